"""ELMo's task-specific layer mix (Peters et al. 2018, eq. 1), as a thinc layer.

    ELMo_k = gamma * sum_j s_j * h_{k,j},   s = softmax(w)

over the L+1 biLM layers h_j of each token. Each downstream component owns
one of these, so each learns its own weights ``w`` and scale ``gamma``
(initialised to w = 0, i.e. the mean of the layers, and gamma = 1).

Options:
- ``layer_norm``: normalise each layer of each token to zero mean and unit
  variance over its features before mixing (no learned parameters). The
  paper normalises over the whole batch; we normalise per token so that a
  token's vector never depends on its batch.
- ``l2``: the paper's lambda * ||w||^2 added to the loss, pulling the
  weights toward an equal mix.

The forward pass is written in torch (on the arrays' memory, no copies on
CPU) and its gradients, the penalty's included, come from autograd.
"""
from typing import Any, Dict, List, Optional, Tuple

import numpy
import torch
from thinc.api import Model, torch2xp, xp2torch
from thinc.types import Floats2d, Floats3d

#: Added to each token layer's variance before normalising (``layer_norm``).
LAYER_NORM_EPS = 1e-6


def ScalarMix(
    n_layers: Optional[int] = None, layer_norm: bool = False, l2: float = 0.0
) -> Model[List[Floats3d], List[Floats2d]]:
    if l2 < 0:
        raise ValueError(f"l2 must be >= 0, found {l2}")
    return Model(
        "elmo_scalar_mix",
        forward,
        init=init,
        params={"weights": None, "gamma": None},
        dims={"nL": n_layers, "nI": None, "nO": None},
        attrs={"layer_norm": layer_norm, "l2": l2},
    )


def init(model: Model, X: Optional[List[Floats3d]] = None, Y=None) -> None:
    if X is not None and len(X):
        if not model.has_dim("nL"):
            model.set_dim("nL", X[0].shape[0])
        if not model.has_dim("nI"):
            model.set_dim("nI", X[0].shape[2])
    if not model.has_dim("nL"):
        raise ValueError("ScalarMix needs its number of layers (nL): initialize it with sample layers")
    if model.has_dim("nI") and not model.has_dim("nO"):
        model.set_dim("nO", model.get_dim("nI"))
    model.set_param("weights", model.ops.alloc1f(model.get_dim("nL")))
    gamma = model.ops.alloc1f(1)
    gamma[0] = 1.0
    model.set_param("gamma", gamma)


def learned_mix(model: Model) -> Tuple[numpy.ndarray, float]:
    """(softmax weights s_j as a numpy array, gamma as a float) of a ScalarMix."""
    s = torch.softmax(_as_tensor(model.get_param("weights")), dim=0)
    gamma = model.ops.to_numpy(model.get_param("gamma"))
    return model.ops.to_numpy(torch2xp(s)).copy(), float(gamma[0])


def _xp(tensor: torch.Tensor) -> Any:
    """A tensor as an array of the ops (thinc types the result as any array kind)."""
    return torch2xp(tensor)


def _as_tensor(array, requires_grad: bool = False) -> torch.Tensor:
    """A torch view of a numpy (or cupy) array; read-only numpy arrays (e.g.
    views of ``Doc._.elmo``) are copied first."""
    if isinstance(array, numpy.ndarray):
        tensor = torch.from_numpy(array if array.flags.writeable else array.copy())
    else:
        tensor = xp2torch(array)
    return tensor.requires_grad_() if requires_grad else tensor


def forward(model: Model, Xs: List[Floats3d], is_train: bool):
    ops = model.ops
    n_layers = model.get_param("weights").shape[0]
    for X in Xs:
        if X.shape[0] != n_layers:
            raise ValueError(f"ScalarMix has {n_layers} layer weights, found input with {X.shape[0]} layers")
    w = _as_tensor(model.get_param("weights"), is_train)
    gamma = _as_tensor(model.get_param("gamma"), is_train)
    inputs = [_as_tensor(ops.asarray3f(X), is_train) for X in Xs]
    with torch.set_grad_enabled(is_train):
        s = torch.softmax(w, dim=0)
        mixed = []
        for x in inputs:
            if model.attrs["layer_norm"]:
                x = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=LAYER_NORM_EPS)
            mixed.append(gamma * torch.tensordot(s, x, dims=1))  # (n, dim)
    outputs = [ops.asarray2f(_xp(Y.detach())) for Y in mixed]

    def backprop(dYs: List[Floats2d]) -> List[Floats3d]:
        tensors = list(mixed)
        grads = [_as_tensor(ops.asarray2f(dY)) for dY in dYs]
        if model.attrs["l2"]:
            tensors.append(model.attrs["l2"] * (w * w).sum())
            grads.append(torch.ones((), dtype=w.dtype, device=w.device))
        if tensors:
            torch.autograd.backward(tensors, grads)
        for name, param in (("weights", w), ("gamma", gamma)):
            if param.grad is not None:
                model.inc_grad(name, ops.asarray1f(_xp(param.grad)))
        return [
            ops.alloc3f(*x.shape) if x.grad is None else ops.asarray3f(_xp(x.grad)) for x in inputs
        ]

    return outputs, backprop


def mix_weights(nlp) -> Dict[str, Tuple[numpy.ndarray, float]]:
    """The learned ELMo mix of every component: ``{name: (softmax weights, gamma)}``;
    several mixes in one component (ELMo at input and output) get keys ``name``,
    ``name[1]``, ... in model order; mixes not initialized yet are left out."""
    result: Dict[str, Tuple[numpy.ndarray, float]] = {}
    for name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if not isinstance(model, Model):
            continue
        mixes = [node for node in model.walk() if node.name == "elmo_scalar_mix" and node.has_param("weights")]
        for i, node in enumerate(mixes):
            result[name if i == 0 else f"{name}[{i}]"] = learned_mix(node)
    return result
