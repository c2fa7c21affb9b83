"""The biLM: token encoder + forward and backward LSTM stacks -> L+1 layers."""
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy
import torch
from torch import nn

from .batching import batch_rows
from .chars import batch_to_char_ids
from .fast.engine import PRECISIONS, InferenceEngine, bf16_supported, check_precision  # noqa: F401
from .fast.token_cache import (  # noqa: F401 (check_token_cache_size: used by the thinc layer)
    MAX_TOKEN_CACHE_SIZE,
    ThreadLock,
    TokenCache,
    TypeProductCache,
    check_token_cache_size,
)
from .lstm import BiProjectedLSTMLayer, State
from .options import BiLMOptions
from .token_encoder import CharCNNEncoder

PathLike = Union[str, Path]


@dataclass
class BiLMOutput:
    """``layers``: L+1 tensors (B, T, 2*projection_dim), boundary positions
    included; ``mask``: (B, T) bool, True at real positions (boundaries too)."""

    layers: List[torch.Tensor]
    mask: torch.Tensor


def reverse_index(lengths: torch.Tensor, n_steps: int) -> torch.Tensor:
    """(B, T) index that reverses each row within its length (an involution)."""
    steps = torch.arange(n_steps, device=lengths.device).unsqueeze(0)
    lengths = lengths.unsqueeze(1)
    return torch.where(steps < lengths, lengths - 1 - steps, steps)


class BiLM(nn.Module):
    """ELMo's bidirectional language model (Peters et al. 2018), inference side.

    ``forward`` takes char ids (B, T, max_chars) that already hold the
    sentence boundary tokens (see :mod:`spacy_elmo.bilm.chars`) and returns
    L+1 layers: layer 0 is the token encoding duplicated, ``[x; x]``, and
    layer ``l`` is ``[forward_l; backward_l]``.

    ``dropout`` (training mode only) drops units of every LSTM layer's input.

    Outputs are deterministic by default: every sentence starts from a zero
    LSTM state, so its vectors do not depend on its batch, its position,
    padding or earlier calls. ``stateful=True`` replays the reference
    implementation instead: each row of a batch starts from the state that
    the same row of the previous call ended in (zero on the first call, and
    after :meth:`reset_states`). Use it only to reproduce reference outputs.
    """

    def __init__(
        self,
        options: Union[BiLMOptions, Dict[str, Any]],
        stateful: bool = False,
        dropout: float = 0.0,
        token_cache_size: int = 50_000,
    ) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), found {dropout}")
        check_token_cache_size(token_cache_size)
        #: Dropout on the input of every LSTM layer, in training mode only
        #: (bilm-tf's DropoutWrapper on the cell inputs). Inference ignores it.
        self.dropout = dropout
        if isinstance(options, dict):
            options = BiLMOptions.from_dict(options)
        if not isinstance(options, BiLMOptions):
            raise TypeError(f"options must be a BiLMOptions or an options dict, found {type(options).__name__}")
        options.validate()  # again: its fields may have changed since it was made
        self.options = options
        self.token_encoder = CharCNNEncoder(options)
        self.layers = nn.ModuleList(
            BiProjectedLSTMLayer(
                options.projection_dim,
                options.lstm_dim,
                options.projection_dim,
                options.cell_clip,
                options.proj_clip,
            )
            for _ in range(options.n_layers)
        )
        self.stateful = stateful
        #: How inference (autograd off) runs: precision, fast paths and
        #: word-type caches; see :mod:`spacy_elmo.bilm.fast.engine`.
        self.engine = InferenceEngine(token_cache_size=token_cache_size)
        self._states: Optional[List[State]] = None
        #: Serializes calls in stateful mode only (see :meth:`forward`).
        self._stateful_lock = ThreadLock()

    # ------------------------------------------------------------------ info
    PRECISIONS = PRECISIONS

    @property
    def precision(self) -> str:
        """``"fp32"`` (exact, the default), or an opt-in fast path for inference:
        ``"bf16"`` runs the matrix products in bfloat16 (fp32 cell state and
        outputs; fast where the CPU or GPU has native bf16), ``"int8"`` runs
        them with int8 weights and dynamically quantized activations (CPU
        only; see :mod:`spacy_elmo.bilm.fast.int8`). Their deviation from the
        exact path is reported by ``python benchmarks/inference_speed.py``.
        Training ignores it (use autocast). It is :attr:`engine`'s, checked
        here against the model's device."""
        return self.engine.precision

    @precision.setter
    def precision(self, value: str) -> None:
        self.engine.precision = check_precision(value, self.device, self.engine.precision)

    @property
    def token_cache(self) -> TokenCache:
        """Word-type cache of token encodings, used in inference only (the
        engine's; ``token_cache.max_size = 0`` disables it)."""
        return self.engine.token_cache

    @property
    def type_product_cache(self) -> TypeProductCache:
        """The first LSTM layer's input products of recently seen word types,
        on the CPU paths that make them per type; opt-in (``max_bytes`` 0 by
        default; see :class:`~spacy_elmo.bilm.fast.token_cache.TypeProductCache`).
        Used only where the word-type cache is."""
        return self.engine.type_product_cache

    @property
    def num_layers(self) -> int:
        """Number of output layers, L+1."""
        return self.options.n_layers + 1

    @property
    def output_dim(self) -> int:
        return self.options.output_dim

    @property
    def device(self) -> torch.device:
        return self.token_encoder.char_embedding.weight.device

    # ------------------------------------------------------------ weights io
    @classmethod
    def from_hdf5(cls, weights_path: PathLike, options_path: PathLike, **kwargs) -> "BiLM":
        """Load a biLM in the published bilm-tf/AllenNLP format. The options
        are validated and the weight file read and checked against them
        before the model is allocated, so a bad pair costs no more memory
        than the file holds."""
        from .weights import load_hdf5, read_datasets

        options = BiLMOptions.from_file(options_path)
        arrays = read_datasets(weights_path, options)
        model = cls(options, **kwargs)
        load_hdf5(model, weights_path, arrays)
        return model

    @classmethod
    def from_pretrained(
        cls, name: Optional[PathLike] = None, options: Optional[PathLike] = None, *, progress: bool = True, **kwargs
    ) -> "BiLM":
        """A biLM by name, path or URL: ``None``/``"english"`` (shipped with the
        package), ``"small"``, ``"medium"``, ``"original"``, ``"original-5.5b"``
        (AllenNLP's published English ELMo, downloaded once into the cache), a
        directory or weights file, or an http(s) URL. See :mod:`spacy_elmo.hub`."""
        from ..hub import resolve

        return cls.from_hdf5(*resolve(name, options, progress=progress), **kwargs)

    def to_hdf5(self, weights_path: PathLike, options_path: PathLike) -> None:
        """Export to the published format (weights hdf5 + options JSON)."""
        from .weights import save_hdf5

        save_hdf5(self, weights_path)
        self.options.to_file(options_path)

    # ----------------------------------------------------------------- state
    def reset_states(self) -> None:
        """Forget the carried LSTM state (stateful mode only)."""
        self._states = None

    def _initial_states(self, order: torch.Tensor, like: torch.Tensor) -> Optional[List[State]]:
        if not self.stateful or self._states is None:
            return None
        batch = order.shape[0]
        states = []
        for (h, c) in self._states:
            if h.shape[1] < batch:
                pad = batch - h.shape[1]
                h = nn.functional.pad(h, (0, 0, 0, pad))
                c = nn.functional.pad(c, (0, 0, 0, pad))
            states.append((h[:, order].to(like.dtype), c[:, order].to(like.dtype)))
        return states

    def _store_states(self, order: torch.Tensor, finals: List[State]) -> None:
        batch = order.shape[0]
        stored = []
        for layer, (h, c) in enumerate(finals):
            if self._states is not None and self._states[layer][0].shape[1] > batch:
                new_h, new_c = (s.clone() for s in self._states[layer])
            else:
                new_h, new_c = torch.zeros_like(h), torch.zeros_like(c)
            new_h[:, order] = h.detach()
            new_c[:, order] = c.detach()
            stored.append((new_h, new_c))
        self._states = stored

    # --------------------------------------------------------------- forward
    def encode_tokens(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Token encodings (..., projection_dim) of char ids (..., max_chars).

        Each distinct token is encoded once per call (exact: the encoder is
        context-free); in inference the word-type cache also serves tokens
        seen in earlier calls.
        """
        lead = char_ids.shape[:-1]
        if char_ids.numel() == 0:
            return self.token_encoder(char_ids)
        encoded, inverse, _ = self._encode_types(char_ids)
        return encoded.index_select(0, inverse.reshape(-1)).reshape(*lead, -1)

    def _encode_types(self, char_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, Optional[List[bytes]]]:
        """The encodings (n_types, projection_dim) of the distinct tokens of
        non-empty ``char_ids``, each token's type index (its leading shape),
        and the types' cache keys (None where the word-type cache is not
        used: autograd on, training mode, or ``token_cache.max_size == 0``)."""
        flat = char_ids.reshape(-1, char_ids.shape[-1])
        unique, inverse = torch.unique(flat, dim=0, return_inverse=True)
        if torch.is_grad_enabled():
            encoded, keys = self.token_encoder(unique), None
        else:
            encoded, keys = self.engine.encode_types(self, unique)
        weight = self.token_encoder.char_embedding.weight
        return encoded.to(weight.dtype), inverse.reshape(char_ids.shape[:-1]), keys

    def clear_caches(self) -> None:
        """Empty the word-type caches (token encodings and first-layer input
        products), e.g. to time a cold start; outputs do not change."""
        self.engine.clear()

    def forward(self, char_ids: torch.Tensor) -> BiLMOutput:
        """Concurrent calls (threads sharing one biLM, e.g. a server running
        one pipeline) give the same outputs as sequential calls: the
        word-type and packed-weight caches are consulted under their locks
        (:mod:`.fast.token_cache`). In stateful mode, where a call reads the
        state the previous call left, whole calls run one at a time (their
        order is then the threads' order, so use one thread to replay)."""
        if self.stateful:
            with self._stateful_lock:
                return self._forward(char_ids)
        return self._forward(char_ids)

    def _forward(self, char_ids: torch.Tensor) -> BiLMOutput:
        if char_ids.dim() != 3:
            raise ValueError(f"char_ids must be (batch, tokens, chars), found shape {tuple(char_ids.shape)}")
        if self.precision == "int8" and char_ids.device.type != "cpu":
            raise ValueError(f"precision='int8' runs on CPU only; got input on {char_ids.device}")
        mask = (char_ids > 0).any(dim=-1)
        lengths = mask.sum(dim=1)
        batch, n_steps = mask.shape
        # Sort rows longest first, so each step works on a prefix of the batch.
        order = torch.argsort(lengths, descending=True, stable=True)
        sorted_lengths = lengths[order]
        lengths_list = sorted_lengths.tolist()
        n_steps = int(lengths_list[0]) if batch else 0
        sorted_ids = char_ids[order, :n_steps]

        rev = reverse_index(sorted_lengths, n_steps)
        # Without autograd, the engine runs the layers (fast paths, caches).
        engine = None if torch.is_grad_enabled() else self.engine
        first_products = None
        if sorted_ids.numel() == 0:
            tokens = self.token_encoder(sorted_ids)
        else:
            encoded, inverse, keys = self._encode_types(sorted_ids)
            tokens = encoded.index_select(0, inverse.reshape(-1)).view(batch, n_steps, -1)
            if engine is not None:
                first_products = engine.first_layer_products(self, encoded, inverse, rev, keys)
        tokens = tokens * mask[order, :n_steps].unsqueeze(-1)
        backward_tokens = tokens.gather(1, rev.unsqueeze(-1).expand_as(tokens))
        # (2, T, B, dim), time-major for the recurrence.
        x = torch.stack([tokens, backward_tokens]).transpose(1, 2)

        states = self._initial_states(order, x)
        finals = []
        outputs = [torch.cat([tokens, tokens], dim=-1)]
        for index, layer in enumerate(self.layers):
            layer_in = nn.functional.dropout(x, self.dropout, self.training) if self.dropout else x
            state = None if states is None else states[index]
            products = first_products if index == 0 else None
            # Drop our reference so that the first layer's input products
            # (as large as a layer's gate pre-activations) are freed before
            # the next layer makes its own (peak RSS for 10,000 Brown docs on
            # the packed small shape: 1,350 -> 1,204 MiB, README "Memory").
            first_products = None
            if engine is None:
                out, final = layer(layer_in, lengths_list, state)
            else:
                out, final = engine.run_layer(self, index, layer_in, lengths_list, state, products)
            finals.append(final)
            if index > 0 and self.options.use_skip_connections:
                out = out + x
            x = out
            by_batch = out.transpose(1, 2)  # (2, B, T, dim)
            backward = by_batch[1].gather(1, rev.unsqueeze(-1).expand_as(by_batch[1]))
            outputs.append(torch.cat([by_batch[0], backward], dim=-1))
        if self.stateful:
            self._store_states(order, finals)

        unsort = torch.empty_like(order)
        unsort[order] = torch.arange(batch, device=order.device)
        full = char_ids.shape[1]
        layers = []
        for layer_out in outputs:
            layer_out = layer_out[unsort]
            if layer_out.shape[1] < full:
                layer_out = nn.functional.pad(layer_out, (0, 0, 0, full - layer_out.shape[1]))
            layers.append(layer_out)
        return BiLMOutput(layers=layers, mask=mask)

    # ------------------------------------------------------------ sentences
    def embed_sentences(
        self, sentences: Sequence[Sequence[str]], batch_size: int = 64
    ) -> List[numpy.ndarray]:
        """Embed tokenised sentences.

        Returns one float32 array per sentence, shape (L+1, n_tokens,
        2*projection_dim), sentence boundaries removed. Sentences are batched
        by length (``batch_size`` sentences at most); in stateful mode they are
        batched in the given order instead, since the carried state follows
        the row. :meth:`iter_embeddings` gives the same arrays one batch at a
        time (to place them without holding them all).
        """
        results: List[Optional[numpy.ndarray]] = [None] * len(sentences)
        for index, layers in self.iter_embeddings(sentences, batch_size):
            results[index] = layers
        empty = numpy.zeros((self.num_layers, 0, self.output_dim), dtype=numpy.float32)
        return [empty.copy() if r is None else r for r in results]

    def iter_embeddings(
        self, sentences: Sequence[Sequence[str]], batch_size: int = 64
    ) -> Iterator[Tuple[int, numpy.ndarray]]:
        """``(index, layers)`` for each non-empty sentence (every sentence in
        stateful mode), batch after batch, in the batching order of
        :meth:`embed_sentences`; ``layers`` as there. Holds one batch's
        output at a time."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, found {batch_size}")
        sentences = check_sentences(sentences)
        device = self.device
        for rows in batch_rows(sentences, batch_size, by_length=not self.stateful):
            batch = [sentences[i] for i in rows]
            with torch.inference_mode():
                char_ids, _ = batch_to_char_ids(batch, self.options.max_characters_per_token)
                output = self(torch.from_numpy(char_ids).to(device))
                stacked = torch.stack(output.layers, dim=1).float().cpu().numpy()
            arrays = [numpy.ascontiguousarray(stacked[row, :, 1 : len(s) + 1]) for row, s in enumerate(batch)]
            del stacked, output
            yield from zip(rows, arrays)


def check_sentences(sentences: Sequence[Sequence[str]]) -> List[List[str]]:
    """``sentences`` as lists of token strings, or a ``TypeError`` naming the
    first that is not one: a plain string where a list of tokens belongs
    (``["the bank"]`` instead of ``[["the", "bank"]]``) would otherwise be
    read as one token per character."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError("embed_sentences takes a list of sentences, each a list of token strings; found one string")
    result = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"sentence {i} is a {type(sentence).__name__} ({sentence[:40]!r}), not a list of tokens: "
                "embed_sentences takes token lists, e.g. [['the', 'bank']]; split the text into tokens first"
            )
        tokens = list(sentence)
        for token in tokens:
            if not isinstance(token, str):
                raise TypeError(f"sentence {i} holds a {type(token).__name__} token ({token!r}); tokens are strings")
        result.append(tokens)
    return result
