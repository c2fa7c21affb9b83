"""A committed snapshot of a long pretraining run, so that the run can go on
from git when its machine, and with it the run's checkpoints, is gone.

    python scripts/campaign_snapshot.py RUN campaign/en2

Writes into the target directory (replacing what a previous snapshot left):

* ``weights.hdf5``, ``softmax.hdf5``, ``options.json``, ``vocab.txt``: the
  run's last checkpoint as ``spacy_elmo export`` writes it, with every
  dataset stored as float16 (half the size; the readers cast to float32),
  which is what ``pretrain --init`` continues from;
* ``log.jsonl``: the run's log up to the checkpoint's step, every training
  and evaluation record (the learning curve; ``campaign_curve.py`` reads the
  directory as a run);
* ``snapshot.json``: step, tokens seen, the last held-out evaluation, and
  the run's settings with no path of the machine.

A snapshot is not a checkpoint: the optimizer's state and the position in
the learning-rate schedule are not in it. Continuing from one (``pretrain
... --init DIR``) restarts Adam's moments and the schedule (warm-up, then
the decay to the new ``--max-steps``), and the new run counts tokens from
0 (add ``snapshot.json``'s ``tokens_seen``). Float16 storage rounds each
weight to 11 significant bits; ``--check TEXT`` measures what that costs
in held-out perplexity against the float32 export (written to
``snapshot.json``: a snapshot's step rarely has an evaluation in the log).
"""
import json
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Tuple

import h5py
import numpy
import typer

from portable_paths import portable_config

FILES = ("weights.hdf5", "softmax.hdf5", "options.json", "vocab.txt")


def to_float16(source: Path, target: Path) -> None:
    """Copy an hdf5 file, floating-point datasets as float16, attributes kept."""
    with h5py.File(source, "r") as fin, h5py.File(target, "w") as fout:
        for key, value in fin.attrs.items():
            fout.attrs[key] = value

        def copy(name: str, obj) -> None:
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                if data.dtype.kind == "f":
                    data = data.astype(numpy.float16)
                out = fout.create_dataset(name, data=data)
                for key, value in obj.attrs.items():
                    out.attrs[key] = value
            elif isinstance(obj, h5py.Group):
                fout.require_group(name)

        fin.visititems(copy)


def read_log(run: Path) -> list:
    records = []
    for line in (run / "log.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut off by a kill (pretrain --resume moves it aside)
    return records


def copy_checkpoint(run: Path, folder: Path, checkpoint: Optional[Path] = None) -> Tuple[Path, int, int]:
    """Copy RUN's last.pt (or ``checkpoint``) into ``folder`` first, as a run still
    training replaces last.pt while we read it; returns the copy, its step and its
    tokens seen."""
    from spacy_elmo.pretrain.checkpoint import checkpoint_path, load_checkpoint

    copy = folder / "pinned.pt"
    shutil.copyfile(checkpoint_path(run, checkpoint), copy)
    state = load_checkpoint(copy)
    return copy, int(state["step"]), int(state["tokens_seen"])


def main(
    run: Path = typer.Argument(..., help="the pretrain output directory"),
    target: Path = typer.Argument(..., help="where the snapshot goes (e.g. campaign/en2)"),
    check: Optional[Path] = typer.Option(None, help="held-out text: print the float32 and float16 perplexities"),
) -> None:
    from spacy_elmo.pretrain.export import export

    if not (run / "log.jsonl").is_file() or not (run / "config.json").is_file():
        raise typer.BadParameter(f"{run}: no log.jsonl and config.json (give a pretrain output directory)")
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint, step, tokens_seen = copy_checkpoint(run, Path(tmp))
        # The log as far as the checkpoint: what the snapshot's weights have seen.
        records = [r for r in read_log(run) if int(r.get("step", 0)) <= step]
        evals = [r for r in records if r.get("event") == "eval"]
        exported = export(run, Path(tmp) / "fp32", checkpoint)
        staged = Path(tmp) / "fp16"
        staged.mkdir()
        for name in FILES:
            if name.endswith(".hdf5"):
                to_float16(exported / name, staged / name)
            else:
                shutil.copyfile(exported / name, staged / name)
        measured = {}
        if check is not None:
            from spacy_elmo.pretrain.perplexity import perplexity

            for label, folder in (("float32", exported), ("float16", staged)):
                measured[label] = perplexity(folder, [check])["ppl"]
                typer.echo(f"{label}: held-out perplexity {measured[label]:.2f}")
        target.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            shutil.copyfile(staged / name, target / name)
    (target / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    summary = {
        "step": step,
        "tokens_seen": tokens_seen,
        "last_eval": evals[-1] if evals else None,
        "dtype": "float16",
        # --check: the perplexity of these weights on that text, float32 export and float16 files
        **({"check": {"text": check.name, "ppl": measured}} if measured else {}),
        "config": portable_config(config),
    }
    (target / "snapshot.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    typer.echo(f"{target}: step {summary['step']}, {summary['tokens_seen']:,} tokens seen")


if __name__ == "__main__":
    typer.run(main)
