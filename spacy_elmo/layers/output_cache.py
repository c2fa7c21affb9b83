"""A training-time cache of a frozen biLM's outputs.

When the biLM is not fine-tuned (every listener has ``grad_factor = 0``, or
the ``elmo`` component is ``frozen``), a Doc's ELMo layers are the same in
every epoch, yet ``spacy train`` runs the biLM on every batch of every epoch
(and on the dev set at every evaluation). With this cache the biLM runs
once per distinct Doc; later epochs read the stored layers. Turn it on in a
training config::

    [initialize.after_init]
    @callbacks = "spacy_elmo.training_cache.v1"
    max_mib = 2048

Choices, named:

* **Training only.** The callback attaches the cache to the live ``elmo``
  components after ``nlp.initialize()``. It is never saved: a pipeline
  written by ``spacy train`` (``model-best``) and loaded with ``spacy.load``
  has no cache, so ``spacy evaluate`` and speed benchmarks run the biLM as a
  user would.
* **Exact.** Outputs are stored as the biLM returned them (float32) and
  handed out as copies, so training with the cache gives the same layers as
  without it (``tests``: bit for bit). A miss runs the biLM on the missing
  Docs only; the biLM's outputs for a span do not depend on the other spans
  of its batch.
* **Keyed by what the biLM reads**: the spans the model's span getter gives
  for the Doc (their bounds) and the Doc's token texts. The cache is emptied
  when the component's biLM object, its inference engine (``bilm.engine``)
  or its precision changes, and it is
  bypassed while the component fine-tunes the biLM (its outputs change with
  every update).
* **Bounded, fill-once.** At most ``max_mib`` MiB of stored layers; once
  full, new Docs are computed and not stored. Training reads the same Docs
  in every epoch, a cyclic pattern under which a least-recently-used policy
  would evict exactly the Docs needed next; keeping the first Docs that fit
  gives a steady hit rate instead.
"""
from typing import Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy
from spacy.language import Language
from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats3d

from .bilm_shim import get_bilm

Key = Tuple[Tuple[str, ...], Tuple[Tuple[int, int], ...]]


class OutputCache:
    """Per-Doc biLM layers of a frozen ``elmo`` component, up to ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"the ELMo output cache's size must be >= 0 bytes, found {max_bytes}")
        self.max_bytes = int(max_bytes)
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self._store: Dict[Key, numpy.ndarray] = {}
        self._state: Optional[Tuple[object, object, str]] = None

    def clear(self) -> None:
        self._store.clear()
        self.nbytes = 0

    def stats(self) -> Dict[str, float]:
        return {"hits": self.hits, "misses": self.misses, "docs": len(self._store),
                "mib": round(self.nbytes / 2**20, 1)}

    def _keys(self, model: Model, docs: Sequence[Doc]) -> List[Key]:
        spans = model.attrs["span_getter"](list(docs))
        return [(tuple(token.text for token in doc), tuple((s.start, s.end) for s in doc_spans))
                for doc, doc_spans in zip(docs, spans)]

    def predict(self, model: Model, docs: Sequence[Doc]) -> List[Floats3d]:
        """``model.predict(docs)``, reading stored Docs from the cache."""
        bilm = get_bilm(model)
        state = (bilm, bilm.engine, bilm.precision)  # the model and the engine compare by identity
        if self._state != state:
            self.clear()
            self._state = state
        keys = self._keys(model, docs)
        found: List[Optional[numpy.ndarray]] = [self._store.get(key) for key in keys]
        todo = [i for i, layers in enumerate(found) if layers is None]
        self.hits += len(docs) - len(todo)
        self.misses += len(todo)
        if todo:
            computed = model.predict([docs[i] for i in todo])
            for i, layers in zip(todo, computed):
                layers = model.ops.to_numpy(layers)
                found[i] = layers
                if keys[i] not in self._store and self.nbytes + layers.nbytes <= self.max_bytes:
                    self._store[keys[i]] = layers
                    self.nbytes += layers.nbytes
        return [model.ops.asarray3f(cast(Floats3d, layers).copy()) for layers in found]  # all found by now


def training_cache(max_mib: float = 1024) -> Callable[[Language], Language]:
    """``[initialize.after_init]``: give every ``elmo`` component of the
    pipeline an :class:`OutputCache` of ``max_mib`` MiB for this training
    process (see the module docstring)."""
    if max_mib < 0:
        raise ValueError(f"spacy_elmo.training_cache.v1: max_mib must be >= 0, found {max_mib}")

    def after_init(nlp: Language) -> Language:
        for _, component in nlp.pipeline:
            if hasattr(component, "output_cache"):
                component.output_cache = OutputCache(int(max_mib * 2**20))
        return nlp

    return after_init
