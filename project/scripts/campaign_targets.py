"""Issue 29's targets along the English campaign: does each shipped version,
with more tokens seen, move the figures the issue asks for?

    python scripts/campaign_targets.py ../spacy_elmo/models/english \\
        --senses-curve campaign/senses_curve.json --labels v1@4100,v1,v2,v3,v4,v5 \\
        --plot ../docs/img/campaign_targets.png

For every shipped version in the model directory's ``history.jsonl`` (what
``ship_model.py`` writes, with ``--update-card``'s downstream figures):
tokens seen, held-out perplexity, the best contextual layer's sense margin
over random weights of the same shape (layers 1..L, nearest centroid or
1-NN, whichever is higher), the 1%-POS error cut against tok2vec, WNUT NER
and sentiment as ELMo minus tok2vec, and the README demo's money query
(money banks among the 4 uses nearest to it, the best layer; from
``senses_curve.py --json``, matched by tokens seen). Prints a Markdown table,
then, per figure, its least-squares slope per doubling of tokens over the
versions of the last shape (the earlier shapes are another model), and how
many doublings the target is away at that slope. ``--plot`` draws each
figure against tokens seen with its target.

NER "spreads overlap" compares mean +- standard deviation over seeds of the
two systems (``history.jsonl`` keeps means and deviations, not the seeds);
the plot's NER bars are the gain's deviation, sqrt(sd_elmo^2 + sd_tok2vec^2).
"""
import json
import math
from pathlib import Path
from typing import Annotated, Dict, List, Optional

import typer

POS = "POS (Brown), 1% of train"
NER = "NER (WNUT-2016), 100%"
SENTIMENT = "sentiment (rt-polarity), 100%"

# figure key -> (title, target, higher is better)
TARGETS = {
    "ppl": ("held-out perplexity", 120.0, False),
    "senses": ("sense margin over random weights (points)", 20.0, True),
    "pos_cut": ("1%-POS error cut vs tok2vec (%)", 35.0, True),
    "ner_gain": ("WNUT NER F1, ELMo - tok2vec", 5.0, True),
    "sentiment_gain": ("sentiment macro-F, ELMo - tok2vec", 0.0, True),
    "money": ("money query: money banks of 4", 3.0, True),
}


def read_history(model: Path) -> List[dict]:
    path = model / "history.jsonl"
    if not path.is_file():
        raise typer.BadParameter(f"{path}: not found (give a shipped model directory with history.jsonl)")
    return [json.loads(line) for line in path.read_text(encoding="utf8").splitlines() if line.strip()]


def senses_margin(senses: Optional[dict]) -> Optional[float]:
    if not senses or "layers" not in senses:
        return None
    margins = [100 * (m["model"] - m["random_mean"])
               for layer, methods in senses["layers"].items() if layer not in ("0", "mix")
               for m in methods.values()]
    return max(margins) if margins else None


def figures(entry: dict, banks: Dict[int, int]) -> dict:
    """One version's figures (None where not measured)."""
    down = entry.get("downstream") or {}
    row = {"tokens": entry["tokens_seen"], "ppl": entry["dev_ppl"], "parameters": entry.get("parameters"),
           "shipped": entry.get("shipped"), "senses": senses_margin(entry.get("senses")),
           "money": banks.get(entry["tokens_seen"])}
    if POS in down:
        base, elmo = down[POS]["baseline"]["mean"], down[POS]["elmo_tok2vec"]["mean"]
        row["pos_cut"] = 100 * (1 - (1 - elmo) / (1 - base))
    if NER in down:
        base, elmo = down[NER]["baseline"], down[NER]["elmo_tok2vec"]
        row["ner_gain"] = 100 * (elmo["mean"] - base["mean"])
        row["ner_overlap"] = elmo["mean"] - elmo["sd"] <= base["mean"] + base["sd"]
        row["ner"] = (100 * elmo["mean"], 100 * elmo["sd"], 100 * base["mean"], 100 * base["sd"])
    if SENTIMENT in down:
        row["sentiment_gain"] = 100 * (down[SENTIMENT]["elmo_tok2vec"]["mean"] - down[SENTIMENT]["baseline"]["mean"])
    return row


def read_banks(path: Optional[Path]) -> Dict[int, int]:
    """tokens seen -> the money query's best count over the layers."""
    if path is None:
        return {}
    rows = json.loads(path.read_text(encoding="utf8"))["rows"]
    return {row["tokens_seen"]: max(layer["money"] for layer in row["bank"].values())
            for row in rows if row.get("tokens_seen") and row.get("bank")}


def slope(points: List[tuple]) -> Optional[float]:
    """Least-squares slope of y against log2(x): change per doubling."""
    points = [(math.log2(x), y) for x, y in points if y is not None]
    if len({x for x, _ in points}) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def fmt(value: Optional[float], spec: str = ".1f") -> str:
    return "–" if value is None else format(value, spec)


def print_table(rows: List[dict]) -> None:
    print("| version | shipped | parameters | tokens seen | held-out ppl | senses margin | 1%-POS error cut (%) "
          "| NER F1: ELMo vs tok2vec (gain; spreads overlap?) | sentiment gain | money query (of 4) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        ner = "–"
        if "ner" in row:
            e, es, b, bs = row["ner"]
            ner = f"{e:.1f} ± {es:.1f} vs {b:.1f} ± {bs:.1f} ({row['ner_gain']:+.1f}; {'yes' if row['ner_overlap'] else 'no'})"
        print(f"| {row['label']} | {row['shipped']} | {row['parameters'] / 1e6:.1f}M | {row['tokens'] / 1e6:.1f}M "
              f"| {row['ppl']:.1f} | {fmt(row['senses'], '+.1f')} | {fmt(row.get('pos_cut'))} | {ner} "
              f"| {fmt(row.get('sentiment_gain'), '+.1f')} | {fmt(row['money'], 'd')} |")


def print_slopes(rows: List[dict]) -> None:
    last = [row for row in rows if row["parameters"] == rows[-1]["parameters"]]
    first, end = last[0], last[-1]
    print(f"\nPer doubling of tokens over the {len(last)} versions of the last shape "
          f"({first['tokens'] / 1e6:.0f}M to {end['tokens'] / 1e6:.0f}M tokens, "
          f"{math.log2(end['tokens'] / first['tokens']):.1f} doublings):\n")
    print("| figure | last version | target | change per doubling (all) | change per doubling (last two) "
          "| doublings to the target at the slope over all |")
    print("|---|---|---|---|---|---|")
    for key, (title, target, higher) in TARGETS.items():
        # perplexity falls by a ratio: fit 100 x its log, i.e. percent per doubling
        scale = (lambda v: 100 * math.log(v)) if key == "ppl" else (lambda v: v)
        values = [(row["tokens"], None if row.get(key) is None else scale(row[key])) for row in last]
        current = end.get(key)
        s_all = slope(values)
        s_two = slope(values[-2:])
        if current is None or s_all is None:
            away = "–"
        else:
            gap = scale(target) - scale(current)
            met = current <= target if not higher else current >= target
            if met:
                away = "met"
            elif s_all == 0 or (gap > 0) != (s_all > 0):
                away = "never (the slope points away)"
            else:
                away = f"{gap / s_all:.1f}"
        unit = "%" if key == "ppl" else ""
        print(f"| {title} | {fmt(current, '.1f')} | {target:g} | {fmt(s_all, '+.2f')}{unit} "
              f"| {fmt(s_two, '+.2f')}{unit} | {away} |")


def draw(rows: List[dict], plot: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig, axes = plt.subplots(2, 3, figsize=(11.5, 6.4))
    low, high = min(row["tokens"] for row in rows) / 1.4, max(row["tokens"] for row in rows) * 1.4
    ticks = [10 ** e * m for e in range(6, 12) for m in (1, 3) if low <= 10 ** e * m <= high]
    for ax, (key, (title, target, _)) in zip(axes.flat, TARGETS.items()):
        points = [(row["tokens"], row.get(key), row["label"]) for row in rows if row.get(key) is not None]
        if key == "ner_gain":
            errs = [math.hypot(row["ner"][1], row["ner"][3]) for row in rows if row.get(key) is not None]
            ax.errorbar([t for t, _, _ in points], [v for _, v, _ in points], yerr=errs, marker="o", capsize=3)
        else:
            ax.plot([t for t, _, _ in points], [v for _, v, _ in points], marker="o")
        for t, v, label in points:
            ax.annotate(label, (t, v), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.axhline(target, linestyle="--", linewidth=0.8, color="grey")
        ax.annotate(f"target {target:g}", (0.01, target), xycoords=("axes fraction", "data"), va="bottom", fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1e6:g}M"))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("tokens seen", fontsize=8)
        ax.grid(True, which="both", linewidth=0.3)
    fig.tight_layout()
    plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot, dpi=110)
    plt.close(fig)


def main(
    model: Annotated[Path, typer.Argument(help="The shipped model directory (history.jsonl)")],
    senses_curve: Annotated[Optional[Path], typer.Option(help="senses_curve.py --json output: the money query")] = None,
    labels: Annotated[Optional[str], typer.Option(help="Comma-separated names of the versions, oldest first")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Draw every figure against tokens seen here (PNG)")] = None,
) -> None:
    banks = read_banks(senses_curve)
    history = read_history(model)
    names = labels.split(",") if labels else [f"#{i}" for i in range(1, len(history) + 1)]
    if len(names) != len(history):
        raise typer.BadParameter(f"--labels: {len(names)} names for the {len(history)} versions in {model / 'history.jsonl'}")
    rows = [dict(figures(entry, banks), label=name) for entry, name in zip(history, names)]
    print_table(rows)
    print_slopes(rows)
    if plot is not None:
        draw(rows, plot)
        typer.echo(f"wrote {plot.name}", err=True)


if __name__ == "__main__":
    typer.run(main)
