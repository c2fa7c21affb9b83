"""Pretraining a biLM on one's own text (``python -m spacy_elmo pretrain``).

See :mod:`spacy_elmo.pretrain.trainer` and docs/pretraining.md.
"""
from .corpus import Corpus, CorpusStats, read_corpus
from .errors import PretrainError
from .trainer import PretrainConfig, PretrainModel, export, export_pipeline, load_checkpoint, pretrain
from .vocab import Vocab

__all__ = ["Corpus", "CorpusStats", "PretrainConfig", "PretrainError", "PretrainModel", "Vocab", "export", "export_pipeline", "load_checkpoint", "pretrain", "read_corpus"]
