"""How a :class:`~spacy_elmo.bilm.BiLM` runs inference: one named object,
the one home of the inference settings.

Training (autograd on) always runs the exact model of :mod:`spacy_elmo.bilm`.
With autograd off, :meth:`BiLM.forward <spacy_elmo.bilm.BiLM.forward>` hands
its parts (:class:`ModelParts`: the token encoder, the LSTM layers, the
skip-connection flag and the mode; never the model itself) to its :class:`InferenceEngine` (``bilm.engine``), which
encodes the word types and runs each LSTM layer. The engine's ``precision``
names the arithmetic:

* ``"fp32"`` (default): exact up to float32 summation order (~1e-6);
* ``"bf16"``: matrix products in bfloat16 (fast where the CPU or GPU has
  native bf16);
* ``"int8"``: int8 weights, dynamically quantized inputs (CPU; :mod:`.int8`).

and its switches name the exact shortcuts, each of which can be turned off
to compare or to debug:

* ``packed_weights``: on CPU in fp32, LSTM weights packed once by oneDNN
  (:mod:`.packed`); None follows the static rule
  (:data:`.packed.PACK_MIN_ELEMENTS`), True/False force it where supported;
* ``type_products``: the first LSTM layer's input products made once per
  word type (on the packed and int8 paths);
* ``fused_kernel``: PyTorch's fused LSTM for layers without clipping;
* ``token_cache`` and ``type_product_cache``: word-type caches
  (:mod:`.token_cache`).

Every setting is validated where it is set: the constructor checks them all
(:func:`check_precision`, :func:`.token_cache.check_token_cache_size`), and
``bilm.precision = ...`` checks the precision against the model's device.
Choose a path by building one::

    bilm.engine = InferenceEngine("fp32", packed_weights=False)
    bilm.precision = "int8"   # validated for the model's device

:meth:`InferenceEngine.path` says which recurrence a layer takes.
"""
import warnings
from functools import partial
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from ..lstm import BiProjectedLSTMLayer, State, active_rows
from ..token_encoder import CharCNNEncoder
from . import int8, packed
from .recurrence import fused_kernel_applies, recur_fused, recur_inplace
from .token_cache import TokenCache, TypeProductCache, check_token_cache_size, type_keys

#: The inference precisions (the arithmetic of the matrix products).
INFERENCE_PRECISIONS = ("fp32", "bf16", "int8")


class ModelParts(NamedTuple):
    """What an engine is given of a biLM: its modules and how it runs now."""

    token_encoder: CharCNNEncoder
    layers: Sequence[BiProjectedLSTMLayer]
    skip_connections: bool
    #: The model is in training mode (no word-type caches then).
    training: bool
    #: Dropout applies to the LSTM inputs (training mode with dropout > 0).
    dropout: bool


def bf16_supported(device: Union[str, torch.device] = "cpu") -> bool:
    """Whether bf16 matrix products run natively on ``device`` (CUDA with bf16,
    or a CPU with avx512_bf16 or AMX). Elsewhere torch emulates bf16, which
    is many times slower than fp32."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def check_precision(value: str, device: Optional[torch.device] = None, current: str = "fp32") -> str:
    """``value`` if it names a precision (that can run on ``device``, where
    given), else a ValueError; warns when bf16 would be emulated (slower
    than fp32). The one check of a precision, wherever it is set."""
    if value not in INFERENCE_PRECISIONS:
        raise ValueError(f"precision must be one of {INFERENCE_PRECISIONS}, found {value!r}")
    if device is None:
        return value
    if value == "bf16" and current != "bf16" and not bf16_supported(device):
        warnings.warn(
            f"precision='bf16' on {device}, which has no native bf16: it will be slower than fp32",
            RuntimeWarning,
        )
    if value == "int8":
        if device.type != "cpu":
            raise ValueError(f"precision='int8' runs on CPU only; this biLM is on {device}")
        if not int8.int8_supported():
            raise ValueError("precision='int8' needs PyTorch's fbgemm/x86 quantized kernels")
    return value


class InferenceEngine:
    """The inference paths of one biLM (see the module docstring). Safe
    under concurrent calls: its caches are read and filled under locks."""

    def __init__(
        self,
        precision: str = "fp32",
        *,
        packed_weights: Optional[bool] = None,
        type_products: bool = True,
        fused_kernel: bool = True,
        token_cache_size: int = 50_000,
        type_product_cache_bytes: int = 0,
    ) -> None:
        #: "fp32", "bf16" or "int8"; set it through ``BiLM.precision`` to have
        #: it checked against the model's device.
        self.precision = check_precision(precision)
        #: Pack fp32 CPU weights with oneDNN: None (the rule:
        #: :data:`.packed.PACK_MIN_ELEMENTS`), True or False.
        self.packed_weights = packed_weights
        #: Make the first layer's input products once per word type.
        self.type_products = type_products
        #: Run unclipped layers on PyTorch's fused LSTM kernel.
        self.fused_kernel = fused_kernel
        #: Token encodings of recently seen word types.
        self.token_cache = TokenCache(check_token_cache_size(token_cache_size))
        bad_bytes = not isinstance(type_product_cache_bytes, int) or isinstance(type_product_cache_bytes, bool)
        if bad_bytes or type_product_cache_bytes < 0:
            raise ValueError(f"type_product_cache_bytes must be an integer >= 0, found {type_product_cache_bytes!r}")
        #: The first layer's input products of recently seen word types
        #: (opt-in: ``max_bytes`` 0 by default).
        self.type_product_cache = TypeProductCache(type_product_cache_bytes)
        self._packs: Dict[Tuple, packed.PackCache] = {}

    def __repr__(self) -> str:
        return (
            f"InferenceEngine({self.precision!r}, packed_weights={self.packed_weights}, "
            f"type_products={self.type_products}, fused_kernel={self.fused_kernel})"
        )

    @property
    def compute_dtype(self) -> Optional[torch.dtype]:
        """The dtype of the matrix products where it is not the model's."""
        return torch.bfloat16 if self.precision == "bf16" else None

    # ------------------------------------------------------------- choices
    def packs_weights(self, layer: BiProjectedLSTMLayer, inputs: torch.Tensor) -> bool:
        """Whether ``layer`` runs on oneDNN-packed fp32 weights for ``inputs``:
        fp32 on CPU where this PyTorch build can pack, and where
        :attr:`packed_weights` says so (None: recurrent weights of at least
        :data:`.packed.PACK_MIN_ELEMENTS` elements, every published shape;
        a static rule, so a machine's outputs do not depend on timing)."""
        if not (
            self.precision == "fp32"
            and inputs.device.type == "cpu"
            and inputs.dtype == torch.float32
            and packed.packing_supported()
        ):
            return False
        if self.packed_weights is not None:
            return self.packed_weights
        return layer.weight_hh[0].numel() >= packed.PACK_MIN_ELEMENTS

    def path(self, layer: BiProjectedLSTMLayer, inputs: torch.Tensor, lengths: List[int]) -> str:
        """The recurrence ``layer`` takes: "int8", "fused", "packed", "bf16"
        or "plain" (in-place fp32)."""
        if self.precision == "int8":
            return "int8"
        if self.precision == "fp32" and self.fused_kernel and fused_kernel_applies(layer, lengths):
            return "fused"
        if self.packs_weights(layer, inputs):
            return "packed"
        return "bf16" if self.precision == "bf16" else "plain"

    # --------------------------------------------------------- pack caches
    def _packed(self, key: Tuple, module: torch.nn.Module, build, bound=None):
        """Packed weights of ``module``, made on first use and remade when
        its parameters change (``key``: which module, which kind)."""
        cache = self._packs.get(key)
        if cache is None:
            cache = self._packs.setdefault(key, int8.Int8Cache() if key[0] == "int8" else packed.PackCache())
        return cache.get(module, build, key=bound)

    def _fp32_packs(self, index: int, layer: BiProjectedLSTMLayer):
        return self._packed(("fp32", index), layer, packed.pack_layer)

    def _int8_packs(self, index: int, layer: BiProjectedLSTMLayer, bound: Optional[float]):
        return self._packed(("int8", index), layer, lambda module: int8.pack_layer(module, bound), bound)

    # ------------------------------------------------------------- encoder
    def encode_types(self, parts: ModelParts, unique: torch.Tensor) -> Tuple[torch.Tensor, Optional[List[bytes]]]:
        """Encodings of the distinct tokens ``unique`` (U, max_chars), and
        their cache keys (None where the word-type cache is not used:
        training mode, or ``token_cache.max_size == 0``)."""
        if self.precision == "int8" and unique.device.type != "cpu":
            raise ValueError(f"precision='int8' runs on CPU only; got input on {unique.device}")
        encoder = parts.token_encoder
        if self.precision == "int8":
            convs = self._packed(("int8", "encoder"), encoder, int8.pack_encoder)
            encode: Callable[[torch.Tensor], torch.Tensor] = partial(encoder, conv_products=convs)
        else:
            encode = encoder
        use_cache = self.token_cache.max_size > 0 and not parts.training
        keys = type_keys(unique) if use_cache else None
        dtype = self.compute_dtype
        with torch.autocast(unique.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            if use_cache:
                with self.token_cache.lock:  # check and fill as one step for concurrent calls
                    self.token_cache.check(encoder, self.precision)
                    return self.token_cache.encode(encode, unique, keys), keys
            return encode(unique), keys

    def first_layer_products(
        self,
        parts: ModelParts,
        encoded: torch.Tensor,
        inverse: torch.Tensor,
        rev: torch.Tensor,
        keys: Optional[List[bytes]] = None,
    ) -> Optional[List[torch.Tensor]]:
        """The first LSTM layer's input products, computed once per token
        type and gathered into place ((T, B, 4 x cell_dim) per direction), or
        None where that layer computes them itself. Exact: like the token
        encoding, ``x W_ih + b`` depends on the word alone. CPU, on the
        packed-weight and int8 paths (with :attr:`type_products` on), where
        the layer's own product would cost a quarter of the LSTM work. With
        the word types' cache ``keys``, products of types seen in earlier
        calls come from :attr:`type_product_cache`."""
        first = parts.layers[0]
        is_int8 = self.precision == "int8"
        if (
            not self.type_products
            or parts.dropout
            or encoded.device.type != "cpu"
            or not (is_int8 or self.packs_weights(first, encoded))
        ):
            return None

        def per_type(encodings: torch.Tensor) -> List[torch.Tensor]:
            if is_int8:
                return int8.type_input_products(first, self._int8_packs(0, first, None), encodings)
            return packed.type_input_products(self._fp32_packs(0, first), encodings)

        positions = [inverse.t(), inverse.gather(1, rev).t()]  # forward, backward (T, B)
        if keys is not None:  # (a cache that is off frees itself and returns None)
            cache = self.type_product_cache
            with cache.lock:  # check and lookup as one step for concurrent calls
                cache.check([parts.token_encoder, first], self.precision)
                cached = cache.lookup(
                    keys, 4 * first.cell_dim, encoded, lambda index: per_type(encoded.index_select(0, index)), positions
                )
            if cached is not None:
                return cached
        return [
            products.index_select(0, index.reshape(-1)).view(*index.shape, -1)
            for products, index in zip(per_type(encoded), positions)
        ]

    # ---------------------------------------------------------------- LSTM
    def run_layer(
        self,
        parts: ModelParts,
        index: int,
        inputs: torch.Tensor,
        lengths: List[int],
        state: Optional[State] = None,
        input_products: Optional[List[torch.Tensor]] = None,
    ) -> Tuple[torch.Tensor, State]:
        """LSTM layer ``index`` of the model on ``inputs`` (as
        :meth:`BiProjectedLSTMLayer.forward`); ``input_products``: the
        first layer's, from :meth:`first_layer_products`."""
        layer = parts.layers[index]
        n_dir, n_steps, batch, _ = inputs.shape
        if state is None:
            state = layer.zero_state(batch, inputs)
        path = self.path(layer, inputs, lengths)
        if path == "int8":
            bound = int8.input_bound(parts.layers, index, parts.skip_connections)
            packs = self._int8_packs(index, layer, bound)
            return int8.recur_int8(layer, packs, inputs, lengths, state, input_products)
        if path == "fused":
            return recur_fused(layer, inputs, lengths, state)
        if path == "packed":
            return packed.recur_packed(layer, self._fp32_packs(index, layer), inputs, lengths, state, input_products)
        xw = layer.input_products(inputs, self.compute_dtype)
        return recur_inplace(layer, xw, active_rows(lengths, n_steps), state, inputs.dtype)

    def clear(self) -> None:
        """Empty the word-type caches; outputs do not change."""
        self.token_cache.clear()
        self.type_product_cache.clear()
