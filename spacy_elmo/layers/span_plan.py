"""Which sentences the biLM reads for a batch of Docs, and where each token's
output comes from (the span getter decides; overlapping windows resolve as
:func:`~spacy_elmo.layers.span_getters.token_sources` says)."""
from typing import Callable, Iterable, Iterator, List, Tuple

import numpy
from spacy.tokens import Doc

from .span_getters import token_sources


def span_plan(span_getter: Callable, docs: List[Doc]) -> Tuple[List[List[str]], List[numpy.ndarray], List[int]]:
    """Token texts of every span; for each Doc the row of each token's
    output in the concatenation of all spans' outputs (-1: none); and the
    number of (non-empty) spans of each Doc."""
    spans_per_doc = span_getter(docs)
    if len(spans_per_doc) != len(docs):
        raise ValueError(f"span getter returned {len(spans_per_doc)} span lists for {len(docs)} docs")
    texts: List[List[str]] = []
    sources = []
    n_spans: List[int] = []
    offset = 0
    for doc, spans in zip(docs, spans_per_doc):
        bounds = [(span.start, span.end) for span in spans if len(span)]
        source = token_sources(len(doc), bounds)
        sources.append(numpy.where(source >= 0, source + offset, -1))
        offset += sum(end - start for start, end in bounds)
        texts.extend([token.text for token in doc[start:end]] for start, end in bounds)
        n_spans.append(len(bounds))
    return texts, sources, n_spans


def span_targets(
    texts: List[List[str]], sources: List[numpy.ndarray], n_spans: List[int]
) -> List[Tuple[int, numpy.ndarray, numpy.ndarray]]:
    """For every span (in the order of ``texts``): its Doc, the Doc positions
    that take its output, and the rows of the span they take (what
    :func:`span_plan` returned, turned around for placing one span's output
    as it comes)."""
    offsets = numpy.cumsum([0] + [len(t) for t in texts])
    targets: List[Tuple[int, numpy.ndarray, numpy.ndarray]] = []
    for d, source in enumerate(sources):
        covered = numpy.flatnonzero(source >= 0)
        order = numpy.argsort(source[covered], kind="stable")
        positions, flat = covered[order], source[covered][order]
        for j in range(len(targets), len(targets) + n_spans[d]):
            lo, hi = numpy.searchsorted(flat, [offsets[j], offsets[j + 1]])
            targets.append((d, positions[lo:hi], flat[lo:hi] - offsets[j]))
    return targets


def token_buffers(docs: Iterable[Doc], max_tokens: int) -> Iterator[List[Doc]]:
    """``docs`` in order, in groups that the ``elmo`` component runs through
    the biLM together: docs are added until the group holds at least
    ``max_tokens`` tokens (so a group exceeds it by less than its last doc;
    a doc longer than ``max_tokens`` makes a group of its own or ends one).
    The groups depend only on the docs, never on how the caller batched
    them, so outputs do not depend on ``nlp.pipe``'s ``batch_size``."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, found {max_tokens}")
    group: List[Doc] = []
    n_tokens = 0
    for doc in docs:
        group.append(doc)
        n_tokens += len(doc)
        if n_tokens >= max_tokens:
            yield group
            group, n_tokens = [], 0
    if group:
        yield group
