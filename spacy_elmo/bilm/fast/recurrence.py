"""Inference recurrences of :class:`~spacy_elmo.bilm.lstm.BiProjectedLSTMLayer`.

Each computes the layer's exact cell (see :mod:`spacy_elmo.bilm.lstm`) with
autograd off, so it may update the state in place, activate the gates in
place and write each step's output straight into place. Rows are sorted
longest first, as in the exact recurrence.
"""
from typing import Callable, List, Tuple

import torch
from torch import nn

from ..lstm import BiProjectedLSTMLayer, State


def recur_inplace(
    layer: BiProjectedLSTMLayer, xw: torch.Tensor, n_active: List[int], state: State, out_dtype: torch.dtype
) -> Tuple[torch.Tensor, State]:
    """Both directions at once from the input products ``xw`` (2, T, B,
    4 x cell_dim); the products run in ``xw``'s dtype (bf16 for that
    precision), the cell state and the outputs in ``out_dtype``."""
    dtype = xw.dtype
    h = state[0].to(dtype, copy=True)
    c = state[1].to(out_dtype, copy=True)
    C = layer.cell_dim
    w_hh = layer.weight_hh.transpose(1, 2).to(dtype)
    w_proj = layer.weight_proj.transpose(1, 2).to(dtype)
    out = xw.new_zeros(xw.shape[0], xw.shape[1], h.shape[1], layer.projection_dim, dtype=out_dtype)
    for t, n in enumerate(n_active):
        if n == 0:
            break
        gates = torch.baddbmm(xw[:, t, :n], h[:, :n], w_hh)
        gates[..., : 2 * C].sigmoid_()
        gates[..., 2 * C : 3 * C].tanh_()
        gates[..., 3 * C :].sigmoid_()
        i, f, g, o = gates.chunk(4, dim=-1)
        c_t = c[:, :n]
        c_t.mul_(f).addcmul_(i, g)
        if layer.cell_clip is not None:
            c_t.clamp_(-layer.cell_clip, layer.cell_clip)
        h_t = torch.bmm(torch.tanh(c_t).mul_(o).to(dtype), w_proj)
        if layer.proj_clip is not None:
            h_t.clamp_(-layer.proj_clip, layer.proj_clip)
        h[:, :n] = h_t
        out[:, t, :n] = h_t
    return out, (h, c)


GatesFn = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]
ProjFn = Callable[[int, torch.Tensor], torch.Tensor]


def recur_per_direction(
    layer: BiProjectedLSTMLayer,
    inputs: torch.Tensor,
    lengths: List[int],
    state: State,
    gates_fn: GatesFn,
    proj_fn: ProjFn,
    xw: List[torch.Tensor],
) -> Tuple[torch.Tensor, State]:
    """The in-place recurrence one direction after the other, for products
    whose weights are packed per direction: ``gates_fn(d, h, xw_t)`` gives
    the step's gate pre-activations of direction ``d``, ``proj_fn(d, tanh(c)
    * o)`` its projection; ``xw[d]`` (T, B, 4 x cell_dim) its input
    products."""
    n_dir, n_steps, batch, _ = inputs.shape
    h = state[0].to(torch.float32, copy=True)
    c = state[1].to(torch.float32, copy=True)
    C = layer.cell_dim
    out = inputs.new_zeros(n_dir, n_steps, batch, layer.projection_dim)
    for t in range(n_steps):
        n = sum(1 for length in lengths if length > t)
        if n == 0:
            break
        for d in range(n_dir):
            gates = gates_fn(d, h[d, :n], xw[d][t, :n])
            gates[:, : 2 * C].sigmoid_()
            gates[:, 2 * C : 3 * C].tanh_()
            gates[:, 3 * C :].sigmoid_()
            i, f, g, o = gates.chunk(4, dim=-1)
            c_t = c[d, :n]
            c_t.mul_(f).addcmul_(i, g)
            if layer.cell_clip is not None:
                c_t.clamp_(-layer.cell_clip, layer.cell_clip)
            h_t = proj_fn(d, torch.tanh(c_t).mul_(o))
            if layer.proj_clip is not None:
                h_t.clamp_(-layer.proj_clip, layer.proj_clip)
            h[d, :n] = h_t
            out[d, t, :n] = h_t
    return out, (h, c)


def fused_kernel_applies(layer: BiProjectedLSTMLayer, lengths: List[int]) -> bool:
    """PyTorch's own LSTM kernel (``torch.lstm`` with a projection) computes
    the same function when nothing is clipped; it cannot clip, so models
    with ``cell_clip``/``proj_clip`` (every published ELMo) never use it."""
    return layer.cell_clip is None and layer.proj_clip is None and len(lengths) > 0 and lengths[-1] > 0


def recur_fused(
    layer: BiProjectedLSTMLayer, inputs: torch.Tensor, lengths: List[int], state: State
) -> Tuple[torch.Tensor, State]:
    """Unclipped layers on ``torch.lstm`` (see :func:`fused_kernel_applies`)."""
    batch_sizes = torch.tensor([sum(1 for n in lengths if n > t) for t in range(lengths[0])])
    bias = layer.gate_bias()
    no_bias = torch.zeros_like(bias[0])
    outputs, hs, cs = [], [], []
    for d in range(2):
        packed = nn.utils.rnn.pack_padded_sequence(inputs[d], torch.tensor(lengths))
        params = [layer.weight_ih[d], layer.weight_hh[d], bias[d], no_bias, layer.weight_proj[d]]
        hx = (state[0][d : d + 1], state[1][d : d + 1])
        out, h, c = torch.lstm(packed.data, batch_sizes, hx, params, True, 1, 0.0, False, False)
        padded, _ = nn.utils.rnn.pad_packed_sequence(
            nn.utils.rnn.PackedSequence(out, batch_sizes), total_length=inputs.shape[1]
        )
        outputs.append(padded)
        hs.append(h)
        cs.append(c)
    return torch.stack(outputs), (torch.cat(hs), torch.cat(cs))
