"""Growing a trained biLM to a wider projection before pretraining goes on.

``pretrain --init MODEL --options WIDER.json``, where the options differ from
MODEL's only by a larger ``lstm.projection_dim``, starts from MODEL grown to
that width. The grown model computes exactly what MODEL computes: its
vectors are MODEL's in the first dimensions of each direction, and its
softmax gives the same distribution (so its held-out perplexity at step 0
is MODEL's). The new dimensions are random projections of what each layer
projects (an LSTM's cell output, the char-CNN's highway output),
and training goes on from there.

How: every matrix that *writes* a projected dimension (the token
projection, each LSTM's output projection, the hidden layer of each tail
cluster of the adaptive softmax) gets new rows drawn at random with the
spread of the rows it has, and every matrix that *reads* one (the LSTMs'
input and recurrent weights, the softmax's head and tail projections) gets
zero columns for the new dimensions: nothing reads them at first, so the
model's function is unchanged, and the zero columns learn from the first
step (their gradient is the error times the new dimensions, which are not
zero). The other way round (zero writers, random readers) also preserves
the function, but its new dimensions start at zero and, at a continuation's
learning rate, barely move: docs/pretraining.md has the measurements.
"""
import dataclasses
from typing import Dict

import torch

from ..bilm.options import BiLMOptions


def check_growth(source: BiLMOptions, target: BiLMOptions, where: str) -> None:
    """Raise ``ValueError`` unless ``target`` is ``source`` with a projection
    at least as wide (``where`` names the two settings for the message)."""
    if target.projection_dim < source.projection_dim:
        raise ValueError(
            f"{where}: lstm.projection_dim {target.projection_dim} is narrower than the model's "
            f"{source.projection_dim}; a model can be grown, not cut"
        )
    # The vocabulary size (``n_tokens_vocab``) is the run's, whatever a file says.
    same = dataclasses.replace(target, projection_dim=source.projection_dim, extra={})
    if same.to_dict() != dataclasses.replace(source, extra={}).to_dict() or same.family != source.family:
        raise ValueError(
            f"{where}: the options differ in more than lstm.projection_dim; only a wider projection can be grown "
            "from a trained model (leave --options out to continue the model as it is)"
        )
    if target.has_projection != source.has_projection:
        raise ValueError(
            f"{where}: lstm.projection_dim {target.projection_dim} equals the char-CNN's width "
            f"({target.n_filters}), which removes the token projection; choose another width"
        )


def grow_state(
    source: Dict[str, torch.Tensor], target: Dict[str, torch.Tensor], seed: int
) -> Dict[str, torch.Tensor]:
    """The grown state dict: ``target`` gives the shapes (a model of the wider
    options, built with the same vocabulary and cutoffs), ``source`` the
    trained values. The random rows are drawn from a generator seeded by
    ``seed``, so every process of a run grows the same model."""
    generator = torch.Generator().manual_seed(seed)
    grown: Dict[str, torch.Tensor] = {}
    for name, shape_of in target.items():
        if name not in source:
            raise ValueError(f"cannot grow: the trained model has no {name}")
        old = source[name]
        if old.dim() != shape_of.dim() or any(o > n for o, n in zip(old.shape, shape_of.shape)):
            raise ValueError(f"cannot grow {name} from {tuple(old.shape)} to {tuple(shape_of.shape)}")
        # New columns (readers of new dimensions) stay zero.
        new = torch.zeros(shape_of.shape, dtype=old.dtype)
        if old.dim() >= 2:
            rows, cols = old.shape[-2], old.shape[-1]
            new[..., :rows, :cols] = old
            if shape_of.shape[-2] > rows:
                # New rows, over the inputs the model has: writers of new dimensions.
                spread = float(old.float().std()) if old.numel() > 1 else 0.0
                extra = torch.randn(*old.shape[:-2], shape_of.shape[-2] - rows, cols, generator=generator) * spread
                new[..., rows:, :cols] = extra.to(old.dtype)
        else:
            new[: old.shape[0]] = old
        grown[name] = new
    return grown
