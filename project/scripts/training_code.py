"""Registered functions the project's configs use (``spacy train --code``).

The training-time cache of the frozen biLM's outputs is the library's
``spacy_elmo.training_cache.v1`` (``[initialize.after_init]`` in the ELMo
configs); its hit counts go into the log below.

``spacy_elmo_project.JsonlLogger.v1`` (``[training.logger]``): spaCy's
    console table, plus one JSON line per evaluation with the step, epoch,
    dev scores, losses, seconds since training started and words seen
    (spaCy's own ``ConsoleLogger.v3`` file has no time or words): the
    training curves of the report.
"""
import json
import sys
from pathlib import Path
from typing import Optional

from spacy.util import registry


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@registry.loggers("spacy_elmo_project.JsonlLogger.v1")
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
                "scores": _jsonable(info["other_scores"]),
                "losses": _jsonable(info["losses"]),
                "seconds": info.get("seconds"),
                "words": info.get("words"),
            }
            cache = _cache_stats(nlp)
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


def _cache_stats(nlp):
    for _, component in nlp.pipeline:
        cache = getattr(component, "output_cache", None)
        if cache is not None:
            return cache.stats()
    return None
