"""The English biLM's learning curve on corpus v3: tokens read since the
shipped v5 (in ``pretrain-english``, 80% of them from the new sources)
against the registry held-out slice's perplexity, the new sources' held-out
perplexity, SemEval-2007 F1 (best layer) and F1 on SemCor's held-out
documents (``split-semcor``: centroids from the other nine tenths; 23,204
instances against SemEval-2007's 455, so a change of a point is not noise),
every shipped version marked.

``measure EXPORT``: measures an exported biLM (``pretrain``'s ``export/``,
or the shipped model's directory) and records it as one point of
``--curve`` (a point of the same label is updated with what is measured),
``--run`` naming the run it comes from and ``--start`` the point that run
started from. ``plot``: draws the curve, a line per run from its start.
``rate RUN``: the run's reading speed between two steps, from its own
``tokens_per_s`` records (median) and ``tokens_seen`` (tokens an hour).
``verdict LABEL``: whether a point may ship over the last shipped version
(``common.ship_verdict``; ``ship_model.py --curve --point`` applies the same
rule and marks the point shipped).
"""
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import typer

from common import best_f1, curve_verdict, read_curve, sha256_of
from spacy_elmo.pretrain.perplexity import perplexity_parts
from spacy_elmo.pretrain.runlog import read_log

app = typer.Typer(add_completion=False, no_args_is_help=True)
CURVE = Path("metrics/english_curve.json")
SHIPPED = Path("../spacy_elmo/models/english")
#: A colour per run, in the order the runs first appear (cycled past the last).
RUN_COLOURS = ["tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
#: Least span of an F1 panel's axis, in points (SemEval-2007's standard error is about 2.3).
MIN_F1_SPAN = 8.0


def wsd_f1(export: Path, train: Path, test: Path, sense_index: Path) -> Dict:
    """F1 per layer on the test set, centroids from ``train``, by the
    package's ``wsd`` command (its centroid cache makes a second measurement
    of one model cheap)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "wsd.json"
        subprocess.run([sys.executable, "-m", "spacy_elmo", "wsd", "--model", str(export), "--train", str(train),
                        "--test", str(test), "--sense-index", str(sense_index), "--random-seeds", "0",
                        "--json", str(out), "--no-progress"], check=True)
        report = json.loads(out.read_text(encoding="utf-8"))
    return {str(layer): next(iter(scores.values()))["f1"] for layer, scores in report["layers"].items()}


@app.command()
def measure(
    export: Path = typer.Argument(..., help="An exported biLM directory (weights, options, vocab.txt, softmax.hdf5)"),
    label: str = typer.Option(..., help="The point's name (e.g. v5, or a run and step)"),
    tokens: int = typer.Option(..., help="Tokens read since the shipped v5 (the run's log: tokens_seen)"),
    shipped: Optional[str] = typer.Option(None, help="The version this export shipped as, if it did"),
    run: str = typer.Option("pretrain-english", help="The run the export comes from (a line of its own)"),
    start: Optional[str] = typer.Option(None, help="The label of the point the run started from (v5, or a branch)"),
    parts: str = typer.Option(
        "ppl,semeval,semcor,grown",
        help="What to measure (a point of the same label keeps what is not measured again); grown: the share of "
        "the vectors in the dimensions a model grown from the shipped width added",
    ),
    heldout: Path = typer.Option(Path("corpus/pretrain3/heldout.txt")),
    heldout_v3: Path = typer.Option(Path("corpus/pretrain3/heldout_v3.txt")),
    wsd_train: Path = typer.Option(Path("../../shared/wsd/semcor.data.xml.gz")),
    wsd_test: Path = typer.Option(Path("../../shared/wsd/semeval2007.data.xml")),
    semcor_split: Path = typer.Option(Path("assets/semcor_split"), help="`split-semcor`'s output"),
    sense_index: Path = typer.Option(Path("assets/wordnet/index.sense")),
    curve: Path = typer.Option(CURVE),
) -> None:
    wanted = set(parts.split(","))
    unknown = wanted - {"ppl", "semeval", "semcor", "grown"}
    if unknown:
        raise SystemExit(f"--parts: unknown {', '.join(sorted(unknown))} (ppl, semeval, semcor, grown)")
    points = read_curve(curve)
    point = next((p for p in points if p["label"] == label), {"label": label})
    if start is not None and not any(p["label"] == start for p in points):
        raise SystemExit(f"--start {start!r}: no point of that label in {curve}")
    needed = {"ppl": [heldout, heldout_v3], "semeval": [wsd_train, wsd_test, sense_index],
              "semcor": [semcor_split / "semcor_train.data.xml", semcor_split / "semcor_heldout.data.xml", sense_index]}
    missing = sorted({str(f) for part in wanted for f in needed.get(part, []) if not Path(f).exists()})
    if missing:
        raise SystemExit(f"missing before measuring: {', '.join(missing)} (`weasel run fetch-corpus`, "
                         "`fetch-sense-index` and `split-semcor` in project/ make them)")
    point.update(tokens=tokens, shipped=shipped, run=run, weights_sha256=sha256_of(export / "weights.hdf5"))
    if start is not None:
        point["start"] = start
    if "ppl" in wanted:
        old, new, _ = perplexity_parts(export, [[heldout], [heldout_v3]])
        point.update(heldout_ppl=round(old["ppl"], 2), heldout_v3_ppl=round(new["ppl"], 2))
    if "semeval" in wanted:
        f1 = wsd_f1(export, wsd_train, wsd_test, sense_index)
        point["semeval2007_f1"] = {k: round(v, 1) for k, v in f1.items()}
        point["best_layer"] = max((k for k in f1 if k != "mean"), key=lambda k: f1[k])
    if "semcor" in wanted:
        f1 = wsd_f1(export, semcor_split / "semcor_train.data.xml", semcor_split / "semcor_heldout.data.xml",
                        sense_index)
        point["semcor_heldout_f1"] = {k: round(v, 1) for k, v in f1.items()}
    if "grown" in wanted:
        width = json.loads((SHIPPED / "options.json").read_text(encoding="utf-8"))["lstm"]["projection_dim"]
        if json.loads((export / "options.json").read_text(encoding="utf-8"))["lstm"]["projection_dim"] > width:
            point["grown_share"] = grown_share(export, heldout_v3, width)
    points = [p for p in points if p["label"] != label] + [point]
    points.sort(key=lambda p: p["tokens"])
    curve.parent.mkdir(parents=True, exist_ok=True)
    curve.write_text(json.dumps(points, indent=1) + "\n", encoding="utf-8")
    typer.echo(json.dumps(point))


def grown_share(export: Path, text: Path, width: int, lines: int = 300) -> Dict[str, float]:
    """Per layer, the share of the vectors' squared norm that lies in the
    dimensions a grown model added (those past ``width`` in each direction),
    over the first ``lines`` lines of ``text``."""
    import numpy
    import spacy

    from spacy_elmo.bilm.model import BiLM

    model = BiLM.from_hdf5(export / "weights.hdf5", export / "options.json")
    half = model.options.projection_dim
    nlp = spacy.blank("en")
    with text.open(encoding="utf-8") as fin:
        texts = [line.strip() for _, line in zip(range(lines), fin) if line.strip()]
    sentences = [[t.text for t in doc][:64] for doc in nlp.pipe(texts)]
    vectors = numpy.concatenate(model.embed_sentences(sentences), axis=1)  # (L+1, tokens, 2 * half)
    added = numpy.r_[width:half, half + width : 2 * half]
    return {str(layer): round(float((v[:, added] ** 2).sum() / (v**2).sum()), 4) for layer, v in enumerate(vectors)}


@app.command()
def verdict(label: str = typer.Argument(..., help="A point's label"), curve: Path = typer.Option(CURVE)) -> None:
    """Whether the point may ship over the last shipped version: prints the
    reasons it may not and exits with 1, or says that it may."""
    _, _, shipped, reasons = curve_verdict(curve, label)
    if reasons:
        typer.echo(f"{label!r} does not ship over {shipped['label']!r}:\n  " + "\n  ".join(reasons))
        raise typer.Exit(1)
    typer.echo(f"{label!r} may ship over {shipped['label']!r}")


@app.command()
def plot(curve: Path = typer.Option(CURVE), out: Path = typer.Option(Path("../docs/img/english_curve.png"))) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = read_curve(curve)
    if not points:
        raise SystemExit(f"{curve}: no points; run `measure` first")
    by_label = {p["label"]: p for p in points}
    runs: Dict[str, List[Dict]] = {}
    for p in points:
        runs.setdefault(p.get("run", "pretrain-english"), []).append(p)
    for members in runs.values():
        starts = [p["start"] for p in members if p.get("start") in by_label]
        if starts:
            members.insert(0, by_label[starts[0]])
    panels = [("held-out perplexity, registry slice", lambda p: p.get("heldout_ppl")),
              ("held-out perplexity, new sources", lambda p: p.get("heldout_v3_ppl")),
              ("SemEval-2007 F1, best layer", lambda p: best_f1(p.get("semeval2007_f1"))),
              ("SemCor held-out documents F1, best layer", lambda p: best_f1(p.get("semcor_heldout_f1")))]
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    for ax, (title, value) in zip(axes, panels):
        for i, (name, members) in enumerate(runs.items()):
            colour = RUN_COLOURS[i % len(RUN_COLOURS)]
            have = [(p["tokens"] / 1e6, value(p)) for p in members if value(p) is not None]
            ax.plot([h[0] for h in have], [h[1] for h in have], marker="o", color=colour, label=name)
        for p in points:
            if p.get("shipped") and value(p) is not None:
                xi, yi = p["tokens"] / 1e6, value(p)
                ax.annotate(p["shipped"], (xi, yi), textcoords="offset points", xytext=(4, 6), color="tab:red")
                ax.plot([xi], [yi], marker="*", markersize=12, color="tab:red")
        ax.set_title(title, fontsize=10)
        low, high = ax.get_ylim()
        if "F1" in title and high - low < MIN_F1_SPAN:  # a tenth of a point must not fill the panel
            middle = (low + high) / 2
            ax.set_ylim(middle - MIN_F1_SPAN / 2, middle + MIN_F1_SPAN / 2)
        ax.set_xlabel("tokens read since v5 (millions)")
        ax.grid(alpha=0.3)
    if len(runs) > 1:
        axes[0].legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    typer.echo(f"wrote {out}")


def reading_rate(log: Path, first: int, last: int) -> Dict[str, object]:
    """Median ``tokens_per_s`` of the train records of steps ``first`` to
    ``last`` and, from the first and last of them (``tokens_seen``, the
    records' times), the tokens read an hour, checkpoints and evaluations
    included. The steps must lie within one leg of the run (no resume
    between them). A run begun again from step 0 appends a new ``start``
    record; what the log held before it belongs to the abandoned run and is
    not read."""
    records = read_log(log)
    starts = [i for i, r in enumerate(records) if r.get("event") == "start"]
    if starts:
        records = records[starts[-1]:]
    train = [r for r in records if r.get("event") == "train" and first <= r["step"] <= last]
    if len(train) < 2:
        raise SystemExit(f"{log}: fewer than two train records between steps {first} and {last}")
    begin, end = train[0], train[-1]
    resumed = [r["step"] for r in records if r.get("event") == "resume" and begin["step"] <= r["step"] < end["step"]]
    if resumed:
        raise SystemExit(f"{log}: the run was resumed at step {resumed[0]}, between steps {begin['step']} and "
                         f"{end['step']}: pick steps of one leg")
    per_second = (end["tokens_seen"] - begin["tokens_seen"]) / (end["time"] - begin["time"])
    return {"steps": f"{begin['step']}-{end['step']}", "records": len(train),
            "median_tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in train)),
            "tokens_per_hour": round(per_second * 3600)}


@app.command()
def rate(run: Path = typer.Argument(..., help="A pretraining output directory (its log.jsonl)"),
         first: int = typer.Option(0, help="First step"), last: int = typer.Option(10**9, help="Last step")) -> None:
    """A run's reading speed between two steps of one leg."""
    typer.echo(json.dumps(reading_rate(run / "log.jsonl", first, last)))


if __name__ == "__main__":
    app()
