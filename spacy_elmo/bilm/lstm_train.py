"""The training recurrence of :class:`~spacy_elmo.bilm.lstm.BiProjectedLSTMLayer`
as one autograd function with a hand-written backward pass (BPTT).

Autograd through the step loop records ~15 small operations per step and
replays them one by one; at the small sizes of a CPU-trained biLM that
bookkeeping, not arithmetic, sets the speed. Here the forward pass runs
without autograd and keeps what the backward needs (activated gates, the
cell, ``tanh`` of the cell, the projection's input), and the backward runs the
recurrence in reverse with a few fused products per step. The weight
gradients are not accumulated per step: they are one product each over all
steps at the end.

It computes exactly the function of the autograd recurrence (same cell,
clipping, forget-gate offset inside ``xw``, rows sorted by length with step
``t`` working on the prefix of active rows), and the gradients of
:func:`torch.clamp` (zero outside ``[-clip, clip]``, passed at the bounds).
``tests/bilm/test_lstm_train.py`` checks both against autograd and with
:func:`torch.autograd.gradcheck`.
"""
from typing import List, Optional, Sequence, Tuple

import torch


class ProjectedLSTMFunction(torch.autograd.Function):
    """``outputs, h, c = apply(xw, weight_hh, weight_proj, h0, c0, n_active,
    cell_clip, proj_clip)``.

    ``xw``: (2, T, B, 4C) input products with the bias and the forget offset
    added, gate order i, f, g, o; ``weight_hh`` (2, 4C, P); ``weight_proj``
    (2, P, C); ``h0``/``c0`` (2, B, P)/(2, B, C), not differentiated;
    ``n_active[t]``: rows active at step ``t`` (non-increasing). Returns the
    outputs (2, T, B, P), zero past each row's length, and the final state
    (not differentiable).
    """

    @staticmethod
    def forward(ctx, xw, weight_hh, weight_proj, h0, c0, n_active, cell_clip, proj_clip):
        n_dir, n_steps, batch, four_c = xw.shape
        C = four_c // 4
        w_hh = weight_hh.transpose(1, 2)
        w_proj = weight_proj.transpose(1, 2)
        out = xw.new_zeros(n_dir, n_steps, batch, weight_proj.shape[1])
        h_final, c_final = h0.clone(), c0.clone()
        gates_seq: List[torch.Tensor] = []
        c_raw_seq: List[torch.Tensor] = []
        c_seq: List[torch.Tensor] = []
        tanh_c_seq: List[torch.Tensor] = []
        m_seq: List[torch.Tensor] = []
        h_raw_seq: List[torch.Tensor] = []
        h_prev, c_prev = h0, c0
        for t, n in enumerate(n_active):
            if n == 0:
                break
            gates = torch.baddbmm(xw[:, t, :n], h_prev[:, :n], w_hh)
            gates[..., : 2 * C].sigmoid_()
            gates[..., 2 * C : 3 * C].tanh_()
            gates[..., 3 * C :].sigmoid_()
            i, f, g, o = gates.chunk(4, dim=-1)
            c_raw = torch.addcmul(f * c_prev[:, :n], i, g)
            c = c_raw if cell_clip is None else c_raw.clamp(-cell_clip, cell_clip)
            tanh_c = torch.tanh(c)
            m = tanh_c * o
            h_raw = torch.bmm(m, w_proj)
            h = h_raw if proj_clip is None else h_raw.clamp(-proj_clip, proj_clip)
            out[:, t, :n] = h
            # Rows whose last step this is: their final state.
            n_next = n_active[t + 1] if t + 1 < len(n_active) else 0
            if n_next < n:
                h_final[:, n_next:n] = h[:, n_next:]
                c_final[:, n_next:n] = c[:, n_next:]
            gates_seq.append(gates)
            c_raw_seq.append(c_raw)
            c_seq.append(c)
            tanh_c_seq.append(tanh_c)
            m_seq.append(m)
            h_raw_seq.append(h_raw)
            h_prev, c_prev = h, c
        ctx.n_active = [n for n in n_active[: len(gates_seq)]]
        ctx.clips = (cell_clip, proj_clip)
        ctx.sequences = (gates_seq, c_raw_seq, c_seq, tanh_c_seq, m_seq, h_raw_seq)
        ctx.save_for_backward(weight_hh, weight_proj, h0, c0, out)
        ctx.mark_non_differentiable(h_final, c_final)
        return out, h_final, c_final

    @staticmethod
    def backward(ctx, d_out, _dh_final, _dc_final):
        weight_hh, weight_proj, h0, c0, out = ctx.saved_tensors
        gates_seq, c_raw_seq, c_seq, tanh_c_seq, m_seq, h_raw_seq = ctx.sequences
        cell_clip, proj_clip = ctx.clips
        n_active = ctx.n_active
        n_dir, n_steps, batch, P = d_out.shape
        C = weight_proj.shape[2]
        d_xw = d_out.new_empty(n_dir, n_steps, batch, 4 * C)
        # Rows past their length get no gradient; active rows are written below.
        for t in range(n_steps):
            n = n_active[t] if t < len(n_active) else 0
            if n < batch:
                d_xw[:, t, n:].zero_()
        dh = d_out.new_zeros(n_dir, batch, P)
        dc = d_out.new_zeros(n_dir, batch, C)
        dh_raw_seq: List[Optional[torch.Tensor]] = [None] * len(n_active)
        for t in range(len(n_active) - 1, -1, -1):
            n = n_active[t]
            dh_t = dh[:, :n] + d_out[:, t, :n]
            if proj_clip is not None:
                h_raw = h_raw_seq[t]
                dh_t.mul_((h_raw >= -proj_clip) & (h_raw <= proj_clip))
            dh_raw_seq[t] = dh_t
            dm = torch.bmm(dh_t, weight_proj)
            gates = gates_seq[t]
            i, f, g, o = gates.chunk(4, dim=-1)
            tanh_c = tanh_c_seq[t]
            dc_t = torch.addcmul(dc[:, :n], dm * o, 1.0 - tanh_c * tanh_c)
            if cell_clip is not None:
                c_raw = c_raw_seq[t]
                dc_t.mul_((c_raw >= -cell_clip) & (c_raw <= cell_clip))
            c_prev = c_seq[t - 1][:, :n] if t > 0 else c0[:, :n]
            # Gate derivatives: s (1 - s) for the sigmoids, 1 - g^2 for g.
            deriv = gates * (1.0 - gates)
            deriv[..., 2 * C : 3 * C] = 1.0 - g * g
            d_gates = d_xw[:, t, :n]
            torch.mul(dc_t, g, out=d_gates[..., :C])
            torch.mul(dc_t, c_prev, out=d_gates[..., C : 2 * C])
            torch.mul(dc_t, i, out=d_gates[..., 2 * C : 3 * C])
            torch.mul(dm, tanh_c, out=d_gates[..., 3 * C :])
            d_gates.mul_(deriv)
            dc[:, :n] = dc_t * f
            dh[:, :n] = torch.bmm(d_gates, weight_hh)
        # Weight gradients: one product each over all steps. Each step's
        # h_{t-1} is the previous step's output (h0 at the first step); rows
        # past their length have zero gradient in ``d_xw``, and their
        # (finite) h_{t-1} then adds nothing.
        T = len(n_active)
        h_prev = torch.cat([h0.unsqueeze(1), out[:, : max(T - 1, 0)]], dim=1)  # (2, T, B, P)
        d_weight_hh = torch.bmm(
            d_xw[:, :T].reshape(n_dir, T * batch, 4 * C).transpose(1, 2), h_prev.reshape(n_dir, T * batch, P)
        )
        if T:
            d_weight_proj = torch.bmm(torch.cat(dh_raw_seq, dim=1).transpose(1, 2), torch.cat(m_seq, dim=1))
        else:
            d_weight_proj = torch.zeros_like(weight_proj)
        return d_xw, d_weight_hh, d_weight_proj, None, None, None, None, None


def projected_lstm(
    xw: torch.Tensor,
    weight_hh: torch.Tensor,
    weight_proj: torch.Tensor,
    state: Tuple[torch.Tensor, torch.Tensor],
    n_active: Sequence[int],
    cell_clip: Optional[float],
    proj_clip: Optional[float],
) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Run :class:`ProjectedLSTMFunction`; see there."""
    h0, c0 = (s.detach() for s in state)
    out, h, c = ProjectedLSTMFunction.apply(xw, weight_hh, weight_proj, h0, c0, list(n_active), cell_clip, proj_clip)
    return out, (h, c)
