"""One process's part of ``embed -o``: read the input as chunks, embed the
chunks of its shard (skipping those a previous run finished), assemble its
shard file, and (the last step of a run) write the manifest.

Resume. Each finished chunk is a piece in the work folder, published
atomically (:mod:`.layout`); a run that is stopped at any moment (an error,
Ctrl-C, ``kill -9``, a lost machine) and started again with the same
command skips the chunks whose pieces exist and ends with the same files as
a run that was never stopped. What identifies a run (the model's SHA-256s,
tokenization, layers, dtype, batch size, chunk size, ``skip_blank``, the
number of shards) is kept in ``run.json`` in the work folder and in every
piece and shard; a command that differs in any of them, or an input whose
chunks differ from the finished ones, is refused with what changed.

Many processes. Under ``torchrun`` each rank is shard ``RANK`` of
``WORLD_SIZE``; when all shards are written (a gather over a ``gloo``
process group: no shared filesystem is needed for it) rank 0 writes the
manifest. With ``--shard i/N`` (processes started by anything else) each
writes its shard and a summary beside it; whichever finishes last writes
the manifest.
"""

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Type, Union

from ..bilm.threads import check_thread_count
from .layout import (
    FORMAT,
    ChunkText,
    DamagedPiece,
    EmbedError,
    PieceWriter,
    assemble_shard,
    check_dtype,
    parse_layers,
    read_piece,
    remove_piece,
    shard_attributes,
    shard_name,
    write_json,
)
from .plan import Chunk, Scan, World, chunks, default_threads
from .reader import MANIFEST, EmbeddingsFileError, ShardFile

Tokenize = Callable[[Iterable[str]], Iterator[List[str]]]
RUN_FILE = "run.json"
#: How long a rank waits for the others at the end (they may have hours of work left).
GATHER_TIMEOUT_S = 7 * 24 * 3600


@dataclass(frozen=True)
class EmbedSettings:
    """What a run stores and how it cuts the work (see docs/embedding.md)."""

    layers: str = "all"
    dtype: str = "float32"
    batch_size: int = 64
    chunk_kb: int = 1024
    skip_blank: bool = False


@dataclass
class EmbedResult:
    """What this process did: its shard file, its counts, the chunks it
    embedded now and those a previous run had finished, and the manifest if
    it wrote one."""

    path: Path
    sentences: int
    tokens: int
    embedded_chunks: int
    resumed_chunks: int
    manifest: Optional[Path] = None


@dataclass(frozen=True)
class Targets:
    shard: Path
    work: Path
    folder: Optional[Path]  # the output directory (None: one file)


def output_targets(output: Union[str, Path], world: World) -> Targets:
    """Where the shard, the work folder and the manifest go: ``output`` is a
    file when one process writes everything to a name that is not a
    directory (nor ends in ``/``); else a directory of ``shard-I-of-N.h5``
    files."""
    as_dir = world.size > 1 or Path(output).is_dir() or str(output).endswith(("/", os.sep))
    output = Path(output)
    if not as_dir:
        return Targets(output, output.with_name(output.name + ".work"), None)
    return Targets(output / shard_name(world.rank, world.size), output / ".work", output)


def place_model(bilm, world: World, device: str = "auto", threads: int = 0) -> str:
    """Put ``bilm`` on this process's device: ``auto`` is GPU ``LOCAL_RANK``
    where there is a GPU, else the CPU with ``threads`` threads (0: this
    machine's cores shared among its processes). Returns the device."""
    import torch

    if device == "auto":
        device = f"cuda:{world.local_rank % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu"
    if threads != 0:  # 0: the cores shared among this machine's processes
        try:
            check_thread_count(threads, "--threads")
        except ValueError as err:
            raise EmbedError(f"{err} (or 0: the cores shared among this machine's processes)") from None
    if device == "cpu":
        torch.set_num_threads(threads or default_threads(world))
    try:
        bilm.to(device)
    except (RuntimeError, AssertionError) as err:
        raise EmbedError(f"--device {device}: {err}") from None
    return device


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fin:
        for block in iter(lambda: fin.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_identity(
    model: Dict[str, str], tokenization: str, settings: EmbedSettings, layers: str, world: World
) -> Dict[str, Any]:
    """What a resumed run must match (see the module docstring)."""
    return {
        "format": FORMAT,
        "weights_sha256": model["weights_sha256"],
        "options_sha256": model["options_sha256"],
        "tokenization": tokenization,
        "layers": layers,
        "dtype": settings.dtype,
        "batch_size": settings.batch_size,
        "chunk_kb": settings.chunk_kb,
        "skip_blank": settings.skip_blank,
        "shards": world.size,
    }


_SETTING_NAMES = {
    "weights_sha256": "the model (weights SHA-256)",
    "options_sha256": "the model (options SHA-256)",
    "tokenization": "the tokenization (--lang/--whitespace)",
    "layers": "--layers",
    "dtype": "--dtype",
    "batch_size": "--batch-size",
    "chunk_kb": "--chunk-kb",
    "skip_blank": "--skip-blank",
    "shards": "the number of shards (--shard N or torchrun's world size)",
    "format": "the file format",
}


def _refuse_changes(where: Path, old: Dict[str, Any], new: Dict[str, Any]) -> None:
    changed = [key for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    if changed:
        what = "; ".join(f"{_SETTING_NAMES.get(k, k)} was {old.get(k)!r}, now {new.get(k)!r}" for k in changed)
        raise EmbedError(
            f"--output {where} holds a run with other settings ({what}). Run the command that started it to resume it, "
            "or write to a new --output (or remove this one)"
        )


def check_output(input_path: Optional[Path], output: Union[str, Path], world: World) -> Targets:
    """Where this process writes (:func:`output_targets`), checked before any
    work: not the input, in a directory that exists and can be written."""
    targets = output_targets(output, world)
    _check_paths(input_path, Path(output), targets)
    return targets


def _check_paths(input_path: Optional[Path], output: Path, targets: Targets) -> None:
    if input_path is not None:
        source = input_path.resolve()
        for target in (output, targets.shard):
            if target.resolve() == source:
                raise EmbedError(
                    f"--output {output} is the input file: give another path (the input would be overwritten)"
                )
    parent = (targets.folder or targets.shard).parent
    if not parent.is_dir():
        raise EmbedError(
            f"--output {output}: the directory {parent} does not exist; create it first (mkdir -p {parent})"
        )
    if targets.folder is not None and targets.folder.exists() and not targets.folder.is_dir():
        raise EmbedError(f"--output {output}: not a directory (several shards are written into a directory)")
    for folder in (parent, targets.folder):
        if folder is not None and folder.exists() and not os.access(folder, os.W_OK | os.X_OK):
            raise EmbedError(f"--output {output}: the directory {folder} is not writable")


def _claim_work(targets: Targets, output: Path, identity: Dict[str, Any]) -> None:
    """Make the work folder and its ``run.json``, or check the one there."""
    if targets.folder is not None:
        targets.folder.mkdir(exist_ok=True)
    targets.work.mkdir(exist_ok=True)
    record = targets.work / RUN_FILE
    if record.exists():
        try:
            old = json.loads(record.read_text(encoding="utf-8")[: 1 << 20])
        except ValueError:
            raise EmbedError(f"{record}: damaged; remove it (and the work folder) to start again") from None
        _refuse_changes(output, old if isinstance(old, dict) else {}, identity)
    else:
        write_json(record, identity)


class _Progress:
    """A bar per process (stderr): input bytes read (for the ETA) and this
    process's tokens a second."""

    def __init__(self, enabled: bool, total: Optional[int], world: World) -> None:
        from tqdm import tqdm

        desc = f"embedding {world.rank}/{world.size}" if world.size > 1 else "embedding"
        self.bar = tqdm(
            total=total,
            desc=desc,
            unit="B",
            unit_scale=True,
            disable=not enabled,
            file=sys.stderr,
            position=world.local_rank if world.size > 1 else None,
            dynamic_ncols=True,
        )
        self.tokens = 0
        self.start = time.perf_counter()

    def advance(self, nbytes: int, tokens: int = 0) -> None:
        self.tokens += tokens
        self.bar.update(nbytes)
        if tokens:
            rate = self.tokens / max(time.perf_counter() - self.start, 1e-9)
            self.bar.set_postfix_str(f"{rate:,.0f} tokens/s", refresh=False)

    def close(self) -> None:
        self.bar.close()


def embed_corpus(
    bilm,
    input_path: Optional[Path],
    output: Union[str, Path],
    *,
    model: Dict[str, str],
    tokenize: Tokenize,
    tokenization: str,
    settings: EmbedSettings = EmbedSettings(),
    world: World = World(),
    progress: bool = False,
    input_name: Optional[str] = None,
    stdin: Optional[BinaryIO] = None,
) -> EmbedResult:
    """Embed this process's shard of ``input_path`` (None: ``stdin``) into
    ``output`` (see the module docstring and docs/embedding.md).

    model: the biLM's identity (``model``, ``weights_sha256``,
        ``options_sha256``, ``options``), stored with the vectors.
    tokenize: lines -> token lists; ``tokenization`` names it."""
    if getattr(bilm, "stateful", False):
        raise EmbedError("embed -o needs a stateless biLM (each sentence from a zero state); this one is stateful")
    if settings.batch_size < 1 or settings.chunk_kb < 1:
        raise EmbedError(
            f"--batch-size and --chunk-kb must be >= 1, found {settings.batch_size} and {settings.chunk_kb}"
        )
    choice = parse_layers(settings.layers, bilm.num_layers)
    dtype = check_dtype(settings.dtype)
    dim = bilm.output_dim
    targets = check_output(input_path, output, world)
    output = Path(output)
    identity = run_identity(model, tokenization, settings, choice.name, world)
    identity_json = json.dumps(identity, sort_keys=True)
    finished = _finished_shard(targets, output, identity)
    _claim_work(targets, output, identity)
    input_name = input_name or (str(input_path) if input_path is not None else "<stdin>")
    where = f"--input {input_name}"
    if world.distributed:
        _join_group()
    total = input_path.stat().st_size if input_path is not None else None
    bar = _Progress(progress, total, world)
    scan = Scan()
    owned: List[int] = []
    embedded = resumed = 0
    stream = open(input_path, "rb") if input_path is not None else (stdin or sys.stdin.buffer)
    try:
        mine = (lambda c: False) if finished is not None else (lambda c: c % world.size == world.rank)
        for chunk in chunks(stream, where, settings.chunk_kb * 1024, mine, scan):
            if chunk.index % world.size != world.rank:
                bar.advance(chunk.nbytes)
                continue
            owned.append(chunk.index)
            if finished is not None:
                bar.advance(chunk.nbytes)
                continue
            piece = _finished_piece(targets.work, chunk, choice.width, dim, dtype, identity_json, output, where)
            if piece is not None:
                resumed += 1
                bar.advance(chunk.nbytes)
                continue
            tokens = _embed_chunk(bilm, chunk, tokenize, settings, choice, dtype, targets.work, identity_json, output)
            embedded += 1
            bar.advance(chunk.nbytes, tokens)
    finally:
        bar.close()
        if input_path is not None:
            stream.close()
    input_info = {"name": input_name, "sha256": scan.digest.hexdigest(), "lines": scan.lines, "bytes": scan.nbytes}
    if finished is not None:
        if finished.attrs.get("input_sha256") != input_info["sha256"]:
            raise EmbedError(
                f"--output {output}: {targets.shard.name} was embedded from another input (its SHA-256 differs from "
                f"{input_name}'s): write to a new --output (or remove this one)"
            )
    else:
        counts = _counts(targets.work, owned, choice.width, dim, dtype)
        attrs = shard_attributes(identity, model, choice, dim, (world.rank, world.size), input_info, counts)
        assemble = lambda: assemble_shard(targets.shard, targets.work, owned, choice.width, dim, dtype, attrs)  # noqa: E731
        _write_out(assemble, output, RuntimeError)  # h5py reports some failed writes as RuntimeError
    for index in owned:
        remove_piece(targets.work, index)
    shard = ShardFile(targets.shard)
    summary = {
        "file": targets.shard.name,
        "sentences": shard.attrs["sentences"],
        "tokens": shard.attrs["tokens"],
        "chunks": len(owned),
        "bytes": targets.shard.stat().st_size,
        "sha256": sha256_file(targets.shard),
    }
    manifest = None
    if targets.folder is None:
        (targets.work / RUN_FILE).unlink(missing_ok=True)
        _remove_empty(targets.work)
    else:
        manifest = _finish_run(targets, world, summary, identity, model, input_info, output)
    return EmbedResult(targets.shard, summary["sentences"], summary["tokens"], embedded, resumed, manifest)


def _finished_shard(targets: Targets, output: Path, identity: Dict[str, Any]) -> Optional[ShardFile]:
    """The shard file a previous run completed, if its settings match."""
    if not targets.shard.exists():
        return None
    try:
        shard = ShardFile(targets.shard)
    except EmbeddingsFileError as err:
        raise EmbedError(
            f"--output {output}: {targets.shard} exists and is not a finished shard of this run ({err}); "
            "give a new --output or remove it"
        ) from None
    try:
        old = json.loads(str(shard.attrs.get("settings", "")))
    except ValueError:
        old = {}
    _refuse_changes(output, old if isinstance(old, dict) else {}, identity)
    return shard


def _finished_piece(
    work: Path, chunk: Chunk, width: int, dim: int, dtype, identity_json: str, output: Path, where: str
):
    try:
        piece = read_piece(work, chunk.index, width, dim, dtype)
    except DamagedPiece as err:
        print(f"warning: {err}: its chunk is embedded again", file=sys.stderr)
        remove_piece(work, chunk.index)
        return None
    if piece is None:
        return None
    if piece.identity != identity_json:
        _refuse_changes(output, json.loads(piece.identity), json.loads(identity_json))
    if piece.sha256 != chunk.sha256 or piece.first_line != chunk.first_line:
        raise EmbedError(
            f"{where}, lines {chunk.first_line + 1}-{chunk.first_line + max(1, len(chunk.lines or []))}: the input "
            "changed "
            f"since the run in --output {output} embedded them. Give the input it was started with to resume, "
            "or write to a new --output"
        )
    return piece


def _embed_chunk(
    bilm,
    chunk: Chunk,
    tokenize: Tokenize,
    settings: EmbedSettings,
    choice,
    dtype,
    work: Path,
    identity_json: str,
    output: Path,
) -> int:
    from ..bilm.batching import iter_batches

    lines = list(range(chunk.first_line, chunk.first_line + len(chunk.lines or [])))
    tokens = list(tokenize(chunk.lines or []))
    if settings.skip_blank:
        kept = [i for i, t in enumerate(tokens) if t]
        lines, tokens = [lines[i] for i in kept], [tokens[i] for i in kept]
    text = ChunkText(chunk.index, chunk.first_line, chunk.sha256, lines, tokens)
    writer = _write_out(lambda: PieceWriter(work, text, choice.width, bilm.output_dim, dtype, identity_json), output)
    try:
        for rows, views in iter_batches(bilm, tokens, settings.batch_size):
            for row, view in zip(rows, views):
                writer.write(row, choice.apply(view, dtype))
        _write_out(writer.finish, output)
    except BaseException:
        writer.abort()
        raise
    return len(writer.ends)


def _write_out(step: Callable, output: Path, *also: Type[BaseException]):
    """``step()``; an operating-system error on the output (a full disk, a
    lost permission; or one of ``also``) becomes one line that says nothing
    finished is lost."""
    caught: Tuple[Type[BaseException], ...] = (OSError, *also)
    try:
        return step()
    except caught as err:
        reason = getattr(err, "strerror", None) or str(err).splitlines()[0]
        filename = getattr(err, "filename", None)
        raise EmbedError(
            f"--output {output}: cannot write ({reason}{': ' + str(filename) if filename else ''}). "
            "The chunks already finished are kept: fix this (free space, permissions) and run the same command "
            "again to resume"
        ) from None


def _counts(work: Path, owned: List[int], width: int, dim: int, dtype) -> Tuple[int, int]:
    sentences = tokens = 0
    for index in owned:
        piece = read_piece(work, index, width, dim, dtype)
        if piece is not None:
            sentences, tokens = sentences + piece.sentences, tokens + piece.tokens
    return sentences, tokens


def _remove_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


# ------------------------------------------------------------ many processes
def _join_group() -> None:
    import datetime

    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=GATHER_TIMEOUT_S))


def _finish_run(
    targets: Targets,
    world: World,
    summary: Dict[str, Any],
    identity: Dict[str, Any],
    model: Dict[str, str],
    input_info: Dict[str, Any],
    output: Path,
) -> Optional[Path]:
    """The manifest, once every shard is written (see the module docstring)."""
    assert targets.folder is not None
    path = targets.folder / MANIFEST
    if world.distributed:
        import torch.distributed as dist

        gathered: List[Any] = [None] * world.size
        dist.all_gather_object(gathered, {"summary": summary, "input": input_info})
        if world.rank == 0:
            _write_manifest(path, [g["summary"] for g in gathered], identity, model, gathered, output)
        dist.barrier()
        dist.destroy_process_group()
        return path if world.rank == 0 else None
    record = {"summary": summary, "input": input_info}
    write_json(targets.work / (targets.shard.name + ".json"), record)
    records = []
    for i in range(world.size):
        side = targets.work / (shard_name(i, world.size) + ".json")
        if not side.exists():
            return None  # another shard is still running: it writes the manifest
        try:
            records.append(json.loads(side.read_text(encoding="utf-8")[: 1 << 20]))
        except ValueError:
            raise EmbedError(f"{side}: damaged; run the shard {i}/{world.size} again to rewrite it") from None
    _write_manifest(path, [r["summary"] for r in records], identity, model, records, output)
    return path


def _write_manifest(
    path: Path,
    summaries: List[Dict[str, Any]],
    identity: Dict[str, Any],
    model: Dict[str, str],
    records: List[Dict[str, Any]],
    output: Path,
) -> None:
    inputs = {json.dumps(r["input"], sort_keys=True) for r in records}
    if len(inputs) > 1:
        raise EmbedError(
            f"--output {output}: the shards read different inputs ({len(inputs)} differ): give every process the "
            "same --input"
        )
    write_json(
        path,
        {
            "format": FORMAT,
            "model": {key: model[key] for key in ("model", "weights_sha256", "options_sha256")},
            "settings": identity,
            "input": records[0]["input"],
            "sentences": sum(s["sentences"] for s in summaries),
            "tokens": sum(s["tokens"] for s in summaries),
            "shards": summaries,
        },
    )
