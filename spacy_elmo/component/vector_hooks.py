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
- ``similarity``: the cosine of the two objects' ELMo vectors, for any pair
  of Token, Span and Doc. The other object's vector is read from its own
  Doc's ``_.elmo``, whether or not that Doc has the hooks (a Doc read back
  from a DocBin compares as it did before). 0.0 when either vector is all
  zeros; 0.0 with spaCy's warning W008 when either has no vector (an empty
  Doc or Span, a Doc without ``_.elmo``). A ``ValueError`` says why where
  the two cannot be compared: vectors of two different biLMs or mixes
  (``ElmoData.space``), an ELMo vector against a static one (a Doc with
  the vocabulary's vectors), or a Lexeme (a vocabulary entry has no
  context, so no ELMo vector).

The hooks compute nothing until asked, so they cost nothing when unused. A
Doc without ``_.elmo`` (removed by ``doc_cleaner``, say) answers an empty
vector and ``has_vector`` False, as spaCy does without vectors.

spaCy does not serialize user hooks: ``spacy.load`` of a saved pipeline
installs them again (the component runs), and a pickled Doc keeps them (the
hooks are module-level functions), but ``Doc.from_bytes``, ``DocBin`` and
``nlp.pipe(n_process=N)`` (which ships Docs as bytes) give Docs with
``_.elmo`` and no hooks: call :func:`install` on them (``doc._.elmo``
itself survives all of these). Without it their own ``.vector`` and
``.similarity`` are spaCy's (the vocabulary's vectors).
"""
import hashlib
import json
import warnings
from typing import Iterable, Optional, Sequence, Union

import numpy
from spacy.errors import Warnings
from spacy.lexeme import Lexeme
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


def _vector(obj: Union[Doc, Span, Token]) -> numpy.ndarray:
    data = _data(obj)
    return _EMPTY if data is None else _elmo_vector(obj, data)


# One per hook table, module-level (a pickled Doc keeps its hooks).
def doc_vector(doc: Doc) -> numpy.ndarray:
    return _vector(doc)


def span_vector(span: Span) -> numpy.ndarray:
    return _vector(span)


def token_vector(token: Token) -> numpy.ndarray:
    return _vector(token)


def has_vector(obj: Union[Doc, Span, Token]) -> bool:
    """Whether ``doc._.elmo`` is set and ``obj`` has tokens (an empty Doc or
    Span has no vector, as in spaCy)."""
    return _data(obj) is not None and len(obj) > 0


def _elmo_vector(obj: Union[Doc, Span, Token], data) -> numpy.ndarray:
    if isinstance(obj, Token):
        return data[obj.i : obj.i + 1].vectors[0]
    return (data if isinstance(obj, Doc) else data[obj.start : obj.end]).vector


def _name(obj) -> str:
    return type(obj).__name__


def similarity(obj: Union[Doc, Span, Token], other) -> float:
    """Cosine of the two objects' ELMo vectors (see the module): 0.0 when
    either is all zeros; 0.0 with spaCy's warning W008 when either has no
    vector; a ValueError where they cannot be compared."""
    if isinstance(other, Lexeme):
        raise ValueError(
            f"{_name(obj)}.similarity(Lexeme): ELMo vectors come from context, and a Lexeme (a vocabulary entry) "
            f"has none; compare with a token of a Doc the pipeline ran on (e.g. nlp({other.text!r})[0]), or set "
            "the elmo component's vector_hooks = false to compare the vocabulary's static vectors"
        )
    if not isinstance(other, (Doc, Span, Token)):
        raise TypeError(f"{_name(obj)}.similarity takes a Token, Span or Doc, found {_name(other)}")
    mine, theirs = _data(obj), _data(other)
    if theirs is None and other.has_vector:
        raise ValueError(
            f"{_name(obj)}.similarity: the other {_name(other)}'s Doc has no Doc._.elmo, and its vector is not "
            "an ELMo vector (the vocabulary's static vectors, say); the cosine of the two would mean nothing. Run "
            "both through the pipeline with the elmo component"
        )
    if mine is None or theirs is None or len(obj) == 0 or len(other) == 0:
        warnings.warn(Warnings.W008.format(obj=_name(obj)))
        return 0.0
    if mine.space is not None and theirs.space is not None and mine.space != theirs.space:
        raise ValueError(
            f"{_name(obj)}.similarity: the two ELMo vectors come from different biLMs or layer mixes (the "
            f"elmo component's weights or mix: vector spaces {mine.space} and {theirs.space}); the cosine of the "
            "two would mean nothing. Compare Docs of one pipeline"
        )
    a = numpy.asarray(_elmo_vector(obj, mine), dtype=numpy.float32)
    b = numpy.asarray(_elmo_vector(other, theirs), dtype=numpy.float32)
    if a.shape != b.shape:
        raise ValueError(
            f"{_name(obj)}.similarity: ELMo vectors of width {a.shape[0]} and {b.shape[0]} (two different "
            "biLMs); compare Docs of one pipeline"
        )
    norm = float(numpy.linalg.norm(a) * numpy.linalg.norm(b))
    return 0.0 if norm == 0.0 else float(numpy.dot(a, b) / norm)


def vector_space(bilm, mix: Optional[Sequence[float]]) -> str:
    """A digest of what makes a Doc's vectors (``ElmoData.space``): the
    biLM's options and parameters, and the mix. Each parameter is read
    through its shape and up to 1,024 of its values at even steps, so it
    costs milliseconds even for the largest biLM; two different biLMs get
    different digests unless they agree on all of these."""
    import torch

    digest = hashlib.sha256(json.dumps(bilm.options.to_dict(), sort_keys=True).encode("utf-8"))
    digest.update(json.dumps(None if mix is None else [float(w) for w in mix]).encode("utf-8"))
    with torch.no_grad():
        for name, parameter in bilm.named_parameters():
            flat = parameter.detach().reshape(-1)
            picks = flat[torch.linspace(0, flat.numel() - 1, min(1024, flat.numel())).long()] if flat.numel() else flat
            digest.update(f"{name}:{tuple(parameter.shape)}".encode("utf-8"))
            digest.update(picks.to(device="cpu", dtype=torch.float32).numpy().tobytes())
    return digest.hexdigest()[:16]
