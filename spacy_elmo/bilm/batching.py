"""The biLM's sentence batching, shared by inference and training.

:meth:`BiLM.embed_sentences <spacy_elmo.bilm.BiLM.embed_sentences>` (inference)
and the thinc layer's training forward
(:mod:`spacy_elmo.layers.bilm_model`) both run sentences through the biLM
in batches of similar length: :func:`map_batches` is that loop, the two
differ only in what they do with one batch.
"""
from typing import Callable, List, Optional, Sequence, TypeVar

T = TypeVar("T")


def batch_rows(sentences: Sequence[Sequence[str]], batch_size: int, by_length: bool = True) -> List[List[int]]:
    """Indices of ``sentences`` in batches of at most ``batch_size``.

    by_length: the non-empty sentences, shortest first (stable), so that a
        batch pads little; empty ones are left out. False: every sentence in
        the given order (stateful mode, where the carried LSTM state follows
        the row).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, found {batch_size}")
    if by_length:
        order = sorted((i for i, s in enumerate(sentences) if len(s)), key=lambda i: len(sentences[i]))
    else:
        order = list(range(len(sentences)))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def map_batches(
    sentences: Sequence[Sequence[str]],
    batch_size: int,
    run_batch: Callable[[List[Sequence[str]]], Sequence[T]],
    by_length: bool = True,
) -> List[Optional[T]]:
    """``run_batch`` over the batches of :func:`batch_rows`; it gets one
    batch of sentences and returns one result per sentence. Returns the
    results in the order of ``sentences`` (None where a sentence was left
    out: empty, with ``by_length``)."""
    results: List[Optional[T]] = [None] * len(sentences)
    for rows in batch_rows(sentences, batch_size, by_length):
        batch_results = run_batch([sentences[i] for i in rows])
        if len(batch_results) != len(rows):
            raise ValueError(f"run_batch returned {len(batch_results)} results for {len(rows)} sentences")
        for index, result in zip(rows, batch_results):
            results[index] = result
    return results
