"""Check the report's test scores with `spacy evaluate`, the command a user runs.

    python scripts/check_evaluate.py metrics training reports/evaluate_check.md --seeds 0

For every run in ``METRICS/<task>/<system>/f<pct>_s<seed>.json`` (the given
seeds), runs ``python -m spacy evaluate TRAINING/<task>/<system>/f<pct>_s<seed>/model-best
<test.spacy> --gold-preproc --output J`` in a
fresh process and compares its main score with the one ``run_grid.py``
recorded. Writes a markdown table and exits 1 if any differs by more than
``--tolerance`` (scores in [0, 1]).
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import typer

from common import scrub

CORPUS = {"pos": "brown", "ner": "wnut", "sentiment": "sentiment"}
MAIN_SCORE = {"pos": "tag_acc", "ner": "ents_f", "sentiment": "cats_macro_f"}


def main(
    metrics: Path = typer.Argument(..., help="run_grid.py's metrics directory"),
    training: Path = typer.Argument(..., help="run_grid.py's training directory"),
    output: Path = typer.Argument(..., help="Markdown table to write"),
    corpus_dir: Path = typer.Option(Path("corpus"), help="Holds <corpus>/test.spacy"),
    seeds: str = typer.Option("0", help="Comma-separated seeds to check"),
    tolerance: float = typer.Option(1e-6, help="Largest allowed difference of the main score"),
) -> None:
    wanted = {int(s) for s in seeds.split(",") if s.strip()}
    rows, bad = [], 0
    for path in sorted(metrics.glob("*/*/*.json")):
        task, system = path.parts[-3], path.parts[-2]
        if task not in CORPUS:
            continue
        run = json.loads(path.read_text(encoding="utf-8"))
        if run["seed"] not in wanted:
            continue
        model = training / task / system / path.stem / "model-best"
        if not model.exists():
            rows.append((task, system, path.stem, run["test"].get(MAIN_SCORE[task]), None, "model-best missing"))
            bad += 1
            continue
        with tempfile.TemporaryDirectory() as tmp:
            scores = Path(tmp) / "scores.json"
            command = [
                sys.executable,
                "-m",
                "spacy",
                "evaluate",
                str(model),
                str(corpus_dir / CORPUS[task] / "test.spacy"),
                "--gold-preproc",
                "--output",
                str(scores),
            ]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                rows.append(
                    (task, system, path.stem, run["test"].get(MAIN_SCORE[task]), None, scrub(done.stderr[-300:]))
                )
                bad += 1
                continue
            got = json.loads(scores.read_text(encoding="utf-8"))[MAIN_SCORE[task]]
        want = run["test"].get(MAIN_SCORE[task])
        same = want is not None and abs(got - want) <= tolerance
        bad += not same
        rows.append((task, system, path.stem, want, got, "same" if same else "DIFFERS"))
        typer.echo(f"{task} {system} {path.stem}: report {want:.4f}, spacy evaluate {got:.4f}")
    lines = ["| task | system | run | report | `spacy evaluate` | |", "|---|---|---|---|---|---|"]
    for task, system, name, want, got, verdict in rows:
        fmt = lambda v: "–" if v is None else f"{100 * v:.2f}"  # noqa: E731
        lines.append(f"| {task} | {system} | {name} | {fmt(want)} | {fmt(got)} | {verdict} |")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    typer.echo(f"wrote {output}: {len(rows)} runs, {bad} problems")
    raise typer.Exit(1 if bad else 0)


if __name__ == "__main__":
    typer.run(main)
