"""Pure-PyTorch ELMo biLM. Imports nothing from spaCy or thinc."""
from .chars import batch_to_char_ids, token_char_ids
from .fast import InferenceEngine
from .model import BiLM, BiLMOutput
from .options import BiLMOptions, OptionsError
from .weights import WeightFileError

__all__ = [
    "BiLM",
    "BiLMOutput",
    "InferenceEngine",
    "BiLMOptions",
    "OptionsError",
    "WeightFileError",
    "batch_to_char_ids",
    "token_char_ids",
]
