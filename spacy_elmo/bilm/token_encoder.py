"""Context-free token encoder: char embedding -> CNN -> max-pool -> highway
(-> concatenated after a word embedding) -> projection.

The ELMoForManyLangs variant (``options.family``) differs only in its
inputs: a character vocabulary instead of bytes (more rows in the char
embedding, another padding id) and, where the model has one, a word
embedding whose vector comes before the CNN output in the projection's
input, as in the reference's ``ConvTokenEmbedder``.
"""
from typing import Callable, List, Optional, Sequence, cast

import torch
from torch import nn

from .chars import PAD_CHAR
from .options import BiLMOptions

Product = Callable[[torch.Tensor], torch.Tensor]

PAD_ID = PAD_CHAR + 1  # in-word padding, +1 scheme


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

    def __init__(self, options: BiLMOptions, pad_id: int = PAD_ID) -> None:
        super().__init__()
        self.max_chars = options.max_characters_per_token
        #: Ids per token: the characters, then the word id where there is a
        #: word embedding.
        self.token_width = options.token_width
        #: The (+1) id of in-word padding (the byte scheme's, or a character
        #: vocabulary's ``<pad>``).
        self.pad_id = pad_id
        self.char_embedding = nn.Embedding(options.char_rows, options.char_embedding_dim, padding_idx=0)
        self.word_embedding = (
            nn.Embedding(options.n_words + 1, options.word_embedding_dim, padding_idx=0)
            if options.word_embedding_dim
            else None
        )
        self.convs = nn.ModuleList(
            nn.Conv1d(options.char_embedding_dim, num, width) for width, num in options.filters
        )
        self.activation = torch.tanh if options.activation == "tanh" else torch.relu
        self.highways = nn.ModuleList(Highway(options.n_filters) for _ in range(options.n_highway))
        self.projection = (
            nn.Linear(options.word_embedding_dim + options.n_filters, options.projection_dim)
            if options.has_projection
            else None
        )
        self.output_dim = options.projection_dim
        self.max_width = max(width for width, _ in options.filters)

    def forward(self, char_ids: torch.Tensor, conv_products: Optional[Sequence[Product]] = None) -> torch.Tensor:
        """``conv_products[k](windows)``, where given, replaces the product
        of convolution ``k``'s unfolded windows (n, width x char_dim) by its
        kernel (an inference engine's int8 weights, :mod:`.fast.int8`)."""
        lead = char_ids.shape[:-1]
        if char_ids.shape[-1] != self.token_width:
            raise ValueError(f"char ids must have {self.token_width} ids per token, found {char_ids.shape[-1]}")
        flat = char_ids.reshape(-1, self.token_width)
        if flat.shape[0] == 0:
            return flat.new_zeros(*lead, self.output_dim, dtype=self.char_embedding.weight.dtype)
        # Sort by length so that each chunk is cut close to its longest token.
        span = self.char_span(flat)
        order = torch.argsort(span, stable=True)
        parts = []
        for start in range(0, flat.shape[0], self.chunk_size):
            rows = order[start : start + self.chunk_size]
            parts.append(self._encode(flat[rows], int(span[rows[-1]]), conv_products))
        x = torch.cat(parts) if len(parts) > 1 else parts[0]
        x = x.index_select(0, torch.argsort(order))
        return x.reshape(*lead, self.output_dim)

    #: Tokens encoded together; bounds the memory of the CNN activations.
    chunk_size = 512

    def conv_layers(self) -> List[nn.Conv1d]:
        """The convolutions, one per filter width."""
        return [cast(nn.Conv1d, conv) for conv in self.convs]

    def char_span(self, flat: torch.Tensor) -> torch.Tensor:
        """Per token, the number of leading chars that are not padding.

        Every convolution window that lies wholly in the padding after a
        token's word-end mark sees the same input and so gives the same value;
        computing windows up to ``span + widest filter`` therefore covers every
        distinct value, and the max-pool over them is exactly the max-pool over
        all 50 positions.
        """
        positions = torch.arange(1, self.max_chars + 1, device=flat.device)
        chars = flat[:, : self.max_chars]
        real = (chars != self.pad_id) & (chars != 0)
        return (real * positions).amax(dim=1)

    def _encode(self, flat: torch.Tensor, span: int, conv_products: Optional[Sequence[Product]]) -> torch.Tensor:
        width = min(self.max_chars, span + self.max_width)
        chars = self.char_embedding(flat[:, :width])  # (n_tokens, width, char_dim)
        # Each convolution as one matrix product over its unfolded windows
        # (about twice as fast as Conv1d with so few input channels), then a
        # max-pool over positions and the activation (both monotonic: the order
        # does not change the result, and pooling first is cheaper).
        pooled = []
        for k, conv in enumerate(self.conv_layers()):
            n_out, char_dim, size = conv.weight.shape
            windows = chars.unfold(1, size, 1).transpose(2, 3)  # (n, positions, size, char_dim)
            windows = windows.reshape(-1, size * char_dim)
            if conv_products is None:
                kernel = conv.weight.permute(2, 1, 0).reshape(size * char_dim, n_out)
                scores = windows @ kernel
            else:
                scores = conv_products[k](windows)
            pooled.append(scores.view(flat.shape[0], -1, n_out).amax(dim=1) + conv.bias)
        x = self.activation(torch.cat(pooled, dim=-1))
        for highway in self.highways:
            x = highway(x)
        if self.word_embedding is not None:
            x = torch.cat([self.word_embedding(flat[:, self.max_chars]), x], dim=-1)
        if self.projection is not None:
            x = self.projection(x)
        return x
