"""Reading ``embed -o``'s output back: :func:`read_embeddings`.

A file, or a directory of shards, opens as an :class:`Embeddings`: a
sequence of ``(tokens, array)`` in input order whose datasets are mapped
into memory, not read, so that opening costs the same for ten sentences
or a billion and ``[i]`` reads sentence ``i`` alone.

Nothing in a file is trusted before it is checked: every size comes from
attributes and dataset shapes that are compared with each other and with
the file's length before anything is mapped, and each sentence's offsets
are checked when it is read. A damaged, truncated or foreign file raises
:class:`EmbeddingsFileError` naming it.
"""

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple, Union

import numpy

from .layout import DTYPES, FORMAT, FORMAT_1, INDEX, shard_name

MANIFEST = "manifest.json"
#: The largest manifest read (a line a shard).
MAX_MANIFEST_BYTES = 64 << 20
_SHARD_FILE = r"shard-(\d{5,})-of-(\d{5,})\.h5"


class EmbeddingsFileError(ValueError):
    """A file or directory that is not a complete, undamaged output of ``embed -o``."""


class ShardFile:
    """One shard file, its datasets mapped (checked as the module says)."""

    def __init__(self, path: Path) -> None:
        import h5py

        self.path = path
        try:
            size = path.stat().st_size
            with h5py.File(path, "r") as fin:
                self.attrs = {key: _plain(value) for key, value in fin.attrs.items()}
                self._check_format()
                self.arrays = {name: self._map(fin, name, size) for name in _DATASETS}
        except EmbeddingsFileError:
            raise
        except (OSError, KeyError, ValueError, TypeError) as err:
            raise EmbeddingsFileError(
                f"{path}: not a complete output of `spacy_elmo embed -o` (damaged or truncated?): {err}"
            ) from None
        self._check_shapes()

    def _check_format(self) -> None:
        found = self.attrs.get("format")
        if found == FORMAT_1:
            raise EmbeddingsFileError(
                f"{self.path}: written by an earlier version (format {FORMAT_1}: dataset 'i' is sentence i, read it "
                "with "
                "h5py); embed the text again to get this version's layout"
            )
        if found != FORMAT:
            raise EmbeddingsFileError(
                f"{self.path} is not an output of `spacy_elmo embed -o` (format {found!r}, expected {FORMAT!r})"
            )

    def _map(self, fin, name: str, size: int) -> numpy.ndarray:
        if name not in fin:
            raise EmbeddingsFileError(f"{self.path}: dataset {name!r} is missing")
        dataset = fin[name]
        fixed, ndim = _DATASETS[name]
        dtype = DTYPES.get(str(self.attrs.get("dtype")), None) if fixed is None else fixed
        if dtype is None or dataset.dtype != dtype or dataset.ndim != ndim:
            raise EmbeddingsFileError(
                f"{self.path}: dataset {name!r} is {dataset.dtype} {dataset.shape}, not {dtype} of {ndim} dimensions"
            )
        shape = tuple(int(n) for n in dataset.shape)
        count = int(numpy.prod(shape, dtype=numpy.int64))
        if count == 0:
            return numpy.zeros(shape, dtype=dtype)
        offset = dataset.id.get_offset()
        if offset is None or dataset.chunks is not None or dataset.compression is not None:
            raise EmbeddingsFileError(
                f"{self.path}: dataset {name!r} is not stored contiguously (not written by embed -o)"
            )
        if offset + count * dtype.itemsize > size:
            raise EmbeddingsFileError(f"{self.path}: dataset {name!r} runs past the end of the file (truncated?)")
        return numpy.memmap(self.path, dtype=dtype, mode="r", offset=offset, shape=shape)

    def _check_shapes(self) -> None:
        a = self.arrays
        n, tokens = _count(self, "sentences"), _count(self, "tokens")
        indices = self.attrs.get("layer_indices")
        width = 1 if self.attrs.get("mix") else len(indices) if indices is not None else -1
        expected = {
            "vectors": (tokens, width, _count(self, "dim")),
            "offsets": (n + 1,),
            "lines": (n,),
            "token_ends": (tokens,),
            "chunk_offsets": (len(a["chunks"]) + 1,),
            "chunk_sha256": (len(a["chunks"]), 32),
        }
        for name, shape in expected.items():
            if a[name].shape != shape:
                raise EmbeddingsFileError(
                    f"{self.path}: dataset {name!r} has shape {a[name].shape}, its attributes say {shape}"
                )
        ends, offsets, chunk_offsets = a["token_ends"], a["offsets"], a["chunk_offsets"]
        if offsets[0] != 0 or offsets[-1] != tokens or chunk_offsets[0] != 0 or chunk_offsets[-1] != n:
            raise EmbeddingsFileError(f"{self.path}: the sentence offsets do not match the token count (damaged?)")
        if (int(ends[-1]) if tokens else 0) != len(a["token_text"]):
            raise EmbeddingsFileError(f"{self.path}: the token ends run past the token text (damaged?)")
        if not numpy.all(numpy.diff(chunk_offsets) >= 0):
            raise EmbeddingsFileError(f"{self.path}: the chunk offsets are not in order (damaged?)")

    def sentence(self, i: int) -> Tuple[List[str], numpy.ndarray]:
        a = self.arrays
        start, end = int(a["offsets"][i]), int(a["offsets"][i + 1])
        if not 0 <= start <= end <= len(a["token_ends"]):
            raise EmbeddingsFileError(
                f"{self.path}: sentence {i} has offsets {start}:{end} outside the file's tokens (damaged?)"
            )
        ends = a["token_ends"][start:end]
        first = int(a["token_ends"][start - 1]) if start else 0
        bounds = numpy.concatenate(([first], ends)).astype(numpy.int64, copy=False)
        if len(bounds) > 1 and (numpy.any(numpy.diff(bounds) < 0) or bounds[-1] > len(a["token_text"])):
            raise EmbeddingsFileError(f"{self.path}: the tokens of sentence {i} are out of bounds (damaged?)")
        blob = a["token_text"][bounds[0] : bounds[-1]].tobytes()
        base = bounds[0]
        try:
            tokens = [
                blob[s - base : e - base].decode("utf-8") for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist())
            ]
        except UnicodeDecodeError:
            raise EmbeddingsFileError(f"{self.path}: the tokens of sentence {i} are not UTF-8 (damaged?)") from None
        return tokens, a["vectors"][start:end].transpose(1, 0, 2)


_DATASETS = {
    "vectors": (None, 3),
    "offsets": (INDEX, 1),
    "lines": (INDEX, 1),
    "token_text": (numpy.dtype(numpy.uint8), 1),
    "token_ends": (INDEX, 1),
    "chunks": (INDEX, 1),
    "chunk_offsets": (INDEX, 1),
    "chunk_sha256": (numpy.dtype(numpy.uint8), 2),
}


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, numpy.generic):
        return value.item()
    return value


def _count(shard: ShardFile, key: str) -> int:
    value = shard.attrs.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EmbeddingsFileError(f"{shard.path}: attribute {key!r} is {value!r}, not a count")
    return value


class Embeddings(Sequence):
    """The sentences of an ``embed -o`` output, in input order.

    ``emb[i]`` is ``(tokens, array)``: the sentence's tokens and an array of
    shape (k, n_tokens, dim), the kept layers (``emb.attrs["layers"]``; k = 1
    for ``top`` and ``mix``) in the stored dtype, mapped from the file (copy
    it to keep it after :meth:`close`). ``emb.lines[i]`` is the input line
    (0-based) sentence ``i`` came from. ``emb.attrs``: the model, settings
    and input (see docs/embedding.md)."""

    def __init__(self, shards: List[ShardFile]) -> None:
        self._shards = shards
        self.attrs: Dict[str, Any] = dict(shards[0].attrs)
        for key in ("shard",):
            self.attrs.pop(key, None)
        self.attrs["sentences"] = sum(s.attrs["sentences"] for s in shards)
        self.attrs["tokens"] = sum(s.attrs["tokens"] for s in shards)
        # Chunks in input order: (global first sentence, shard, first sentence in the shard).
        order = []
        for number, shard in enumerate(shards):
            chunk_offsets = shard.arrays["chunk_offsets"]
            for c, index in enumerate(shard.arrays["chunks"].tolist()):
                order.append((index, number, int(chunk_offsets[c]), int(chunk_offsets[c + 1] - chunk_offsets[c])))
        order.sort()
        indices = [o[0] for o in order]
        if len(shards) > 1 and indices != list(range(len(indices))):
            missing = sorted(set(range(max(indices, default=-1) + 1)) - set(indices))
            raise EmbeddingsFileError(
                f"{shards[0].path.parent}: the shards do not hold every chunk once (missing or repeated chunks, "
                f"e.g. {missing[:3]})"
            )
        self._starts = numpy.zeros(len(order) + 1, dtype=numpy.int64)
        numpy.cumsum([o[3] for o in order], out=self._starts[1:])
        self._shard_of = numpy.asarray([o[1] for o in order], dtype=numpy.int64)
        self._local = numpy.asarray([o[2] for o in order], dtype=numpy.int64)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _locate(self, i: int) -> Tuple[ShardFile, int]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sentence {i} out of range ({n} sentences)")
        i %= n
        c = int(numpy.searchsorted(self._starts, i, side="right")) - 1
        return self._shards[int(self._shard_of[c])], int(self._local[c] + i - self._starts[c])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        shard, local = self._locate(int(i))
        return shard.sentence(local)

    def __iter__(self) -> Iterator[Tuple[List[str], numpy.ndarray]]:
        for i in range(len(self)):
            yield self[i]

    def line(self, i: int) -> int:
        """The input line (0-based) of sentence ``i``."""
        shard, local = self._locate(int(i))
        return int(shard.arrays["lines"][local])

    @property
    def lines(self) -> numpy.ndarray:
        """Every sentence's input line (0-based), in order (one int64 array)."""
        if len(self._shards) == 1:
            return numpy.asarray(self._shards[0].arrays["lines"])
        parts = [
            self._shards[int(s)].arrays["lines"][int(local) : int(local) + int(n)]
            for s, local, n in zip(self._shard_of, self._local, numpy.diff(self._starts))
        ]
        return numpy.concatenate(parts) if parts else numpy.zeros(0, dtype=numpy.int64)

    @property
    def paths(self) -> List[Path]:
        return [s.path for s in self._shards]

    def close(self) -> None:
        """Unmap the files (arrays taken from them become invalid)."""
        for shard in self._shards:
            shard.arrays = {}
        self._shards = []
        self._starts = numpy.zeros(1, dtype=numpy.int64)

    def __enter__(self) -> "Embeddings":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Embeddings({len(self)} sentences, {len(self._shards)} file(s), layers={self.attrs.get('layers')!r})"


def read_embeddings(path: Union[str, Path]) -> Embeddings:
    """The output of ``embed -o``: a shard file, or a directory of shards
    (with its ``manifest.json``, or every ``shard-I-of-N.h5`` of one run).
    See :class:`Embeddings`."""
    path = Path(path)
    if not path.exists():
        raise EmbeddingsFileError(f"{path}: no such file or directory")
    if not path.is_dir():
        return Embeddings([ShardFile(path)])
    names = _shard_files(path)
    shards = [ShardFile(path / name) for name in names]
    settings = {s.attrs.get("settings") for s in shards}
    inputs = {s.attrs.get("input_sha256") for s in shards}
    if len(settings) > 1 or len(inputs) > 1:
        raise EmbeddingsFileError(f"{path}: its shards come from different runs (settings or input differ)")
    return Embeddings(shards)


def _shard_files(folder: Path) -> List[str]:
    manifest = folder / MANIFEST
    if manifest.exists():
        if manifest.stat().st_size > MAX_MANIFEST_BYTES:
            raise EmbeddingsFileError(
                f"{manifest}: larger than {MAX_MANIFEST_BYTES >> 20} MiB, not a manifest of embed -o"
            )
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            names = [str(entry["file"]) for entry in data["shards"]]
        except (ValueError, KeyError, TypeError) as err:
            raise EmbeddingsFileError(f"{manifest}: not a manifest of embed -o ({err})") from None
        if any(not re.fullmatch(_SHARD_FILE, name) for name in names):
            raise EmbeddingsFileError(f"{manifest}: names a shard that is not shard-I-of-N.h5")
    else:
        names = sorted(p.name for p in folder.iterdir() if re.fullmatch(_SHARD_FILE, p.name))
    if not names:
        raise EmbeddingsFileError(
            f"{folder}: no shard files (shard-I-of-N.h5) and no {MANIFEST}: not an output of embed -o, or not finished"
        )
    total = int(re.fullmatch(_SHARD_FILE, names[0])[2])  # type: ignore[index]
    expected = [shard_name(i, total) for i in range(total)]
    if names != expected:
        missing = sorted(set(expected) - set(names))
        raise EmbeddingsFileError(
            f"{folder}: the shards of one run are {expected[0]} .. {expected[-1]}; "
            + (
                f"missing {', '.join(missing[:3])} (is a shard still running?)"
                if missing
                else "found others beside them"
            )
        )
    for name in names:
        if not (folder / name).is_file():
            raise EmbeddingsFileError(f"{folder / name}: named in {MANIFEST} but missing")
    return names
