"""The biLM as a thinc model: ``List[Doc] -> List[Floats3d]``, one array of
shape (L+1, n_tokens, dim) per Doc.

The PyTorch :class:`~spacy_elmo.bilm.BiLM` lives in a :class:`BiLMShim` (a
thinc ``PyTorchShim``) whose serializer writes the published hdf5 format
plus the options JSON, so a saved pipeline carries the weights in the same
format bilm-tf reads and needs no outside file. Before ``initialize``
(``[initialize.components.elmo]`` weights/options, or
:func:`spacy_elmo.add_elmo`) the shim holds no biLM.

``model.predict`` runs the biLM under ``torch.inference_mode`` through
:meth:`BiLM.embed_sentences` (length-sorted batches, the word-type cache).
``model.begin_update`` runs the same batches through the shim's
``begin_update`` (autograd, training mode, so the biLM's dropout applies)
and returns a backprop into the torch parameters; ``finish_update`` applies
thinc's optimizer to them. The model has no grad_factor: its users decide
whether to call ``begin_update`` and scale the gradient (see
:mod:`spacy_elmo.layers.listener` and the ``elmo`` component).

In a multiprocessing worker (``nlp.pipe(..., n_process=N)``, with fork or
spawn) the biLM runs on one thread: the N workers share the cores, and
PyTorch's OpenMP thread pool does not survive ``fork`` (a forked child that
uses it hangs).
"""
import io
import multiprocessing
import os
import warnings
from typing import Callable, List, Optional, Tuple

import numpy
import srsly
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, PyTorchShim, get_torch_default_device
from thinc.types import Floats3d

from ..bilm import BiLM, BiLMOptions
from ..bilm.batching import map_batches
from ..bilm.chars import batch_to_char_ids
from ..hub import HOW_TO_GIVE_WEIGHTS
from ..saved_pipeline import bilm_checksum
from .listener import replace_listener, replace_listener_cfg
from .span_getters import SpanGetter, configure_sent_or_strided_spans, token_sources

NOT_INITIALIZED = (
    "The elmo biLM has no weights yet: call nlp.initialize() (with no weights given it loads "
    "the English biLM shipped with spacy_elmo). " + HOW_TO_GIVE_WEIGHTS + " In Python also "
    "spacy_elmo.add_elmo(nlp, NAME) or nlp.get_pipe('elmo').set_bilm(BiLM(...))."
)


def _serialize_bilm(module: torch.nn.Module) -> bytes:
    if not isinstance(module, BiLM):
        return b""
    buffer = io.BytesIO()
    from ..bilm.weights import save_hdf5

    save_hdf5(module, buffer)
    fields = {
        "options": module.options.to_dict(),
        "weights": buffer.getvalue(),
        "precision": module.precision,
        "token_cache_size": module.token_cache.max_size,
    }
    # --- checksum (issue 26): what the biLM embeds, checked on load.
    fields["sha256"] = bilm_checksum(fields["options"], fields["weights"], fields["precision"], fields["token_cache_size"])
    return srsly.msgpack_dumps(fields)


_RESAVE = (
    "re-save the pipeline from a working copy (nlp.to_disk), or re-initialize the elmo component "
    "from the published weights and options"
)


def _deserialize_bilm(module: torch.nn.Module, data: bytes, device: torch.device) -> torch.nn.Module:
    """The biLM of a saved pipeline (``spacy.load``, ``from_bytes``): the
    fields are type-checked, the options validated (bounds, parameter
    count) and the weights read and shape-checked, all before the model is
    allocated; anything wrong is an :class:`OptionsError` or a
    :class:`WeightFileError` (msgpack and hdf5 only: nothing is unpickled)."""
    if not data:
        return module
    from ..bilm import OptionsError, WeightFileError
    from ..bilm.model import check_token_cache_size
    from ..bilm.weights import load_hdf5, read_datasets

    where = "the elmo component's saved biLM"
    try:
        msg = srsly.msgpack_loads(data)
    except Exception as err:  # msgpack raises several unrelated classes
        raise WeightFileError(f"{where} is not readable msgpack ({type(err).__name__}: {err}); {_RESAVE}") from None
    if not isinstance(msg, dict):
        raise WeightFileError(f"{where} is a {type(msg).__name__}, expected a map; {_RESAVE}")
    if not isinstance(msg.get("options"), dict):
        raise OptionsError(
            f"{where} holds no biLM options (field 'options' is {'missing' if 'options' not in msg else type(msg['options']).__name__}); {_RESAVE}",
            ["options"],
        )
    try:
        options = BiLMOptions.from_dict(msg["options"])
    except OptionsError as err:
        raise OptionsError(f"{where}: {err}; {_RESAVE}", err.fields) from None
    if not isinstance(msg.get("weights"), bytes):
        raise WeightFileError(f"{where} holds no weights (field 'weights' is missing or not bytes); {_RESAVE}")
    precision = msg.get("precision", "fp32")
    if precision not in BiLM.PRECISIONS:
        raise WeightFileError(f"{where}: field 'precision' must be one of {BiLM.PRECISIONS}, found {precision!r}; {_RESAVE}")
    try:
        token_cache_size = check_token_cache_size(msg.get("token_cache_size", 50_000))
    except ValueError as err:
        raise WeightFileError(f"{where}: {err}; {_RESAVE}") from None
    # --- checksum (issue 26): refuse weights or settings changed after saving.
    _check_bilm_checksum(msg, where)
    weights = io.BytesIO(msg["weights"])
    arrays = read_datasets(weights, options)
    bilm = BiLM(options, token_cache_size=token_cache_size)
    load_hdf5(bilm, weights, arrays)
    bilm.precision = precision
    return bilm.to(device)


def _check_bilm_checksum(msg: dict, where: str) -> None:
    """The saved SHA-256 of the biLM's options, settings and weights must
    match them. Pipelines saved before checksums were written have none:
    they load with a warning (re-saving them adds one)."""
    from ..bilm import WeightFileError

    saved = msg.get("sha256")
    if saved is None:
        warnings.warn(f"{where} carries no checksum (saved by an older spacy_elmo); re-save it to add one")
        return
    try:
        actual = bilm_checksum(msg["options"], msg["weights"], msg.get("precision", "fp32"), msg.get("token_cache_size", 50_000))
    except (TypeError, ValueError) as err:  # options that are not JSON (crafted)
        raise WeightFileError(f"{where}: its options cannot be checksummed ({err}); {_RESAVE}") from None
    if saved != actual:
        raise WeightFileError(
            f"{where}: its weights or options do not match the SHA-256 checksum saved with them "
            f"(saved {str(saved)[:16]}..., now {actual[:16]}...): the file was changed or damaged after it was "
            f"saved; {_RESAVE}"
        )


class BiLMShim(PyTorchShim):
    """The thinc shim of the biLM: a :class:`PyTorchShim` whose model is the
    :class:`~spacy_elmo.bilm.BiLM`, serialized in the published hdf5 format
    with its options. It holds no model (None) until the weights are given
    (``initialize``, :func:`set_bilm`) or read (``from_bytes``); until then
    updates and device moves have nothing to do."""

    def __init__(self, bilm: Optional[BiLM] = None) -> None:
        super().__init__(bilm, serialize_model=_serialize_bilm, deserialize_model=_deserialize_bilm)

    @property
    def device(self):
        return get_torch_default_device() if self._model is None else super().device

    def finish_update(self, optimizer) -> None:
        if self._model is not None:
            super().finish_update(optimizer)

    def to_device(self, device_type: str, device_id: int) -> None:
        if self._model is not None:
            super().to_device(device_type, device_id)


@registry.architectures("spacy_elmo.ElmoBiLM.v2")
def ElmoBiLM(
    span_getter: Optional[SpanGetter] = None,
    batch_size: int = 64,
    precision: str = "fp32",
) -> Model[List[Doc], List[Floats3d]]:
    """The biLM over Docs.

    span_getter: splits Docs into the sentences the biLM reads (default:
        ``spacy_elmo.sent_or_strided_spans.v1`` with window 128, stride 96).
    batch_size: sentences per biLM call (sorted by length).
    precision: "fp32" (exact), or an opt-in fast inference path: "bf16"
        (native bf16 CPUs and GPUs) or "int8" (CPU); see ``BiLM.precision``.

    ``predict`` runs the biLM in inference; ``begin_update`` runs it with
    autograd and returns its backprop. Its users decide whether it is
    fine-tuned: the listeners' ``grad_factor`` (and the ``elmo`` component's
    ``frozen``), or ``spacy_elmo.ElmoMix.v1``'s ``grad_factor``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, found {batch_size}")
    if precision not in BiLM.PRECISIONS:
        raise ValueError(f"precision must be one of {BiLM.PRECISIONS}, found {precision!r}")
    return Model(
        "elmo_bilm",
        forward,
        shims=[BiLMShim()],
        attrs={
            "span_getter": span_getter or configure_sent_or_strided_spans(),
            "batch_size": batch_size,
            "precision": precision,
            # Used by nlp.replace_listeners (see .listener).
            "replace_listener_cfg": replace_listener_cfg,
            "replace_listener": replace_listener,
        },
    )


GRAD_FACTOR_MOVED = (
    "spacy_elmo.ElmoBiLM.v1's grad_factor is gone: the biLM's users decide whether it is "
    "fine-tuned. Set grad_factor on the ElmoListener (or ElmoTok2Vec, or ElmoMix after "
    "nlp.replace_listeners) instead, and use spacy_elmo.ElmoBiLM.v2 (the same without grad_factor)."
)


@registry.architectures("spacy_elmo.ElmoBiLM.v1")
def ElmoBiLM_v1(
    span_getter: Optional[SpanGetter] = None,
    batch_size: int = 64,
    precision: str = "fp32",
    grad_factor: float = 0.0,
) -> Model[List[Doc], List[Floats3d]]:
    """Configs and pipelines saved before ``spacy_elmo.ElmoBiLM.v2``: the same
    model. Its ``grad_factor`` is accepted as 0 only (under the ``elmo``
    component it was ignored: the listeners decided)."""
    if grad_factor != 0:
        raise ValueError(f"{GRAD_FACTOR_MOVED} Found grad_factor = {grad_factor}.")
    return ElmoBiLM(span_getter, batch_size, precision)


def has_bilm(model: Model) -> bool:
    return isinstance(model.shims[0]._model, BiLM)


def get_bilm(model: Model) -> BiLM:
    bilm = model.shims[0]._model
    if not isinstance(bilm, BiLM):
        raise ValueError(NOT_INITIALIZED)
    return bilm


def set_bilm(model: Model, bilm: BiLM) -> None:
    if not isinstance(bilm, BiLM):
        raise TypeError(f"expected a spacy_elmo.BiLM, found {type(bilm).__name__}")
    if bilm.device.type == "cpu":  # follow spacy.require_gpu() / spacy train --gpu-id
        bilm.to(get_torch_default_device())
    bilm.precision = model.attrs["precision"]
    model.shims[0]._model = bilm


def _span_plan(model: Model, docs: List[Doc]) -> Tuple[List[List[str]], List[numpy.ndarray], List[int]]:
    """Token texts of every span; for each Doc the row of each token's
    output in the concatenation of all spans' outputs (-1: none); and the
    number of (non-empty) spans of each Doc."""
    spans_per_doc = model.attrs["span_getter"](docs)
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


_THREADS_SET_FOR_PID: Optional[int] = None


def _one_thread_in_workers() -> None:
    global _THREADS_SET_FOR_PID
    if _THREADS_SET_FOR_PID == os.getpid():
        return
    _THREADS_SET_FOR_PID = os.getpid()
    if multiprocessing.parent_process() is not None:
        torch.set_num_threads(1)


def forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    """Per-Doc layers (L+1, n_tokens, dim).

    Prediction: :meth:`BiLM.embed_sentences` (inference mode, the word-type
    cache). Training: the shim's ``begin_update`` on each batch of sentences
    (the same length-sorted batches, :func:`~spacy_elmo.bilm.batching.map_batches`);
    the backprop routes the Docs' gradients to the batches' outputs and calls
    the shim's backprop of each batch."""
    _one_thread_in_workers()
    bilm = get_bilm(model)
    bilm.precision = model.attrs["precision"]
    texts, sources, n_spans = _span_plan(model, docs)
    n_layers, dim = bilm.num_layers, bilm.output_dim
    ops = model.ops
    zero_row = numpy.zeros((n_layers, 1, dim), dtype=numpy.float32)
    if not is_train:
        return _predict_streaming(model, bilm, docs, texts, sources, n_spans), _no_gradient

    shim = model.shims[0]
    # Per batch: the biLM's output layers (tensors), the shim's backprop, padded length.
    batches: List[Tuple[List[torch.Tensor], Callable, int]] = []

    def run_batch(batch: List[List[str]]) -> List[Tuple[numpy.ndarray, int, int]]:
        char_ids, _ = batch_to_char_ids(batch, bilm.options.max_characters_per_token)
        inputs = ArgsKwargs(args=(torch.from_numpy(char_ids).to(bilm.device),), kwargs={})
        output, batch_backprop = shim.begin_update(inputs)
        stacked = torch.stack(output.layers, dim=1).detach().float().cpu().numpy()  # (B, L+1, T, dim)
        batches.append((output.layers, batch_backprop, char_ids.shape[1]))
        # Each sentence: its layers, and where it sits (batch, row).
        return [(stacked[row, :, 1 : len(s) + 1], len(batches) - 1, row) for row, s in enumerate(batch)]

    spans = map_batches(texts, model.attrs["batch_size"], run_batch)
    flat = numpy.concatenate([zero_row] + [layers for layers, _, _ in spans], axis=1)
    outputs = [ops.asarray3f(flat[:, source + 1]) for source in sources]

    def backprop(d_outputs: List[Floats3d]) -> List:
        d_flat = numpy.zeros_like(flat)
        for d_doc, source in zip(d_outputs, sources):
            covered = source >= 0  # a covered token has a row of its own
            d_flat[:, source[covered] + 1] += ops.to_numpy(d_doc)[:, covered]
        d_batches = [
            numpy.zeros((n_layers, layers[0].shape[0], n_steps, dim), dtype=numpy.float32)
            for layers, _, n_steps in batches
        ]
        start = 1
        for layers, batch, row in spans:
            n = layers.shape[1]
            d_batches[batch][:, row, 1 : n + 1] = d_flat[:, start : start + n]
            start += n
        for (layers, batch_backprop, _), d_batch in zip(batches, d_batches):
            grads = [torch.from_numpy(d).to(device=t.device, dtype=t.dtype) for d, t in zip(d_batch, layers)]
            batch_backprop(ArgsKwargs(args=(layers,), kwargs={"grad_tensors": grads}))
        return []

    return outputs, backprop


def _predict_streaming(
    model: Model, bilm: BiLM, docs: List[Doc], texts: List[List[str]], sources: List[numpy.ndarray], n_spans: List[int]
) -> List[Floats3d]:
    """Inference: each Doc's output (L+1, n_tokens, dim) is allocated once
    (zeros: a token no span covers keeps zero vectors) and each batch's span
    outputs are copied into the rows of the tokens that take them as they
    come (:meth:`BiLM.iter_embeddings`), so the memory beyond the result is
    one batch, whatever the Doc's length."""
    bilm.eval()
    n_layers, dim = bilm.num_layers, bilm.output_dim
    outputs = [numpy.zeros((n_layers, len(doc), dim), dtype=numpy.float32) for doc in docs]
    # For every span (in the order of ``texts``): its Doc, the Doc positions
    # that take its output, and the rows of the span they take.
    offsets = numpy.cumsum([0] + [len(t) for t in texts])
    targets: List[Tuple[int, numpy.ndarray, numpy.ndarray]] = []
    for d, source in enumerate(sources):
        covered = numpy.flatnonzero(source >= 0)
        order = numpy.argsort(source[covered], kind="stable")
        positions, flat = covered[order], source[covered][order]
        for j in range(len(targets), len(targets) + n_spans[d]):
            lo, hi = numpy.searchsorted(flat, [offsets[j], offsets[j + 1]])
            targets.append((d, positions[lo:hi], flat[lo:hi] - offsets[j]))
    for index, layers in bilm.iter_embeddings(texts, batch_size=model.attrs["batch_size"]):
        d, positions, rows = targets[index]
        if len(positions):
            outputs[d][:, positions] = layers[:, rows]
    return [model.ops.asarray3f(output) for output in outputs]


def _no_gradient(d_outputs: List[Floats3d]) -> List:
    return []
