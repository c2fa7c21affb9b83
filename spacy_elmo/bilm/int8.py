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
``BiProjectedLSTMLayer.type_input_products``). The highway layers, the token
projection, all element-wise work and the outputs stay in float32.

Why bounds: ``linear_dynamic`` quantizes its input with one scale per call,
taken from the input's range, so a row's result would depend on the other
rows of the batch. Each call here gets one extra row holding ``+bound`` and
``-bound``, which fixes the range for every call: a sentence's int8 vectors
are the same alone or in any batch, as on the exact path.

It trades exactness for speed on CPUs without native bf16: its deviation from
the exact path and its speed are reported by ``python -m spacy_elmo
benchmark``. The quantized weights are made on first use and remade whenever
a weight changes (tracked by tensor version, like the word-type cache).
"""
import warnings
from typing import Optional

import torch

from .packed import PackCache


def int8_supported() -> bool:
    """Whether this PyTorch build has the x86 quantized kernels (fbgemm)."""
    engines = torch.backends.quantized.supported_engines
    return "fbgemm" in engines or "x86" in engines


class PackedLinear:
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
