"""A batch's rows sorted by length for the recurrences, and back."""
from typing import List

import torch
from torch import nn


def reverse_index(lengths: torch.Tensor, n_steps: int) -> torch.Tensor:
    """(B, T) index that reverses each row within its length (an involution)."""
    steps = torch.arange(n_steps, device=lengths.device).unsqueeze(0)
    lengths = lengths.unsqueeze(1)
    return torch.where(steps < lengths, lengths - 1 - steps, steps)


class SortedRows:
    """A batch's rows sorted by length, longest first (stable), cut to the
    longest length: the order, the lengths, the within-length reversal of
    the backward direction, and the way back to the caller's order."""

    def __init__(self, char_ids: torch.Tensor) -> None:
        #: (B, T) True at real positions (boundary tokens too), caller's order.
        self.mask = (char_ids > 0).any(dim=-1)
        lengths = self.mask.sum(dim=1)
        self.order = torch.argsort(lengths, descending=True, stable=True)
        sorted_lengths = lengths[self.order]
        #: Sorted lengths, as Python ints (the recurrences' active rows).
        self.lengths: List[int] = sorted_lengths.tolist()
        self.n_steps = int(self.lengths[0]) if self.lengths else 0
        self.sorted_mask = self.mask[self.order, : self.n_steps]
        self.rev = reverse_index(sorted_lengths, self.n_steps)

    def reverse(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, dim) rows reversed within their lengths."""
        return x.gather(1, self.rev.unsqueeze(-1).expand_as(x))

    def unsort(self, x: torch.Tensor, full: int) -> torch.Tensor:
        """(B, T, dim) back in the caller's row order, padded to ``full`` steps."""
        unsort = torch.empty_like(self.order)
        unsort[self.order] = torch.arange(self.order.shape[0], device=self.order.device)
        x = x[unsort]
        if x.shape[1] < full:
            x = nn.functional.pad(x, (0, 0, 0, full - x.shape[1]))
        return x
