"""Reading a pretraining corpus: text files, directories, ``.spacy`` files or
pre-tokenised slices (``.npz``, written by ``python -m spacy_elmo tokenise``).

Text files hold one sentence or paragraph a line, UTF-8. Each line is
tokenised with ``spacy.blank(lang).tokenizer`` (whitespace tokens dropped) and
cut into windows of at most ``max_tokens`` tokens. ``.spacy`` files
(:class:`spacy.tokens.DocBin`, msgpack, no pickle) give one window per
sentence when the docs have sentence boundaries, else per doc (cut the same
way). A ``.npz`` slice holds windows tokenised earlier with the same ``lang``
and ``max_tokens`` (checked; :func:`~.corpus_cache.load_slice`), so a large
corpus is tokenised once. A directory is read recursively: every non-hidden file, in sorted order.
A path given twice is read twice: naming a directory and then some of its
files weights those files double (upsampling a source).

Bad input never crashes mid-run; it is skipped and counted (``CorpusStats``),
or, with ``strict=True``, raises a :class:`~.errors.PretrainError` (a
ValueError) naming the file (and line):

* a missing path, a path that is not a regular file or directory (a
  device such as /dev/zero, a FIFO), or an input with no usable text at
  all: always PretrainError;
* empty files: skipped;
* binary files (a NUL byte in the first 8 KiB, or mostly undecodable lines):
  skipped;
* lines that are not valid UTF-8 (e.g. latin-1 bytes in a UTF-8 file): skipped;
* lines longer than ``max_line_chars`` characters (default 100,000): skipped,
  read in bounded pieces, so a huge line without newlines costs no memory.

The result is a :class:`~.corpus.Corpus`; with a cache directory, the
tokenised corpus is kept on disk (:mod:`.corpus_cache`).
"""
import logging
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Union

from .corpus import Corpus, CorpusStats
from .corpus_cache import cache_key, load_corpus, load_slice, save_corpus
from .errors import PretrainError

logger = logging.getLogger(__name__)
_SNIFF_BYTES = 8192
_READ_CHUNK = 1 << 16


def list_files(paths: Sequence[Union[str, Path]]) -> List[Path]:
    files: List[Path] = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                raise PretrainError(f"corpus directory {path} holds no files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise PretrainError(
                f"corpus path {path} is not a regular file or directory (a device, FIFO or socket); "
                "give text files, directories of them, or .spacy files"
            )
        else:
            raise PretrainError(f"corpus path not found: {path}")
    return files


def _bad(strict: bool, message: str) -> None:
    if strict:
        raise PretrainError(message)
    logger.warning(message)


def read_lines(path: Path, stats: CorpusStats, max_line_chars: int = 100_000, strict: bool = False) -> Iterator[str]:
    """Yield the non-empty, decodable, not-too-long lines of a text file."""
    try:
        fin = open(path, "rb")
    except OSError as err:
        raise PretrainError(f"cannot read corpus file {path}: {err.strerror or err}") from None
    with fin:
        head = fin.read(_SNIFF_BYTES)
        if not head:
            stats.skipped_empty_files.append(str(path))
            _bad(strict, f"{path}: empty file, skipped")
            return
        if b"\x00" in head:
            stats.skipped_binary_files.append(str(path))
            _bad(strict, f"{path}: binary file (NUL bytes), skipped")
            return
        fin.seek(0)
        limit = 4 * max_line_chars  # bytes: a UTF-8 character takes at most 4
        lineno = good = bad = 0
        while True:
            raw = fin.readline(limit + 1)
            if not raw:
                break
            lineno += 1
            if len(raw) > limit and not raw.endswith(b"\n"):
                # Too long: drop the rest of the line in bounded reads.
                while True:
                    rest = fin.readline(_READ_CHUNK)
                    if not rest or rest.endswith(b"\n"):
                        break
                stats.skipped_long_lines += 1
                _bad(strict, f"{path}:{lineno}: line longer than {max_line_chars} characters, skipped")
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                bad += 1
                stats.skipped_bad_encoding_lines += 1
                _bad(strict, f"{path}:{lineno}: not valid UTF-8 ({err.reason} at byte {err.start}), line skipped")
                if bad >= 100 and bad > 10 * good:
                    stats.skipped_binary_files.append(str(path))
                    _bad(strict, f"{path}: mostly not UTF-8 text, rest of file skipped")
                    return
                continue
            line = line.strip()
            if len(line) > max_line_chars:
                stats.skipped_long_lines += 1
                _bad(strict, f"{path}:{lineno}: line longer than {max_line_chars} characters, skipped")
                continue
            if line:
                good += 1
                yield line


def _windows(tokens: List[str], max_tokens: int) -> Iterator[List[str]]:
    for start in range(0, len(tokens), max_tokens):
        yield tokens[start : start + max_tokens]


def read_corpus(
    paths: Sequence[Union[str, Path]],
    lang: str = "en",
    max_tokens: int = 100,
    max_line_chars: int = 100_000,
    strict: bool = False,
    corpus: Optional[Corpus] = None,
    cache_dir: Optional[Union[str, Path]] = None,
    write_cache: bool = True,
) -> Corpus:
    """Read, tokenise and window a corpus (see the module docstring).

    With ``cache_dir``, the tokenised corpus is kept there under its
    :func:`~.corpus_cache.cache_key` and a later read of the same files with the
    same settings loads it instead of tokenising again (a restart or
    ``--resume`` of a run on millions of words starts in seconds, not
    minutes). A cache that cannot be read is ignored (with a warning) and
    rewritten; a cache that cannot be written costs a warning, never the
    run. ``write_cache=False`` reads the cache but leaves writing it to
    another process (torchrun: rank 0), so that ranks never race to write."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, found {max_tokens}")
    if cache_dir is not None and corpus is None:
        key = cache_key(list_files(paths), lang, max_tokens, max_line_chars, strict)
        cache = Path(cache_dir) / f"corpus-{key[:24]}.npz"
        if cache.is_file():
            try:
                loaded = load_corpus(cache)
                logger.info("read the tokenised corpus from %s", cache)
                return loaded
            except Exception as err:  # a damaged cache costs a re-read, never the run
                logger.warning("ignoring the corpus cache %s (it is rebuilt): %s", cache, err)
        loaded = read_corpus(paths, lang, max_tokens, max_line_chars, strict)
        if write_cache:
            try:
                save_corpus(loaded, cache)
            except Exception as err:  # full disk, read-only output...: the corpus is in memory
                logger.warning("could not write the corpus cache %s: %s", cache, err)
        return loaded
    corpus = corpus if corpus is not None else Corpus()
    stats = corpus.stats
    nlp: Any = None  # spaCy's tokenizer, made at the first file that is not a slice: slices need no spaCy
    for path in list_files(paths):
        stats.files += 1
        before = stats.windows
        if path.suffix == ".npz":
            corpus.extend(load_slice(path, lang, max_tokens))
        else:
            if nlp is None:
                import spacy

                nlp = spacy.blank(lang)
            if path.suffix == ".spacy":
                words: Iterator[List[str]] = _spacy_file_windows(path, nlp, strict, stats)
            else:
                docs = nlp.tokenizer.pipe(_counting(read_lines(path, stats, max_line_chars, strict), stats),
                                          batch_size=256)
                words = ([t.text for t in doc if not t.is_space] for doc in docs)
            for tokens in words:
                for window in _windows(tokens, max_tokens):
                    corpus.add_window(window)
        logger.info("%s: %d windows", path, stats.windows - before)
    if stats.windows == 0:
        raise PretrainError(f"no usable text in {', '.join(map(str, paths))}: {stats.summary()}")
    corpus.finalize()
    return corpus


def _counting(lines: Iterator[str], stats: CorpusStats) -> Iterator[str]:
    for line in lines:
        stats.lines += 1
        yield line


def _spacy_file_windows(path: Path, nlp, strict: bool, stats: CorpusStats) -> Iterator[List[str]]:
    from spacy.tokens import DocBin

    try:
        docbin = DocBin().from_disk(path)
        docs = list(docbin.get_docs(nlp.vocab))
    except Exception as err:  # msgpack/zlib errors of a corrupt file
        stats.skipped_binary_files.append(str(path))
        _bad(strict, f"{path}: not a readable .spacy (DocBin) file ({type(err).__name__}: {err}), skipped")
        return
    if not docs:
        stats.skipped_empty_files.append(str(path))
        _bad(strict, f"{path}: no docs, skipped")
        return
    for doc in docs:
        spans = doc.sents if doc.has_annotation("SENT_START") else [doc[:]]
        for span in spans:
            stats.lines += 1
            tokens = [t.text for t in span if not t.is_space]
            if tokens:
                yield tokens


def tokenise_slice(
    paths: Sequence[Union[str, Path]], output: Union[str, Path], lang: str = "en", max_tokens: int = 64
) -> Corpus:
    """Read ``paths`` as :func:`read_corpus` does and write them as one
    pre-tokenised slice (a compressed ``.npz`` that records ``lang`` and
    ``max_tokens``, which :func:`~.corpus_cache.load_slice` checks)."""
    corpus = read_corpus(paths, lang, max_tokens)
    save_corpus(corpus, Path(output), compressed=True, settings={"lang": lang, "max_tokens": max_tokens})
    return corpus
