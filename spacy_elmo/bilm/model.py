"""The biLM: token encoder + forward and backward LSTM stacks -> L+1 layers."""
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple, Union, cast

import numpy
import torch
from torch import nn

from .batching import check_sentences, iter_embeddings
from .chars import PAD_CHAR, CharVocabulary, batch_to_char_ids
from .family import check_vocabulary
from .fast.engine import InferenceEngine, ModelParts, check_precision
from .fast.token_cache import ThreadLock, TokenCache, TypeProductCache
from .lstm import BiProjectedLSTMLayer, State
from .options import BiLMOptions
from .rows import SortedRows
from .token_encoder import CharCNNEncoder
from .weights import load_datasets, read_checked, save_hdf5

PathLike = Union[str, Path]


@dataclass
class BiLMOutput:
    """``layers``: L+1 tensors (B, T, 2*projection_dim), boundary positions
    included; ``mask``: (B, T) bool, True at real positions (boundaries too)."""

    layers: List[torch.Tensor]
    mask: torch.Tensor


class _ExactRun:
    """The exact modules, behind the engine's interface: what
    :meth:`BiLM._forward` runs with autograd on (training, gradients)."""

    @staticmethod
    def encode_types(parts: ModelParts, unique: torch.Tensor):
        return parts.token_encoder(unique), None

    @staticmethod
    def first_layer_products(parts: ModelParts, *args) -> None:
        return None

    @staticmethod
    def run_layer(parts: ModelParts, index: int, inputs, lengths, state, input_products=None):
        return parts.layers[index](inputs, lengths, state)


_EXACT = _ExactRun()


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
        vocabulary: Optional[CharVocabulary] = None,
    ) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), found {dropout}")
        #: Dropout on the input of every LSTM layer, in training mode only
        #: (bilm-tf's DropoutWrapper on the cell inputs). Inference ignores it.
        self.dropout = dropout
        if isinstance(options, dict):
            options = BiLMOptions.from_dict(options)
        if not isinstance(options, BiLMOptions):
            raise TypeError(f"options must be a BiLMOptions or an options dict, found {type(options).__name__}")
        options.validate()  # again: its fields may have changed since it was made
        self.options = options
        #: The character (and word) vocabulary of an ELMoForManyLangs model
        #: (``options.family``); None: the byte scheme of bilm-tf models.
        self.vocabulary = check_vocabulary(options, vocabulary)
        pad_id = PAD_CHAR + 1 if self.vocabulary is None else self.vocabulary.pad_id
        self.token_encoder = CharCNNEncoder(options, pad_id=pad_id)
        self.layers = nn.ModuleList(
            BiProjectedLSTMLayer(
                options.projection_dim,
                options.lstm_dim,
                options.projection_dim,
                options.cell_clip,
                options.proj_clip,
                forget_bias=options.forget_bias,
            )
            for _ in range(options.n_layers)
        )
        self.stateful = stateful
        #: How inference (autograd off) runs, the one home of the inference
        #: settings: precision, fast paths and word-type caches (validated
        #: there); see :mod:`spacy_elmo.bilm.fast.engine`.
        self.engine = InferenceEngine(token_cache_size=token_cache_size)
        self._states: Optional[List[State]] = None
        #: Serializes calls in stateful mode only (see :meth:`forward`).
        self._stateful_lock = ThreadLock()

    #: How :meth:`from_pretrained` loads a model by name, path or URL:
    #: ``loader(name, options, progress=..., **kwargs)``. The package sets
    #: :func:`spacy_elmo.loading.load_bilm` (the hub lives outside ``bilm``,
    #: which imports nothing above it).
    pretrained_loader: ClassVar[Optional[Callable[..., "BiLM"]]] = None

    # ------------------------------------------------------------------ info
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

    def parts(self) -> ModelParts:
        """What the inference engine is given: the modules and the mode."""
        return ModelParts(
            self.token_encoder,
            cast(Sequence[BiProjectedLSTMLayer], self.layers),
            self.options.use_skip_connections,
            self.training,
            self.training and self.dropout > 0,
        )

    # ------------------------------------------------------------ weights io
    @classmethod
    def from_datasets(cls, options: BiLMOptions, arrays: Dict[str, numpy.ndarray], **kwargs) -> "BiLM":
        """A biLM of ``options`` holding the published datasets ``arrays``
        (as :func:`~spacy_elmo.bilm.weights.read_datasets` read and checked
        them)."""
        model = cls(options, **kwargs)
        load_datasets(model, arrays)
        return model

    @classmethod
    def from_hdf5(cls, weights_path: PathLike, options_path: PathLike, **kwargs) -> "BiLM":
        """Load a biLM in the published bilm-tf/AllenNLP format. The options
        are validated and the weight file read and checked against them
        before the model is allocated, so a bad pair costs no more memory
        than the file holds."""
        return cls.from_datasets(*read_checked(weights_path, options_path), **kwargs)

    def batch_ids(self, sentences: Sequence[Sequence[str]]) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """``(ids, lengths)`` of tokenised sentences in this model's scheme
        (bytes, or its character vocabulary), sentence boundaries added:
        the input of :meth:`forward`."""
        if self.vocabulary is not None:
            return self.vocabulary.batch_ids(sentences)
        return batch_to_char_ids(sentences, self.options.max_characters_per_token)

    @classmethod
    def from_pretrained(
        cls, name: Optional[PathLike] = None, options: Optional[PathLike] = None, *, progress: bool = True, **kwargs
    ) -> "BiLM":
        """A biLM by name, path or URL: ``None``/``"english"`` (shipped with the
        package), ``"small"``, ``"medium"``, ``"original"``, ``"original-5.5b"``
        (AllenNLP's published English ELMo, downloaded once into the cache), a
        directory or weights file, or an http(s) URL; through
        :attr:`pretrained_loader` (:func:`spacy_elmo.loading.load_bilm`)."""
        if cls.pretrained_loader is None:
            raise RuntimeError("no loader for names and URLs: import spacy_elmo, or use BiLM.from_hdf5")
        return cls.pretrained_loader(name, options, progress=progress, **kwargs)

    def to_hdf5(self, weights_path: PathLike, options_path: PathLike) -> None:
        """Export to the published format (weights hdf5 + options JSON)."""
        if self.vocabulary is not None:
            raise ValueError(
                "an ELMoForManyLangs biLM (character vocabulary, word embedding) has no bilm-tf hdf5 form: "
                "write it in its own layout with spacy_elmo.bilm.formats.efml.save(bilm, DIRECTORY)"
            )
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
        """Peters et al. (2018), section 3: token encodings x_k (layer 0 is
        ``[x; x]``), then L layers of forward and backward LSTMs over them,
        each layer's output ``[h_fwd; h_bwd]``, with residual connections
        around every layer but the first. Rows run sorted longest first
        (each step works on a prefix of the batch); the backward LSTM reads
        each row reversed within its length. The one hand-off: with
        autograd off, :attr:`engine` encodes and runs the layers (fast
        paths, caches); with autograd on, the exact modules do."""
        if char_ids.dim() != 3:
            raise ValueError(f"char_ids must be (batch, tokens, chars), found shape {tuple(char_ids.shape)}")
        run = _EXACT if torch.is_grad_enabled() else self.engine
        parts = self.parts()
        rows = SortedRows(char_ids)
        ids = char_ids[rows.order, : rows.n_steps]

        tokens, first_products = self._encode(run, parts, ids, rows)
        x = torch.stack([tokens, rows.reverse(tokens)]).transpose(1, 2)  # (2, T, B, dim), time-major
        states = self._initial_states(rows.order, x)
        outputs = [torch.cat([tokens, tokens], dim=-1)]
        finals = []
        for index, layer in enumerate(self.layers):
            layer_in = nn.functional.dropout(x, self.dropout, self.training) if self.dropout else x
            state = None if states is None else states[index]
            out, final = run.run_layer(parts, index, layer_in, rows.lengths, state, first_products)
            # Only the first layer has them; dropping the reference frees them
            # (as large as a layer's gate pre-activations) before the next layer.
            first_products = None
            finals.append(final)
            if index > 0 and self.options.use_skip_connections:
                out = out + x
            x = out
            by_batch = out.transpose(1, 2)  # (2, B, T, dim)
            outputs.append(torch.cat([by_batch[0], rows.reverse(by_batch[1])], dim=-1))
        if self.stateful:
            self._store_states(rows.order, finals)
        return BiLMOutput(layers=[rows.unsort(layer, char_ids.shape[1]) for layer in outputs], mask=rows.mask)

    def _encode(self, run, parts: ModelParts, ids: torch.Tensor, rows: "SortedRows"):
        """Token encodings (B, T, dim) of the sorted ``ids`` (zero at padding),
        each distinct token encoded once, and the first LSTM layer's input
        products where ``run`` makes them per word type."""
        if ids.numel() == 0:
            return self.token_encoder(ids), None
        encoded, inverse, keys = self._encode_types(ids, run)
        tokens = encoded.index_select(0, inverse.reshape(-1)).view(*ids.shape[:2], -1)
        first_products = run.first_layer_products(parts, encoded, inverse, rows.rev, keys)
        return tokens * rows.sorted_mask.unsqueeze(-1), first_products

    def _encode_types(
        self, char_ids: torch.Tensor, run=None
    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[List[bytes]]]:
        """The encodings (n_types, projection_dim) of the distinct tokens of
        non-empty ``char_ids``, each token's type index (its leading shape),
        and the types' cache keys (None where the word-type cache is not
        used: autograd on, training mode, or ``token_cache.max_size == 0``).
        ``run``: the exact modules or the engine (None: as :meth:`forward`
        chooses)."""
        if run is None:
            run = _EXACT if torch.is_grad_enabled() else self.engine
        flat = char_ids.reshape(-1, char_ids.shape[-1])
        unique, inverse = torch.unique(flat, dim=0, return_inverse=True)
        encoded, keys = run.encode_types(self.parts(), unique)
        weight = self.token_encoder.char_embedding.weight
        return encoded.to(weight.dtype), inverse.reshape(char_ids.shape[:-1]), keys

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
        sentences = check_sentences(sentences)
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
        output at a time. The sentences (token lists, not strings) and
        ``batch_size`` are checked before the first batch is asked for."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, found {batch_size}")
        return iter_embeddings(self, check_sentences(sentences), batch_size, by_length=not self.stateful)
