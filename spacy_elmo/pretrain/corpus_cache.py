"""A tokenised corpus on disk: one ``.npz`` (no pickle), written atomically.

Two uses: a run's cache, one file per input and reading settings
(:func:`cache_key`; written by rank 0 only under torchrun, see
:func:`~.reading.read_corpus`), and pre-tokenised *slices*
(``python -m spacy_elmo tokenise``), which record the language and window
length they were cut with and are read like text files by ``pretrain``
(:func:`load_slice`), so a large corpus is tokenised once and its slices
can be copied to another machine.
"""
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy

from .corpus import N_RESERVED_TYPES, Corpus, CorpusStats

CACHE_FORMAT = "spacy_elmo.pretrain.corpus/1"
#: The most one pre-tokenised slice may unpack to (its zip's declared sizes, checked before reading).
MAX_SLICE_BYTES = 8 * 2**30


def cache_key(files: Sequence[Path], lang: str, max_tokens: int, max_line_chars: int, strict: bool) -> str:
    """A hash of what a read depends on: every input file's resolved path,
    size and modification time, the reading settings and, where a file is
    text to tokenise (not a ``.npz`` slice), the spaCy version (whose
    tokenizer splits the text). Contents are not hashed: a file rewritten in
    place with the same size within the same nanosecond would be missed, and
    hashing gigabytes on every start is what the cache saves."""
    import hashlib
    import json

    spacy_version = None
    if any(path.suffix != ".npz" for path in files):
        import spacy

        spacy_version = spacy.__version__
    stamps = []
    for path in files:
        st = path.stat()
        stamps.append([str(path.resolve()), st.st_size, st.st_mtime_ns])
    key = {
        "format": CACHE_FORMAT, "files": stamps, "lang": lang, "max_tokens": max_tokens,
        "max_line_chars": max_line_chars, "strict": strict, "spacy": spacy_version,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()


def save_corpus(
    corpus: Corpus, path: Path, compressed: bool = False, settings: Optional[Dict[str, Any]] = None
) -> None:
    """Write a tokenised corpus as one ``.npz`` (no pickle; ``compressed``:
    zip-deflated, about a third of the size and slower to write), atomically:
    into a temporary file of its own (unique even for processes with the
    same pid on other machines sharing the directory), then renamed over
    ``path``, so a reader sees the old file or the whole new one. A failed
    write leaves no temporary file behind. ``settings`` (a slice's ``lang``
    and ``max_tokens``) are stored for :func:`load_slice` to check."""
    import json
    import os
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: Dict[str, Any] = corpus.to_arrays()  # Any: numpy's savez stub types **arrays as its own options
    meta = json.dumps(
        {"format": CACHE_FORMAT, "types": corpus.types, "stats": corpus.stats.to_dict(), "settings": settings or {}}
    )
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fout:
            save = numpy.savez_compressed if compressed else numpy.savez
            save(fout, **arrays, meta=numpy.frombuffer(meta.encode("utf-8"), dtype=numpy.uint8))
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
    return _load(path)[0]


def load_slice(path: Path, lang: str, max_tokens: int) -> Corpus:
    """A pre-tokenised slice, checked against the run's settings: a slice
    cut with another language or window length is a PretrainError naming
    the file and the setting, never windows of another length. A damaged
    or foreign file is a PretrainError too."""
    import zipfile

    from .errors import PretrainError

    try:
        with zipfile.ZipFile(path) as archive:
            declared = sum(info.file_size for info in archive.infolist())
        if declared > MAX_SLICE_BYTES:
            raise PretrainError(
                f"{path}: its arrays declare {declared / 2**30:.1f} GiB, over the {MAX_SLICE_BYTES // 2**30} GiB a "
                "slice may hold; tokenise the text in smaller slices"
            )
        corpus, settings = _load(path)
    except (ValueError, KeyError, OSError, zipfile.BadZipFile) as err:
        raise PretrainError(f"{path}: not a readable pre-tokenised corpus slice ({err})") from None
    for name, wanted in (("lang", lang), ("max_tokens", max_tokens)):
        if settings.get(name) != wanted:
            raise PretrainError(
                f"{path} was tokenised with {name} {settings.get(name)!r}, this run uses {wanted!r}: run with "
                f"--{name.replace('_', '-')} {settings.get(name)} or tokenise the text again"
            )
    return corpus


def _load(path: Path):
    import json

    with numpy.load(path, allow_pickle=False) as data:
        meta = json.loads(data["meta"].tobytes().decode("utf-8"))
        if meta.get("format") != CACHE_FORMAT:
            raise ValueError(f"{path}: not a spacy_elmo corpus cache")
        flat, offsets, counts = data["flat"], data["offsets"], data["counts"]
    types = meta["types"]
    consistent = (
        isinstance(types, list)
        and len(types) >= N_RESERVED_TYPES
        and flat.ndim == offsets.ndim == counts.ndim == 1
        and len(offsets) >= 1
        and offsets[0] == 0
        and offsets[-1] == len(flat)
        and bool(numpy.all(numpy.diff(offsets) >= 0))
        and len(counts) == len(types)
        and (not len(flat) or (0 <= flat.min() and flat.max() < len(types)))
    )
    if not consistent:
        raise ValueError(f"{path}: inconsistent corpus cache (truncated or damaged)")
    settings = meta.get("settings") or {}
    return Corpus.from_arrays(types, flat, offsets, counts, CorpusStats(**meta["stats"])), settings
