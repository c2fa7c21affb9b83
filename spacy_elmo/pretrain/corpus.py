"""Reading a pretraining corpus: text files, directories or ``.spacy`` files.

Text files hold one sentence or paragraph a line, UTF-8. Each line is
tokenised with ``spacy.blank(lang).tokenizer`` (whitespace tokens dropped) and
cut into windows of at most ``max_tokens`` tokens. ``.spacy`` files
(:class:`spacy.tokens.DocBin`, msgpack, no pickle) give one window per
sentence when the docs have sentence boundaries, else per doc (cut the same
way). A directory is read recursively: every non-hidden file, in sorted order.

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

Tokens are stored once as "types" (distinct strings) and the windows as int32
type ids, so the corpus costs ~4 bytes a token in memory.
"""
import hashlib
import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Union

import numpy

from .errors import PretrainError

logger = logging.getLogger(__name__)

#: Type ids 0..2 are reserved: padding, sentence start, sentence end.
PAD_TYPE, BOS_TYPE, EOS_TYPE = 0, 1, 2
N_RESERVED_TYPES = 3
_SNIFF_BYTES = 8192
_READ_CHUNK = 1 << 16


@dataclass
class CorpusStats:
    files: int = 0
    lines: int = 0
    windows: int = 0
    tokens: int = 0
    skipped_empty_files: List[str] = field(default_factory=list)
    skipped_binary_files: List[str] = field(default_factory=list)
    skipped_bad_encoding_lines: int = 0
    skipped_long_lines: int = 0

    def to_dict(self) -> Dict:
        return asdict(self)

    def summary(self) -> str:
        text = f"{self.files} files, {self.lines} lines, {self.windows} windows, {self.tokens} tokens"
        skips = []
        if self.skipped_empty_files:
            skips.append(f"{len(self.skipped_empty_files)} empty files")
        if self.skipped_binary_files:
            skips.append(f"{len(self.skipped_binary_files)} binary files ({', '.join(self.skipped_binary_files[:3])})")
        if self.skipped_bad_encoding_lines:
            skips.append(f"{self.skipped_bad_encoding_lines} lines not UTF-8")
        if self.skipped_long_lines:
            skips.append(f"{self.skipped_long_lines} lines too long")
        return text + (("; skipped " + ", ".join(skips)) if skips else "")


class Corpus:
    """Windows of tokens as type ids; ``types[i]`` is the string of type ``i``."""

    def __init__(self) -> None:
        self.types: List[str] = ["", "<S>", "</S>"]
        self.type_index: Dict[str, int] = {}
        self.counts: List[int] = [0, 0, 0]
        self._ids: List[numpy.ndarray] = []
        self.stats = CorpusStats()
        self._flat: Optional[numpy.ndarray] = None
        self._offsets: Optional[numpy.ndarray] = None

    # ----------------------------------------------------------- building
    def add_window(self, tokens: Sequence[str]) -> None:
        ids = numpy.empty(len(tokens), dtype=numpy.int32)
        for i, tok in enumerate(tokens):
            index = self.type_index.get(tok)
            if index is None:
                index = self.type_index[tok] = len(self.types)
                self.types.append(tok)
                self.counts.append(0)
            self.counts[index] += 1
            ids[i] = index
        self._ids.append(ids)
        self.stats.windows += 1
        self.stats.tokens += len(tokens)
        self._flat = None

    def finalize(self) -> None:
        lengths = numpy.array([len(x) for x in self._ids], dtype=numpy.int64)
        self._offsets = numpy.concatenate([[0], numpy.cumsum(lengths)]).astype(numpy.int64)
        self._flat = numpy.concatenate(self._ids) if self._ids else numpy.zeros(0, numpy.int32)

    # ------------------------------------------------------------ access
    def __len__(self) -> int:
        return len(self._ids)

    def window(self, i: int) -> numpy.ndarray:
        return self._ids[i]

    def lengths(self) -> numpy.ndarray:
        return numpy.array([len(x) for x in self._ids], dtype=numpy.int64)

    def fingerprint(self) -> str:
        """SHA-256 of the corpus as tokenised: every window's tokens in
        order (the type strings and each window's type ids). Two corpora
        give the same fingerprint exactly when they give the same training
        windows, wherever their files lie; a resume compares it with the
        checkpoint's (see :func:`spacy_elmo.pretrain.checkpoint.check_resume_data`)."""
        if self._flat is None or self._offsets is None:
            self.finalize()
        digest = hashlib.sha256()
        for text in self.types:
            digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
        digest.update(numpy.ascontiguousarray(self._offsets, dtype="<i8").tobytes())
        digest.update(numpy.ascontiguousarray(self._flat, dtype="<i4").tobytes())
        return digest.hexdigest()

    def word_counts(self, windows: Optional[Iterable[int]] = None) -> Counter:
        """Token counts (as strings) over all windows or the given ones."""
        if windows is None:
            return Counter({self.types[i]: c for i, c in enumerate(self.counts) if i >= N_RESERVED_TYPES and c})
        per_type = numpy.zeros(len(self.types), dtype=numpy.int64)
        for w in windows:
            numpy.add.at(per_type, self._ids[w], 1)
        return Counter({self.types[i]: int(per_type[i]) for i in numpy.nonzero(per_type)[0] if i >= N_RESERVED_TYPES})


# ------------------------------------------------------------------ files
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


CACHE_FORMAT = "spacy_elmo.pretrain.corpus/1"


def corpus_fingerprint(
    paths: Sequence[Union[str, Path]], lang: str, max_tokens: int, max_line_chars: int, strict: bool
) -> str:
    """A hash of what a read depends on: every input file's resolved path,
    size and modification time, the reading settings and the spaCy version
    (whose tokenizer splits the text). Contents are not hashed: a file
    rewritten in place with the same size within the same nanosecond would
    be missed, and hashing gigabytes on every start is what the cache saves."""
    import hashlib
    import json

    import spacy

    files = []
    for path in list_files(paths):
        st = path.stat()
        files.append([str(path.resolve()), st.st_size, st.st_mtime_ns])
    key = {
        "format": CACHE_FORMAT, "files": files, "lang": lang, "max_tokens": max_tokens,
        "max_line_chars": max_line_chars, "strict": strict, "spacy": spacy.__version__,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()


def save_corpus(corpus: Corpus, path: Path) -> None:
    """Write a tokenised corpus as one ``.npz`` (no pickle), atomically:
    into a temporary file of its own (unique even for processes with the
    same pid on other machines sharing the directory), then renamed over
    ``path``, so a reader sees the old file or the whole new one. A failed
    write leaves no temporary file behind."""
    import json
    import os
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if corpus._flat is None:
        corpus.finalize()
    meta = json.dumps({"format": CACHE_FORMAT, "types": corpus.types, "stats": corpus.stats.to_dict()})
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fout:
            numpy.savez(
                fout, flat=corpus._flat, offsets=corpus._offsets, counts=numpy.asarray(corpus.counts, dtype=numpy.int64),
                meta=numpy.frombuffer(meta.encode("utf-8"), dtype=numpy.uint8),
            )
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_corpus(path: Path) -> Corpus:
    """Read a corpus written by :func:`save_corpus` (``allow_pickle=False``).
    A file that does not hold a consistent corpus is a ValueError (or the
    error of the damaged zip), never a corpus with wrong windows."""
    import json

    with numpy.load(path, allow_pickle=False) as data:
        meta = json.loads(data["meta"].tobytes().decode("utf-8"))
        if meta.get("format") != CACHE_FORMAT:
            raise ValueError(f"{path}: not a spacy_elmo corpus cache")
        flat, offsets, counts = data["flat"], data["offsets"], data["counts"]
    types = meta["types"]
    consistent = (
        isinstance(types, list) and len(types) >= N_RESERVED_TYPES and flat.ndim == offsets.ndim == counts.ndim == 1
        and len(offsets) >= 1 and offsets[0] == 0 and offsets[-1] == len(flat) and bool(numpy.all(numpy.diff(offsets) >= 0))
        and len(counts) == len(types) and (not len(flat) or (0 <= flat.min() and flat.max() < len(types)))
    )
    if not consistent:
        raise ValueError(f"{path}: inconsistent corpus cache (truncated or damaged)")
    corpus = Corpus()
    corpus.types = list(types)
    corpus.type_index = {t: i for i, t in enumerate(corpus.types) if i >= N_RESERVED_TYPES}
    corpus.counts = counts.tolist()
    corpus._ids = numpy.split(flat, offsets[1:-1]) if len(offsets) > 1 else []
    corpus.stats = CorpusStats(**meta["stats"])
    corpus._flat, corpus._offsets = flat, offsets
    return corpus


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
    :func:`corpus_fingerprint` and a later read of the same files with the
    same settings loads it instead of tokenising again (a restart or
    ``--resume`` of a run on millions of words starts in seconds, not
    minutes). A cache that cannot be read is ignored (with a warning) and
    rewritten; a cache that cannot be written costs a warning, never the
    run. ``write_cache=False`` reads the cache but leaves writing it to
    another process (torchrun: rank 0), so that ranks never race to write."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, found {max_tokens}")
    if cache_dir is not None and corpus is None:
        cache = Path(cache_dir) / f"corpus-{corpus_fingerprint(paths, lang, max_tokens, max_line_chars, strict)[:24]}.npz"
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
    import spacy

    nlp = spacy.blank(lang)
    tokenizer = nlp.tokenizer
    corpus = corpus if corpus is not None else Corpus()
    stats = corpus.stats
    for path in list_files(paths):
        stats.files += 1
        before = stats.windows
        if path.suffix == ".spacy":
            for tokens in _spacy_file_windows(path, nlp, strict, stats):
                for window in _windows(tokens, max_tokens):
                    corpus.add_window(window)
        else:
            lines = read_lines(path, stats, max_line_chars, strict)
            for doc in tokenizer.pipe(_counting(lines, stats), batch_size=256):
                tokens = [t.text for t in doc if not t.is_space]
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
