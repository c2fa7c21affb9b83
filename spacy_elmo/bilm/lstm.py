"""LSTM with projection, cell clipping and projection clipping, both directions at once.

One :class:`BiProjectedLSTMLayer` holds the forward and the backward cell of a
layer as stacked parameters (leading dimension 2: forward, backward), so that
each time step is one batched matrix product for both directions.

The cell is TensorFlow's ``LSTMCell`` as bilm-tf used it::

    i, j, f, o = split(x W_ih + h W_hh + b)
    c = clip(sigmoid(f + 1) * c + sigmoid(i) * tanh(j), cell_clip)
    h = clip((sigmoid(o) * tanh(c)) W_P, proj_clip)

Parameters are kept in PyTorch's gate order (i, f, g=j, o) and ``bias`` keeps
TensorFlow's meaning (the forget gate's +1 is added at run time, never stored),
so exporting to the published format is an exact copy.

The backward direction is run on sequences reversed within their own length,
so both directions advance over the same "active rows" at every step: rows are
sorted by length (longest first) and step ``t`` computes only the rows whose
length exceeds ``t``. No work is spent on padding, and a row's result never
depends on the other rows of its batch.

This is the exact, differentiable recurrence (training runs it, with the
hand-written backward of :mod:`.lstm_train` where autograd is not needed
between steps). Inference recurrences (in place, packed weights, int8) live
in :mod:`spacy_elmo.bilm.fast`.
"""
from typing import List, Optional, Tuple

import torch
from torch import nn

from .lstm_train import projected_lstm

State = Tuple[torch.Tensor, torch.Tensor]  # h (2, B, proj), c (2, B, cell)


def active_rows(lengths: List[int], n_steps: int) -> List[int]:
    """Rows still running at each step (``lengths`` sorted longest first)."""
    return [sum(1 for length in lengths if length > t) for t in range(n_steps)]


def _autocast_on(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (torch >= 2.4 takes the
    device type; older versions have one query per device)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled()
        return torch.is_autocast_enabled()


class BiProjectedLSTMLayer(nn.Module):
    forget_offset: torch.Tensor  # a buffer: TensorFlow's forget-gate offset

    def __init__(
        self,
        input_dim: int,
        cell_dim: int,
        projection_dim: int,
        cell_clip: Optional[float] = None,
        proj_clip: Optional[float] = None,
        forget_bias: float = 1.0,
    ) -> None:
        super().__init__()
        self.input_dim = input_dim
        self.cell_dim = cell_dim
        self.projection_dim = projection_dim
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.weight_ih = nn.Parameter(torch.empty(2, 4 * cell_dim, input_dim))
        self.weight_hh = nn.Parameter(torch.empty(2, 4 * cell_dim, projection_dim))
        self.bias = nn.Parameter(torch.zeros(2, 4 * cell_dim))
        self.weight_proj = nn.Parameter(torch.empty(2, projection_dim, cell_dim))
        forget = torch.zeros(4 * cell_dim)
        forget[cell_dim : 2 * cell_dim] = forget_bias
        self.register_buffer("forget_offset", forget, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = self.cell_dim ** -0.5
        for p in (self.weight_ih, self.weight_hh, self.weight_proj):
            nn.init.uniform_(p, -bound, bound)
        nn.init.zeros_(self.bias)

    def zero_state(self, batch_size: int, like: torch.Tensor) -> State:
        h = like.new_zeros(2, batch_size, self.projection_dim)
        c = like.new_zeros(2, batch_size, self.cell_dim)
        return h, c

    def gate_bias(self) -> torch.Tensor:
        """(2, 4 x cell_dim): ``bias`` with the forget gate's +1 (``forget_bias``:
        1.0 for TensorFlow-trained models, 0.0 for ELMoForManyLangs, whose
        PyTorch cell stores its biases as they are used)."""
        return self.bias + self.forget_offset

    def input_products(self, inputs: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """``x W_ih + b`` of every position at once: (2, T, B, 4 x cell_dim)
        (in ``dtype`` if given)."""
        n_dir, n_steps, batch, _ = inputs.shape
        dtype = dtype or inputs.dtype
        return torch.baddbmm(
            self.gate_bias().unsqueeze(1).to(dtype),
            inputs.reshape(n_dir, n_steps * batch, -1).to(dtype),
            self.weight_ih.transpose(1, 2).to(dtype),
        ).view(n_dir, n_steps, batch, -1)

    def forward(
        self, inputs: torch.Tensor, lengths: List[int], state: Optional[State] = None
    ) -> Tuple[torch.Tensor, State]:
        """Run both directions.

        ``inputs``: (2, T, B, input_dim), time-major, direction 1 already
        reversed within each row's length; rows sorted by ``lengths``
        descending. Returns outputs (2, T, B, projection_dim) (zero past each
        row's length) and the final state of every row (its state after its
        last real step).
        """
        n_dir, n_steps, batch, _ = inputs.shape
        if state is None:
            state = self.zero_state(batch, inputs)
        xw = self.input_products(inputs)
        n_active = active_rows(lengths, n_steps)
        # Autocast (mixed-precision training) casts op by op, which the
        # hand-written backward does not: those runs take the autograd
        # recurrence, as does a differentiable initial state (and a call
        # without autograd, which has nothing to save).
        if (
            not torch.is_grad_enabled()
            or state[0].requires_grad
            or state[1].requires_grad
            or _autocast_on(xw.device.type)
        ):
            return self._recur_autograd(xw, n_active, state)
        return projected_lstm(xw, self.weight_hh, self.weight_proj, state, n_active, self.cell_clip, self.proj_clip)

    def _cell(self, gates: torch.Tensor, c_prev: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        i, f, g, o = gates.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
        if self.cell_clip is not None:
            c = c.clamp(-self.cell_clip, self.cell_clip)
        h = torch.bmm(torch.sigmoid(o) * torch.tanh(c), self.weight_proj.transpose(1, 2))
        if self.proj_clip is not None:
            h = h.clamp(-self.proj_clip, self.proj_clip)
        return h, c

    def _recur_autograd(self, xw: torch.Tensor, n_active: List[int], state: State) -> Tuple[torch.Tensor, State]:
        """Differentiable recurrence: no in-place writes to saved tensors."""
        h, c = state
        batch = h.shape[1]
        w_hh = self.weight_hh.transpose(1, 2)
        # One view per step, made by a single unbind: indexing ``xw[:, t]``
        # instead would make every step's backward allocate and fill a
        # zero gradient of the whole of ``xw`` (quadratic in the length).
        steps = xw.unbind(1)
        outputs = []
        for t, n in enumerate(n_active):
            if n == 0:
                break
            h_new, c_new = self._cell(torch.baddbmm(steps[t][:, :n], h[:, :n], w_hh), c[:, :n])
            if n < batch:
                h = torch.cat([h_new, h[:, n:]], dim=1)
                c = torch.cat([c_new, c[:, n:]], dim=1)
                h_new = nn.functional.pad(h_new, (0, 0, 0, batch - n))
            else:
                h, c = h_new, c_new
            outputs.append(h_new)
        out = xw.new_zeros(xw.shape[0], xw.shape[1], batch, self.projection_dim)
        if outputs:
            out[:, : len(outputs)] = torch.stack(outputs, dim=1)
        return out, (h, c)
