"""The biLM as a thinc model: ``List[Doc] -> List[Floats3d]``, one array of
shape (L+1, n_tokens, dim) per Doc.

The PyTorch :class:`~spacy_elmo.bilm.BiLM` lives in a thinc ``PyTorchShim``
whose serializer writes the published hdf5 format plus the options JSON, so a
saved pipeline carries the weights in the same format bilm-tf reads and
needs no outside file. Before ``initialize`` (``[initialize.components.elmo]``
weights/options, or :func:`spacy_elmo.add_elmo`) the shim holds no biLM.

Inference runs under ``torch.inference_mode`` through
:meth:`BiLM.embed_sentences` (length-sorted batches, the word-type cache).
With ``is_train`` and a positive ``grad_factor`` the model runs with
autograd instead (training mode, so the biLM's dropout applies), and its
gradient reaches the torch parameters; ``finish_update`` applies thinc's
optimizer to them.

In a multiprocessing worker (``nlp.pipe(..., n_process=N)``, with fork or
spawn) the biLM runs on one thread: the N workers share the cores, and
PyTorch's OpenMP thread pool does not survive ``fork`` (a forked child that
uses it hangs).
"""
import io
import multiprocessing
import os
from typing import Callable, List, Optional, Tuple

import numpy
import srsly
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, PyTorchShim, get_torch_default_device
from thinc.types import Floats3d

from ..bilm import BiLM, BiLMOptions
from ..bilm.chars import batch_to_char_ids
from ..hub import HOW_TO_GIVE_WEIGHTS
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
    return srsly.msgpack_dumps(
        {
            "options": module.options.to_dict(),
            "weights": buffer.getvalue(),
            "precision": module.precision,
            "token_cache_size": module.token_cache.max_size,
        }
    )


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
    weights = io.BytesIO(msg["weights"])
    arrays = read_datasets(weights, options)
    bilm = BiLM(options, token_cache_size=token_cache_size)
    load_hdf5(bilm, weights, arrays)
    bilm.precision = precision
    return bilm.to(device)


@registry.architectures("spacy_elmo.ElmoBiLM.v1")
def ElmoBiLM(
    span_getter: Optional[SpanGetter] = None,
    batch_size: int = 64,
    precision: str = "fp32",
    grad_factor: float = 0.0,
) -> Model[List[Doc], List[Floats3d]]:
    """The biLM over Docs.

    span_getter: splits Docs into the sentences the biLM reads (default:
        ``spacy_elmo.sent_or_strided_spans.v1`` with window 128, stride 96).
    batch_size: sentences per biLM call (sorted by length).
    precision: "fp32" (exact), or an opt-in fast inference path: "bf16"
        (native bf16 CPUs and GPUs) or "int8" (CPU); see ``BiLM.precision``.
    grad_factor: fine-tunes the biLM when > 0 and this model runs on its own
        (e.g. after ``nlp.replace_listeners``). Under the ``elmo`` component
        each listener's ``grad_factor`` decides instead.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, found {batch_size}")
    if precision not in BiLM.PRECISIONS:
        raise ValueError(f"precision must be one of {BiLM.PRECISIONS}, found {precision!r}")
    shim = PyTorchShim(
        torch.nn.Module(), serialize_model=_serialize_bilm, deserialize_model=_deserialize_bilm
    )
    return Model(
        "elmo_bilm",
        forward,
        shims=[shim],
        attrs={
            "span_getter": span_getter or configure_sent_or_strided_spans(),
            "batch_size": batch_size,
            "precision": precision,
            "grad_factor": grad_factor,
            # Used by nlp.replace_listeners (see .listener).
            "replace_listener_cfg": replace_listener_cfg,
            "replace_listener": replace_listener,
        },
    )


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


def forward(model: Model, docs: List[Doc], is_train: bool):
    fine_tune = is_train and model.attrs["grad_factor"] > 0
    outputs, backprop = run_bilm(model, docs, fine_tune)
    factor = model.attrs["grad_factor"]

    def scaled_backprop(d_outputs):
        return backprop([d * factor for d in d_outputs])

    return outputs, scaled_backprop


def _span_plan(model: Model, docs: List[Doc]) -> Tuple[List[List[str]], List[numpy.ndarray]]:
    """Token texts of every span, and for each Doc the row of each token's
    output in the concatenation of all spans' outputs (-1: none)."""
    spans_per_doc = model.attrs["span_getter"](docs)
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


_THREADS_SET_FOR_PID: Optional[int] = None


def _one_thread_in_workers() -> None:
    global _THREADS_SET_FOR_PID
    if _THREADS_SET_FOR_PID == os.getpid():
        return
    _THREADS_SET_FOR_PID = os.getpid()
    if multiprocessing.parent_process() is not None:
        torch.set_num_threads(1)


def run_bilm(model: Model, docs: List[Doc], fine_tune: bool) -> Tuple[List[Floats3d], Callable]:
    """Per-Doc layers; with ``fine_tune`` also a backprop into the biLM."""
    _one_thread_in_workers()
    bilm = get_bilm(model)
    bilm.precision = model.attrs["precision"]
    texts, sources = _span_plan(model, docs)
    n_layers, dim = bilm.num_layers, bilm.output_dim
    ops = model.ops
    if not fine_tune:
        bilm.eval()
        span_layers = bilm.embed_sentences(texts, batch_size=model.attrs["batch_size"])
        flat = numpy.concatenate(
            [numpy.zeros((n_layers, 1, dim), dtype=numpy.float32)] + span_layers, axis=1
        )
        # Row 0 of ``flat`` is the zero row for uncovered tokens.
        outputs = [ops.asarray3f(flat[:, source + 1]) for source in sources]
        return outputs, lambda d_outputs: []

    bilm.train()
    flat_t = _train_forward(bilm, texts, model.attrs["batch_size"])
    flat_t = torch.cat([flat_t.new_zeros((n_layers, 1, dim)), flat_t], dim=1)
    doc_tensors = [flat_t[:, torch.from_numpy(source + 1).to(flat_t.device)] for source in sources]
    outputs = [ops.asarray3f(t.detach().cpu().numpy()) for t in doc_tensors]

    def backprop(d_outputs: List[Floats3d]) -> List:
        grads = [
            torch.as_tensor(ops.to_numpy(d), dtype=t.dtype, device=t.device)
            for d, t in zip(d_outputs, doc_tensors)
        ]
        pairs = [(t, g) for t, g in zip(doc_tensors, grads) if t.numel()]
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        return []

    return outputs, backprop


def _train_forward(bilm: BiLM, texts: List[List[str]], batch_size: int) -> torch.Tensor:
    """(L+1, total_tokens, dim) with autograd, spans in the given order."""
    n_layers, dim = bilm.num_layers, bilm.output_dim
    pieces: List[Optional[torch.Tensor]] = [None] * len(texts)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        char_ids, _ = batch_to_char_ids([texts[i] for i in rows], bilm.options.max_characters_per_token)
        out = bilm(torch.from_numpy(char_ids).to(bilm.device))
        stacked = torch.stack(out.layers, dim=0)  # (L+1, B, T, dim)
        for row, index in enumerate(rows):
            n = len(texts[index])
            pieces[index] = stacked[:, row, 1 : n + 1]
    if not pieces:
        return torch.zeros((n_layers, 0, dim), device=bilm.device)
    return torch.cat(pieces, dim=1)
