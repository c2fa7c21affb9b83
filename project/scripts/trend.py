"""The perplexity trend: one task trained with biLMs of different quality.

    python scripts/trend.py step1250=DIR1 step2600=DIR2 shipped=../spacy_elmo/models/english \\
        --heldout corpus/pretrain2/heldout.txt --task pos --fraction 1 --seeds 0 -- --max-steps 1500 ...

For each ``LABEL=DIR`` (an exported biLM with ``vocab.txt`` and
``softmax.hdf5`` beside its weights, such as checkpoints along the shipped
model's training exported with ``python -m spacy_elmo export``):

1. its held-out perplexity on ``--heldout`` (``python -m spacy_elmo
   perplexity``, the pretraining windows of 64 tokens) ->
   ``METRICS/LABEL/bilm.json``, with its training step and tokens seen when
   ``DIR/history.jsonl`` says so (a shipped model's directory; an export of
   a checkpoint has no record of them: name the step in its LABEL);
2. ``run_grid.py TASK --systems SYSTEM --fractions F --seeds S`` with that
   biLM, into ``TRAINING/LABEL`` and ``METRICS/LABEL`` (the arguments after
   ``--`` go to run_grid unchanged: the same budget as the main grid). A run
   of the main grid (``--main-metrics``) with the same weights (sha256), task,
   system, fraction, seed and budget is copied instead of trained again.

``report.py --trend METRICS`` turns the result into a table and a plot: task
score against the biLM's held-out perplexity.
"""
import json
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import typer

from common import portable_path
from common import sha256_of as sha256

SCRIPTS = Path(__file__).resolve().parent


def main(
    bilms: List[str] = typer.Argument(..., help="LABEL=DIR pairs, then -- and run_grid.py's budget options"),
    heldout: Path = typer.Option(..., help="Held-out text for the perplexity (never trained on)"),
    task: str = typer.Option("pos", help="pos | ner | sentiment"),
    system: str = typer.Option("elmo_tok2vec", help="The ELMo system to train"),
    fraction: str = typer.Option("1", help="Percentage of the training data"),
    seeds: str = typer.Option("0", help="Comma-separated seeds"),
    metrics_dir: Path = typer.Option(Path("metrics/trend"), help="Where bilm.json and the runs' metrics go, per label"),
    training_dir: Path = typer.Option(Path("training/trend"), help="Where the runs train, per label"),
    main_metrics: Path = typer.Option(Path("metrics"), help="The main grid's metrics: matching runs are reused"),
) -> None:
    pairs = [b for b in bilms if "=" in b]
    grid_args = [b for b in bilms if "=" not in b]
    if not pairs:
        raise typer.BadParameter("give at least one LABEL=DIR")
    for pair in pairs:
        label, directory = pair.split("=", 1)
        directory = Path(directory)
        weights, options = directory / "weights.hdf5", directory / "options.json"
        out = metrics_dir / label
        out.mkdir(parents=True, exist_ok=True)
        info_path = out / "bilm.json"
        digest = sha256(weights)
        info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
        if info.get("weights_sha256") != digest:
            from spacy_elmo.pretrain.perplexity import perplexity

            typer.echo(f"[{label}] held-out perplexity of {directory} on {heldout} ...")
            info = {"label": label, "dir": portable_path(directory), "weights_sha256": digest,
                    "heldout": portable_path(heldout),
                    **perplexity(directory, [heldout])}
            history = directory / "history.jsonl"
            if history.exists():
                last = [json.loads(line) for line in history.read_text(encoding="utf-8").splitlines() if line.strip()][
                    -1
                ]
                info.update({k: last[k] for k in ("step", "tokens_seen") if k in last})
            info_path.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        typer.echo(f"[{label}] held-out perplexity {info['ppl']:.1f}")
        reuse_matching_runs(main_metrics, out, task, system, digest, grid_args)
        command = [sys.executable, str(SCRIPTS / "run_grid.py"), task, "--systems", system, "--fractions", fraction,
                   "--seeds", seeds, "--elmo-weights", str(weights), "--elmo-options", str(options),
                   "--training-dir", str(training_dir / label), "--metrics-dir", str(out), *grid_args]
        subprocess.run(command, check=True)


def reuse_matching_runs(
    main_metrics: Path, out: Path, task: str, system: str, digest: str, grid_args: List[str]
) -> None:
    """Copy the main grid's runs of this biLM (same weights, task, system and
    budget) into the trend, so run_grid skips them."""
    budget = {}
    for key in ("max_steps", "eval_frequency", "patience"):
        flag = "--" + key.replace("_", "-")
        if flag in grid_args:
            budget[key] = int(grid_args[grid_args.index(flag) + 1])
    for path in sorted((main_metrics / task / system).glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        same_budget = all(run.get("budget", {}).get(k) == v for k, v in budget.items())
        if _weights_of(run) == digest and same_budget:
            target = out / task / system / path.name
            # absent, or a record of other weights under this label (an earlier biLM's)
            if not target.exists() or _weights_of(json.loads(target.read_text(encoding="utf-8"))) != digest:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
                typer.echo(f"reused {path}")


def _weights_of(run: dict) -> Optional[str]:
    return run.get("provenance", {}).get("elmo_weights_sha256")


if __name__ == "__main__":
    typer.run(main)
