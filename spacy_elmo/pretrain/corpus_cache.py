"""The on-disk cache of a tokenised corpus: one ``.npz`` (no pickle) per
input and reading settings (:func:`cache_key`), written atomically (by
rank 0 only under torchrun; see :func:`~.reading.read_corpus`)."""
from pathlib import Path
from typing import Sequence

import numpy

from .corpus import N_RESERVED_TYPES, Corpus, CorpusStats

CACHE_FORMAT = "spacy_elmo.pretrain.corpus/1"


def cache_key(files: Sequence[Path], lang: str, max_tokens: int, max_line_chars: int, strict: bool) -> str:
    """A hash of what a read depends on: every input file's resolved path,
    size and modification time, the reading settings and the spaCy version
    (whose tokenizer splits the text). Contents are not hashed: a file
    rewritten in place with the same size within the same nanosecond would
    be missed, and hashing gigabytes on every start is what the cache saves."""
    import hashlib
    import json

    import spacy

    stamps = []
    for path in files:
        st = path.stat()
        stamps.append([str(path.resolve()), st.st_size, st.st_mtime_ns])
    key = {
        "format": CACHE_FORMAT, "files": stamps, "lang": lang, "max_tokens": max_tokens,
        "max_line_chars": max_line_chars, "strict": strict, "spacy": spacy.__version__,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()


def save_corpus(corpus: Corpus, path: Path, compressed: bool = False) -> None:
    """Write a tokenised corpus as one ``.npz`` (no pickle; ``compressed``:
    zip-deflated, about a third of the size and slower to write), atomically:
    into a temporary file of its own (unique even for processes with the
    same pid on other machines sharing the directory), then renamed over
    ``path``, so a reader sees the old file or the whole new one. A failed
    write leaves no temporary file behind."""
    import json
    import os
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = corpus.to_arrays()
    meta = json.dumps({"format": CACHE_FORMAT, "types": corpus.types, "stats": corpus.stats.to_dict()})
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
    return Corpus.from_arrays(types, flat, offsets, counts, CorpusStats(**meta["stats"]))
