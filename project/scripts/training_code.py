"""Registered functions the project's configs use (``spacy train --code``).

``spacy_elmo_project.memoize_elmo.v1`` (``[initialize.after_init]``):
    the biLM is frozen in these experiments (``grad_factor = 0``), so a
    sentence's ELMo layers are the same in every epoch. spaCy would still
    run the biLM on every batch of every epoch: the ``elmo`` component
    broadcasts to its listeners in ``nlp.update``, and a frozen ``elmo`` in
    ``annotating_components`` runs on each batch too. This callback wraps the
    biLM's ``embed_sentences`` with a per-sentence memo (keyed by the token
    texts, stored as float16 by default, up to ``max_mib``; once full, new
    sentences are computed and not stored), so the biLM runs once per
    distinct training and dev sentence. It lives in the training process
    only: the saved pipeline has no memo, so ``spacy evaluate`` and the
    speed benchmark run the biLM as a user would. Fine-tuning the biLM
    (``grad_factor > 0``) never reads the memo (training goes through
    autograd, not ``embed_sentences``).

``spacy_elmo_project.JsonlLogger.v1`` (``[training.logger]``): spaCy's
    console table, plus one JSON line per evaluation with the step, epoch,
    dev scores, losses, seconds since training started and words seen
    (spaCy's own ``ConsoleLogger.v3`` file has no time or words): the
    training curves of the report.
"""
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy
from spacy.util import registry


class SentenceMemo:
    """``embed_sentences`` with a per-sentence memo of its outputs."""

    def __init__(self, embed, max_bytes: int, dtype: str = "float16") -> None:
        self.embed = embed
        self.max_bytes = max_bytes
        self.dtype = numpy.dtype(dtype)
        self.cache: Dict[Tuple[str, ...], numpy.ndarray] = {}
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def __call__(self, sentences: Sequence[Sequence[str]], batch_size: int = 64) -> List[numpy.ndarray]:
        keys = [tuple(sentence) for sentence in sentences]
        results: List[Optional[numpy.ndarray]] = [None] * len(keys)
        todo: Dict[Tuple[str, ...], List[int]] = {}
        for i, key in enumerate(keys):
            stored = self.cache.get(key)
            if stored is not None:
                results[i] = stored.astype(numpy.float32)
                self.hits += 1
            else:
                todo.setdefault(key, []).append(i)
        if todo:
            new_keys = list(todo)
            self.misses += len(new_keys)
            outputs = self.embed([list(key) for key in new_keys], batch_size=batch_size)
            for key, output in zip(new_keys, outputs):
                for i in todo[key]:
                    results[i] = output
                if output is None:
                    continue
                size = output.size * self.dtype.itemsize
                if self.nbytes + size <= self.max_bytes:
                    self.cache[key] = output.astype(self.dtype)
                    self.nbytes += size
        return results  # type: ignore[return-value]


@registry.callbacks("spacy_elmo_project.memoize_elmo.v1")
def memoize_elmo(max_mib: int = 4096, dtype: str = "float16"):
    """After initialization: give every ``elmo`` component's biLM a sentence memo."""

    def after_init(nlp):
        for name, component in nlp.pipeline:
            bilm = getattr(component, "bilm", None) if hasattr(component, "set_bilm") else None
            if bilm is None:
                continue
            memo = SentenceMemo(bilm.embed_sentences, max_mib << 20, dtype)
            bilm.embed_sentences = memo
            print(f"[memoize_elmo] {name}: per-sentence memo, up to {max_mib} MiB as {dtype}", file=sys.stderr)
        return nlp

    return after_init


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
            memo = _memo_stats(nlp)
            if memo:
                record["elmo_memo"] = memo
            stream.write(json.dumps(record) + "\n")
            stream.flush()

        def finalize():
            finalize_console()
            if stream is not None:
                stream.close()

        return log_step, finalize

    return setup


def _memo_stats(nlp):
    for _, component in nlp.pipeline:
        if hasattr(component, "set_bilm"):
            try:
                embed = component.bilm.embed_sentences
            except ValueError:
                continue
            if isinstance(embed, SentenceMemo):
                return {"hits": embed.hits, "misses": embed.misses, "mib": round(embed.nbytes / 2**20, 1)}
    return None
