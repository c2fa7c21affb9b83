"""Every name the package registers with spaCy, in one list.

A config refers to these by name; ``pyproject.toml``'s entry points name this
module, so spaCy finds them without importing the package first, and
importing this module (the ``elmo`` factory's module does) registers them.

========================================  ==========================================
``[components.elmo]`` factory ``elmo``     :func:`spacy_elmo.component.elmo.make_elmo`
``spacy_elmo.ElmoBiLM.v2``                 the biLM over Docs (:mod:`spacy_elmo.layers.bilm_model`)
``spacy_elmo.ElmoListener.v1``             a component's ELMo input: listener + mix
``spacy_elmo.ElmoMix.v1``                  the mix over an own biLM (after replace_listeners)
``spacy_elmo.ElmoInputOutput.v1``          ELMo at a task model's input and output
``spacy_elmo.ElmoTok2Vec.v1``              task embedding + ELMo into a trainable encoder
``spacy_elmo.sent_or_strided_spans.v1``    span getter: sentences, or windows without them
``spacy_elmo.strided_spans.v1``            span getter: windows
``spacy_elmo.training_cache.v1``           callback: a frozen biLM's outputs cached in training
``spacy_elmo.JsonlLogger.v1``              logger: spaCy's table plus a JSON-lines training curve
========================================  ==========================================
"""
import catalogue
from spacy.util import registry

from ..layers.bilm_model import ElmoBiLM
from ..layers.elmo_tok2vec import ElmoTok2Vec
from ..layers.listener import ElmoInputOutput, ElmoListener, ElmoMix
from ..layers.output_cache import training_cache
from ..layers.span_getters import configure_sent_or_strided_spans, configure_strided_spans
from .training_log import jsonl_logger

if not hasattr(registry, "span_getters"):  # spacy-transformers makes it where installed
    registry.span_getters = catalogue.create("spacy", "span_getters", entry_points=True)  # type: ignore[attr-defined]

ARCHITECTURES = {
    "spacy_elmo.ElmoBiLM.v2": ElmoBiLM,
    "spacy_elmo.ElmoListener.v1": ElmoListener,
    "spacy_elmo.ElmoMix.v1": ElmoMix,
    "spacy_elmo.ElmoInputOutput.v1": ElmoInputOutput,
    "spacy_elmo.ElmoTok2Vec.v1": ElmoTok2Vec,
}
SPAN_GETTERS = {
    "spacy_elmo.sent_or_strided_spans.v1": configure_sent_or_strided_spans,
    "spacy_elmo.strided_spans.v1": configure_strided_spans,
}
CALLBACKS = {
    "spacy_elmo.training_cache.v1": training_cache,
}
LOGGERS = {
    "spacy_elmo.JsonlLogger.v1": jsonl_logger,
}

for _name, _func in ARCHITECTURES.items():
    registry.architectures.register(_name, func=_func)
for _name, _func in SPAN_GETTERS.items():
    registry.span_getters.register(_name, func=_func)  # type: ignore[attr-defined]
for _name, _func in CALLBACKS.items():
    registry.callbacks.register(_name, func=_func)
for _name, _func in LOGGERS.items():
    registry.loggers.register(_name, func=_func)
