"""The English biLM's training on corpus v3, one block of unread slices at a
time, continued on any machine from what is committed.

A long CPU run outlives the machine it runs on only through its saved
state, so the campaign keeps one in the repository: ``campaign/english-v3/``
holds the last saved export (weights and softmax in float16, a starting
point for ``--init``, not a model to use) and ``state.json``: where it
started, the order in which corpus v3's slices are read, and every block
read so far (its slices, the steps of its one epoch, the steps and tokens
read, whether it was read to its end). Each block is its own ``pretrain``
run of one epoch over its slices plus a part of the registry corpus
(``tokens/base-J.npz``, so that the slice every perplexity is measured on is
not forgotten), its learning rate decaying to zero at the block's end.

    python scripts/english_campaign.py status
    python scripts/english_campaign.py run --minutes 120 --procs 2 --blocks 3
    python scripts/english_campaign.py save        # then commit campaign/

``run`` continues the block in hand: with ``--resume`` where its run
directory is still on the machine, and otherwise, where it was saved before
its end, from the saved export at the step it was saved (``pretrain
--start-step``: the same data order read on from there, a new optimizer);
then it starts the next block from the saved export. With ``--blocks N``
each block read to its end is saved and the next one started from it, until
the time limit. ``save`` exports the newest checkpoint of the block in hand
and records it, read to its end or not.

``run`` first tokenises what the block reads and the machine lacks (its
slices' ``train/NNN.txt`` and its part of the registry corpus, as
``tokenise_slices.py`` does), so that a fresh machine needs corpus v3's text
only, and a run of several blocks goes on past a block's end.

``run`` starts its training processes with glibc told to keep its heap
(``MALLOC_MMAP_MAX_=0``, ``MALLOC_TRIM_THRESHOLD_``; docs/pretraining.md,
Speed): faster steps for more resident memory. ``--release-heap`` leaves the
allocator as it is, and values already in the environment are kept.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import h5py
import numpy
import typer

from common import BASE_SOURCES, base_parts, epoch_steps, slice_windows, tokenise

HERE = Path(__file__).resolve().parent.parent
CAMPAIGN = HERE / "campaign" / "english-v3"
TOKENS = HERE / "corpus" / "pretrain3" / "tokens"
RUNS = HERE / "training" / "english-v3"
BASE = HERE / "corpus" / "pretrain2"
SHIPPED = "../spacy_elmo/models/english"

MAX_TOKENS = 64  # the window length every block is tokenised and trained with

app = typer.Typer(add_completion=False, no_args_is_help=True)


def initial_state() -> Dict[str, Any]:
    """Where the campaign starts: the shipped model (v5) grown to a projection
    of 192, slices 82-95 first (no earlier run read them), then 0-81."""
    return {
        "format": "spacy_elmo.english_campaign/1",
        "init": SHIPPED,
        "options": "configs/bilm_8m_p192.json",
        "vocab": f"{SHIPPED}/vocab.txt",
        "dev": "corpus/pretrain3/heldout.txt",
        "order": list(range(82, 96)) + list(range(0, 82)),
        "slices_per_block": 2,
        "base_parts": 8,
        "batch_size": 256,
        "lr": 5e-4,
        "warmup_steps": 50,
        "seed": 100,
        "blocks": [],
    }


def load_state(campaign: Path) -> Dict[str, Any]:
    path = campaign / "state.json"
    if not path.exists():
        return initial_state()
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise typer.BadParameter(f"{path} is not JSON ({err}); restore it from git") from None
    if state.get("format") != initial_state()["format"]:
        raise typer.BadParameter(f"{path} is not a campaign state ({state.get('format')!r})")
    return state


def tokens_read(state: Dict[str, Any]) -> int:
    """Tokens read by every saved block, registry parts included."""
    return sum(int(b["tokens"]) for b in state["blocks"])


def next_slices(state: Dict[str, Any]) -> List[int]:
    used = {n for b in state["blocks"] for n in b["slices"]}
    return [n for n in state["order"] if n not in used][: state["slices_per_block"]]


def block_files(block: Dict[str, Any], tokens: Path) -> List[Path]:
    return [tokens / f"{n:03d}.npz" for n in block["slices"]] + [tokens / f"{block['mix']}.npz"]


def has_checkpoint(run: Path) -> bool:
    return (run / "checkpoints" / "last.pt").exists()


def run_start_step(run: Path) -> int:
    """The step a block's run began at (its ``config.json``; 0 for a run
    begun at the block's start)."""
    path = run / "config.json"
    if not path.exists():
        return 0
    return int(json.loads(path.read_text(encoding="utf-8")).get("start_step", 0))


def current_block(state: Dict[str, Any], runs: Path) -> Dict[str, Any]:
    """The block ``run`` works on: the last saved one if it was not read to
    its end (resumed where its run is still here, otherwise continued from
    the saved export at the step it was saved), a started but unsaved one,
    or a new one. ``start_step`` is where the block's run begins or began."""
    blocks = state["blocks"]
    if blocks and not blocks[-1]["complete"]:
        run = runs / f"block-{blocks[-1]['block']}"
        if has_checkpoint(run):
            return dict(blocks[-1], resume=True, start_step=run_start_step(run))
        return dict(blocks[-1], resume=False, start_step=int(blocks[-1]["steps"]))
    k = len(blocks)
    slices = next_slices(state)
    if not slices:
        raise typer.BadParameter("every slice of corpus v3 has been read: the campaign is over")
    block = {"block": k, "slices": slices, "mix": f"base-{k % state['base_parts']}", "seed": state["seed"] + k}
    resume = has_checkpoint(runs / f"block-{k}")
    return dict(block, resume=resume, start_step=run_start_step(runs / f"block-{k}") if resume else 0)


def prepare_block(state: Dict[str, Any], block: Dict[str, Any], tokens: Path, base: Path) -> List[Path]:
    """Tokenise the block's files that ``tokens`` lacks: its slices from
    ``tokens/../train/NNN.txt``, its registry part from ``base``; returns
    the files made."""
    corpus, made = tokens.parent, []
    tokens.mkdir(parents=True, exist_ok=True)
    for n in block["slices"]:
        out = tokens / f"{n:03d}.npz"
        if out.exists():
            continue
        text = corpus / "train" / f"{n:03d}.txt"
        if not text.exists():
            raise typer.BadParameter(f"block {block['block']} reads slice {n}, and {text} is missing: build corpus "
                                     f"v3 first (scripts/fetch_books_wiki.py; docs/corpus.md)", param_hint="--tokens")
        tokenise([text], out, MAX_TOKENS)
        made.append(out)
    mix = tokens / f"{block['mix']}.npz"
    if not mix.exists():
        part = int(block["mix"].rpartition("-")[2])
        missing = [name for name in BASE_SOURCES if not (base / "train" / f"{name}.txt").exists()]
        if missing:
            raise typer.BadParameter(f"block {block['block']} mixes in {block['mix']}, and {base / 'train'} lacks "
                                     f"{missing[0]}.txt: fetch the registry corpus first "
                                     f"(scripts/fetch_pretrain_text.py)", param_hint="--base")
        parts = base_parts(base, corpus / "base", state["base_parts"])
        tokenise([parts[part]], mix, MAX_TOKENS)
        made.append(mix)
    return made


def native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU computes in bf16 natively (AVX512-BF16 or AMX); elsewhere
    bf16 is emulated and slower than fp32 (docs/pretraining.md, Mixed precision)."""
    try:
        flags = set(cpuinfo.read_text(encoding="utf-8", errors="replace").split())
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def pretrain_command(state: Dict[str, Any], block: Dict[str, Any], campaign: Path, tokens: Path, runs: Path,
                     procs: int, minutes: Optional[float], precision: str = "bf16") -> List[str]:
    files = block_files(block, tokens)
    missing = [str(p) for p in files if not p.exists()]
    if missing:
        raise typer.BadParameter(
            f"block {block['block']} needs {', '.join(missing)}: run `python scripts/tokenise_slices.py "
            f"corpus/pretrain3 --base corpus/pretrain2 --slices "
            f"{','.join(str(n) for n in block['slices'])} --base-parts {state['base_parts']}`")
    steps = epoch_steps(sum(slice_windows(p) for p in files), state["batch_size"], procs)
    start = int(block.get("start_step", 0))
    if start and steps != block["epoch_steps"]:
        raise typer.BadParameter(
            f"block {block['block']} was read in part with another number of processes ({block['epoch_steps']} "
            f"steps an epoch, {steps} with {procs}): continue it with the --procs it was read with, so that it "
            f"reads on in the same order", param_hint="--procs")
    # block 0 starts from the shipped model, resumed or not; a block continued from the saved export, from that
    first = block["block"] == 0 and not start
    init = state["init"] if first else str(campaign)
    launcher = [sys.executable, "-m"] if procs == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}", "-m"]
    argv = launcher + ["spacy_elmo", "pretrain", *map(str, files), "--dev", state["dev"],
                       "-o", str(runs / f"block-{block['block']}"), "--init", init,
                       "--vocab", state["vocab"], "--max-tokens", str(MAX_TOKENS),
                       "--batch-size", str(state["batch_size"]), "--max-steps", str(steps),
                       "--lr", str(state["lr"]), "--warmup-steps", str(state["warmup_steps"]),
                       "--eval-every", "1000", "--checkpoint-every", "50", "--log-every", "20",
                       "--threads", "1" if procs > 1 else "2", "--no-progress", "--seed", str(block["seed"]),
                       "--precision", precision]
    if first and state.get("options"):
        argv += ["--options", state["options"]]
    if start:
        argv += ["--start-step", str(start)]
    if block["resume"]:
        argv.append("--resume")
    if minutes:
        argv += ["--time-limit", str(minutes)]
    return argv


KEEP_HEAP = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(64 << 30)}


def child_environment(keep_heap: bool, environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The training processes' environment: ``environ`` (default: this
    process's) with glibc's heap kept unless the caller set these already."""
    env = dict(os.environ if environ is None else environ)
    if keep_heap:
        for name, value in KEEP_HEAP.items():
            env.setdefault(name, value)
    return env


def to_float16(source: Path, target: Path) -> None:
    """Copy an hdf5 file with its float32 datasets stored as float16."""
    with h5py.File(source, "r") as fin, h5py.File(target, "w") as fout:
        for key, value in fin.attrs.items():
            fout.attrs[key] = value

        def copy(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                if getattr(data, "dtype", None) is not None and data.dtype == numpy.float32:
                    data = data.astype(numpy.float16)
                out = fout.create_dataset(name, data=data)
                for key, value in obj.attrs.items():
                    out.attrs[key] = value

        fin.visititems(copy)


@app.command()
def status(campaign: Path = typer.Option(CAMPAIGN), runs: Path = typer.Option(RUNS)) -> None:
    """What has been read and what the next ``run`` does."""
    state = load_state(campaign)
    for b in state["blocks"]:
        done = "read" if b["complete"] else f"read in part ({b['steps']} of {b['epoch_steps']} steps)"
        typer.echo(f"block {b['block']}: slices {b['slices']} + {b['mix']}: {b['tokens']:,} tokens, {done}")
    read = {n for b in state["blocks"] for n in b["slices"]}
    typer.echo(f"tokens read since v5: {tokens_read(state):,}; slices begun {len(read)} of {len(state['order'])}")
    if len(read) < len(state["order"]):
        block = current_block(state, runs)
        if block["resume"]:
            how = "continues"
        elif block["start_step"]:
            how = f"continues (from the saved export, at step {block['start_step']})"
        else:
            how = "starts"
        typer.echo(f"next run {how} block {block['block']}: slices {block['slices']} + {block['mix']}")


@app.command()
def run(
    minutes: Optional[float] = typer.Option(None, help="Stop (with a checkpoint) after this many minutes in all"),
    blocks: int = typer.Option(1, min=1, help="Blocks to read: each one read to its end is saved and the next "
                                              "one started from it"),
    procs: int = typer.Option(2, min=1, help="Processes (torch.distributed), one thread each"),
    precision: str = typer.Option("auto", help="bf16, fp32, or auto: bf16 where the CPU has it natively"),
    keep_heap: bool = typer.Option(True, "--keep-heap/--release-heap",
                                   help="Start the training processes with glibc keeping its heap: faster steps, "
                                        "more memory (docs/pretraining.md)"),
    dry_run: bool = typer.Option(False, help="Print the command only"),
    campaign: Path = typer.Option(CAMPAIGN), tokens: Path = typer.Option(TOKENS), runs: Path = typer.Option(RUNS),
    base: Path = typer.Option(BASE, help="The registry corpus, whose parts the blocks mix in"),
) -> None:
    """Read the block in hand, or the next one, from the saved export."""
    if precision == "auto":
        precision = "bf16" if native_bf16() else "fp32"
    deadline = time.monotonic() + 60 * minutes if minutes else None
    for _ in range(blocks):
        left = None if deadline is None else round((deadline - time.monotonic()) / 60, 1)
        if left is not None and left < 1:
            break
        state = load_state(campaign)
        block = current_block(state, runs)
        if not dry_run:
            prepare_block(state, block, tokens, base)
        argv = pretrain_command(state, block, campaign, tokens, runs, procs, left, precision)
        env = child_environment(keep_heap)
        added = [f"{name}={env[name]}" for name in KEEP_HEAP if keep_heap and name not in os.environ]
        typer.echo(" ".join(added + argv))
        if dry_run:
            return
        code = subprocess.call(argv, cwd=HERE, env=env)
        if code:
            raise typer.Exit(code)
        if not save_block(campaign, runs)["complete"]:
            break  # stopped by the time limit: the block is continued by the next run


def save_block(campaign: Path, runs: Path, partial: bool = False) -> Dict[str, Any]:
    """Record the block in hand's newest checkpoint; export it into ``campaign``
    (float16) if the block was read to its end or ``partial``."""
    from spacy_elmo.pretrain import export, load_checkpoint
    from spacy_elmo.pretrain.checkpoint import checkpoint_path

    state = load_state(campaign)
    block = current_block(state, runs)
    run_dir = runs / f"block-{block['block']}"
    if not has_checkpoint(run_dir):
        last = state["blocks"][-1] if state["blocks"] else None
        if last is not None and last["complete"]:
            typer.echo(f"nothing to save: block {last['block']} was saved when it was read to its end, "
                       f"block {block['block']} is not begun")
            return last
        raise typer.BadParameter(f"{run_dir} has no checkpoint: nothing to save (run first)")
    checkpoint = load_checkpoint(checkpoint_path(run_dir))
    steps, epoch = int(checkpoint["step"]), int(checkpoint["config"]["max_steps"])
    record = {"block": block["block"], "slices": block["slices"], "mix": block["mix"], "seed": block["seed"],
              "epoch_steps": epoch, "steps": steps, "tokens": int(checkpoint["tokens_seen"]),
              "complete": steps >= epoch}
    if not (record["complete"] or partial):
        return record
    exported = export(run_dir, run_dir / "export")
    campaign.mkdir(parents=True, exist_ok=True)
    for name in ("weights.hdf5", "softmax.hdf5"):
        to_float16(exported / name, campaign / name)
    for name in ("options.json", "vocab.txt"):
        (campaign / name).write_bytes((exported / name).read_bytes())
    state["blocks"] = [b for b in state["blocks"] if b["block"] != block["block"]] + [record]
    (campaign / "state.json").write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
    typer.echo(f"saved block {record['block']} at step {steps} of {epoch} ({record['tokens']:,} tokens) -> "
               f"{campaign}; tokens read since v5: {tokens_read(state):,}")
    return record


@app.command()
def save(campaign: Path = typer.Option(CAMPAIGN), runs: Path = typer.Option(RUNS)) -> None:
    """Export the block in hand's newest checkpoint into ``campaign`` (float16)
    and record the block in ``state.json``, read to its end or not."""
    save_block(campaign, runs, partial=True)


if __name__ == "__main__":
    app()
