"""What the ``elmo`` component stores on ``Doc._.elmo``.

:class:`ElmoData` holds, for the tokens of a Doc (or a Span/Token view of
it), either all biLM layers, shape ``(L+1, n_tokens, dim)``, or only one
vector per token (the configured mix), shape ``(n_tokens, dim)``, in float32
or float16. ``dim`` is ``2 * projection_dim`` of the biLM.

Bytes per token on ``Doc._.elmo`` (``dim`` = 2 * projection_dim):

========================  ====================  ==========================
``store``                 ``dtype="float32"``   ``dtype="float16"``
========================  ====================  ==========================
``"layers"`` (default)    ``4 * (L+1) * dim``   ``2 * (L+1) * dim``
``"vectors"``             ``4 * dim``           ``2 * dim``
========================  ====================  ==========================

For the original ELMo (L=2, dim=1024) that is 12,288 / 6,144 / 4,096 /
2,048 bytes. Listeners (which learn their own mix) need ``"layers"``.

The class registers msgpack encoders with ``srsly``, so ``doc.to_bytes()``,
``DocBin(store_user_data=True)`` and ``nlp.pipe(..., n_process=2)`` carry it.
"""
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Union

import numpy
import srsly
from spacy.tokens import Doc, Span, Token

STORES = ("layers", "vectors")
DTYPES = ("float32", "float16")
#: What ``mix = None`` means: the top LSTM layer. Layer 0 is computed from a
#: word's characters alone, the same for every use of the word, so a mean
#: that includes it pulls every pair of uses together (the shipped biLM on
#: examples/bank.txt: uses of one sense 0.894, across senses 0.850 with the
#: mean of all layers; 0.698 against 0.581 with the top layer). The top
#: layer is also the one that tells senses apart best (docs/senses.md).
DEFAULT_MIX = "the top layer"


def mix_layers(layers: numpy.ndarray, weights: Union[Sequence[float], numpy.ndarray, None] = None) -> numpy.ndarray:
    """One vector per token: ``sum_j w_j * layers[j]`` in float32; the top
    layer when ``weights`` is None (see :data:`DEFAULT_MIX`). ``weights`` are
    used as given (no softmax): pass already-normalised weights."""
    layers = numpy.asarray(layers, dtype=numpy.float32)
    if weights is None:
        return layers[-1].copy()
    w = numpy.asarray(weights, dtype=numpy.float32)
    if w.shape != (layers.shape[0],):
        raise ValueError(f"mix weights need one value per layer ({layers.shape[0]}), found {w.shape}")
    return numpy.tensordot(w, layers, axes=1)


@dataclass
class ElmoData:
    """ELMo activations of a Doc, Span or Token.

    ``layers``: (L+1, n_tokens, dim) or None when only vectors are stored.
    ``mixed``: (n_tokens, dim) stored vectors, or None when layers are stored.
    ``weights``: the mix used by :attr:`vectors` over stored layers (None:
    the top layer, :data:`DEFAULT_MIX`).
    ``space``: which biLM and mix made :attr:`vectors` (a digest, see
    :func:`~spacy_elmo.component.vector_hooks.vector_space`), so that
    ``.similarity`` refuses vectors of two different ones; None: unknown.
    """

    layers: Optional[numpy.ndarray] = None
    mixed: Optional[numpy.ndarray] = None
    weights: Optional[numpy.ndarray] = None
    space: Optional[str] = None

    def __post_init__(self) -> None:
        if (self.layers is None) == (self.mixed is None):
            raise ValueError("ElmoData holds exactly one of layers or mixed vectors")

    @classmethod
    def from_layers(
        cls,
        layers: numpy.ndarray,
        store: str = "layers",
        dtype: str = "float32",
        weights: Optional[Sequence[float]] = None,
        space: Optional[str] = None,
    ) -> "ElmoData":
        """Build what the component stores from float32 layers (L+1, n, dim)."""
        if store not in STORES:
            raise ValueError(f"store must be one of {STORES}, found {store!r}")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, found {dtype!r}")
        w = None if weights is None else numpy.asarray(weights, dtype=numpy.float32)
        if store == "layers":
            return cls(layers=numpy.ascontiguousarray(layers, dtype=dtype), weights=w, space=space)
        return cls(mixed=numpy.ascontiguousarray(mix_layers(layers, w), dtype=dtype), space=space)

    def _vectors_stored(self) -> numpy.ndarray:
        """The stored vectors of an ElmoData that holds no layers."""
        assert self.mixed is not None  # __post_init__: one of the two is stored
        return self.mixed

    def __len__(self) -> int:
        return self.layers.shape[1] if self.layers is not None else self._vectors_stored().shape[0]

    @property
    def vectors(self) -> numpy.ndarray:
        """(n_tokens, dim) float32: the stored vectors, or the mix of the layers."""
        if self.mixed is not None:
            return self.mixed.astype(numpy.float32, copy=False)
        assert self.layers is not None
        return mix_layers(self.layers, self.weights)

    @property
    def vector(self) -> numpy.ndarray:
        """(dim,) float32: the mean of :attr:`vectors` (a Token's own vector)."""
        vectors = self.vectors
        if vectors.shape[0] == 0:
            return numpy.zeros((vectors.shape[1],), dtype=numpy.float32)
        return vectors.mean(axis=0)

    @property
    def nbytes(self) -> int:
        return int(self.layers.nbytes if self.layers is not None else self._vectors_stored().nbytes)

    def __getitem__(self, index: slice) -> "ElmoData":
        """A view of a token range (slices only)."""
        if not isinstance(index, slice):
            raise TypeError("ElmoData takes slices of tokens, e.g. data[2:5]")
        if self.layers is not None:
            return ElmoData(layers=self.layers[:, index], weights=self.weights, space=self.space)
        return ElmoData(mixed=self._vectors_stored()[index], space=self.space)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "layers": None if self.layers is None else numpy.ascontiguousarray(self.layers),
            "mixed": None if self.mixed is None else numpy.ascontiguousarray(self.mixed),
            "weights": self.weights,
            "space": self.space,
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ElmoData":
        """From :meth:`to_dict`'s map (a DocBin or ``Doc.from_bytes``
        payload), validated: see :func:`check_payload`."""
        check_payload(data)
        return cls(layers=data["layers"], mixed=data["mixed"], weights=data.get("weights"), space=data.get("space"))


# --- payload validation (issue 26) ------------------------------------------
_REDO = (
    "it was not written by the elmo component, or was changed or damaged since: run the pipeline's elmo "
    "component on the texts again (nlp.pipe) and save new Docs"
)


_HEX = frozenset("0123456789abcdef")


class ElmoDataError(ValueError):
    """A ``Doc._.elmo`` payload (DocBin, ``Doc.from_bytes``) of the wrong
    structure, dtype or shape, or of another Doc's length."""


def check_payload(data: Any) -> None:
    """A ``Doc._.elmo`` payload must be a map with the keys ``layers`` and
    ``mixed``, exactly one of them an array (float32 or float16; ``layers``
    3-D (L+1, n_tokens, dim), ``mixed`` 2-D (n_tokens, dim)) and the other
    null, ``weights`` null or L+1 finite numbers, and ``space`` (absent in
    payloads of older versions) null or a hex digest. The Doc's length is
    checked where the payload meets its Doc (:func:`get_doc_elmo`)."""
    where = "a Doc._.elmo payload"
    if not isinstance(data, dict):
        raise ElmoDataError(f"{where} is a {type(data).__name__}, expected a map; {_REDO}")
    missing = [key for key in ("layers", "mixed") if key not in data]
    if missing:
        raise ElmoDataError(f"{where} lacks the key(s) {missing}; {_REDO}")
    arrays = {key: data[key] for key in ("layers", "mixed") if data[key] is not None}
    if len(arrays) != 1:
        raise ElmoDataError(
            f"{where} must hold exactly one of 'layers' and 'mixed', found {sorted(arrays) or 'neither'}; {_REDO}"
        )
    ((key, value),) = arrays.items()
    ndim = 3 if key == "layers" else 2
    if not isinstance(value, numpy.ndarray):
        raise ElmoDataError(f"{where}: '{key}' is a {type(value).__name__}, expected an array; {_REDO}")
    if value.dtype.name not in DTYPES:
        raise ElmoDataError(f"{where}: '{key}' holds {value.dtype} values, expected one of {DTYPES}; {_REDO}")
    if value.ndim != ndim:
        raise ElmoDataError(f"{where}: '{key}' has shape {value.shape}, expected {ndim} dimensions; {_REDO}")
    weights = data.get("weights")
    if weights is not None:
        ok = isinstance(weights, numpy.ndarray) and weights.dtype.kind == "f" and weights.ndim == 1
        if not ok or key != "layers" or weights.shape[0] != value.shape[0] or not numpy.isfinite(weights).all():
            raise ElmoDataError(
                f"{where}: 'weights' must be null or one finite number per stored layer, found "
                f"{weights if not isinstance(weights, numpy.ndarray) else (weights.dtype, weights.shape)}; {_REDO}"
            )
    space = data.get("space")
    if space is not None and not (isinstance(space, str) and 0 < len(space) <= 64 and all(c in _HEX for c in space)):
        raise ElmoDataError(f"{where}: 'space' must be null or a hex digest of at most 64 characters; {_REDO}")


_USER_DATA_KEY: Any = ("._.", "elmo", None, None)  # where spaCy keeps Doc._.elmo (a tuple key)


def get_doc_elmo(doc: Doc) -> Optional[ElmoData]:
    """``Doc._.elmo``: None, or the stored data after checking that it has
    one row per token of ``doc`` (a payload of another Doc, e.g. a DocBin
    edited or written from other texts, gave some tokens empty or zero
    vectors before)."""
    data = doc.user_data.get(_USER_DATA_KEY)
    if data is not None:
        if not isinstance(data, ElmoData):
            raise ElmoDataError(f"Doc._.elmo holds a {type(data).__name__}, expected ElmoData; {_REDO}")
        if len(data) != len(doc):
            raise ElmoDataError(
                f"Doc._.elmo holds vectors of {len(data)} tokens for a Doc of {len(doc)} tokens; {_REDO}"
            )
    return data


def set_doc_elmo(doc: Doc, value: Optional[ElmoData]) -> None:
    """Setting ``Doc._.elmo``: an :class:`ElmoData` or None (``doc_cleaner``)."""
    if value is not None and not isinstance(value, ElmoData):
        raise TypeError(f"Doc._.elmo takes an ElmoData or None, found {type(value).__name__}")
    doc.user_data[_USER_DATA_KEY] = value


_KEY = "__spacy_elmo_data__"


@srsly.msgpack_encoders("spacy_elmo_data")
def serialize_elmo_data(obj, chain=None):
    if isinstance(obj, ElmoData):
        return {_KEY: obj.to_dict()}
    return obj if chain is None else chain(obj)


@srsly.msgpack_decoders("spacy_elmo_data")
def deserialize_elmo_data(obj, chain=None):
    if isinstance(obj, dict) and _KEY in obj:
        return ElmoData.from_dict(obj[_KEY])
    return obj if chain is None else chain(obj)


def install_extensions() -> None:
    """``Doc._.elmo`` (set by the ``elmo`` component) and its ``Span._.elmo`` /
    ``Token._.elmo`` views."""
    if not Doc.has_extension("elmo"):
        # A getter and setter (not a default): the getter checks the data
        # against the Doc's length (get_doc_elmo).
        Doc.set_extension("elmo", getter=get_doc_elmo, setter=set_doc_elmo)
    if not Span.has_extension("elmo"):
        Span.set_extension("elmo", getter=_span_view)
    if not Token.has_extension("elmo"):
        Token.set_extension("elmo", getter=_token_view)


# Module-level getters (not lambdas): nlp.pipe(n_process=N) pickles the
# extension table for its workers.
def _span_view(span: Span) -> Optional[ElmoData]:
    return _view(span.doc, span.start, span.end)


def _token_view(token: Token) -> Optional[ElmoData]:
    return _view(token.doc, token.i, token.i + 1)


def _view(doc: Doc, start: int, end: int) -> Optional[ElmoData]:
    data = doc._.elmo
    return None if data is None else data[start:end]
