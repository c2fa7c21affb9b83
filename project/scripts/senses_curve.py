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
  gives step N and the tokens seen by then; a shipped model directory's ``history.jsonl`` gives its own.

``--random`` takes a ``benchmarks/senses_baseline.py --json`` file of the
same shape, so the table shows model - random (random weights do not depend
on the step: measure them once). Prints a Markdown table; ``--json`` keeps
the figures.
"""
import json
import re
from pathlib import Path
from typing import Dict, List, Optional

import typer

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
        return {k: last[k] for k in ("step", "tokens_seen") if k in last}
    return {}


def main(
    bilms: List[str] = typer.Argument(..., help="LABEL=DIR pairs (exported biLMs)"),
    bank: Path = typer.Option(REPO / "examples" / "bank.txt", help="The README demo's 16 bank sentences"),
    random: Optional[Path] = typer.Option(None, help="benchmarks/senses_baseline.py --json output of the same shape"),
    run: Optional[Path] = typer.Option(None, help="The pretraining run (its log.jsonl): steps and tokens seen for labels stepN"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the figures here"),
) -> None:
    from spacy_elmo.loading import load_bilm
    from spacy_elmo.senses import sense_eval

    baseline = json.loads(random.read_text(encoding="utf-8"))["random"] if random else None
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
    header = "| biLM | step | tokens | " + " | ".join(f"{m} L{l}" for m in METHODS for l in ("1", "2", "mix")) + \
        " | money query, L1 / L2 / mix (of 4) |"
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
        typer.echo(f"| {row['label']} | {row.get('step', '?')} | {tokens} | " + " | ".join(cells) + f" | {money} |")
    if json_out:
        json_out.write_text(json.dumps({"rows": rows, "random": baseline}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(main)
