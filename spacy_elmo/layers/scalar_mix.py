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
  weights toward an equal mix (its gradient 2 * lambda * w is added to w's).
"""
from typing import List, Optional

from thinc.api import Model
from thinc.types import Floats2d, Floats3d

EPS = 1e-12


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


def mix_weights(model: Model):
    """(softmax weights s_j as a numpy array, gamma as a float) of a ScalarMix."""
    s = _softmax(model.ops, model.get_param("weights"))
    gamma = model.ops.to_numpy(model.get_param("gamma"))
    return model.ops.to_numpy(s).copy(), float(gamma[0])


def _softmax(ops, w):
    e = ops.xp.exp(w - w.max())
    return e / e.sum()


def _normalise(ops, X: Floats3d):
    mean = X.mean(axis=-1, keepdims=True)
    centred = X - mean
    inv_std = 1.0 / ops.xp.sqrt((centred * centred).mean(axis=-1, keepdims=True) + 1e-6)
    return centred * inv_std, inv_std


def forward(model: Model, Xs: List[Floats3d], is_train: bool):
    ops = model.ops
    xp = ops.xp
    w = model.get_param("weights")
    gamma = float(model.get_param("gamma")[0])
    s = _softmax(ops, w)
    n_layers = w.shape[0]
    layer_norm = model.attrs["layer_norm"]
    inputs = []
    normaliser = []
    outputs = []
    for X in Xs:
        X = ops.asarray3f(X)
        if X.shape[0] != n_layers:
            raise ValueError(f"ScalarMix has {n_layers} layer weights, found input with {X.shape[0]} layers")
        if layer_norm:
            X, inv_std = _normalise(ops, X)
            normaliser.append(inv_std)
        inputs.append(X)
        mixed = xp.tensordot(s, X, axes=1)  # (n, dim)
        outputs.append(ops.asarray2f(gamma * mixed))

    def backprop(dYs: List[Floats2d]) -> List[Floats3d]:
        d_s = xp.zeros_like(s)
        d_gamma = 0.0
        dXs = []
        for i, (X, dY) in enumerate(zip(inputs, dYs)):
            # d_s_j = gamma * <dY, X_j>;  d_gamma = <dY, sum_j s_j X_j> = sum_j s_j <dY, X_j>
            inner = (X * dY[None]).reshape(n_layers, -1).sum(axis=1)
            d_s += gamma * inner
            d_gamma += float((s * inner).sum())
            dX = (gamma * s)[:, None, None] * dY[None]
            if layer_norm:
                Xn, inv_std = X, normaliser[i]
                dX = inv_std * (
                    dX - dX.mean(axis=-1, keepdims=True) - Xn * (dX * Xn).mean(axis=-1, keepdims=True)
                )
            dXs.append(dX)
        d_w = s * (d_s - (s * d_s).sum())
        if model.attrs["l2"]:
            d_w = d_w + 2.0 * model.attrs["l2"] * w
        model.inc_grad("weights", d_w.astype("float32"))
        model.inc_grad("gamma", xp.asarray([d_gamma], dtype="float32"))
        return dXs

    return outputs, backprop
