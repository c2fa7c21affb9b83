"""Which sentences the biLM reads for a batch of Docs, and where each token's
output comes from (the span getter decides; overlapping windows resolve as
:func:`~spacy_elmo.layers.span_getters.token_sources` says)."""
from typing import Callable, List, Tuple

import numpy
from spacy.tokens import Doc

from .span_getters import token_sources


def span_plan(span_getter: Callable, docs: List[Doc]) -> Tuple[List[List[str]], List[numpy.ndarray]]:
    """Token texts of every span, and for each Doc the row of each token's
    output in the concatenation of all spans' outputs (-1: none)."""
    spans_per_doc = span_getter(docs)
    if len(spans_per_doc) != len(docs):
        raise ValueError(f"span getter returned {len(spans_per_doc)} span lists for {len(docs)} docs")
    texts: List[List[str]] = []
    sources = []
    offset = 0
    for doc, spans in zip(docs, spans_per_doc):
        bounds = [(span.start, span.end) for span in spans if len(span)]
        source = token_sources(len(doc), bounds)
        sources.append(numpy.where(source >= 0, source + offset, -1))
        offset += sum(end - start for start, end in bounds)
        texts.extend([token.text for token in doc[start:end]] for start, end in bounds)
    return texts, sources
