"""Corpus-scale embedding: ``embed -o`` as a library.

:func:`embed_corpus` streams a text file (one sentence a line) through a
biLM in chunks, one shard per process (``torchrun`` or ``--shard i/N``),
resumable after any interruption; :func:`read_embeddings` reads the output
back lazily, in input order. The layout and the guarantees are in
docs/embedding.md; the modules: :mod:`.lines` (checked lines), :mod:`.plan`
(chunks, shards, processes), :mod:`.layout` (the files), :mod:`.run` (one
process's run), :mod:`.reader` (reading back).
"""

from .layout import FORMAT, EmbedError, LayerChoice, parse_layers
from .lines import MAX_LINE_CHARS, LineError
from .plan import World, detect_world
from .reader import Embeddings, EmbeddingsFileError, read_embeddings
from .run import EmbedResult, EmbedSettings, embed_corpus, place_model

__all__ = [
    "FORMAT",
    "MAX_LINE_CHARS",
    "EmbedError",
    "EmbedResult",
    "EmbedSettings",
    "Embeddings",
    "EmbeddingsFileError",
    "LayerChoice",
    "LineError",
    "World",
    "detect_world",
    "embed_corpus",
    "parse_layers",
    "place_model",
    "read_embeddings",
]
