"""The softmax over a word vocabulary used to pretrain a biLM.

One head is shared by both directions (as in bilm-tf): the forward LSTM's top
output at position ``t`` predicts the word at ``t + 1`` and the backward one's
predicts the word at ``t - 1`` (the biLM already re-aligns the backward stack
to token positions). Sentence boundaries are part of the targets: the forward
LM predicts ``</S>`` after the last token and the backward LM ``<S>`` before the
first one, so a sentence of ``n`` tokens gives ``n + 1`` targets per direction.

The softmax is PyTorch's :class:`torch.nn.AdaptiveLogSoftmaxWithLoss` (Grave
et al. 2017): a head over the most frequent words plus a few clusters, with
smaller projections for rarer words. Its training loss is the exact negative
log-likelihood of a normalized distribution over the whole vocabulary (not a
sampled estimate), and :meth:`LMHead.log_prob` returns that full distribution,
so evaluation perplexities are exact. It needs word ids sorted by frequency,
which :mod:`spacy_elmo.pretrain.vocab` provides.
"""
from typing import List, Optional, Sequence, Tuple, cast

import torch
from torch import nn


def default_cutoffs(vocab_size: int) -> List[int]:
    """Cluster boundaries for a vocabulary sorted by frequency: a head of up to
    ~2k words (20k and 100k boundaries as the vocabulary grows), at least one
    tail cluster so the module is valid for any vocabulary of >= 2 words."""
    if vocab_size < 2:
        raise ValueError(f"the vocabulary needs at least 2 words, found {vocab_size}")
    cutoffs = [c for c in (2_000, 20_000, 100_000) if c < vocab_size]
    if not cutoffs:
        cutoffs = [max(1, vocab_size // 2)]
    return cutoffs


class LMHead(nn.Module):
    """Adaptive softmax shared by the forward and the backward language model."""

    def __init__(
        self,
        input_dim: int,
        vocab_size: int,
        cutoffs: Optional[Sequence[int]] = None,
        div_value: float = 4.0,
    ) -> None:
        super().__init__()
        cutoffs = list(cutoffs) if cutoffs else default_cutoffs(vocab_size)
        if cutoffs != sorted(set(cutoffs)) or cutoffs[0] < 1 or cutoffs[-1] >= vocab_size:
            raise ValueError(
                f"cutoffs must be increasing and within 1..{vocab_size - 1}, found {cutoffs}"
            )
        self.input_dim = input_dim
        self.vocab_size = vocab_size
        self.cutoffs = cutoffs
        # Tail cluster i projects to input_dim // div_value**(i+1) units; keep
        # every projection at least 1 wide (small test models).
        while div_value > 1.0 and int(input_dim // div_value ** len(cutoffs)) < 1:
            div_value = max(1.0, div_value / 2)
        self.div_value = div_value
        self.softmax = nn.AdaptiveLogSoftmaxWithLoss(input_dim, vocab_size, cutoffs, div_value=div_value)

    @staticmethod
    def split_directions(
        top: torch.Tensor, targets: torch.Tensor
    ) -> Tuple[Tuple[torch.Tensor, torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]:
        """Pair outputs with the words they predict.

        ``top``: the biLM's top layer (B, T, 2P), boundaries included;
        ``targets``: word ids (B, T) of the same positions (``<S>`` and
        ``</S>`` included), negative at padding. Returns ``((x_f, y_f), (x_b,
        y_b))``: flat inputs (N, P) and targets (N,) of the forward and the
        backward LM, padding removed.
        """
        dim = top.shape[-1] // 2
        forward_x, forward_y = top[:, :-1, :dim], targets[:, 1:]
        backward_x, backward_y = top[:, 1:, dim:], targets[:, :-1]
        # A position predicts only if both it and its target are real.
        valid = (targets[:, 1:] >= 0) & (targets[:, :-1] >= 0)
        return (
            (forward_x[valid], forward_y[valid]),
            (backward_x[valid], backward_y[valid]),
        )

    def nll(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Summed negative log-likelihood of targets ``y`` (training path)."""
        if y.numel() == 0:
            return x.sum() * 0.0
        # Always fp32, outside autocast: under CUDA autocast the module's
        # linear layers would give bf16/fp16 while its log_softmax gives fp32,
        # and AdaptiveLogSoftmaxWithLoss fails mixing the two (index_copy_).
        # The head is small next to the LSTMs, so this costs little.
        with torch.autocast(x.device.type, enabled=False):
            out = self.softmax(x.float(), y)
        return -out.output.sum()

    def exact_nll(self, x: torch.Tensor, y: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
        """Summed NLL from the full normalized distribution over the vocabulary
        (:meth:`log_prob`), in chunks of ``chunk`` rows; for evaluation."""
        total = x.new_zeros((), dtype=torch.float64)
        for start in range(0, y.shape[0], chunk):
            logp = self.log_prob(x[start : start + chunk])
            total = total - logp.gather(1, y[start : start + chunk].unsqueeze(1)).double().sum()
        return total

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """log p(word | x) for every word of the vocabulary, (N, vocab_size)."""
        with torch.autocast(x.device.type, enabled=False):
            return self.softmax.log_prob(x.float())

    def forward(self, top: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, int]:
        """Summed NLL of the forward and the backward LM and the number of
        targets per direction."""
        (xf, yf), (xb, yb) = self.split_directions(top, targets)
        return self.nll(xf, yf) + self.untouched_term(), self.nll(xb, yb), int(yf.numel())

    def untouched_term(self) -> torch.Tensor:
        """0 times the sum of the tail clusters' parameters, added to the
        loss so that every parameter takes part in every step: a batch whose
        targets miss a cluster gives that cluster a zero gradient rather than
        none. The loss and the other gradients are unchanged (x + 0.0 is x);
        DDP then needs no ``find_unused_parameters``, and Adam treats a
        missed cluster like a dense layer's row (its moments decay) in one
        process and in several alike."""
        return cast(torch.Tensor, sum(p.sum() for p in self.softmax.tail.parameters()) * 0.0)
