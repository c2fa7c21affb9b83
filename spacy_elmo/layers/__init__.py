"""thinc glue: the biLM over Docs, listeners, the scalar mix, span getters, the
training cache. Their registered names are listed in :mod:`spacy_elmo.component.registrations`."""
from .bilm_model import ElmoBiLM
from .bilm_shim import BiLMShim, get_bilm, has_bilm, set_bilm
from .elmo_tok2vec import ElmoTok2Vec
from .listener import BiLMWithGradFactor, ElmoInputOutput, ElmoListener, ElmoListenerLayer, ElmoMix
from .output_cache import OutputCache, training_cache
from .scalar_mix import ScalarMix, learned_mix
from .span_getters import configure_sent_or_strided_spans, configure_strided_spans

__all__ = [
    "BiLMShim",
    "BiLMWithGradFactor",
    "ElmoBiLM",
    "ElmoInputOutput",
    "ElmoListener",
    "ElmoListenerLayer",
    "ElmoMix",
    "ElmoTok2Vec",
    "OutputCache",
    "ScalarMix",
    "configure_sent_or_strided_spans",
    "configure_strided_spans",
    "get_bilm",
    "has_bilm",
    "learned_mix",
    "set_bilm",
    "training_cache",
]
