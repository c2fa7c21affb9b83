"""``spacy_elmo.JsonlLogger.v1``: spaCy's console table plus a training curve.

spaCy's ``ConsoleLogger.v3`` can write a JSON-lines file, but without the
time or the number of words of each evaluation, which a training curve
against time needs. This logger prints spaCy's table (through
``ConsoleLogger.v3``) and writes one JSON object a line per evaluation to
``path``: ``epoch``, ``step``, ``score``, ``scores`` (the dev scores),
``losses``, ``seconds`` (since training started), ``words`` (seen so
far) and, when the ``elmo`` component has a training cache
(``spacy_elmo.training_cache.v1``), ``elmo_cache`` (its hit counts)::

    [training.logger]
    @loggers = "spacy_elmo.JsonlLogger.v1"
    path = "training/log.jsonl"     # null: the table only
    console_output = true

Registered in :mod:`spacy_elmo.component.registrations` (the package's
``spacy_loggers`` entry point names it), so a config that names it needs no
``--code``.
"""
import json
import sys
from pathlib import Path
from typing import Any, Optional

from spacy.util import registry


def _plain(value: Any) -> Any:
    """Numbers as floats, dicts and lists recursively, anything else None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def jsonl_logger(path: Optional[str] = None, console_output: bool = True):
    """spaCy's console table plus a JSON-lines file (``path``) of every evaluation."""
    console = registry.loggers.get("spacy.ConsoleLogger.v3")(
        progress_bar=None, console_output=console_output, output_file=None
    )

    def setup(nlp, stdout=sys.stdout, stderr=sys.stderr):
        log_console, finalize_console = console(nlp, stdout, stderr)
        stream = None
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            stream = open(path, "w", encoding="utf-8")

        def log_step(info):
            log_console(info)
            if info is None or stream is None:
                return
            record = {
                "epoch": info["epoch"],
                "step": info["step"],
                "score": float(info["score"]),
                "scores": _plain(info["other_scores"]),
                "losses": _plain(info["losses"]),
                "seconds": info.get("seconds"),
                "words": info.get("words"),
            }
            cache = _training_cache_stats(nlp)
            if cache:
                record["elmo_cache"] = cache
            stream.write(json.dumps(record) + "\n")
            stream.flush()

        def finalize():
            finalize_console()
            if stream is not None:
                stream.close()

        return log_step, finalize

    return setup


def _training_cache_stats(nlp):
    """The hit counts of the first component's training cache, if any."""
    for _, component in nlp.pipeline:
        cache = getattr(component, "output_cache", None)
        if cache is not None:
            return cache.stats()
    return None
