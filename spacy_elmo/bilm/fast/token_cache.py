"""Bounded, exact caches of per-word-type results (the context-free half of the biLM).

:class:`TokenCache` holds token encodings (char-CNN, highway, projection);
:class:`TypeProductCache` holds the first LSTM layer's input products
``x W_ih + b`` of the same word types, which also depend on the word alone.

The char-CNN, highway and projection depend on a token's characters alone, and
in real text a few thousand word types make up most tokens. The cache maps a
token's char ids to its encoding, least recently used entries leaving first.

It is exact and safe by construction:

* it is consulted only in inference (model in eval mode, autograd off), so
  training never sees a stale or detached value;
* it is keyed by the token's char ids, so an unseen word is simply computed;
* it empties itself whenever the encoder's parameters change (in-place
  updates bump their version counters, ``.to()`` moves their storage) or the
  dtype/device of the computation changes;
* it is safe under concurrent calls (several threads running one pipeline,
  as a server does): every read and update of a cache happens under that
  cache's lock (:class:`ThreadLock`), so each call gets the same values as a
  sequential run (tested with threads in ``tests/test_reliability.py``).

Why a lock per cache and not per-thread caches: per-thread copies would
multiply the memory (the product cache's slabs are 128 MiB when on) and
lose the hits across threads that a server wants. The lock is held only
while a cache is consulted and filled (the char-CNN of the missing words,
the first layer's products of the missing types, and the gather of the
cached rows), not during the LSTM recurrence, which is most of the time
and runs in parallel.
"""
import threading
from collections import OrderedDict
from typing import Any, Callable, List, Optional, Tuple

import numpy
import torch


class ThreadLock:
    """A reentrant lock that copies and pickles as a fresh, unlocked lock
    (``threading.RLock`` itself cannot be pickled, and a model holding one
    must still pickle for ``nlp.pipe(n_process=N)`` and ``copy.deepcopy``)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> "ThreadLock":
        self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def __deepcopy__(self, memo) -> "ThreadLock":
        return type(self)()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._lock = threading.RLock()


def type_keys(unique_ids: torch.Tensor) -> List[bytes]:
    """A cache key for each token row (its ids) of ``unique_ids`` (U, ids per
    token): int16 bytes where every id fits (bytes, small vocabularies),
    int32 otherwise (a word id of a large ELMoForManyLangs vocabulary); the
    two kinds differ in length, so they never collide."""
    array = unique_ids.cpu().numpy()
    dtype = numpy.int16 if array.size == 0 or int(array.max()) < 2 ** 15 else numpy.int32
    return [row.tobytes() for row in array.astype(dtype)]


def parameter_stamp(modules: List[torch.nn.Module]) -> Tuple:
    """What changes when a parameter of ``modules`` is updated in place
    (version counter), replaced or moved (storage, dtype, device): the one
    test of every cache of derived weights or results (word types, packed
    and int8 weights)."""
    return tuple((p.data_ptr(), p._version, p.dtype, p.device) for m in modules for p in m.parameters())


#: Largest word-type cache (entries): 20x the default 50,000; at the
#: original shape an entry is 2 KiB, so 2 GiB when full.
MAX_TOKEN_CACHE_SIZE = 1_000_000


def check_token_cache_size(value: Any) -> int:
    """``value`` if it is a valid ``token_cache_size`` (an integer in [0,
    :data:`MAX_TOKEN_CACHE_SIZE`]), else a ValueError that says so."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN_CACHE_SIZE:
        raise ValueError(
            f"token_cache_size must be an integer in [0, {MAX_TOKEN_CACHE_SIZE}] (0 turns the word-type "
            f"cache off), found {value!r}"
        )
    return value


class TokenCache:
    def __init__(self, max_size: int = 50_000) -> None:
        self.max_size = max_size
        #: Held while the cache is read or updated (see the module docstring).
        self.lock = ThreadLock()
        self._entries: "OrderedDict[bytes, torch.Tensor]" = OrderedDict()
        self._stamp: Optional[Tuple] = None
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self.lock:
            self._entries.clear()
            self._stamp = None

    def check(self, module: torch.nn.Module, mode: str = "") -> None:
        """Empty the cache if ``module``'s parameters (their values, dtype or
        device) or the computation ``mode`` changed since last use."""
        stamp = (mode,) + parameter_stamp([module])
        with self.lock:
            if stamp != self._stamp:
                self._entries.clear()
                self._stamp = stamp

    def encode(
        self,
        module: Callable[[torch.Tensor], torch.Tensor],
        unique_ids: torch.Tensor,
        keys: Optional[List[bytes]] = None,
    ) -> torch.Tensor:
        """Encodings of the (distinct) token rows ``unique_ids`` (U, max_chars),
        those not cached computed by ``module`` (``keys``: their :func:`type_keys`, when the caller has them)."""
        if keys is None:
            keys = type_keys(unique_ids)
        with self.lock:
            return self._encode(module, unique_ids, keys)

    def _encode(
        self, module: Callable[[torch.Tensor], torch.Tensor], unique_ids: torch.Tensor, keys: List[bytes]
    ) -> torch.Tensor:
        found: List[Optional[torch.Tensor]] = [self._entries.get(k) for k in keys]
        missing = [i for i, v in enumerate(found) if v is None]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            index = torch.tensor(missing, device=unique_ids.device)
            fresh = module(unique_ids.index_select(0, index))
            for row, i in enumerate(missing):
                found[i] = fresh[row]
        for k in keys:
            if k in self._entries:
                self._entries.move_to_end(k)
        if missing:
            for row, i in enumerate(missing):
                self._entries[keys[i]] = fresh[row].clone()
            while len(self._entries) > self.max_size:
                self._entries.popitem(last=False)
        return torch.stack(found)  # type: ignore[arg-type]


class TypeProductCache:
    """The first LSTM layer's input products of recently seen word types
    (opt-in: ``max_bytes`` is 0 unless set).

    On the CPU paths that make those products once per distinct word of a
    batch (packed fp32 weights and int8), this cache keeps them across
    calls. Each entry is ``x W_ih + b`` of one word for both directions
    (2 x 4 x cell_dim floats: 32 KiB on the small published shape, 128 KiB on
    the original), held in two preallocated slabs of at most ``max_bytes``
    together (128 MiB: 4,096 types on small, 1,024 on the original), least
    recently used types leaving first. Like :class:`TokenCache` it is keyed
    by char ids, used in inference only, and emptied whenever the parameters
    it depends on or the computation mode change. A batch with more distinct
    words than the slabs hold computes them without the cache.

    Why opt-in: it pays where the same text is embedded repeatedly, hardly
    on text streamed once, and costs its slabs in memory (figures in
    docs/speed.md). Turn it on with ``bilm.type_product_cache.max_bytes =
    128 << 20``.
    """

    def __init__(self, max_bytes: int = 0) -> None:
        self.max_bytes = max_bytes
        #: Held while the cache is read or updated, and while this call's
        #: rows are gathered out of the shared slabs (a row handed out and
        #: gathered later could meanwhile be given to another type by a
        #: concurrent call; see the module docstring).
        self.lock = ThreadLock()
        self._slots: "OrderedDict[bytes, int]" = OrderedDict()
        self._slabs: Optional[List[torch.Tensor]] = None
        self._stamp: Optional[Tuple] = None
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._slots)

    def __deepcopy__(self, memo) -> "TypeProductCache":
        return type(self)(self.max_bytes)  # copies start empty: the slabs can be large

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_slots": OrderedDict(), "_slabs": None, "_stamp": None}

    def clear(self) -> None:
        """Forget every entry and free the slabs."""
        with self.lock:
            self._slots.clear()
            self._slabs = None
            self._stamp = None

    def check(self, modules: List[torch.nn.Module], mode: str = "") -> None:
        """Empty the cache if the parameters of ``modules`` or ``mode`` changed
        (or free it at once when it is off, ``max_bytes == 0``)."""
        with self.lock:
            if self.max_bytes <= 0:
                if self._slabs is not None or self._slots:
                    self.clear()
                return
            stamp = (mode, self.max_bytes) + parameter_stamp(modules)
            if stamp != self._stamp:
                self.clear()
                self._stamp = stamp

    def lookup(
        self,
        keys: List[bytes],
        width: int,
        like: torch.Tensor,
        compute: Callable[[torch.Tensor], List[torch.Tensor]],
        positions: List[torch.Tensor],
    ) -> Optional[List[torch.Tensor]]:
        """The products of the word types ``keys`` gathered into place: for
        each direction, the rows of the types at ``positions[d]`` (type
        indices into ``keys``, any shape S), as a new tensor (*S, ``width``).
        ``compute(index)`` gives the products (n, ``width``) per direction
        of the types at ``index`` that are not cached. None (and nothing
        computed) when the cache is off or ``keys`` do not fit.

        The gather happens under :attr:`lock`, so the result is this call's
        own copy: the slabs never leave the cache."""
        capacity = self.max_bytes // (2 * width * like.element_size())
        if len(keys) == 0 or len(keys) > capacity:
            return None
        with self.lock:
            rows = self._rows(keys, width, like, compute, capacity)
            return [
                slab.index_select(0, rows[index].reshape(-1)).view(*index.shape, width)
                for slab, index in zip(self._slabs, positions)  # type: ignore[arg-type]
            ]

    def _rows(self, keys, width, like, compute, capacity) -> torch.Tensor:
        """Each type's row in the slabs (U,), computing and storing the
        missing types' products (with :attr:`lock` held)."""
        if self._slabs is None or self._slabs[0].shape != (capacity, width):
            self._slots.clear()
            self._slabs = [like.new_empty(capacity, width) for _ in range(2)]
        rows: List[int] = []
        missing: List[int] = []
        for i, key in enumerate(keys):
            row = self._slots.get(key)
            if row is None:
                missing.append(i)
                rows.append(-1)
            else:
                self._slots.move_to_end(key)
                rows.append(row)
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            # Rows fill up in order and are only reused once all are taken,
            # so rows len(self._slots).. are free. Types of this call were just
            # moved to the end, so evicting the oldest entries never removes
            # one it needs (len(keys) <= capacity).
            used = len(self._slots)
            free = list(range(used, min(capacity, used + len(missing))))
            while len(free) < len(missing):
                free.append(self._slots.popitem(last=False)[1])
            products = compute(torch.tensor(missing, device=like.device))
            target = torch.tensor(free, device=like.device)
            for slab, product in zip(self._slabs, products):
                slab.index_copy_(0, target, product.to(slab.dtype))
            for i, row in zip(missing, free):
                rows[i] = row
                self._slots[keys[i]] = row
        return torch.tensor(rows, device=like.device)
