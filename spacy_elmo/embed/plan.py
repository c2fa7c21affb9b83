"""Who embeds what: the input cut into chunks, chunks dealt to shards, and
the processes (``torchrun`` or ``--shard i/N``) that run the shards.

Chunks. The input is read a line at a time and cut into chunks of
consecutive lines: a chunk ends at the first line end after it holds
``chunk_kb`` KiB of text. Where the cuts fall depends on the text and
``chunk_kb`` only, so every process finds the same chunks, and chunk ``c``
goes to shard ``c % N``. A chunk is embedded as a whole (its sentences
sorted by length into batches), so the batches of a sentence, and with
them its vectors, do not depend on the number of shards.

Every process reads (and checks) the whole input, embedding only its own
chunks: reading is fast next to the biLM, and it lets each process check
the input's SHA-256 and the line numbers of its chunks with no
coordination.
"""

import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator, List, Optional

from .layout import EmbedError
from .lines import decode_line, raw_lines


@dataclass
class Chunk:
    """A chunk of the input: its index, its first line (0-based), the
    SHA-256 of its bytes, its size in bytes, and its lines (decoded; only
    for the chunks a process keeps)."""

    index: int
    first_line: int
    sha256: bytes
    nbytes: int
    lines: Optional[List[str]] = None


@dataclass
class Scan:
    """What reading the whole input found: counted as chunks go by."""

    lines: int = 0
    nbytes: int = 0
    digest: "hashlib._Hash" = field(default_factory=hashlib.sha256)


def chunks(stream: BinaryIO, where: str, chunk_bytes: int, keep, scan: Scan) -> Iterator[Chunk]:
    """The chunks of ``stream`` (see the module docstring), each line checked
    (:mod:`.lines`; every process checks every line, so all stop at the same
    bad line). ``keep(index)``: whether to return a chunk's lines. ``scan``
    is updated as lines are read."""
    index, first, size, digest, kept = 0, 0, 0, hashlib.sha256(), []
    for raw in raw_lines(stream, where):
        number = scan.lines + 1
        line = decode_line(raw, number, where)
        if keep(index):
            kept.append(line)
        scan.lines, scan.nbytes = number, scan.nbytes + len(raw)
        scan.digest.update(raw)
        digest.update(raw)
        size += len(raw)
        if size >= chunk_bytes:
            yield Chunk(index, first, digest.digest(), size, kept if keep(index) else None)
            index, first, size, digest, kept = index + 1, scan.lines, 0, hashlib.sha256(), []
    if size:
        yield Chunk(index, first, digest.digest(), size, kept if keep(index) else None)


# ------------------------------------------------------------------ world
@dataclass(frozen=True)
class World:
    """This process's place: shard ``rank`` of ``size``; ``local_rank`` and
    ``local_size`` on its machine (for the GPU and the thread count);
    ``distributed``: under torchrun with more than one process (a process
    group joins them)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    distributed: bool = False


def parse_shard(spec: str) -> World:
    """``--shard i/N``: shard ``i`` (0-based) of ``N``."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec)
    if not match or not 0 <= int(match[1]) < int(match[2]):
        raise EmbedError(f"--shard {spec!r}: give i/N with 0 <= i < N, e.g. --shard 0/4 ... --shard 3/4")
    return World(rank=int(match[1]), size=int(match[2]))


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    if not value.strip().isdigit():
        raise EmbedError(f"the environment variable {name}={value!r} is not a number (set by torchrun)")
    return int(value)


def detect_world(shard: Optional[str]) -> World:
    """``--shard`` if given; else torchrun's environment (``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``); else one process."""
    size = _env_int("WORLD_SIZE", 1)
    if shard is not None:
        if size > 1:
            raise EmbedError(
                f"--shard {shard} under torchrun (WORLD_SIZE={size}): torchrun already shards the work; drop --shard"
            )
        return parse_shard(shard)
    rank = _env_int("RANK", 0)
    if not 0 <= rank < max(size, 1):
        raise EmbedError(f"RANK={rank} is not below WORLD_SIZE={size}")
    local_rank = _env_int("LOCAL_RANK", 0)
    local_size = _env_int("LOCAL_WORLD_SIZE", 1)
    return World(rank, max(size, 1), local_rank, max(local_size, 1), distributed=size > 1)


def default_threads(world: World) -> int:
    """CPU threads for one process: the cores this process may use, shared
    among the processes of its machine."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // world.local_size)
