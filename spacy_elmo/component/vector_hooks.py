"""ELMo where spaCy users look for vectors: ``.vector`` and ``.similarity``.

spaCy lets a Doc answer ``token.vector``, ``span.vector``, ``doc.vector``,
``has_vector`` and ``similarity`` from functions in ``doc.user_hooks``,
``doc.user_span_hooks`` and ``doc.user_token_hooks``. :func:`install` puts
functions there that read ``Doc._.elmo``:

- ``token.vector``: the token's row of ``doc._.elmo.vectors`` (the elmo
  component's ``mix`` of the layers, or the top layer when ``mix`` is None;
  with ``store="vectors"`` the stored vector);
- ``span.vector`` and ``doc.vector``: the mean of their tokens' vectors;
- ``has_vector``: whether ``doc._.elmo`` is set and the Doc or Span has
  tokens (an empty one has none, as in spaCy);
- ``similarity``: the cosine of the two objects' vectors (0.0 when either
  is all zeros; 0.0 with spaCy's warning W008 when either has no vector,
  e.g. an empty Doc or Span), for any pair of Token, Span, Doc (and a Lexeme, whose
  vector is the vocabulary's static one).

The hooks compute nothing until asked, so they cost nothing when unused. A
Doc without ``_.elmo`` (removed by ``doc_cleaner``, say) answers an empty
vector and ``has_vector`` False, as spaCy does without vectors.

spaCy does not serialize user hooks: ``spacy.load`` of a saved pipeline
installs them again (the component runs), and a pickled Doc keeps them (the
hooks are module-level functions), but ``Doc.from_bytes``, ``DocBin`` and
``nlp.pipe(n_process=N)`` (which ships Docs as bytes) give Docs with
``_.elmo`` and no hooks: call :func:`install` on them (``doc._.elmo``
itself survives all of these).
"""
import warnings
from typing import Iterable, Union

import numpy
from spacy.errors import Warnings
from spacy.tokens import Doc, Span, Token

_EMPTY = numpy.zeros((0,), dtype=numpy.float32)


def install(docs: Union[Doc, Iterable[Doc]]) -> None:
    """Answer ``.vector``/``.has_vector``/``.similarity`` of the Doc(s), their
    spans and tokens from ``Doc._.elmo`` (see the module docstring)."""
    for doc in [docs] if isinstance(docs, Doc) else docs:
        for hooks, vector in (
            (doc.user_hooks, doc_vector),
            (doc.user_span_hooks, span_vector),
            (doc.user_token_hooks, token_vector),
        ):
            hooks["vector"] = vector
            hooks["has_vector"] = has_vector
            hooks["similarity"] = similarity


def uninstall(doc: Doc) -> None:
    """Give ``.vector``/``.has_vector``/``.similarity`` back to spaCy's default."""
    for hooks in (doc.user_hooks, doc.user_span_hooks, doc.user_token_hooks):
        for name in ("vector", "has_vector", "similarity"):
            hooks.pop(name, None)


def _data(obj):
    doc = obj if isinstance(obj, Doc) else obj.doc
    return doc._.elmo if Doc.has_extension("elmo") else None


def doc_vector(doc: Doc) -> numpy.ndarray:
    data = _data(doc)
    return _EMPTY if data is None else data.vector


def span_vector(span: Span) -> numpy.ndarray:
    data = _data(span)
    return _EMPTY if data is None else data[span.start : span.end].vector


def token_vector(token: Token) -> numpy.ndarray:
    data = _data(token)
    return _EMPTY if data is None else data[token.i : token.i + 1].vectors[0]


def has_vector(obj: Union[Doc, Span, Token]) -> bool:
    """Whether ``doc._.elmo`` is set and ``obj`` has tokens (an empty Doc or
    Span has no vector, as in spaCy)."""
    return _data(obj) is not None and len(obj) > 0


def similarity(obj: Union[Doc, Span, Token], other) -> float:
    """Cosine of the two vectors; 0.0 when either is all zeros or their
    widths differ (e.g. an ELMo vector against a static one). Where either
    has no vector (an empty Doc or Span, a Doc without ``_.elmo``): 0.0 with
    spaCy's warning W008, as spaCy does."""
    if not obj.has_vector or not other.has_vector:
        warnings.warn(Warnings.W008.format(obj=type(obj).__name__))
        return 0.0
    a = numpy.asarray(obj.vector, dtype=numpy.float32)
    b = numpy.asarray(other.vector, dtype=numpy.float32)
    if a.shape != b.shape or a.size == 0:
        return 0.0
    norm = float(numpy.linalg.norm(a) * numpy.linalg.norm(b))
    return 0.0 if norm == 0.0 else float(numpy.dot(a, b) / norm)
