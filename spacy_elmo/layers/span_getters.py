"""Which stretches of a Doc the biLM reads, and which output a token takes.

The biLM reads sentences: every span a span getter returns is wrapped in
sentence-boundary tokens and embedded from a zero LSTM state. Span getters
live in the ``span_getters`` registry that spacy-transformers also uses, so
its ``spacy-transformers.sent_spans.v1``, ``strided_spans.v1`` and
``doc_spans.v1`` plug in unchanged when it is installed. We don't depend on
spacy-transformers for them (it would pull in ``transformers`` for a few
lines); our default, ``spacy_elmo.sent_or_strided_spans.v1``, also covers what
neither of those does alone: sentences when the Doc has them, strided windows
when it has none, and strided windows inside sentences longer than the window.

Overlapping spans: a token covered by several spans takes the output of the
span in which it lies farthest from an edge (the most context on both
sides); ties go to the earlier span. The choice depends only on the Doc and
the span getter, never on how docs were batched. A token covered by no span
gets zero vectors.
"""
from typing import Callable, Iterable, List, Tuple

import numpy
from spacy.tokens import Doc, Span

SpanGetter = Callable[[Iterable[Doc]], List[List[Span]]]


def strided_bounds(start: int, end: int, window: int, stride: int) -> List[Tuple[int, int]]:
    """Windows of ``window`` tokens every ``stride`` tokens covering [start, end)."""
    bounds = []
    for begin in range(start, max(end, start + 1), stride):
        bounds.append((begin, min(begin + window, end)))
        if begin + window >= end:
            break
    return [(s, e) for s, e in bounds if e > s]


class SentOrStridedSpans:
    """Sentences when the Doc has sentence boundaries (split into strided
    windows when longer than ``window``), otherwise strided windows of
    ``window`` tokens every ``stride`` tokens over the whole Doc.

    A class rather than a closure so that pipelines pickle (``nlp.pipe`` with
    ``n_process`` and the spawn start method pickles the pipeline)."""

    def __init__(self, window: int = 128, stride: int = 96, use_sents: bool = True) -> None:
        if not 0 < stride <= window:
            raise ValueError(f"need 0 < stride <= window, found window={window}, stride={stride}")
        self.window, self.stride, self.use_sents = window, stride, use_sents

    def __call__(self, docs: Iterable[Doc]) -> List[List[Span]]:
        result = []
        for doc in docs:
            if self.use_sents and doc.has_annotation("SENT_START"):
                pieces = [(sent.start, sent.end) for sent in doc.sents]
            else:
                pieces = [(0, len(doc))]
            spans: List[Span] = []
            for start, end in pieces:
                spans.extend(doc[s:e] for s, e in strided_bounds(start, end, self.window, self.stride))
            result.append(spans)
        return result


def configure_sent_or_strided_spans(window: int = 128, stride: int = 96) -> SpanGetter:
    """Sentences when the Doc has sentence boundaries (split into strided
    windows when longer than ``window``), otherwise strided windows of
    ``window`` tokens every ``stride`` tokens over the whole Doc."""
    return SentOrStridedSpans(window, stride, use_sents=True)


def configure_strided_spans(window: int = 128, stride: int = 96) -> SpanGetter:
    """Strided windows over the whole Doc, ignoring sentence boundaries."""
    return SentOrStridedSpans(window, stride, use_sents=False)


def token_sources(n_tokens: int, bounds: List[Tuple[int, int]]) -> numpy.ndarray:
    """For each token of a Doc, the position of its output in the
    concatenation of the spans' outputs (-1 where no span covers it), by the
    most-central-span rule above."""
    source = numpy.full(n_tokens, -1, dtype=numpy.int64)
    best = numpy.full(n_tokens, -1, dtype=numpy.int64)
    offset = 0
    for start, end in bounds:
        positions = numpy.arange(start, end)
        centrality = numpy.minimum(positions - start, end - 1 - positions)
        better = centrality > best[start:end]
        best[start:end][better] = centrality[better]
        source[start:end][better] = offset + (positions[better] - start)
        offset += end - start
    return source
