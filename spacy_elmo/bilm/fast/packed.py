"""Pre-packed float32 weights for the CPU inference recurrence.

An LSTM step multiplies a few dozen rows (the active sentences) by a large
weight matrix (4 x cell_dim columns). A plain ``torch.addmm`` re-lays the whole
weight out for the CPU's matrix kernel on every call, so at that row count
it runs memory-bound.
oneDNN (PyTorch's ``mkldnn`` backend) can lay a weight out once and reuse it:
``torch.ops.mkldnn._reorder_linear_weight`` packs it and
``torch.ops.mkldnn._linear_pointwise`` multiplies by the packed weight, adding
the step's input product in the same call (its speed-up: docs/speed.md).

The result is float32 throughout, equal to the unpacked product up to
summation order (about 1e-6); rows are computed independently, so a
sentence's vectors still do not depend on its batch (tested). These are the
ops PyTorch's own compiler uses for frozen CPU linear layers; they are not
public API, so :func:`packing_supported` checks them once and the recurrence
falls back to plain products where they are missing or fail.

Packed weights are made on first use and remade whenever a parameter changes
(tracked by tensor version, like the int8 weights and the word-type cache);
they are never copied, pickled or trained.
"""
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from ..lstm import BiProjectedLSTMLayer, State, active_rows
from .recurrence import run_steps
from .token_cache import ThreadLock, parameter_stamp


@lru_cache(maxsize=None)
def packing_supported() -> bool:
    """Whether this PyTorch build packs fp32 linear weights with oneDNN
    (and the packed product matches the plain one)."""
    if not torch.backends.mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
        return False
    try:
        gen = torch.Generator().manual_seed(0)
        weight = torch.randn(24, 8, generator=gen)
        x = torch.randn(3, 8, generator=gen)
        add = torch.randn(3, 24, generator=gen)
        bias = torch.randn(24, generator=gen)
        plain = PackedFP32Linear(weight)
        biased = PackedFP32Linear(weight, bias)
        checks = [
            (plain(x), x @ weight.t()),
            (plain(x, add), torch.addmm(add, x, weight.t())),
            (biased(x), torch.addmm(bias, x, weight.t())),
            (biased(x, add), torch.addmm(bias, x, weight.t()) + add),
        ]
        return all(torch.allclose(got, want, atol=1e-5) for got, want in checks)
    except Exception:  # an op that exists but does not run on this build/CPU
        return False


class PackedFP32Linear:
    """``x @ weight.T + bias (+ add)`` with ``weight`` packed once by oneDNN
    (CPU, float32, inference only)."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, rows_hint: int = 32) -> None:
        weight = weight.detach().float().contiguous()
        self.out_features, self.in_features = weight.shape
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows_hint)
        self.bias = None if bias is None else bias.detach().float().contiguous()

    def __call__(self, x: torch.Tensor, add: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x``: (n, in_features), ``add``: None or (n, out_features)."""
        x = x.contiguous()
        if add is None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return torch.ops.mkldnn._linear_pointwise.binary(x, add.contiguous(), self.packed, self.bias, "add")


class PackCache:
    """Packed weights of a module (oneDNN fp32 here, int8 in
    :class:`.int8.Int8Cache`), remade when any of its parameters changes or
    ``key`` differs; empty again in copies and pickles (packed tensors
    cannot be copied).

    Safe under concurrent calls: the check and the rebuild run under a lock,
    so a call never sees packs of another stamp than it asked for, and
    concurrent first calls build them once. The packs themselves are only
    read once built (oneDNN's packed products do not write to them)."""

    def __init__(self) -> None:
        self._stamp: Optional[Tuple] = None
        self._packs: Dict[str, object] = {}
        self._lock = ThreadLock()

    def __deepcopy__(self, memo) -> "PackCache":
        return type(self)()

    def __getstate__(self) -> Dict:
        return {"_stamp": None, "_packs": {}}

    def __setstate__(self, state: Dict) -> None:
        self.__init__()  # type: ignore[misc]

    def _check(self) -> None:
        """Raise if this kind of packing cannot run here."""

    def get(self, module: nn.Module, build, key=None) -> Dict[str, object]:
        stamp = (key,) + parameter_stamp([module])
        with self._lock:
            if stamp != self._stamp:
                self._check()
                self._packs = build(module)
                self._stamp = stamp
            return self._packs


#: Recurrent weights with at least this many elements (4 x cell_dim x
#: projection_dim) are packed when the engine's ``packed_weights`` is left
#: to the rule (None): every published shape (the small one has 2^19), never
#: the tiny test models. See :attr:`.engine.InferenceEngine.packed_weights`.
PACK_MIN_ELEMENTS = 1 << 18


def pack_layer(layer: BiProjectedLSTMLayer) -> Dict[str, List[PackedFP32Linear]]:
    """Packed weights for :func:`recur_packed`: g's rows of ``W_ih``,
    ``W_hh`` and the bias, and all of ``W_P``, times two (exact)."""
    C = layer.cell_dim
    scale = torch.ones(4 * C, 1, device=layer.bias.device)
    scale[2 * C : 3 * C] = 2.0
    bias = layer.gate_bias().detach() * scale.squeeze(1)
    return {
        "ih": [PackedFP32Linear(layer.weight_ih[d].detach() * scale, bias[d]) for d in range(2)],
        "hh": [PackedFP32Linear(layer.weight_hh[d].detach() * scale) for d in range(2)],
        "proj": [PackedFP32Linear(layer.weight_proj[d].detach() * 2.0) for d in range(2)],
    }


def sigmoid_cell(gates: torch.Tensor, c2: torch.Tensor, clip: Optional[float]) -> torch.Tensor:
    """The elementwise half of a :func:`recur_packed` step: ``gates``
    (2, n, 4 x cell_dim) pre-activations (overwritten), ``c2`` (2, n,
    cell_dim) the doubled cell state (updated in place), ``clip`` its
    bound; returns ``o (sigmoid(c2) - 1/2)``, the projection's input."""
    i, f, s, o = gates.sigmoid_().chunk(4, dim=-1)
    c2.mul_(f).addcmul_(i, s, value=4.0).sub_(i, alpha=2.0)
    if clip is not None:
        c2.clamp_(-clip, clip)
    return torch.sigmoid(c2).sub_(0.5).mul_(o)


def recur_packed(
    layer: BiProjectedLSTMLayer,
    packs: Dict[str, List[PackedFP32Linear]],
    inputs: torch.Tensor,
    lengths: List[int],
    state: State,
    input_products: Optional[List[torch.Tensor]] = None,
) -> Tuple[torch.Tensor, State]:
    """The in-place recurrence with packed fp32 weights (:func:`pack_layer`;
    each product's weight is packed on its own, so the products run per
    direction; the elementwise work, :func:`sigmoid_cell`, runs on both
    directions at once). ``input_products``: the layer's ``x W_ih + b`` per direction
    (T, B, 4 x cell_dim, g's columns doubled) when the caller has them.

    The packed weights give the cell input's (g's) pre-activation doubled
    and project by ``2 W_P``, so the cell needs sigmoids only, by
    ``tanh(x) = 2 sigmoid(2x) - 1``, with the cell state kept doubled,
    ``c2 = 2c``::

        c2 = f c2 + 4 i sigmoid(2g) - 2 i            (= 2 (f c + i tanh(g)))
        h  = (o (sigmoid(c2) - 1/2)) (2 W_P)         (= (o tanh(c)) W_P)

    Scaling by 2 is exact in floating point; the identity moves results by
    about 1e-7 (tested against the reference fixtures at 1e-4 like the plain
    path). One sigmoid over all four gates replaces three activation calls,
    and torch's CPU tanh kernel is slower than its sigmoid."""
    ih, hh, proj = packs["ih"], packs["hh"], packs["proj"]
    n_dir, n_steps, batch, _ = inputs.shape
    xw = input_products or [
        ih[d](inputs[d].reshape(-1, layer.input_dim)).view(n_steps, batch, -1) for d in range(n_dir)
    ]
    h = state[0].to(torch.float32, copy=True)
    c2 = state[1].to(torch.float32, copy=True).mul_(2.0)
    clip = None if layer.cell_clip is None else 2.0 * layer.cell_clip
    out = inputs.new_zeros(n_dir, n_steps, batch, layer.projection_dim)

    def step(t: int, n: int):
        gates = torch.stack([hh[d](h[d, :n], xw[d][t, :n]) for d in range(n_dir)])
        a = sigmoid_cell(gates, c2[:, :n], clip)
        for d in range(n_dir):
            yield d, proj[d](a[d])

    run_steps(layer, active_rows(lengths, n_steps), h, out, step)
    return out, (h, c2.mul_(0.5))


def type_input_products(packs: Dict[str, List[PackedFP32Linear]], encodings: torch.Tensor) -> List[torch.Tensor]:
    """``encodings @ W_ih.T + bias`` (n, 4 x cell_dim) per direction, in
    the form the ``packs`` were made for (g's columns doubled)."""
    return [packs["ih"][d](encodings) for d in range(2)]
