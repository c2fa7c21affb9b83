"""Pre-packed float32 weights for the CPU inference recurrence.

An LSTM step multiplies a few dozen rows (the active sentences) by a large
weight matrix (4 x cell_dim columns). A plain ``torch.addmm`` re-lays the whole
weight out for the CPU's matrix kernel on every call, so at that row count
it runs memory-bound, at about a third of the machine's fp32 matmul peak.
oneDNN (PyTorch's ``mkldnn`` backend) can lay a weight out once and reuse it:
``torch.ops.mkldnn._reorder_linear_weight`` packs it and
``torch.ops.mkldnn._linear_pointwise`` multiplies by the packed weight, adding
the step's input product in the same call. That doubles the speed of the
per-step products on a 2-core AVX2 machine (``python -m spacy_elmo
benchmark``, README "Speed and memory").

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
import time
from functools import lru_cache
from typing import Dict, Iterable, Optional, Tuple

import torch
from torch import nn

from .token_cache import ThreadLock


def _stamp(params: Iterable[torch.Tensor]) -> Tuple:
    return tuple((p.data_ptr(), p._version, p.device) for p in params)


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
        stamp = (key,) + _stamp(module.parameters())
        with self._lock:
            if stamp != self._stamp:
                self._check()
                self._packs = build(module)
                self._stamp = stamp
            return self._packs


@lru_cache(maxsize=None)
def packing_pays(cell_dim: int, projection_dim: int, threads: int, rows: int = 32, rounds: int = 5) -> bool:
    """Whether, on this machine, one LSTM step's products (recurrent and
    projection, both directions, ``rows`` rows) are faster with packed
    weights than with the plain batched products, measured once per shape
    and thread count (about 0.1 s for the small published shape).

    Whether packing pays for weights that fit the CPU's cache depends on the
    CPU: on the small published shape it gave -9% on one 2-core AVX2 VM and
    +35% on another (``benchmarks/exact_ablation.py --shape small``). Packing
    also lets the first layer's input products be made per word type, so it
    is chosen unless it is more than 10% slower on the step alone."""
    gen = torch.Generator().manual_seed(0)
    gates = 4 * cell_dim
    w_hh = torch.randn(2, gates, projection_dim, generator=gen)
    w_proj = torch.randn(2, projection_dim, cell_dim, generator=gen)
    h = torch.randn(2, rows, projection_dim, generator=gen)
    x = torch.randn(2, rows, gates, generator=gen)
    a = torch.randn(2, rows, cell_dim, generator=gen)
    hh = [PackedFP32Linear(w_hh[d]) for d in range(2)]
    proj = [PackedFP32Linear(w_proj[d]) for d in range(2)]

    def plain() -> None:
        torch.baddbmm(x, h, w_hh.transpose(1, 2))
        torch.bmm(a, w_proj.transpose(1, 2))

    def packed() -> None:
        for d in range(2):
            hh[d](h[d], x[d])
            proj[d](a[d])

    best = {plain: float("inf"), packed: float("inf")}
    with torch.inference_mode():
        for _ in range(rounds):
            for fn in best:
                start = time.perf_counter()
                for _ in range(4):
                    fn()
                best[fn] = min(best[fn], time.perf_counter() - start)
    return best[packed] <= 1.1 * best[plain]
