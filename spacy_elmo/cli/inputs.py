"""What every command reads the same way: text (UTF-8, one sentence a line),
its tokens, the biLM, and progress while embedding.

Choices:

* Text is read as bytes, a line at a time, and decoded as strict UTF-8 (a
  byte-order mark at the start is dropped). A NUL byte, undecodable bytes or
  a line longer than :data:`MAX_LINE_CHARS` characters stop the command with
  a :class:`~spacy_elmo.embed.lines.LineError` naming the file, the line and what to do,
  before anything is embedded from a bad file: nothing is skipped silently.
  Lines are kept as they are, so sentence ``i`` is line ``i`` (0-based; an
  empty line is an empty sentence).
* Tokens come from ``spacy.blank(lang).tokenizer`` (whitespace tokens
  dropped), the tokenizer ``pretrain`` and ``perplexity`` use and a spaCy
  pipeline starts with; ``--whitespace`` (alias ``--pretokenized``) splits on
  whitespace instead, for text that is already tokenised.
* Progress: :class:`ProgressEmbedder` runs the biLM one batch at a time with
  a tqdm bar on stderr, with the batches ``BiLM.embed_sentences`` would make
  (the same length-sorted rows), so its outputs are the same arrays.
"""

import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy

from ..embed.lines import MAX_LINE_CHARS, decode_line, raw_lines  # noqa: F401  (MAX_LINE_CHARS: named here too)
from ..embed.run import sha256_file
from ._app import MODEL_WORDING, InputError

STDIN = "<stdin>"


# ------------------------------------------------------------------- files
def input_file(path: Optional[Path], setting: str) -> Optional[Path]:
    """``path`` if it is a readable regular file; else an InputError that
    names ``setting`` and the path."""
    if path is None:
        return None
    if not path.exists():
        raise InputError(f"{setting} {path}: no such file")
    if path.is_dir():
        raise InputError(f"{setting} {path} is a directory: give a text file (one sentence a line, UTF-8)")
    if not path.is_file():
        raise InputError(f"{setting} {path} is not a regular file (a device or a pipe?): give a text file")
    return path


def output_file(path: Optional[Path], setting: str) -> Optional[Path]:
    """Check, before any work, that ``path`` can be written: its directory
    exists and is writable, and ``path`` itself is not a directory."""
    if path is None:
        return None
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise InputError(f"{setting} {path} is a directory: give a file name")
    if not folder.is_dir():
        raise InputError(
            f"{setting} {path}: the directory {folder} does not exist; create it first (mkdir -p {folder})"
        )
    if not _writable(folder):
        raise InputError(f"{setting} {path}: the directory {folder} is not writable")
    return path


def _writable(folder: Path) -> bool:
    import os

    return os.access(folder, os.W_OK | os.X_OK)


def read_lines(path: Optional[Path], setting: str = "--input") -> Iterator[str]:
    """The lines of ``path`` (or stdin), without line ends, checked as the
    module docstring says (:mod:`spacy_elmo.embed.lines`)."""
    name = str(path) if path is not None else STDIN
    where = f"{setting} {name}"
    if path is not None:
        with open(path, "rb") as stream:
            yield from _decoded(raw_lines(stream, where), where)
        return
    stdin_bytes = getattr(sys.stdin, "buffer", None)
    if stdin_bytes is None:  # a text stream without bytes underneath
        yield from _decoded((line.encode("utf-8") for line in sys.stdin), where)
    else:
        yield from _decoded(raw_lines(stdin_bytes, where), where)


def _decoded(raws: Iterable[bytes], where: str) -> Iterator[str]:
    for number, raw in enumerate(raws, 1):
        yield decode_line(raw, number, where)


# ------------------------------------------------------------------ tokens
def tokenizer(lang: str, whitespace: bool) -> Callable[[Iterable[str]], Iterator[List[str]]]:
    """``lines -> token lists``: spaCy's tokenizer for ``lang``, or
    whitespace splitting (see the module docstring)."""
    if whitespace:
        return lambda lines: (line.split() for line in lines)
    import spacy

    try:
        nlp = spacy.blank(lang)
    except (ImportError, KeyError) as err:
        raise InputError(
            f"--lang {lang!r}: spaCy has no such language ({err}). Use a spaCy language code such as en, de, fr"
        ) from None
    spacy_tokenizer: Any = nlp.tokenizer

    def tokenize(lines: Iterable[str]) -> Iterator[List[str]]:
        for doc in spacy_tokenizer.pipe(lines, batch_size=256):
            yield [t.text for t in doc if not t.is_space]

    return tokenize


def tokenization_name(lang: str, whitespace: bool) -> str:
    return "whitespace" if whitespace else f"spacy.blank({lang!r}).tokenizer"


# ------------------------------------------------------------------- model
def load_model(model: Optional[str], options: Optional[str], progress: bool):
    """The biLM of ``--model``/``--options`` (through the package's one
    loader, :func:`spacy_elmo.loading.load_bilm`, its errors worded for the
    command line), in eval mode."""
    from ..loading import load_bilm

    return load_bilm(model, options, progress=progress, wording=MODEL_WORDING).eval()


def model_files(model: Optional[str], options: Optional[str]) -> Tuple[Path, Path]:
    """The local (weights, options) files of ``--model``/``--options``; after
    :func:`load_model`, nothing is downloaded."""
    from ..loading import resolve

    return resolve(model, options, progress=False, wording=MODEL_WORDING)


def model_identity(model: Optional[str], options: Optional[str]) -> Dict[str, str]:
    """What identifies the biLM an output came from: the ``--model`` as given
    (``english`` for the default), the SHA-256 of its weights and options
    files, and the options JSON itself."""
    weights_path, options_path = model_files(model, options)
    return {
        "model": model if model is not None else "english",
        "weights_sha256": sha256_file(weights_path),
        "options_sha256": sha256_file(options_path),
        "options": Path(options_path).read_text(encoding="utf-8"),
    }


# ---------------------------------------------------------------- progress
class ProgressEmbedder:
    """A biLM whose ``embed_sentences`` shows a tqdm bar (stderr), one batch
    at a time; anything that takes a biLM (``nearest_uses``, ``sense_eval``)
    takes it."""

    def __init__(self, bilm, progress: bool, desc: str = "embedding") -> None:
        self.bilm = bilm
        self.progress = progress
        self.desc = desc

    def batches(
        self, sentences: Sequence[Sequence[str]], batch_size: int
    ) -> Iterator[Tuple[List[int], List[numpy.ndarray]]]:
        """(rows, arrays) per batch, in the order the biLM runs them; empty
        sentences come last, in one batch."""
        from tqdm import tqdm

        from ..bilm.batching import batch_rows

        if batch_size < 1:
            raise InputError(f"--batch-size must be >= 1, found {batch_size}")
        sentences = [list(s) for s in sentences]
        stateful = getattr(self.bilm, "stateful", False)
        with tqdm(
            total=len(sentences), desc=self.desc, unit=" sentences", disable=not self.progress, file=sys.stderr
        ) as bar:
            for rows in batch_rows(sentences, batch_size, by_length=not stateful):
                yield rows, self.bilm.embed_sentences([sentences[i] for i in rows], batch_size=len(rows))
                bar.update(len(rows))
            if not stateful:
                empty = [i for i, s in enumerate(sentences) if not s]
                if empty:
                    yield empty, self.bilm.embed_sentences([[] for _ in empty], batch_size=batch_size)
                    bar.update(len(empty))

    def embed_sentences(self, sentences: Sequence[Sequence[str]], batch_size: int = 64) -> List[numpy.ndarray]:
        results: List[Optional[numpy.ndarray]] = [None] * len(sentences)
        for rows, arrays in self.batches(sentences, batch_size):
            for i, array in zip(rows, arrays):
                results[i] = array
        return results  # type: ignore[return-value]
