"""The files of ``embed -o``: what is stored, the work pieces a run leaves
while it goes, and the shard file it assembles from them.

A shard file (hdf5, :data:`FORMAT`) holds a few datasets, each written once
at its final size, contiguous and little-endian (so that a reader can map
them into memory; see :mod:`.reader`):

=================  ==========================  =========================================
dataset            shape, type                 what
=================  ==========================  =========================================
``vectors``        (tokens, k, dim) f4 or f2   every token's vectors, sentence after sentence
``offsets``        (sentences + 1,) i8         sentence ``i`` is rows ``offsets[i]:offsets[i+1]``
``lines``          (sentences,) i8             each sentence's line of the input (0-based)
``token_text``     (bytes,) u1                 every token's UTF-8 bytes, one after another
``token_ends``     (tokens,) i8                where each token's bytes end in ``token_text``
``chunks``         (chunks,) i8                the index of each chunk of the input held here
``chunk_offsets``  (chunks + 1,) i8            chunk ``c`` is sentences ``chunk_offsets[c]:[c+1]``
``chunk_sha256``   (chunks, 32) u1             SHA-256 of each chunk's input bytes
=================  ==========================  =========================================

``k`` is the number of layers kept (``--layers``: ``all`` the biLM's L+1,
``top`` layer L, ``mix`` their plain mean, or a list such as ``0,2``).
Attributes: see :func:`shard_attributes`.

While a run goes, each chunk of the input it finishes is a *piece* in the
work folder: ``chunk-K.npy`` (its vectors, written as batches come) and
``chunk-K.npz`` (the rest), each written under a temporary name, flushed to
disk and renamed; the ``.npz`` is renamed last, so its presence is the
chunk's completion record. Nothing is unpickled: both are read with
``allow_pickle=False``.
"""

import errno
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy

FORMAT = "spacy_elmo.embed/2"
#: The format of the files of earlier versions (one dataset per sentence).
FORMAT_1 = "spacy_elmo.embed/1"
DTYPES: Dict[str, numpy.dtype] = {"float32": numpy.dtype("<f4"), "float16": numpy.dtype("<f2")}
INDEX = numpy.dtype("<i8")
#: Bytes copied at a time when a shard is assembled from its pieces.
COPY_BYTES = 64 << 20


class EmbedError(ValueError):
    """Bad input, settings or output of ``embed -o`` (the message names the
    file or setting and what to do)."""


# ------------------------------------------------------------------ layers
@dataclass(frozen=True)
class LayerChoice:
    """Which of the biLM's L+1 layers a file keeps: ``name`` as given
    (``all``, ``top``, ``mix``, or indices such as ``0,2``)."""

    name: str
    indices: Tuple[int, ...]
    mix: bool = False

    @property
    def width(self) -> int:
        return 1 if self.mix else len(self.indices)

    def apply(self, layers: numpy.ndarray, dtype: numpy.dtype) -> numpy.ndarray:
        """(L+1, n, dim) float32 -> (n, k, dim) in ``dtype``."""
        if self.mix:
            kept = layers.mean(axis=0, dtype=numpy.float32)[None]
        else:
            kept = layers[list(self.indices)]
        return kept.transpose(1, 0, 2).astype(dtype, copy=False)


def parse_layers(spec: str, num_layers: int) -> LayerChoice:
    """``--layers`` for a biLM with ``num_layers`` (L+1) output layers."""
    spec = spec.strip()
    if spec == "all":
        return LayerChoice("all", tuple(range(num_layers)))
    if spec == "top":
        return LayerChoice("top", (num_layers - 1,))
    if spec == "mix":
        return LayerChoice("mix", tuple(range(num_layers)), mix=True)
    if not re.fullmatch(r"\d+(,\d+)*", spec):
        raise EmbedError(f"--layers {spec!r}: give all, top, mix or layer numbers such as 0,1,2")
    indices = tuple(int(i) for i in spec.split(","))
    if len(set(indices)) != len(indices) or any(i >= num_layers for i in indices):
        raise EmbedError(
            f"--layers {spec!r}: give distinct layer numbers in 0..{num_layers - 1} (this biLM has {num_layers} layers)"
        )
    return LayerChoice(",".join(map(str, indices)), indices)


def check_dtype(name: str) -> numpy.dtype:
    if name not in DTYPES:
        raise EmbedError(f"--dtype {name!r}: give float32 or float16")
    return DTYPES[name]


# -------------------------------------------------------------------- disk
def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    try:
        fsync_file(path)
    except OSError:  # some filesystems cannot open or sync a directory
        pass


def publish(temporary: Path, final: Path) -> None:
    """Make ``temporary`` (complete) appear as ``final`` atomically, durably."""
    fsync_file(temporary)
    os.replace(temporary, final)
    fsync_dir(final.parent)


def write_json(path: Path, data: Dict[str, Any]) -> None:
    """``data`` as JSON (sorted keys: the same data gives the same bytes),
    published atomically."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.partial")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    publish(temporary, path)


# ------------------------------------------------------------------ pieces
@dataclass
class ChunkText:
    """One chunk of the input, tokenised: what a piece is made from."""

    index: int
    first_line: int
    sha256: bytes
    lines: List[int]  # each sentence's input line (0-based)
    tokens: List[List[str]]


def piece_paths(work: Path, index: int) -> Tuple[Path, Path]:
    return work / f"chunk-{index:09d}.npy", work / f"chunk-{index:09d}.npz"


def encode_tokens(tokens: Sequence[Sequence[str]]) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """(offsets, token_ends, token_text) of token lists."""
    lengths = numpy.fromiter((len(s) for s in tokens), dtype=INDEX, count=len(tokens))
    offsets = numpy.zeros(len(tokens) + 1, dtype=INDEX)
    numpy.cumsum(lengths, out=offsets[1:])
    encoded = [t.encode("utf-8") for sentence in tokens for t in sentence]
    ends = numpy.cumsum(numpy.fromiter((len(b) for b in encoded), dtype=INDEX, count=len(encoded)), dtype=INDEX)
    text = numpy.frombuffer(b"".join(encoded), dtype=numpy.uint8)
    return offsets, ends, text


class PieceWriter:
    """The piece of one chunk: vectors written as batches come (plain
    positioned writes, so a full disk is an ``OSError``, never a signal),
    published by :meth:`finish`. ``identity``: the run's settings (JSON),
    kept with it."""

    def __init__(self, work: Path, chunk: ChunkText, width: int, dim: int, dtype: numpy.dtype, identity: str) -> None:
        self.chunk = chunk
        self.identity = identity
        self.vectors_path, self.meta_path = piece_paths(work, chunk.index)
        self.offsets, self.ends, self.text = encode_tokens(chunk.tokens)
        self.partial = self.vectors_path.with_name(self.vectors_path.name + ".partial")
        self.row_bytes = width * dim * dtype.itemsize
        self.dtype = dtype
        shape = (int(self.offsets[-1]), width, dim)
        self.fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            with os.fdopen(os.dup(self.fd), "wb") as header:
                numpy.lib.format.write_array_header_1_0(
                    header, {"descr": dtype.str, "fortran_order": False, "shape": shape}
                )
                self.data_start = header.tell()
            reserve(self.fd, self.data_start, shape[0] * self.row_bytes)
        except BaseException:
            self.abort()
            raise

    def write(self, sentence: int, kept: numpy.ndarray) -> None:
        """Sentence ``sentence`` of the chunk: (n, k, dim) as stored."""
        start, end = int(self.offsets[sentence]), int(self.offsets[sentence + 1])
        if kept.shape[0] != end - start or kept.dtype != self.dtype:
            raise ValueError(
                f"chunk {self.chunk.index}, sentence {sentence}: {kept.shape[0]} {kept.dtype} vectors for "
                f"{end - start} tokens"
            )
        data = numpy.ascontiguousarray(kept).tobytes()
        position, done = self.data_start + start * self.row_bytes, 0
        while done < len(data):
            done += os.pwrite(self.fd, data[done:], position + done)

    def finish(self) -> None:
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        publish(self.partial, self.vectors_path)
        meta_partial = self.meta_path.with_name(self.meta_path.name + ".partial")
        with open(meta_partial, "wb") as out:
            numpy.savez(
                out,
                offsets=self.offsets,
                lines=numpy.asarray(self.chunk.lines, dtype=INDEX),
                token_ends=self.ends,
                token_text=self.text,
                sha256=numpy.frombuffer(self.chunk.sha256, dtype=numpy.uint8),
                first_line=numpy.asarray([self.chunk.first_line], dtype=INDEX),
                identity=numpy.frombuffer(self.identity.encode("utf-8"), dtype=numpy.uint8),
            )
        publish(meta_partial, self.meta_path)

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.partial.unlink(missing_ok=True)


def reserve(fd: int, offset: int, nbytes: int) -> None:
    """Allocate ``nbytes`` of disk at ``offset`` of the open file ``fd`` now,
    so that a full disk shows here as an ``OSError`` (the file is sized
    anyway where the filesystem cannot allocate ahead)."""
    if nbytes and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, offset, nbytes)
            return
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
    os.ftruncate(fd, offset + nbytes)


def check_space(folder: Path, nbytes: int) -> None:
    """Raise the ``OSError`` of a full disk (or a file-size limit) now if
    ``folder`` cannot take a file of ``nbytes``: a trial file is allocated
    and removed."""
    trial = folder / f".space-check.{os.getpid()}"
    fd = os.open(trial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        reserve(fd, 0, nbytes)
    finally:
        os.close(fd)
        trial.unlink(missing_ok=True)


@dataclass
class Piece:
    """A finished piece, checked: its arrays (vectors mapped, not read)."""

    index: int
    vectors: numpy.ndarray
    offsets: numpy.ndarray
    lines: numpy.ndarray
    token_ends: numpy.ndarray
    token_text: numpy.ndarray
    sha256: bytes
    first_line: int
    identity: str

    @property
    def sentences(self) -> int:
        return len(self.lines)

    @property
    def tokens(self) -> int:
        return int(self.offsets[-1])


class DamagedPiece(Exception):
    """A piece that does not hold what its record says (redo its chunk)."""


def read_piece(work: Path, index: int, width: int, dim: int, dtype: numpy.dtype) -> Optional[Piece]:
    """The finished piece of chunk ``index``; None if there is none. Raises
    :class:`DamagedPiece` when its files do not agree with each other."""
    vectors_path, meta_path = piece_paths(work, index)
    if not meta_path.exists():
        return None
    try:
        with numpy.load(meta_path, allow_pickle=False) as meta:
            arrays = {
                key: meta[key]
                for key in ("offsets", "lines", "token_ends", "token_text", "sha256", "first_line", "identity")
            }
        vectors = numpy.load(vectors_path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise DamagedPiece(f"{meta_path}: {err}") from None
    offsets, lines, ends, text = arrays["offsets"], arrays["lines"], arrays["token_ends"], arrays["token_text"]
    agree = (
        vectors.dtype == dtype
        and vectors.shape[1:] == (width, dim)
        and offsets.dtype == INDEX
        and offsets.ndim == 1
        and len(offsets) == len(lines) + 1
        and offsets[0] == 0
        and bool(numpy.all(numpy.diff(offsets) >= 0))
        and offsets[-1] == vectors.shape[0]
        and ends.dtype == INDEX
        and len(ends) == vectors.shape[0]
        and (len(ends) == 0 or (ends[-1] == len(text) and bool(numpy.all(numpy.diff(ends) >= 0)) and ends[0] >= 0))
        and text.dtype == numpy.uint8
        and arrays["sha256"].shape == (32,)
        and arrays["first_line"].shape == (1,)
    )
    if not agree:
        raise DamagedPiece(f"{meta_path}: its arrays do not agree with each other")
    return Piece(
        index,
        vectors,
        offsets,
        lines,
        ends,
        text,
        arrays["sha256"].tobytes(),
        int(arrays["first_line"][0]),
        arrays["identity"].tobytes().decode("utf-8", "replace"),
    )


def remove_piece(work: Path, index: int) -> None:
    for path in piece_paths(work, index):
        path.unlink(missing_ok=True)


# ------------------------------------------------------------------ shards
def shard_name(shard: int, shards: int) -> str:
    return f"shard-{shard:05d}-of-{shards:05d}.h5"


def shard_attributes(
    identity: Dict[str, Any],
    model: Dict[str, str],
    layers: LayerChoice,
    dim: int,
    shard: Tuple[int, int],
    input_info: Dict[str, Any],
    counts: Tuple[int, int],
) -> Dict[str, Any]:
    """The attributes of a shard file, in a fixed order: ``format``; the
    model (``model`` as given, ``weights_sha256``, ``options_sha256``,
    ``options``: the JSON); the settings (``tokenization``, ``layers``,
    ``layer_indices``, ``mix``, ``dtype``, ``dim``, ``batch_size``,
    ``chunk_kb``, ``skip_blank``, and ``settings``: all of them as JSON, what
    a resumed run must match); the input (``input`` as given,
    ``input_sha256``, ``input_lines``, ``input_bytes``); ``shard``,
    ``shards``, ``sentences``, ``tokens``; ``spacy_elmo_version``."""
    from .. import __version__

    return {
        "format": FORMAT,
        "model": model["model"],
        "weights_sha256": model["weights_sha256"],
        "options_sha256": model["options_sha256"],
        "options": model["options"],
        "tokenization": identity["tokenization"],
        "layers": layers.name,
        "layer_indices": numpy.asarray(layers.indices, dtype=INDEX),
        "mix": layers.mix,
        "dtype": identity["dtype"],
        "dim": dim,
        "batch_size": identity["batch_size"],
        "chunk_kb": identity["chunk_kb"],
        "skip_blank": identity["skip_blank"],
        "settings": json.dumps(identity, sort_keys=True),
        "input": input_info["name"],
        "input_sha256": input_info["sha256"],
        "input_lines": input_info["lines"],
        "input_bytes": input_info["bytes"],
        "shard": shard[0],
        "shards": shard[1],
        "sentences": counts[0],
        "tokens": counts[1],
        "spacy_elmo_version": __version__,
    }


def assemble_shard(
    path: Path, work: Path, indices: Sequence[int], width: int, dim: int, dtype: numpy.dtype, attrs: Dict[str, Any]
) -> None:
    """Write the shard file ``path`` from the finished pieces of ``indices``
    (in that order), as ``path.partial`` renamed when complete. The same
    pieces give the same bytes."""
    import h5py

    pieces = [_required_piece(work, k, width, dim, dtype) for k in indices]
    n_sentences = sum(p.sentences for p in pieces)
    n_tokens = sum(p.tokens for p in pieces)
    n_text = sum(len(p.token_text) for p in pieces)
    partial = path.with_name(path.name + ".partial")
    check_space(
        path.parent,
        sum(p.vectors.nbytes + len(p.token_text) + 16 * (p.tokens + p.sentences) for p in pieces) + (1 << 20),
    )
    with h5py.File(partial, "w", libver="earliest") as out:
        for key, value in attrs.items():
            out.attrs[key] = value

        def dataset(name: str, shape: Tuple[int, ...], kind: numpy.dtype):
            return out.create_dataset(name, shape=shape, dtype=kind, track_times=False)

        vectors = dataset("vectors", (n_tokens, width, dim), dtype)
        offsets = dataset("offsets", (n_sentences + 1,), INDEX)
        lines = dataset("lines", (n_sentences,), INDEX)
        text = dataset("token_text", (n_text,), numpy.dtype(numpy.uint8))
        ends = dataset("token_ends", (n_tokens,), INDEX)
        dataset("chunks", (len(pieces),), INDEX)[:] = numpy.asarray([p.index for p in pieces], dtype=INDEX)
        chunk_offsets = numpy.zeros(len(pieces) + 1, dtype=INDEX)
        numpy.cumsum([p.sentences for p in pieces], out=chunk_offsets[1:])
        dataset("chunk_offsets", (len(pieces) + 1,), INDEX)[:] = chunk_offsets
        hashes = numpy.frombuffer(b"".join(p.sha256 for p in pieces), dtype=numpy.uint8).reshape(len(pieces), 32)
        dataset("chunk_sha256", (len(pieces), 32), numpy.dtype(numpy.uint8))[:] = hashes
        sentence, token, byte = 0, 0, 0
        offsets[0:1] = numpy.zeros(1, dtype=INDEX)
        for piece in pieces:
            s, t, b = piece.sentences, piece.tokens, len(piece.token_text)
            if s:
                offsets[sentence + 1 : sentence + s + 1] = piece.offsets[1:] + token
                lines[sentence : sentence + s] = piece.lines
            if t:
                ends[token : token + t] = piece.token_ends + byte
                _copy_rows(piece.vectors, vectors, token)
            if b:
                text[byte : byte + b] = piece.token_text
            sentence, token, byte = sentence + s, token + t, byte + b
    publish(partial, path)


def _required_piece(work: Path, index: int, width: int, dim: int, dtype: numpy.dtype) -> Piece:
    try:
        piece = read_piece(work, index, width, dim, dtype)
    except DamagedPiece as err:
        raise EmbedError(f"{err}: remove it and run the same command again to redo its chunk") from None
    if piece is None:
        raise EmbedError(f"{piece_paths(work, index)[1]}: missing (was the work folder changed while the run went?)")
    return piece


def _copy_rows(source: numpy.ndarray, target, start: int) -> None:
    row_bytes = max(1, source[:1].nbytes)
    step = max(1, COPY_BYTES // row_bytes)
    for begin in range(0, source.shape[0], step):
        block = numpy.asarray(source[begin : begin + step])
        target[start + begin : start + begin + block.shape[0]] = block
