"""The opt-in int8 inference path: dynamically quantized matrix products.

With ``bilm.precision = "int8"`` (CPU, inference only) every large matrix
product of the biLM -- the char-CNN convolutions, the highway and projection
layers, and the LSTM's input, recurrent and projection products -- runs with
int8 weights (symmetric, one scale per output channel) and activations
quantized on the fly per call (PyTorch's fbgemm/x86 ``linear_dynamic``, with
``reduce_range`` as fbgemm asks, so that its 16-bit accumulation cannot
saturate). Element-wise work (gates, cell state, clipping, max-pool) and all
outputs stay in float32.

It trades exactness for speed on CPUs without native bf16: its deviation from
the exact path and its effect on a tagger are reported in the README
(``python -m spacy_elmo benchmark --fast``, ``benchmarks/int8_tagger.py``).
The quantized weights are made on first use and remade whenever a weight
changes (tracked by tensor version, like the word-type cache).
"""
import warnings
from typing import Dict, Iterable, Optional, Tuple

import torch
from torch import nn


def int8_supported() -> bool:
    """Whether this PyTorch build has the x86 quantized kernels (fbgemm)."""
    engines = torch.backends.quantized.supported_engines
    return "fbgemm" in engines or "x86" in engines


class PackedLinear:
    """``x @ weight.T + bias`` with int8 weights, for inference."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> None:
        weight = weight.detach().float().contiguous()
        self.out_features, self.in_features = weight.shape
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

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        if flat.shape[0] == 0:
            return x.new_zeros(*lead, self.out_features)
        out = torch.ops.quantized.linear_dynamic(flat.contiguous(), self.packed, True)
        return out.view(*lead, self.out_features)


def _stamp(params: Iterable[torch.Tensor]) -> Tuple:
    return tuple((p.data_ptr(), p._version, p.device) for p in params)


class Int8Cache:
    """Packed int8 weights of a module, remade when any parameter changes."""

    def __init__(self) -> None:
        self._stamp: Optional[Tuple] = None
        self._packs: Dict[str, object] = {}

    def __deepcopy__(self, memo) -> "Int8Cache":
        return Int8Cache()  # packed weights are remade on first use

    def __getstate__(self) -> Dict:
        return {"_stamp": None, "_packs": {}}

    def get(self, module: nn.Module, build) -> Dict[str, object]:
        stamp = _stamp(module.parameters())
        if stamp != self._stamp:
            if not int8_supported():
                raise RuntimeError("precision='int8' needs PyTorch's fbgemm/x86 quantized kernels")
            self._packs = build(module)
            self._stamp = stamp
        return self._packs
