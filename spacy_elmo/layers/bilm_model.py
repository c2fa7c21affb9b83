"""The biLM as a thinc model, ``spacy_elmo.ElmoBiLM.v2``: ``List[Doc] ->
List[Floats3d]``, one array of shape (L+1, n_tokens, dim) per Doc.

The PyTorch :class:`~spacy_elmo.bilm.BiLM` lives in a
:class:`~.bilm_shim.BiLMShim`. Before ``initialize``
(``[initialize.components.elmo]`` weights/options, or
:func:`spacy_elmo.add_elmo`) the shim holds no biLM.

``model.predict`` runs the biLM under ``torch.inference_mode`` through
:func:`~spacy_elmo.bilm.batching.iter_batches` (length-sorted batches, the
word-type cache; each batch on the threads of :mod:`.thread_policy`),
placing each batch's output into the Docs' arrays as it comes.
``model.begin_update`` runs the same batches (the same batch runner,
:func:`~spacy_elmo.bilm.batching.embed_batch`) through the shim's
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
import multiprocessing
import os
from typing import Callable, List, Optional, Sequence, Tuple, cast

import numpy
import torch
from spacy.tokens import Doc
from thinc.api import ArgsKwargs, Model
from thinc.types import Floats3d

from ..bilm.batching import embed_batch, iter_batches, map_batches
from .bilm_shim import BiLMShim, get_bilm
from .listener import replace_listener, replace_listener_cfg
from .span_getters import SpanGetter, configure_sent_or_strided_spans
from .span_plan import span_plan, span_targets
from .thread_policy import ThreadsSetting, make_policy


def ElmoBiLM(
    span_getter: Optional[SpanGetter] = None,
    batch_size: int = 64,
    precision: str = "fp32",
    token_cache_size: int = 50_000,
    threads: ThreadsSetting = "auto",
) -> Model[List[Doc], List[Floats3d]]:
    """The biLM over Docs.

    span_getter: splits Docs into the sentences the biLM reads (default:
        ``spacy_elmo.sent_or_strided_spans.v1`` with window 128, stride 96).
    batch_size: sentences per biLM call (sorted by length).
    precision: "fp32" (exact), or an opt-in fast inference path: "bf16"
        (native bf16 CPUs and GPUs) or "int8" (CPU); see ``BiLM.precision``.
    token_cache_size: word types whose token encodings are kept across
        calls (0: off; see ``BiLM.token_cache``).
    threads: torch threads of the biLM's inference batches: "auto" (the
        faster of the caller's thread count and one thread, measured on the
        batches themselves; see :mod:`.thread_policy`), 0 (torch's own
        setting, untouched) or a number of threads.

    ``predict`` runs the biLM in inference; ``begin_update`` runs it with
    autograd and returns its backprop. Its users decide whether it is
    fine-tuned: the listeners' ``grad_factor`` (and the ``elmo`` component's
    ``frozen``), or ``spacy_elmo.ElmoMix.v1``'s ``grad_factor``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, found {batch_size}")
    return Model(
        "elmo_bilm",
        forward,
        shims=[BiLMShim(precision=precision, token_cache_size=token_cache_size)],
        attrs={
            "span_getter": span_getter or configure_sent_or_strided_spans(),
            "batch_size": batch_size,
            "thread_policy": make_policy(threads),
            # Used by nlp.replace_listeners (see .listener).
            "replace_listener_cfg": replace_listener_cfg,
            "replace_listener": replace_listener,
        },
    )


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

    Prediction: :func:`~spacy_elmo.bilm.batching.iter_batches` (inference
    mode, the word-type cache), streamed into the Docs' arrays
    (:func:`_predict_streaming`). Training: the shim's ``begin_update`` on each batch of sentences
    (the same length-sorted batches, :func:`~spacy_elmo.bilm.batching.map_batches`,
    and the same batch runner); the backprop routes the Docs' gradients to
    the batches' outputs and calls the shim's backprop of each batch."""
    _one_thread_in_workers()
    bilm = get_bilm(model)
    texts, sources, n_spans = span_plan(model.attrs["span_getter"], docs)
    if not is_train:
        return _predict_streaming(model, bilm, docs, texts, span_targets(texts, sources, n_spans)), _no_gradient
    n_layers, dim = bilm.num_layers, bilm.output_dim
    ops = model.ops
    zero_row = numpy.zeros((n_layers, 1, dim), dtype=numpy.float32)

    shim = model.shims[0]
    # Per batch: the biLM's output layers (tensors), the shim's backprop, padded length.
    batches: List[Tuple[List[torch.Tensor], Callable, int]] = []

    def run_batch(batch: List[Sequence[str]]) -> List[Tuple[numpy.ndarray, int, int]]:
        backprops = []

        def call(char_ids: torch.Tensor):
            output, batch_backprop = shim.begin_update(ArgsKwargs(args=(char_ids,), kwargs={}))
            backprops.append(batch_backprop)
            return output

        rows, output = embed_batch(bilm, batch, call)
        batches.append((output.layers, backprops[0], output.mask.shape[1]))
        # Each sentence: its layers, and where it sits (batch, row).
        return [(layers, len(batches) - 1, row) for row, layers in enumerate(rows)]

    # Every span has tokens, so every one ran: no None among them.
    spans = cast(List[Tuple[numpy.ndarray, int, int]], map_batches(texts, model.attrs["batch_size"], run_batch))
    flat = numpy.concatenate([zero_row] + [layers for layers, _, _ in spans], axis=1)
    outputs = [ops.asarray3f(cast(Floats3d, flat[:, source + 1])) for source in sources]

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
        for (tensors, batch_backprop, _), d_batch in zip(batches, d_batches):
            grads = [torch.from_numpy(d).to(device=t.device, dtype=t.dtype) for d, t in zip(d_batch, tensors)]
            batch_backprop(ArgsKwargs(args=(tensors,), kwargs={"grad_tensors": grads}))
        return []

    return outputs, backprop


def _predict_streaming(model: Model, bilm, docs: List[Doc], texts: List[List[str]], targets: List) -> List[Floats3d]:
    """Inference: each Doc's output (L+1, n_tokens, dim) is allocated once
    (zeros: a token no span covers keeps zero vectors) and each batch's span
    outputs are copied from the batch's output into the rows of the tokens
    that take them (:func:`~spacy_elmo.bilm.batching.iter_batches`;
    ``targets`` from :func:`~.span_plan.span_targets`), so the memory beyond
    the result is one batch, whatever the Doc's length. Each batch runs on
    the threads the model's thread policy gives it."""
    bilm.eval()
    outputs = [numpy.zeros((bilm.num_layers, len(doc), bilm.output_dim), dtype=numpy.float32) for doc in docs]
    policy = model.attrs["thread_policy"]
    batches = iter_batches(bilm, texts, model.attrs["batch_size"])
    while True:
        with policy.batch() as info:
            batch = next(batches, None)
            if batch is not None:
                info["n_tokens"] = sum(len(texts[i]) for i in batch[0])
        if batch is None:
            break
        for index, layers in zip(*batch):
            d, positions, rows = targets[index]
            if len(positions) == layers.shape[1]:  # the whole span, in order: one slice copy
                start = positions[0]
                outputs[d][:, start : start + len(positions)] = layers
            elif len(positions):
                outputs[d][:, positions] = layers[:, rows]
        del batch
    return [model.ops.asarray3f(cast(Floats3d, output)) for output in outputs]


def _no_gradient(d_outputs: List[Floats3d]) -> List:
    return []
