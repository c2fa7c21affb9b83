"""The training recurrence (hand-written BPTT) against autograd."""
import pytest
import torch

from spacy_elmo.bilm.lstm import BiProjectedLSTMLayer
from spacy_elmo.bilm.lstm_train import ProjectedLSTMFunction, projected_lstm


def _setup(dtype, clip, lengths, seed=0, in_dim=5, cell=6, proj=3):
    torch.manual_seed(seed)
    layer = BiProjectedLSTMLayer(in_dim, cell, proj, cell_clip=clip, proj_clip=clip).to(dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.mul_(4.0)  # large weights, so that clipping is active
    T, B = max(lengths), len(lengths)
    x = torch.randn(2, T, B, in_dim, dtype=dtype)
    n_active = [sum(1 for n in lengths if n > t) for t in range(T)]
    xw = torch.baddbmm(
        (layer.bias + layer.forget_offset).unsqueeze(1), x.reshape(2, T * B, -1), layer.weight_ih.transpose(1, 2)
    ).view(2, T, B, -1)
    return layer, xw.detach().requires_grad_(), n_active


@pytest.mark.parametrize("clip", [None, 0.5])
@pytest.mark.parametrize("lengths", [[4, 4, 2, 1], [5], [3, 3, 3]])
def test_matches_autograd_recurrence(clip, lengths):
    layer, xw, n_active = _setup(torch.float64, clip, lengths)
    state = layer.zero_state(len(lengths), xw)
    ref_out, (ref_h, ref_c) = layer._recur_autograd(xw, n_active, state)
    out, (h, c) = projected_lstm(xw, layer.weight_hh, layer.weight_proj, state, n_active, clip, clip)
    assert torch.allclose(out, ref_out, atol=1e-12)
    # Each row's final state is its state after its own last step.
    assert torch.allclose(h, ref_h, atol=1e-12) and torch.allclose(c, ref_c, atol=1e-12)
    weights = torch.randn_like(out)
    params = [xw, layer.weight_hh, layer.weight_proj]
    ref_grads = torch.autograd.grad((ref_out * weights).sum(), params)
    grads = torch.autograd.grad((out * weights).sum(), params)
    for g, r in zip(grads, ref_grads):
        assert torch.allclose(g, r, atol=1e-10), (g - r).abs().max()
    if clip is not None:  # the test exercises clipping
        assert (out.abs() == clip).any()


def test_gradcheck_with_initial_state():
    layer, xw, n_active = _setup(torch.float64, 0.8, [3, 2, 2], seed=1)
    h0 = torch.randn(2, 3, 3, dtype=torch.float64)
    c0 = torch.randn(2, 3, 6, dtype=torch.float64)
    w_hh = layer.weight_hh.detach().requires_grad_()
    w_p = layer.weight_proj.detach().requires_grad_()
    fn = lambda a, b, c: ProjectedLSTMFunction.apply(a, b, c, h0, c0, n_active, 0.8, 0.8)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (xw, w_hh, w_p), eps=1e-6, atol=1e-6)


def test_layer_training_forward_uses_it_and_matches_inference():
    layer, _, _ = _setup(torch.float32, 3.0, [4])
    x = torch.randn(2, 6, 3, 5)
    lengths = [6, 4, 1]
    with torch.no_grad():
        ref, _ = layer(x, lengths)
    out, _ = layer(x, lengths)
    assert out.grad_fn is not None and "ProjectedLSTMFunction" in type(out.grad_fn).__name__
    assert torch.allclose(out, ref, atol=1e-6)
