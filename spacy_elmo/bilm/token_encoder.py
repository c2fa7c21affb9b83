"""Context-free token encoder: char embedding -> CNN -> max-pool -> highway -> projection."""
import torch
from torch import nn
from torch.nn import functional as F

from .options import BiLMOptions


class Highway(nn.Module):
    """``y = t * relu(x W_T + b_T) + (1 - t) * x`` with gate ``t = sigmoid(x W_C + b_C)``.

    Transform and carry weights live in one ``Linear`` (transform rows first) so
    that a layer costs one matrix product.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.linear = nn.Linear(dim, 2 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        transform, carry = self.linear(x).split(self.dim, dim=-1)
        gate = torch.sigmoid(carry)
        return x + gate * (torch.relu(transform) - x)


class CharCNNEncoder(nn.Module):
    """Map char ids ``(..., max_chars)`` to token vectors ``(..., projection_dim)``.

    Row 0 of the character embedding is the constant zero vector of the
    "no token" id (``padding_idx=0``: it never receives a gradient).
    """

    def __init__(self, options: BiLMOptions) -> None:
        super().__init__()
        self.max_chars = options.max_characters_per_token
        self.char_embedding = nn.Embedding(262, options.char_embedding_dim, padding_idx=0)
        self.convs = nn.ModuleList(
            nn.Conv1d(options.char_embedding_dim, num, width) for width, num in options.filters
        )
        self.activation = torch.tanh if options.activation == "tanh" else torch.relu
        self.highways = nn.ModuleList(Highway(options.n_filters) for _ in range(options.n_highway))
        self.projection = (
            nn.Linear(options.n_filters, options.projection_dim) if options.has_projection else None
        )
        self.output_dim = options.projection_dim

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        lead = char_ids.shape[:-1]
        if char_ids.shape[-1] != self.max_chars:
            raise ValueError(
                f"char ids must have {self.max_chars} characters per token, found {char_ids.shape[-1]}"
            )
        flat = char_ids.reshape(-1, self.max_chars)
        # (n_tokens, char_dim, max_chars): channels first for Conv1d.
        chars = self.char_embedding(flat).transpose(1, 2)
        # Max-pool over positions, then the activation (both monotonic: the order
        # does not change the result, and pooling first is cheaper).
        pooled = [conv(chars).amax(dim=-1) for conv in self.convs]
        x = self.activation(torch.cat(pooled, dim=-1))
        for highway in self.highways:
            x = highway(x)
        if self.projection is not None:
            x = self.projection(x)
        return x.reshape(*lead, self.output_dim)
