"""Pure-PyTorch ELMo biLM. Imports nothing from spaCy or thinc."""
from .chars import batch_to_char_ids, token_char_ids
from .model import BiLM, BiLMOutput
from .options import BiLMOptions, OptionsError
from .weights import WeightFileError

__all__ = [
    "BiLM",
    "BiLMOutput",
    "BiLMOptions",
    "OptionsError",
    "WeightFileError",
    "batch_to_char_ids",
    "token_char_ids",
]
