"""Pretraining through blocks of tokenised slices, each block read once.

Each ``--block`` (a space-separated list of ``tokenise``'s ``.npz`` slices)
is one ``pretrain`` run of exactly one epoch (``max_steps`` = its windows /
``--batch-size``, the linear schedule reaching 0 at the block's end), from
the previous block's export (the first from ``--init``), in ``OUT/block-K``
(its ``export/`` the next block's ``--init``). ``--mix SLICE`` adds a slice to
every block (text the model has read before and must keep). This is the project's way of
continuing a biLM on new text (``english_next_slices``), done without a
watcher stopping each run at its epoch's end.

``--wait SECONDS``: wait up to that long for a block's slices to appear (for
slices that a copy to the machine brings later). ``--deadline MINUTES``:
stop the block in progress that many minutes after the start (as on
SIGTERM: a checkpoint), export it, and start no other. ``OUT/blocks.json`` records each block: its slices,
steps, tokens read and export, rewritten after every block.
"""
import json
import os
import signal
import time
from pathlib import Path
from typing import Dict, List, Optional

import typer

from common import epoch_steps, slice_windows
from spacy_elmo.pretrain import PretrainConfig, export, load_checkpoint, pretrain
from spacy_elmo.pretrain.checkpoint import checkpoint_path

app = typer.Typer(add_completion=False)


def wait_for(paths: List[Path], seconds: float) -> bool:
    """True once every slice exists; False after ``seconds``."""
    end = time.monotonic() + seconds
    while True:
        if all(p.exists() for p in paths):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(2.0)


@app.command()
def main(
    out: Path = typer.Option(..., "--out", "-o", help="Directory of the blocks' runs"),
    init: Path = typer.Option(..., help="The export the first block starts from"),
    block: List[str] = typer.Option(..., help="A block's slices, space-separated (repeat for each block)"),
    mix: List[Path] = typer.Option(
        [], help="A slice read in every block besides its own (text the model must keep, e.g. the registry sources)"),
    vocab: Path = typer.Option(..., help="The vocabulary (the init's)"),
    dev: Optional[Path] = typer.Option(
        None, help="Held-out text (or a slice) for the runs' own evaluations; none are held out of the blocks"),
    batch_size: int = typer.Option(256, help="Windows per step"),
    lr: float = typer.Option(5e-4),
    warmup_steps: int = typer.Option(200),
    max_tokens: int = typer.Option(64),
    seed: int = typer.Option(13, help="The first block's seed; block K uses seed + K"),
    device: str = typer.Option("cpu"),
    precision: str = typer.Option("bf16"),
    eval_every: int = typer.Option(1000),
    checkpoint_every: int = typer.Option(500),
    log_every: int = typer.Option(20),
    wait: float = typer.Option(0.0, help="Seconds to wait for a block's slices"),
    deadline: Optional[float] = typer.Option(None, help="Minutes after which the block in progress stops"),
) -> None:
    start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    # SIGTERM/SIGINT between blocks (or while one is read) ends the chain after
    # the block in hand; during a block's steps the trainer's own handler
    # takes it (a checkpoint, then the export below), which the callback
    # forwards it to when it came before the steps began.
    stop = {"requested": False, "forwarded": False}

    def on_signal(signum, frame) -> None:
        stop["requested"] = True

    def forward(step: int, record: Dict) -> None:
        if stop["requested"] and not stop["forwarded"]:
            stop["forwarded"] = True
            os.kill(os.getpid(), signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    done: List[Dict] = []
    previous = init
    for k, spec in enumerate(block):
        files = [Path(p) for p in spec.split()] + list(mix)
        left = None if deadline is None else deadline * 60 - (time.monotonic() - start)
        if stop["requested"] or (left is not None and left <= 0):
            break
        if not wait_for(files, wait if left is None else min(wait, left)):
            missing = ", ".join(str(p) for p in files if not p.exists())
            typer.echo(f"last export: {previous}")
            typer.echo(f"error: block {k}: slices missing (waited {wait:.0f} s at most): {missing}; the blocks "
                       f"before it are done (blocks.json)", err=True)
            raise typer.Exit(1)
        left = None if deadline is None else deadline * 60 - (time.monotonic() - start)
        steps = epoch_steps(sum(slice_windows(p) for p in files), batch_size, 1)
        run = out / f"block-{k}"
        config = PretrainConfig(
            train=[str(p) for p in files], output=str(run), init=str(previous), dev=[str(dev)] if dev else [],
            dev_fraction=0.0, vocab=str(vocab), max_tokens=max_tokens,
            batch_size=batch_size, max_steps=steps, lr=lr, warmup_steps=warmup_steps, seed=seed + k,
            log_every=log_every, eval_every=eval_every, checkpoint_every=checkpoint_every, device=device,
            precision=precision,
        )
        began = time.monotonic()
        stop["forwarded"] = False
        summary = pretrain(config, progress=False, callback=forward, time_limit=left)
        if summary.get("stopped"):
            export(run, run / "export")
        record = {
            "block": k, "slices": [p.name for p in files], "steps": int(summary["step"]), "epoch_steps": steps,
            "tokens": int(load_checkpoint(checkpoint_path(run))["tokens_seen"]),
            "seconds": round(time.monotonic() - began, 1), "stopped": bool(summary.get("stopped")),
            "dev": summary.get("dev"), "init": str(previous),
        }
        done.append(record)
        (out / "blocks.json").write_text(json.dumps(done, indent=1) + "\n", encoding="utf-8")
        typer.echo(json.dumps(record))
        previous = run / "export"
        if summary.get("stopped") or stop["requested"]:
            break
    typer.echo(f"last export: {previous}")


if __name__ == "__main__":
    app()
