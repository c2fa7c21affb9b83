"""ELMo (Peters et al. 2018) for spaCy v3, on a pure-PyTorch biLM."""
from .bilm import BiLM, BiLMOptions, OptionsError, WeightFileError

__version__ = "0.1.0"

__all__ = ["BiLM", "BiLMOptions", "OptionsError", "WeightFileError", "__version__"]
