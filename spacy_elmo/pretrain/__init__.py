"""Pretraining a biLM on one's own text (``python -m spacy_elmo pretrain``).

See :mod:`spacy_elmo.pretrain.trainer` (the training loop) and
docs/pretraining.md.
"""
from .checkpoint import load_checkpoint
from .config import PretrainConfig
from .corpus import Corpus, CorpusStats
from .errors import PretrainError
from .export import export
from .model import PretrainModel
from .reading import read_corpus
from .trainer import pretrain
from .vocab import Vocab

__all__ = [
    "Corpus",
    "CorpusStats",
    "PretrainConfig",
    "PretrainError",
    "PretrainModel",
    "Vocab",
    "export",
    "load_checkpoint",
    "pretrain",
    "read_corpus",
]
