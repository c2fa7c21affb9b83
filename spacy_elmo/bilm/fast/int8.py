"""The opt-in int8 inference path: dynamically quantized matrix products.

With ``bilm.precision = "int8"`` (CPU, inference only) these matrix
products run with int8 weights (symmetric, one scale
per output channel) on PyTorch's fbgemm/x86 ``linear_dynamic`` kernel, with
``reduce_range`` as fbgemm asks, so that its 16-bit accumulation cannot
saturate: the char-CNN convolutions (inputs: char embeddings), the LSTM's
recurrent products (inputs: the projected state, bounded by ``proj_clip`` or
by the projection's row sums), its projections (inputs: ``tanh(c) * o`` in
[-1, 1]), the input products of every LSTM layer but the first (inputs:
earlier layers' outputs) and, per word type, the first layer's input
products (inputs: token encodings, with no bound: each row is divided by its
largest magnitude before the product and multiplied back after it, see
:func:`type_input_products`). The highway layers, the token
projection, all element-wise work and the outputs stay in float32.

Why bounds: ``linear_dynamic`` quantizes its input with one scale per call,
taken from the input's range, so a row's result would depend on the other
rows of the batch. Each call here gets one extra row holding ``+bound`` and
``-bound``, which fixes the range for every call: a sentence's int8 vectors
are the same alone or in any batch, as on the exact path.

It trades exactness for speed on CPUs without native bf16: its deviation from
the exact path and its speed are reported by ``python
benchmarks/inference_speed.py``. The quantized weights are made on first use and remade whenever
a weight changes (tracked by tensor version, like the word-type cache).
"""
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..lstm import BiProjectedLSTMLayer, State
from ..token_encoder import CharCNNEncoder
from .packed import PackCache
from .recurrence import recur_per_direction


def int8_supported() -> bool:
    """Whether this PyTorch build has the x86 quantized kernels (fbgemm)."""
    engines = torch.backends.quantized.supported_engines
    return "fbgemm" in engines or "x86" in engines


class Int8Linear:
    """``x @ weight.T + bias`` with int8 weights, for inference, for inputs
    with ``|x| <= bound`` (see the module docstring)."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor], bound: float) -> None:
        weight = weight.detach().float().contiguous()
        self.out_features, self.in_features = weight.shape
        if self.in_features < 2:
            raise ValueError("int8 products need at least 2 input features")
        scales = (weight.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
        zero_points = torch.zeros(self.out_features, dtype=torch.long)
        with warnings.catch_warnings():
            # torch marks its quantized-tensor API as deprecated in favour of
            # torchao; it is what runs fbgemm's int8 kernels in torch 2.x.
            warnings.simplefilter("ignore", UserWarning)
            qweight = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(
                qweight, None if bias is None else bias.detach().float().contiguous()
            )
        self.anchor = torch.zeros(1, self.in_features)
        self.anchor[0, 0], self.anchor[0, 1] = float(bound), -float(bound)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        if flat.shape[0] == 0:
            return x.new_zeros(*lead, self.out_features)
        out = torch.ops.quantized.linear_dynamic(torch.cat([flat, self.anchor]), self.packed, True)
        return out[:-1].view(*lead, self.out_features)


class Int8Cache(PackCache):
    """Packed int8 weights of a module, remade when any parameter changes."""

    def _check(self) -> None:
        if not int8_supported():
            raise RuntimeError("precision='int8' needs PyTorch's fbgemm/x86 quantized kernels")


def output_bound(layer: BiProjectedLSTMLayer) -> float:
    """A bound on every output (and state) ``h`` of ``layer``: ``proj_clip``,
    or the largest row sum of ``|W_proj|`` (since ``|tanh(c) * o| < 1``)."""
    bound = float(layer.weight_proj.detach().abs().sum(dim=2).max())
    return bound if layer.proj_clip is None else min(bound, float(layer.proj_clip))


def input_bound(layers: Sequence[BiProjectedLSTMLayer], index: int, skip_connections: bool) -> Optional[float]:
    """A bound on the inputs of LSTM layer ``index`` (None for the first:
    token encodings have none). With skip connections layer l reads the
    sum of the outputs of layers 0..l-1, otherwise layer l-1's output."""
    if index == 0:
        return None
    bounds = [output_bound(layer) for layer in layers[:index]]
    return sum(bounds) if skip_connections else bounds[-1]


def pack_layer(layer: BiProjectedLSTMLayer, bound: Optional[float]) -> Dict[str, List[Optional[Int8Linear]]]:
    """int8 weights of ``layer`` for inputs bounded by ``bound`` (None:
    unbounded, the input product stays in float32 or runs per type on
    rows scaled to max ``|x| = 1``)."""
    bias = layer.gate_bias()
    h_bound = output_bound(layer)
    return {
        "ih": [None if bound is None else Int8Linear(layer.weight_ih[d], bias[d], bound) for d in range(2)],
        "hh": [Int8Linear(layer.weight_hh[d], None, h_bound) for d in range(2)],
        "proj": [Int8Linear(layer.weight_proj[d], None, 1.0) for d in range(2)],
        "ih_rows": [Int8Linear(layer.weight_ih[d], None, 1.0) for d in range(2)] if bound is None else [],
    }


def pack_encoder(encoder: CharCNNEncoder) -> List[Int8Linear]:
    """int8 weights of the char-CNN convolutions, as
    :meth:`CharCNNEncoder.forward`'s ``conv_products``. Their inputs are
    rows of the char embedding: bounded by its largest entry. The highway
    and projection inputs have no bound and stay in float32."""
    bound = float(encoder.char_embedding.weight.detach().abs().max()) or 1.0
    convs = []
    for conv in encoder.conv_layers():
        n_out, char_dim, size = conv.weight.shape
        convs.append(Int8Linear(conv.weight.permute(0, 2, 1).reshape(n_out, size * char_dim), None, bound))
    return convs


Packs = Dict[str, List[Int8Linear]]


def recur_int8(
    layer: BiProjectedLSTMLayer, packs: Packs, inputs: torch.Tensor, lengths: List[int], state: State,
    input_products: Optional[List[torch.Tensor]] = None,
) -> Tuple[torch.Tensor, State]:
    """The layer's recurrence with int8 products (:func:`pack_layer`);
    ``input_products`` as in :func:`.packed.recur_packed` (unscaled)."""
    n_dir, n_steps, batch, _ = inputs.shape
    ih, hh, proj = packs["ih"], packs["hh"], packs["proj"]
    # Directions one after the other: stacking their (B, 4C) gates would
    # copy more than the elementwise work costs.
    bias = layer.gate_bias()
    xw = input_products or [
        torch.addmm(bias[d], inputs[d].reshape(-1, layer.input_dim), layer.weight_ih[d].t()).view(n_steps, batch, -1)
        if ih[d] is None
        else ih[d](inputs[d])
        for d in range(n_dir)
    ]
    return recur_per_direction(
        layer, inputs, lengths, state, lambda d, h, x: hh[d](h).add_(x), lambda d, a: proj[d](a), xw
    )


def type_input_products(
    layer: BiProjectedLSTMLayer, packs: Dict[str, List[Int8Linear]], encodings: torch.Tensor
) -> List[torch.Tensor]:
    """``encodings @ W_ih.T + bias`` (n, 4 x cell_dim) per direction with
    int8 weights: each row is divided by its largest magnitude before the
    product and multiplied back after it, so every row is quantized on its
    own full range and its result does not depend on the other rows
    (encodings have no bound that a fixed anchor could use)."""
    rows = packs["ih_rows"]
    scale = encodings.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(encodings.dtype).tiny)
    unit = encodings / scale
    bias = layer.gate_bias()
    return [rows[d](unit).mul_(scale).add_(bias[d]) for d in range(2)]
