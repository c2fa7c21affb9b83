"""A bounded, exact cache of token encodings (the context-free half of the biLM).

The char-CNN, highway and projection depend on a token's characters alone, and
in real text a few thousand word types make up most tokens. The cache maps a
token's char ids to its encoding, least recently used entries leaving first.

It is exact and safe by construction:

* it is consulted only in inference (model in eval mode, autograd off), so
  training never sees a stale or detached value;
* it is keyed by the token's char ids, so an unseen word is simply computed;
* it empties itself whenever the encoder's parameters change (in-place
  updates bump their version counters, ``.to()`` moves their storage) or the
  dtype/device of the computation changes.
"""
from collections import OrderedDict
from typing import List, Optional, Tuple

import numpy
import torch


class TokenCache:
    def __init__(self, max_size: int = 50_000) -> None:
        self.max_size = max_size
        self._entries: "OrderedDict[bytes, torch.Tensor]" = OrderedDict()
        self._stamp: Optional[Tuple] = None
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._stamp = None

    def check(self, module: torch.nn.Module, mode: str = "") -> None:
        """Empty the cache if ``module``'s parameters (their values, dtype or
        device) or the computation ``mode`` changed since last use."""
        stamp = (mode,) + tuple(
            (p.data_ptr(), p._version, p.dtype, p.device) for p in module.parameters()
        )
        if stamp != self._stamp:
            self._entries.clear()
            self._stamp = stamp

    def encode(self, module: torch.nn.Module, unique_ids: torch.Tensor) -> torch.Tensor:
        """Encodings of the (distinct) token rows ``unique_ids`` (U, max_chars)."""
        keys = [row.tobytes() for row in unique_ids.cpu().numpy().astype(numpy.int16)]
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
