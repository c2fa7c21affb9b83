"""The biLM's sentence batching, shared by inference and training.

:meth:`BiLM.embed_sentences <spacy_elmo.bilm.BiLM.embed_sentences>` (inference)
and the thinc layer's training forward
(:mod:`spacy_elmo.layers.bilm_model`) both run sentences through the biLM
in batches of similar length: :func:`map_batches` is that loop, the two
differ only in what they do with one batch, and :func:`embed_batch` runs
one batch for both. Inference streams (:func:`iter_embeddings`: one batch's
output held at a time); :func:`check_sentences` refuses what is not a list
of token lists before any batch runs.
"""
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar

import numpy
import torch

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


def embed_batch(bilm, batch: List[Sequence[str]], call: Callable) -> Tuple[List[numpy.ndarray], Any]:
    """One batch of sentences through ``call`` (the biLM, or a wrapper of it
    such as the thinc shim's training call; it takes char ids and returns a
    :class:`~spacy_elmo.bilm.model.BiLMOutput`): each sentence's layers
    (L+1, n_tokens, dim) as a float32 view without its boundaries, and the
    output itself."""
    char_ids, _ = bilm.batch_ids(batch)  # bytes, or an ELMoForManyLangs vocabulary's ids
    output = call(torch.from_numpy(char_ids).to(bilm.device))
    stacked = torch.stack(output.layers, dim=1).detach().float().cpu().numpy()  # (B, L+1, T, dim)
    return [stacked[row, :, 1 : len(s) + 1] for row, s in enumerate(batch)], output


def iter_batches(
    bilm, sentences: Sequence[Sequence[str]], batch_size: int, by_length: bool = True
) -> Iterator[Tuple[List[int], List[numpy.ndarray]]]:
    """``(rows, views)`` for each batch of :func:`batch_rows`, under
    ``torch.inference_mode``: the indices of the batch's sentences and each
    one's layers (L+1, n_tokens, dim), float32 views into the batch's one
    output array. The views are valid until the next batch is asked for
    (copy what you keep); the work of a batch is done when it is asked for,
    so a caller can time or configure each batch (the ``elmo`` component's
    thread policy does)."""
    for rows in batch_rows(sentences, batch_size, by_length):
        with torch.inference_mode():
            views, output = embed_batch(bilm, [sentences[i] for i in rows], bilm)
        del output
        yield rows, views


def iter_embeddings(
    bilm, sentences: Sequence[Sequence[str]], batch_size: int, by_length: bool = True
) -> Iterator[Tuple[int, numpy.ndarray]]:
    """``(index, layers)`` for each sentence of the batches of
    :func:`batch_rows`, batch after batch, under ``torch.inference_mode``:
    ``layers`` a float32 array (L+1, n_tokens, dim) of its own, so that the
    batch's output is freed before the next batch runs."""
    for rows, views in iter_batches(bilm, sentences, batch_size, by_length):
        arrays = [numpy.ascontiguousarray(view) for view in views]
        del views
        yield from zip(rows, arrays)


def check_sentences(sentences: Sequence[Sequence[str]]) -> List[List[str]]:
    """``sentences`` as lists of token strings, or a ``TypeError`` naming the
    first that is not one: a plain string where a list of tokens belongs
    (``["the bank"]`` instead of ``[["the", "bank"]]``) would otherwise be
    read as one token per character."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError("embed_sentences takes a list of sentences, each a list of token strings; found one string")
    result = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"sentence {i} is a {type(sentence).__name__} ({sentence[:40]!r}), not a list of tokens: "
                "embed_sentences takes token lists, e.g. [['the', 'bank']]; split the text into tokens first"
            )
        tokens = list(sentence)
        for token in tokens:
            if not isinstance(token, str):
                raise TypeError(f"sentence {i} holds a {type(token).__name__} token ({token!r}); tokens are strings")
        result.append(tokens)
    return result
