"""Word senses along a pretraining run: do more tokens make the biLM tell senses apart?

    python scripts/senses_curve.py step2750=DIR1 step3000=DIR2 ... \\
        [--run RUN] [--bank ../examples/bank.txt] [--random senses_random.json] [--json OUT]

For each ``LABEL=DIR`` (an exported biLM, e.g. a campaign checkpoint written by
``python -m spacy_elmo export RUN DIR --checkpoint FILE``):

* the packaged crossed-frame sense set (docs/senses.md), centroid and 1-NN,
  leave-one-frame-out, per layer (0..L and the mean of the layers);
* the README's bank demo: with each layer, how many of the 4 uses nearest to
  the money query are money banks and how many of the 4 nearest to the river
  query are river banks (``--bank``: lines 1-8 river banks, 9-16 money banks,
  the same file and queries as the README's main job);
* the step and tokens seen: a label ``stepN`` with ``--run RUN`` (the
  pretraining run the checkpoints come from; its log may still be growing)
  gives step N and the tokens seen by then; a shipped model directory's
  ``history.jsonl`` gives its own, a campaign snapshot's ``snapshot.json``
  (``campaign_snapshot.py``) its stage's; ``--tokens LABEL=N`` overrides both
  (a snapshot counts only its own stage's tokens: give the campaign's total);
* the held-out perplexity recorded beside the weights (``history.jsonl``'s
  last ``dev_ppl``, ``snapshot.json``'s float16 check, else its last
  evaluation), when there is one.

``--plot`` draws, against tokens seen, the held-out perplexity (left) and the
best contextual layer's margin over random weights by each method (right,
needs ``--random``), with ``--target`` as a line: whether the senses still
follow the perplexity as the campaign goes on.

``--random`` takes a ``benchmarks/senses_baseline.py --json`` file of the
same shape, so the table shows model - random (random weights do not depend
on the step: measure them once). Prints a Markdown table; ``--json`` keeps
the figures. ``--from-json`` redraws the table and plot from such a file
without loading any model.
"""
import json
import math
import re
from pathlib import Path
from typing import Annotated, Dict, List, Optional

import typer

from campaign_curve import plain_log_ticks
from campaign_snapshot import read_log
from portable_paths import portable_path
from registry_fetch import sha256_of

REPO = Path(__file__).resolve().parents[2]
RIVER_QUERY = "The boat drifted toward the muddy bank of the river ."
MONEY_QUERY = "He borrowed money from the bank to buy a house ."
METHODS = ("centroid", "1nn")


def bank_demo(bilm, bank: Path, layers: List) -> Dict[str, Dict[str, int]]:
    """Per layer: money banks among the money query's 4 nearest uses, river banks
    among the river query's (the README's main job, ``--k 4``)."""
    import spacy

    from spacy_elmo.senses import nearest_uses, uses

    tokenizer = spacy.blank("en").tokenizer
    lines = bank.read_text(encoding="utf-8").splitlines()
    if len(lines) != 16:
        raise typer.BadParameter(f"{bank}: expected 16 lines (8 river banks, then 8 money banks), found {len(lines)}")
    corpus = [[t.text for t in tokenizer(line)] for line in lines]
    out = {}
    for layer in layers:
        counts = {}
        for name, query, wanted in (("money", MONEY_QUERY, range(8, 16)), ("river", RIVER_QUERY, range(0, 8))):
            tokens = query.split()
            found = nearest_uses(bilm, tokens, uses(tokens, "bank")[0], corpus, layer=layer, k=4)
            counts[name] = sum(n.sentence in wanted for n in found)
        out[str(layer)] = counts
    return out


def run_info(label: str, directory: Path, run: Optional[Path]) -> dict:
    match = re.fullmatch(r"step(\d+)", label)
    if match and run is not None:
        step = int(match.group(1))
        records = read_log(run)
        seen = [r["tokens_seen"] for r in records if r.get("event") == "train" and r["step"] <= step]
        return {"step": step, "tokens_seen": max(seen)} if seen else {"step": step}
    history = directory / "history.jsonl"
    if history.is_file():
        last = json.loads(history.read_text(encoding="utf-8").splitlines()[-1])
        info = {k: last[k] for k in ("step", "tokens_seen") if k in last}
        if "dev_ppl" in last:
            info["heldout_ppl"] = last["dev_ppl"]
        return info
    snapshot = directory / "snapshot.json"
    if snapshot.is_file():
        snap = json.loads(snapshot.read_text(encoding="utf-8"))
        info = {k: snap[k] for k in ("step", "tokens_seen") if k in snap}
        ppl = snap.get("check", {}).get("ppl", {}).get("float16") or snap.get("last_eval", {}).get("dev_ppl")
        if ppl:
            info["heldout_ppl"] = ppl
        return info
    return {}


def parse_tokens(pairs: List[str]) -> Dict[str, int]:
    out = {}
    for pair in pairs:
        label, _, number = pair.partition("=")
        try:
            out[label] = int(float(number))
        except ValueError:
            raise typer.BadParameter(f"--tokens {pair!r}: give LABEL=N (tokens seen, e.g. 702.5e6)") from None
    return out


def best_margins(row: dict, baseline: dict) -> Dict[str, float]:
    """Per method, the best contextual layer's (1..L, not the mean) accuracy
    minus the random-weights mean on that layer, in points."""
    out = {}
    for method in METHODS:
        layers = [layer for layer in row["senses"][method] if layer not in ("0", "mix")]
        out[method] = max(100 * (row["senses"][method][layer] - baseline[method][layer]["mean"]) for layer in layers)
    return out


def margin_slopes(rows: List[dict], baseline: dict) -> Dict[str, float]:
    """Per method, the least-squares slope of the best-layer margin (points)
    against log2 of tokens seen: points gained per doubling of tokens (rows
    without tokens seen are left out; empty with fewer than two)."""
    points = [(math.log2(row["tokens_seen"]), best_margins(row, baseline)) for row in rows if row.get("tokens_seen")]
    if len({x for x, _ in points}) < 2:
        return {}
    mean_x = sum(x for x, _ in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    out = {}
    for method in METHODS:
        mean_y = sum(m[method] for _, m in points) / len(points)
        out[method] = sum((x - mean_x) * (m[method] - mean_y) for x, m in points) / spread
    return out


def draw(rows: List[dict], baseline: dict, target: float, plot: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((row for row in rows if "tokens_seen" in row), key=lambda row: row["tokens_seen"])
    if not rows:
        raise typer.BadParameter("--plot: no row has tokens seen (give --tokens LABEL=N)")
    tokens = [row["tokens_seen"] for row in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    with_ppl = [(t, row["heldout_ppl"], row["label"]) for t, row in zip(tokens, rows) if "heldout_ppl" in row]
    left.plot([t for t, _, _ in with_ppl], [p for _, p, _ in with_ppl], marker="o")
    for t, p, label in with_ppl:
        left.annotate(label, (t, p), textcoords="offset points", xytext=(4, 4), fontsize=8)
    if with_ppl:
        left.set_xscale("log")
        left.set_yscale("log")
        from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

        ppls = [p for _, p, _ in with_ppl]  # a narrow range: a labelled tick every 10
        left.yaxis.set_major_locator(FixedLocator(range(int(min(ppls) // 10 * 10), int(max(ppls) // 10 * 10) + 11, 10)))
        left.yaxis.set_major_formatter(ScalarFormatter())
        left.yaxis.set_minor_formatter(NullFormatter())
    else:
        left.text(0.5, 0.5, "no held-out perplexity recorded", ha="center", transform=left.transAxes)
    left.set_ylabel("held-out perplexity")
    for method in METHODS:
        right.plot(tokens, [best_margins(row, baseline)[method] for row in rows], marker="o",
                   label=f"best layer, {'nearest centroid' if method == 'centroid' else '1-NN'}")
    for t, row in zip(tokens, rows):
        right.annotate(row["label"], (t, best_margins(row, baseline)["centroid"]), textcoords="offset points",
                       xytext=(4, 4), fontsize=8)
    right.axhline(target, linestyle="--", linewidth=0.8, color="grey")
    right.annotate(f"target +{target:g}", (0.01, target), xycoords=("axes fraction", "data"), va="bottom", fontsize=8)
    right.set_ylim(bottom=0, top=max(target + 3, right.get_ylim()[1]))
    right.legend(fontsize=8, loc="lower right")
    right.set_xscale("log")
    right.set_ylabel("sense accuracy - random weights (points)")
    for ax in (left, right) if with_ppl else (right,):
        plain_log_ticks(ax.xaxis, 1e6, "M")
    for ax in (left, right):
        ax.set_xlabel("tokens seen")
        ax.grid(True, which="both", linewidth=0.3)
    fig.tight_layout()
    plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot, dpi=110)
    plt.close(fig)


def main(
    bilms: Annotated[Optional[List[str]], typer.Argument(help="LABEL=DIR pairs (exported biLMs)")] = None,
    bank: Annotated[Path, typer.Option(help="The README demo's 16 bank sentences")] = REPO / "examples" / "bank.txt",
    random: Annotated[Optional[Path], typer.Option(help="benchmarks/senses_baseline.py --json output of the same shape")] = None,
    run: Annotated[Optional[Path], typer.Option(help="The pretraining run (its log.jsonl): steps and tokens seen for labels stepN")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the figures here")] = None,
    tokens: Annotated[Optional[List[str]], typer.Option(help="LABEL=N: tokens seen by that biLM in the whole campaign (repeatable)")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Draw perplexity and sense margins against tokens seen here (PNG)")] = None,
    target: Annotated[float, typer.Option(help="The sense margin to draw as a line on the plot (points)")] = 20.0,
    from_json: Annotated[Optional[Path], typer.Option(help="Redraw the table (and --plot) from an earlier --json file")] = None,
) -> None:
    if from_json is not None and bilms:
        raise typer.BadParameter("give either LABEL=DIR pairs or --from-json, not both")
    if from_json is None and not bilms:
        raise typer.BadParameter("give LABEL=DIR pairs (exported biLMs) or --from-json FILE")
    saved = json.loads(from_json.read_text(encoding="utf-8")) if from_json is not None else None
    if saved is not None:
        baseline = saved["random"]
    else:
        baseline = json.loads(random.read_text(encoding="utf-8"))["random"] if random else None
    if plot is not None and baseline is None:  # refused before any model is loaded
        raise typer.BadParameter("--plot draws margins over random weights: give --random")
    rows = saved["rows"] if saved is not None else measure(bilms, bank, run)
    campaign_tokens = parse_tokens(tokens or [])
    unknown = set(campaign_tokens) - {row["label"] for row in rows}
    if unknown:
        raise typer.BadParameter(f"--tokens: no biLM labelled {', '.join(sorted(unknown))}")
    for row in rows:
        if row["label"] in campaign_tokens:
            row["tokens_seen"] = campaign_tokens[row["label"]]
    print_table(rows, baseline)
    if baseline is not None:
        for method, slope in margin_slopes(rows, baseline).items():
            typer.echo(f"best-layer margin ({method}) per doubling of tokens, least squares over the rows: {slope:+.2f} points")
    if json_out:
        json_out.write_text(json.dumps({"rows": rows, "random": baseline}, indent=1) + "\n", encoding="utf-8")
    if plot is not None:
        draw(rows, baseline, target, plot)
        typer.echo(f"wrote {plot.name}", err=True)


def measure(bilms: List[str], bank: Path, run: Optional[Path]) -> List[dict]:
    from spacy_elmo.loading import load_bilm
    from spacy_elmo.senses import sense_eval

    rows = []
    for pair in bilms:
        if "=" not in pair:
            raise typer.BadParameter(f"{pair!r}: give LABEL=DIR")
        label, directory = pair.split("=", 1)
        directory = Path(directory)
        bilm = load_bilm(str(directory), None, progress=False).eval()
        layers = list(range(bilm.num_layers)) + ["mix"]
        senses = {m: {str(r["layer"]): r["accuracy"] for r in sense_eval(bilm, None, method=m)} for m in METHODS}
        row = {"label": label, "dir": portable_path(directory), **run_info(label, directory, run),
               "weights_sha256": sha256_of(directory / "weights.hdf5"),
               "senses": senses, "bank": bank_demo(bilm, bank, layers)}
        rows.append(row)
        typer.echo(f"[{label}] done", err=True)
    return rows


def print_table(rows: List[dict], baseline: Optional[dict]) -> None:
    header = "| biLM | step | tokens | held-out ppl | " + \
        " | ".join(f"{m} L{l}" for m in METHODS for l in ("1", "2", "mix")) + " | money query, L1 / L2 / mix (of 4) |"
    typer.echo(header)
    typer.echo("|" + "---|" * (header.count("|") - 1))
    for row in rows:
        cells = []
        for m in METHODS:
            for layer in ("1", "2", "mix"):
                acc = 100 * row["senses"][m][layer]
                delta = f" ({acc - 100 * baseline[m][layer]['mean']:+.1f})" if baseline else ""
                cells.append(f"{acc:.1f}{delta}")
        money = " / ".join(str(row["bank"][layer]["money"]) for layer in ("1", "2", "mix"))
        tokens = f"{row['tokens_seen'] / 1e6:.2f}M" if "tokens_seen" in row else "?"
        ppl = f"{row['heldout_ppl']:.1f}" if "heldout_ppl" in row else "?"
        typer.echo(f"| {row['label']} | {row.get('step', '?')} | {tokens} | {ppl} | " + " | ".join(cells) + f" | {money} |")


if __name__ == "__main__":
    typer.run(main)
