"""Experiments on the packed CPU path's cell, kept out of the library.

The library runs one cell on the packed path, the sigmoid-only one
(``spacy_elmo.bilm.fast.packed.sigmoid_cell``). The benchmarks compare it
with the cell as written (tanh activations, weights packed as they are) and
with other kernels of the same signature; :class:`CellEngine` is an
``InferenceEngine`` whose packed layers run such a variant::

    model.engine = CellEngine("tanh")            # the cell as written
    model.engine = CellEngine(my_cell)           # sigmoid_cell's signature
"""
from typing import Callable, Union

import torch

from spacy_elmo.bilm.fast import InferenceEngine
from spacy_elmo.bilm.fast.packed import PackedFP32Linear, pack_layer, sigmoid_cell
from spacy_elmo.bilm.fast.recurrence import recur_per_direction, run_steps
from spacy_elmo.bilm.lstm import active_rows


def pack_plain(layer):
    """Packed weights as they are (no doubling), for the tanh cell."""
    bias = layer.gate_bias().detach()
    return {
        "ih": [PackedFP32Linear(layer.weight_ih[d], bias[d]) for d in range(2)],
        "hh": [PackedFP32Linear(layer.weight_hh[d]) for d in range(2)],
        "proj": [PackedFP32Linear(layer.weight_proj[d]) for d in range(2)],
    }


def recur_tanh(layer, packs, inputs, lengths, state, input_products=None):
    """The packed recurrence with the cell as written, one direction after the other."""
    hh, proj = packs["hh"], packs["proj"]
    n_dir, n_steps, batch, _ = inputs.shape
    xw = [packs["ih"][d](inputs[d].reshape(-1, layer.input_dim)).view(n_steps, batch, -1) for d in range(n_dir)]
    return recur_per_direction(layer, inputs, lengths, state, lambda d, h, x: hh[d](h, x), lambda d, a: proj[d](a), xw)


def recur_with_cell(layer, packs, inputs, lengths, state, cell, input_products=None):
    """The library's packed recurrence with ``cell`` in place of ``sigmoid_cell``."""
    ih, hh, proj = packs["ih"], packs["hh"], packs["proj"]
    n_dir, n_steps, batch, _ = inputs.shape
    xw = input_products or [
        ih[d](inputs[d].reshape(-1, layer.input_dim)).view(n_steps, batch, -1) for d in range(n_dir)
    ]
    h = state[0].to(torch.float32, copy=True)
    c2 = state[1].to(torch.float32, copy=True).mul_(2.0)
    clip = None if layer.cell_clip is None else 2.0 * layer.cell_clip
    out = inputs.new_zeros(n_dir, n_steps, batch, layer.projection_dim)

    def step(t, n):
        a = cell(torch.stack([hh[d](h[d, :n], xw[d][t, :n]) for d in range(n_dir)]), c2[:, :n], clip)
        for d in range(n_dir):
            yield d, proj[d](a[d])

    run_steps(layer, active_rows(lengths, n_steps), h, out, step)
    return out, (h, c2.mul_(0.5))


class CellEngine(InferenceEngine):
    """An engine (packed weights forced on) whose packed layers run ``cell``:
    "sigmoid" (the library's), "tanh" (the cell as written) or a function
    with ``sigmoid_cell``'s signature. Per-type first-layer products are off
    for "tanh" (its packs are not doubled)."""

    def __init__(self, cell: Union[str, Callable] = "sigmoid", **kwargs) -> None:
        kwargs.setdefault("packed_weights", True)
        if cell == "tanh":
            kwargs["type_products"] = False
        super().__init__(**kwargs)
        self.cell = cell

    def run_layer(self, parts, index, inputs, lengths, state=None, input_products=None):
        layer = parts.layers[index]
        if self.path(layer, inputs, lengths) != "packed" or self.cell == "sigmoid":
            return super().run_layer(parts, index, inputs, lengths, state, input_products)
        if state is None:
            state = layer.zero_state(inputs.shape[2], inputs)
        if self.cell == "tanh":
            packs = self._packed(("fp32-plain", index), layer, pack_plain)
            return recur_tanh(layer, packs, inputs, lengths, state)
        packs = self._packed(("fp32", index), layer, pack_layer)
        return recur_with_cell(layer, packs, inputs, lengths, state, self.cell, input_products)


__all__ = ["CellEngine", "sigmoid_cell"]
