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

The training curves' logger is the package's ``spacy_elmo.JsonlLogger.v1``
(:mod:`spacy_elmo.training_log`), so the baseline configs need no ``--code``.
"""
import sys
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
