"""Inference recurrences of :class:`~spacy_elmo.bilm.lstm.BiProjectedLSTMLayer`.

Each computes the layer's exact cell (see :mod:`spacy_elmo.bilm.lstm`) with
autograd off, so it may update the state in place, activate the gates in
place and write each step's output straight into place. Rows are sorted
longest first, as in the exact recurrence, and step ``t`` works on the
first :func:`~spacy_elmo.bilm.lstm.active_rows` rows.

One skeleton, :func:`run_steps`, holds the loop they share (active rows, the
projection clip, writing the state and the output); a recurrence gives it
the step: the gate products of its kind of weights (plain, oneDNN-packed,
int8) and the cell (:func:`tanh_cell_` here, the sigmoid-only cell in
:mod:`.packed`).
"""
from typing import Callable, Iterable, List, Optional, Tuple, Union

import torch
from torch import nn

from ..lstm import BiProjectedLSTMLayer, State, active_rows

#: A step: ``step(t, n)`` yields ``(direction, h_t)`` pairs, the step's
#: unclipped output of the ``n`` active rows of one direction (an int) or
#: of both (``slice(None)``).
Step = Callable[[int, int], Iterable[Tuple[Union[int, slice], torch.Tensor]]]
BOTH = slice(None)


def run_steps(
    layer: BiProjectedLSTMLayer, n_active: List[int], h: torch.Tensor, out: torch.Tensor, step: Step
) -> None:
    """The loop of every inference recurrence: at each step, ``step``'s
    outputs clipped to ``proj_clip`` and written into the state ``h`` (2, B,
    P) and the outputs ``out`` (2, T, B, P)."""
    clip = layer.proj_clip
    for t, n in enumerate(n_active):
        if n == 0:
            break
        for d, h_t in step(t, n):
            if clip is not None:
                h_t.clamp_(-clip, clip)
            h[d, :n] = h_t
            out[d, t, :n] = h_t


def tanh_cell_(gates: torch.Tensor, c: torch.Tensor, cell_clip: Optional[float]) -> torch.Tensor:
    """The cell as written, in place: ``gates`` (..., 4 x cell_dim)
    pre-activations (i, f, g, o) are activated, ``c`` becomes ``f c + i g``
    (clipped); returns ``o tanh(c)``, the projection's input."""
    C = gates.shape[-1] // 4
    gates[..., : 2 * C].sigmoid_()
    gates[..., 2 * C : 3 * C].tanh_()
    gates[..., 3 * C :].sigmoid_()
    i, f, g, o = gates.chunk(4, dim=-1)
    c.mul_(f).addcmul_(i, g)
    if cell_clip is not None:
        c.clamp_(-cell_clip, cell_clip)
    return torch.tanh(c).mul_(o)


def recur_inplace(
    layer: BiProjectedLSTMLayer, xw: torch.Tensor, n_active: List[int], state: State, out_dtype: torch.dtype
) -> Tuple[torch.Tensor, State]:
    """Both directions at once from the input products ``xw`` (2, T, B,
    4 x cell_dim); the products run in ``xw``'s dtype (bf16 for that
    precision), the cell state and the outputs in ``out_dtype``."""
    dtype = xw.dtype
    h = state[0].to(dtype, copy=True)
    c = state[1].to(out_dtype, copy=True)
    w_hh = layer.weight_hh.transpose(1, 2).to(dtype)
    w_proj = layer.weight_proj.transpose(1, 2).to(dtype)
    out = xw.new_zeros(xw.shape[0], xw.shape[1], h.shape[1], layer.projection_dim, dtype=out_dtype)

    def step(t: int, n: int):
        gates = torch.baddbmm(xw[:, t, :n], h[:, :n], w_hh)
        yield BOTH, torch.bmm(tanh_cell_(gates, c[:, :n], layer.cell_clip).to(dtype), w_proj)

    run_steps(layer, n_active, h, out, step)
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
    out = inputs.new_zeros(n_dir, n_steps, batch, layer.projection_dim)

    def step(t: int, n: int):
        for d in range(n_dir):
            gates = gates_fn(d, h[d, :n], xw[d][t, :n])
            yield d, proj_fn(d, tanh_cell_(gates, c[d, :n], layer.cell_clip))

    run_steps(layer, active_rows(lengths, n_steps), h, out, step)
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
    batch_sizes = torch.tensor(active_rows(lengths, lengths[0]))
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
