"""A tokenised pretraining corpus in memory: :class:`Corpus` (windows of type
ids) and :class:`CorpusStats` (what reading it counted and skipped).

Tokens are stored once as "types" (distinct strings) and the windows as int32
type ids, so the corpus costs ~4 bytes a token in memory. Reading one:
:mod:`.reading`; its on-disk cache: :mod:`.corpus_cache`.
"""
import hashlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence

import numpy

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

    def extend(self, other: "Corpus") -> None:
        """Append every window of ``other`` (a corpus with its own type
        table, e.g. a pre-tokenised slice): its types are mapped onto this
        corpus's, new ones added, and its counts and stats (all but ``files``,
        which the reader counts) added in."""
        mapping = numpy.arange(len(other.types), dtype=numpy.int32)
        for i in range(N_RESERVED_TYPES, len(other.types)):
            tok = other.types[i]
            index = self.type_index.get(tok)
            if index is None:
                index = self.type_index[tok] = len(self.types)
                self.types.append(tok)
                self.counts.append(0)
            mapping[i] = index
        for i, count in enumerate(other.counts):
            self.counts[int(mapping[i])] += int(count)
        arrays = other.to_arrays()
        flat, offsets = arrays["flat"], arrays["offsets"]
        mapped = mapping[flat]
        self._ids.extend(numpy.split(mapped, offsets[1:-1]) if len(offsets) > 1 else [])
        mine, theirs = self.stats, other.stats
        mine.lines += theirs.lines
        mine.windows += theirs.windows
        mine.tokens += theirs.tokens
        mine.skipped_empty_files += theirs.skipped_empty_files
        mine.skipped_binary_files += theirs.skipped_binary_files
        mine.skipped_bad_encoding_lines += theirs.skipped_bad_encoding_lines
        mine.skipped_long_lines += theirs.skipped_long_lines
        self._flat = None

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

    def to_arrays(self) -> Dict[str, numpy.ndarray]:
        """The corpus as arrays: ``flat`` (every window's type ids, int32, in
        order), ``offsets`` (where each window starts, int64, with the end)
        and ``counts`` (per type, int64); with :attr:`types` and
        :attr:`stats` all :meth:`from_arrays` needs."""
        if self._flat is None or self._offsets is None:
            self.finalize()
        assert self._flat is not None and self._offsets is not None
        return {"flat": self._flat, "offsets": self._offsets, "counts": numpy.asarray(self.counts, dtype=numpy.int64)}

    @classmethod
    def from_arrays(
        cls, types: List[str], flat: numpy.ndarray, offsets: numpy.ndarray, counts: numpy.ndarray, stats: CorpusStats
    ) -> "Corpus":
        """The corpus of :meth:`to_arrays` (the caller checks consistency)."""
        corpus = cls()
        corpus.types = list(types)
        corpus.type_index = {t: i for i, t in enumerate(corpus.types) if i >= N_RESERVED_TYPES}
        corpus.counts = counts.tolist()
        corpus._ids = numpy.split(flat, offsets[1:-1]) if len(offsets) > 1 else []
        corpus.stats = stats
        corpus._flat, corpus._offsets = flat, offsets
        return corpus

    def word_counts(self, windows: Optional[Iterable[int]] = None) -> Counter:
        """Token counts (as strings) over all windows or the given ones."""
        if windows is None:
            return Counter({self.types[i]: c for i, c in enumerate(self.counts) if i >= N_RESERVED_TYPES and c})
        per_type = numpy.zeros(len(self.types), dtype=numpy.int64)
        for w in windows:
            numpy.add.at(per_type, self._ids[w], 1)
        return Counter({self.types[i]: int(per_type[i]) for i in numpy.nonzero(per_type)[0] if i >= N_RESERVED_TYPES})
