"""Measure the words/s of already-trained runs again, with ``run_grid.py``'s
current speed function, and rewrite the ``speed`` field of their metrics.

    python scripts/remeasure_speed.py metrics training [--threads 1]

For every ``METRICS/<task>/<system>/f<pct>_s<seed>.json`` that has a speed
figure (the first seed of the largest fraction) and whose pipeline
``TRAINING/<task>/<system>/f<pct>_s<seed>/model-best`` is on this machine:
loads it, times it on the same test docs with the same docs/batches/batch
size/warm-up as recorded, and replaces ``speed`` (the figure it first
replaced is kept as ``speed_before``). Runs whose pipeline is missing are listed and left as
they are. Scores are not touched.
"""
import json
from pathlib import Path

import typer

from run_grid import CORPUS, speed


def main(
    metrics: Path = typer.Argument(..., help="run_grid.py's metrics directory"),
    training: Path = typer.Argument(..., help="run_grid.py's training directory"),
    corpus_dir: Path = typer.Option(Path("corpus"), help="Holds <corpus>/test.spacy"),
    threads: int = typer.Option(1, help="torch threads (0: PyTorch's default)"),
) -> None:
    import spacy
    import torch

    import spacy_elmo  # noqa: F401  (registers the factories)

    if threads > 0:
        torch.set_num_threads(threads)
    for path in sorted(metrics.glob("*/*/*.json")):
        task, system = path.parts[-3], path.parts[-2]
        if task not in CORPUS:
            continue
        run = json.loads(path.read_text(encoding="utf-8"))
        old = run.get("speed")
        if not old:
            continue
        model = training / task / system / path.stem / "model-best"
        if not model.exists():
            typer.echo(f"{path}: {model} missing, left as it is ({old['words_per_s']:,.0f} words/s, "
                       f"{old.get('method', 'batch mean')})")
            continue
        nlp = spacy.load(model)
        new = speed(nlp, corpus_dir / CORPUS[task] / "test.spacy", old["docs"], old["batches"],
                    old["warmup_epochs"], old["batch_size"])
        run.setdefault("speed_before", old)  # the first figure it replaced, kept across re-runs
        run["speed"] = new
        path.write_text(json.dumps(run, indent=1), encoding="utf-8")
        typer.echo(f"{path}: {old['words_per_s']:,.0f} -> {new['words_per_s']:,.0f} words/s "
                   f"(batch mean {new['words_per_s_batch_mean']:,.0f})")


if __name__ == "__main__":
    typer.run(main)
