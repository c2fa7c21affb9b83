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
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from .int8 import Int8Cache, PackedLinear
from .lstm_train import projected_lstm
from .packed import PackCache, PackedFP32Linear, packing_pays, packing_supported

State = Tuple[torch.Tensor, torch.Tensor]  # h (2, B, proj), c (2, B, cell)


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
    #: CPU inference packs the weights with oneDNN (see :mod:`.packed`) when a
    #: recurrent weight has at least this many elements (8 MB in float32: the
    #: medium and original shapes; packing alone gave +25-26% there,
    #: ``benchmarks/exact_ablation.py``).
    PACKED_MIN_WEIGHT_ELEMENTS = 1 << 21
    #: Between this and :attr:`PACKED_MIN_WEIGHT_ELEMENTS` (the small
    #: published shape: 2 MB), the weights fit the CPU's cache and whether
    #: packing pays depends on the CPU, so it is measured once per shape in a
    #: process (:func:`.packed.packing_pays`, ~0.1 s). Set
    #: :attr:`PACK_CACHE_SIZED_WEIGHTS` to True or False to decide instead
    #: (e.g. for results that are bit-identical across machines; either
    #: choice is within ~1e-6 of the other). Smaller weights are never packed.
    PACKED_MEASURE_MIN_ELEMENTS = 1 << 18
    PACK_CACHE_SIZED_WEIGHTS: Optional[bool] = None

    def __init__(
        self,
        input_dim: int,
        cell_dim: int,
        projection_dim: int,
        cell_clip: Optional[float] = None,
        proj_clip: Optional[float] = None,
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
        forget[cell_dim : 2 * cell_dim] = 1.0
        self.register_buffer("forget_offset", forget, persistent=False)
        self._int8 = Int8Cache()
        self._packed = PackCache()
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

    def forward(
        self,
        inputs: torch.Tensor,
        lengths: List[int],
        state: Optional[State] = None,
        compute_dtype: Optional[torch.dtype] = None,
        input_products: Optional[List[torch.Tensor]] = None,
    ) -> Tuple[torch.Tensor, State]:
        """Run both directions.

        ``inputs``: (2, T, B, input_dim), time-major, direction 1 already
        reversed within each row's length; rows sorted by ``lengths``
        descending. Returns outputs (2, T, B, projection_dim) (zero past each
        row's length) and the final state of every row (its state after its
        last real step).

        ``compute_dtype`` (e.g. bfloat16, inference only) runs the matrix
        products in that dtype; the cell state and the outputs stay in the
        input's dtype.

        ``input_products``: ``inputs @ W_ih.T + bias`` per direction, (T, B,
        4 x cell_dim), when the caller already has them (used on the
        packed-weight path only, see :meth:`type_input_products`).
        """
        n_dir, n_steps, batch, _ = inputs.shape
        if state is None:
            state = self.zero_state(batch, inputs)
        if self.use_fused_kernel(lengths, compute_dtype):
            return self._recur_fused(inputs, lengths, state)
        if self.use_packed_weights(inputs, compute_dtype):
            return self._recur_packed(inputs, lengths, state, input_products)
        bias = self.bias + self.forget_offset
        dtype = compute_dtype or inputs.dtype
        # All input projections at once: (2, T*B, in) x (2, in, 4C).
        xw = torch.baddbmm(
            bias.unsqueeze(1).to(dtype),
            inputs.reshape(n_dir, n_steps * batch, -1).to(dtype),
            self.weight_ih.transpose(1, 2).to(dtype),
        ).view(n_dir, n_steps, batch, -1)
        n_active = [sum(1 for length in lengths if length > t) for t in range(n_steps)]
        if torch.is_grad_enabled():
            # Autocast (mixed-precision training) casts op by op, which the
            # hand-written backward does not: those runs take the autograd
            # recurrence, as does a differentiable initial state.
            if state[0].requires_grad or state[1].requires_grad or _autocast_on(xw.device.type):
                return self._recur_autograd(xw, n_active, state)
            return projected_lstm(
                xw, self.weight_hh, self.weight_proj, state, n_active, self.cell_clip, self.proj_clip
            )
        return self._recur_inplace(xw, n_active, state, inputs.dtype)

    def output_bound(self) -> float:
        """A bound on every output (and state) ``h``: ``proj_clip``, or the
        largest row sum of ``|W_proj|`` (since ``|tanh(c) * o| < 1``)."""
        bound = float(self.weight_proj.detach().abs().sum(dim=2).max())
        return bound if self.proj_clip is None else min(bound, float(self.proj_clip))

    def _int8_packs(self, input_bound: Optional[float]) -> Dict[str, List[Optional[PackedLinear]]]:
        bias = self.bias + self.forget_offset
        h_bound = self.output_bound()
        return {
            "ih": [
                None if input_bound is None else PackedLinear(self.weight_ih[d], bias[d], input_bound)
                for d in range(2)
            ],
            "hh": [PackedLinear(self.weight_hh[d], None, h_bound) for d in range(2)],
            "proj": [PackedLinear(self.weight_proj[d], None, 1.0) for d in range(2)],
            # Unbounded inputs (token encodings): rows scaled to max |x| = 1.
            "ih_rows": [PackedLinear(self.weight_ih[d], None, 1.0) for d in range(2)]
            if input_bound is None
            else [],
        }

    def forward_int8(
        self,
        inputs: torch.Tensor,
        lengths: List[int],
        state: Optional[State] = None,
        input_bound: Optional[float] = None,
        input_products: Optional[List[torch.Tensor]] = None,
    ) -> Tuple[torch.Tensor, State]:
        """:meth:`forward` with int8 matrix products (see :mod:`.int8`);
        inference on CPU only. ``input_bound``: a bound on ``|inputs|``
        (None: the input product runs in float32); ``input_products`` as in
        :meth:`forward`."""
        n_dir, n_steps, batch, _ = inputs.shape
        if state is None:
            state = self.zero_state(batch, inputs)
        packs = self._int8.get(self, lambda layer: layer._int8_packs(input_bound), key=input_bound)
        ih, hh, proj = packs["ih"], packs["hh"], packs["proj"]
        # Directions one after the other: stacking their (B, 4C) gates would
        # copy more than the elementwise work costs.
        bias = self.bias + self.forget_offset
        xw = input_products or [
            torch.addmm(bias[d], inputs[d].reshape(-1, self.input_dim), self.weight_ih[d].t()).view(
                n_steps, batch, -1
            )
            if ih[d] is None
            else ih[d](inputs[d])
            for d in range(n_dir)
        ]
        return self._recur_per_direction(
            inputs, lengths, state, lambda d, h, x: hh[d](h).add_(x), lambda d, a: proj[d](a), xw
        )

    def _recur_per_direction(self, inputs, lengths, state, gates_fn, proj_fn, xw):
        """The in-place inference recurrence, one direction after the other:
        ``gates_fn(d, h, xw_t)`` gives the step's gate pre-activations of
        direction ``d``, ``proj_fn(d, tanh(c) * o)`` its projection."""
        n_dir, n_steps, batch, _ = inputs.shape
        h = state[0].to(torch.float32, copy=True)
        c = state[1].to(torch.float32, copy=True)
        C = self.cell_dim
        out = inputs.new_zeros(n_dir, n_steps, batch, self.projection_dim)
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
                if self.cell_clip is not None:
                    c_t.clamp_(-self.cell_clip, self.cell_clip)
                h_t = proj_fn(d, torch.tanh(c_t).mul_(o))
                if self.proj_clip is not None:
                    h_t.clamp_(-self.proj_clip, self.proj_clip)
                h[d, :n] = h_t
                out[d, t, :n] = h_t
        return out, (h, c)

    def use_packed_weights(self, inputs: torch.Tensor, compute_dtype: Optional[torch.dtype]) -> bool:
        """CPU float32 inference multiplies by weights packed once by oneDNN
        (see :mod:`.packed`) where this PyTorch build supports it and the
        weights are large (:attr:`PACKED_MIN_WEIGHT_ELEMENTS`), or of cache
        size and measured to gain here (:attr:`PACKED_MEASURE_MIN_ELEMENTS`)."""
        if not (
            inputs.device.type == "cpu"
            and inputs.dtype == torch.float32
            and compute_dtype in (None, torch.float32)
            and not torch.is_grad_enabled()
            and packing_supported()
        ):
            return False
        size = self.weight_hh[0].numel()
        if size >= self.PACKED_MIN_WEIGHT_ELEMENTS:
            return True
        if size < self.PACKED_MEASURE_MIN_ELEMENTS:
            return False
        if self.PACK_CACHE_SIZED_WEIGHTS is not None:
            return self.PACK_CACHE_SIZED_WEIGHTS
        return packing_pays(self.cell_dim, self.projection_dim, torch.get_num_threads())

    def _packed_weights(self) -> Dict[str, List[PackedFP32Linear]]:
        """Packed weights for :meth:`_recur_packed`: g's rows of ``W_ih``,
        ``W_hh`` and the bias, and all of ``W_P``, times two (exact)."""
        C = self.cell_dim
        scale = torch.ones(4 * C, 1, device=self.bias.device)
        scale[2 * C : 3 * C] = 2.0
        bias = (self.bias + self.forget_offset).detach() * scale.squeeze(1)
        return {
            "ih": [PackedFP32Linear(self.weight_ih[d].detach() * scale, bias[d]) for d in range(2)],
            "hh": [PackedFP32Linear(self.weight_hh[d].detach() * scale) for d in range(2)],
            "proj": [PackedFP32Linear(self.weight_proj[d].detach() * 2.0) for d in range(2)],
        }

    def type_input_products(self, encodings: torch.Tensor, int8: bool = False) -> List[torch.Tensor]:
        """``encodings @ W_ih.T + bias`` (n, 4 x cell_dim) for each direction,
        with the packed fp32 weights (CPU inference; g's columns doubled, as
        :meth:`_recur_packed` takes them), or with ``int8``
        weights: each row is divided by its largest magnitude before the
        product and multiplied back after it, so every row is quantized on
        its own full range and its result does not depend on the other rows
        (encodings have no bound that a fixed anchor could use)."""
        if not int8:
            ih = self._packed.get(self, lambda layer: layer._packed_weights())["ih"]
            return [ih[d](encodings) for d in range(2)]
        rows = self._int8.get(self, lambda layer: layer._int8_packs(None), key=None)["ih_rows"]
        scale = encodings.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(encodings.dtype).tiny)
        unit = encodings / scale
        bias = self.bias + self.forget_offset
        return [rows[d](unit).mul_(scale).add_(bias[d]) for d in range(2)]

    def _recur_packed(
        self,
        inputs: torch.Tensor,
        lengths: List[int],
        state: State,
        input_products: Optional[List[torch.Tensor]] = None,
    ) -> Tuple[torch.Tensor, State]:
        """:meth:`_recur_inplace` with packed fp32 weights (each product's
        weight is packed on its own, so the products run per direction; the
        elementwise work runs on both directions at once).

        The packed weights give the cell input's (g's) pre-activation
        doubled and project by ``2 W_P`` (:meth:`_packed_weights`), so the
        cell needs sigmoids only, by ``tanh(x) = 2 sigmoid(2x) - 1``, with
        the cell state kept doubled, ``c2 = 2c``::

            c2 = f c2 + 4 i sigmoid(2g) - 2 i            (= 2 (f c + i tanh(g)))
            h  = (o (sigmoid(c2) - 1/2)) (2 W_P)         (= (o tanh(c)) W_P)

        Scaling by 2 is exact in floating point; the identity moves results
        by about 1e-7 (tested against the reference fixtures at 1e-4 like
        the plain path). One sigmoid over all four gates replaces three
        activation calls, and torch's CPU tanh kernel takes about twice as
        long as its sigmoid. Both are measured, with the gain against the
        tanh cell, by ``python benchmarks/exact_ablation.py --shape small``
        (figures in the README's "Speed and memory")."""
        packs = self._packed.get(self, lambda layer: layer._packed_weights())
        ih, hh, proj = packs["ih"], packs["hh"], packs["proj"]
        n_dir, n_steps, batch, _ = inputs.shape
        xw = input_products or [
            ih[d](inputs[d].reshape(-1, self.input_dim)).view(n_steps, batch, -1) for d in range(n_dir)
        ]
        h = state[0].to(torch.float32, copy=True)
        c2 = state[1].to(torch.float32, copy=True).mul_(2.0)
        clip = None if self.cell_clip is None else 2.0 * self.cell_clip
        out = inputs.new_zeros(n_dir, n_steps, batch, self.projection_dim)
        for t in range(n_steps):
            n = sum(1 for length in lengths if length > t)
            if n == 0:
                break
            gates = torch.stack([hh[d](h[d, :n], xw[d][t, :n]) for d in range(n_dir)])
            a = self._sigmoid_cell(gates, c2[:, :n], clip)
            for d in range(n_dir):
                h_t = proj[d](a[d])
                if self.proj_clip is not None:
                    h_t.clamp_(-self.proj_clip, self.proj_clip)
                h[d, :n] = h_t
                out[d, t, :n] = h_t
        return out, (h, c2.mul_(0.5))

    @staticmethod
    def _sigmoid_cell(gates: torch.Tensor, c2: torch.Tensor, clip: Optional[float]) -> torch.Tensor:
        """The elementwise half of a :meth:`_recur_packed` step: ``gates``
        (2, n, 4 x cell_dim) pre-activations (overwritten), ``c2`` (2, n,
        cell_dim) the doubled cell state (updated in place), ``clip`` its
        bound; returns ``o (sigmoid(c2) - 1/2)``, the projection's input."""
        i, f, s, o = gates.sigmoid_().chunk(4, dim=-1)
        c2.mul_(f).addcmul_(i, s, value=4.0).sub_(i, alpha=2.0)
        if clip is not None:
            c2.clamp_(-clip, clip)
        return torch.sigmoid(c2).sub_(0.5).mul_(o)

    def use_fused_kernel(self, lengths: List[int], compute_dtype: Optional[torch.dtype]) -> bool:
        """PyTorch's own LSTM kernel (``torch.lstm`` with a projection) computes
        the same function when nothing is clipped; it cannot clip, so models
        with ``cell_clip``/``proj_clip`` (every published ELMo) never use it."""
        return (
            self.cell_clip is None
            and self.proj_clip is None
            and compute_dtype is None
            and not torch.is_grad_enabled()
            and len(lengths) > 0
            and lengths[-1] > 0
        )

    def _recur_fused(self, inputs: torch.Tensor, lengths: List[int], state: State) -> Tuple[torch.Tensor, State]:
        batch_sizes = torch.tensor([sum(1 for n in lengths if n > t) for t in range(lengths[0])])
        bias = self.bias + self.forget_offset
        no_bias = torch.zeros_like(bias[0])
        outputs, hs, cs = [], [], []
        for d in range(2):
            packed = nn.utils.rnn.pack_padded_sequence(inputs[d], torch.tensor(lengths))
            params = [self.weight_ih[d], self.weight_hh[d], bias[d], no_bias, self.weight_proj[d]]
            hx = (state[0][d : d + 1], state[1][d : d + 1])
            out, h, c = torch.lstm(packed.data, batch_sizes, hx, params, True, 1, 0.0, False, False)
            padded, _ = nn.utils.rnn.pad_packed_sequence(
                nn.utils.rnn.PackedSequence(out, batch_sizes), total_length=inputs.shape[1]
            )
            outputs.append(padded)
            hs.append(h)
            cs.append(c)
        return torch.stack(outputs), (torch.cat(hs), torch.cat(cs))

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
        # zero gradient of the whole of ``xw`` (quadratic in the length;
        # that was 70% of a small-shape training step).
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

    def _recur_inplace(
        self, xw: torch.Tensor, n_active: List[int], state: State, out_dtype: torch.dtype
    ) -> Tuple[torch.Tensor, State]:
        """The same computation without autograd: state updated in place,
        gates activated in place, outputs written straight into place."""
        dtype = xw.dtype
        h = state[0].to(dtype, copy=True)
        c = state[1].to(out_dtype, copy=True)
        C = self.cell_dim
        w_hh = self.weight_hh.transpose(1, 2).to(dtype)
        w_proj = self.weight_proj.transpose(1, 2).to(dtype)
        out = xw.new_zeros(xw.shape[0], xw.shape[1], h.shape[1], self.projection_dim, dtype=out_dtype)
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
            if self.cell_clip is not None:
                c_t.clamp_(-self.cell_clip, self.cell_clip)
            h_t = torch.bmm(torch.tanh(c_t).mul_(o).to(dtype), w_proj)
            if self.proj_clip is not None:
                h_t.clamp_(-self.proj_clip, self.proj_clip)
            h[:, :n] = h_t
            out[:, t, :n] = h_t
        return out, (h, c)
