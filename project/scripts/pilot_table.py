"""The shape pilot of the English biLM: held-out perplexity of several
pretraining runs at equal tokens and at equal training time.

Each run is a ``pretrain`` output directory trained with the same corpus,
vocabulary, seed, batch size and schedule, so step ``k`` of every run has
seen the same windows. Wall time of a run on a shared machine says little,
so equal time is computed from a rate measured separately on a quiet
machine (``benchmarks/pretrain_speed.py``, one process a shape): given a
budget of ``T`` seconds, a shape that trains ``r`` tokens a second has seen
``r * T`` tokens, and its perplexity there is read off its own curve
(log-linear interpolation between evaluations).

    python scripts/pilot_table.py RUN_A RUN_B --rate 2400 --rate 1000 --budget-hours 0.5
"""
import json
import math
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import typer


def eval_curve(run: Path) -> List[Tuple[int, float]]:
    """(tokens seen, held-out perplexity) at every evaluation of a run, the
    last record of a step winning (a resumed run may repeat one)."""
    tokens_at: Dict[int, int] = {}
    ppl_at: Dict[int, float] = {}
    with (run / "log.jsonl").open(encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if record.get("event") == "train":
                tokens_at[record["step"]] = record["tokens_seen"]
            elif record.get("event") == "eval":
                ppl_at[record["step"]] = record["dev_ppl"]
    curve = []
    for step, ppl in sorted(ppl_at.items()):
        logged = [s for s in tokens_at if s <= step]
        if logged:
            last = max(logged)
            # tokens grow linearly between logged steps: scale to the eval step
            tokens = tokens_at[last] * step / last
            curve.append((int(tokens), ppl))
    return curve


def ppl_at_tokens(curve: List[Tuple[int, float]], tokens: float) -> Optional[float]:
    """Perplexity at ``tokens``, interpolated in log-log space; None outside the curve."""
    for (t0, p0), (t1, p1) in zip(curve, curve[1:]):
        if t0 <= tokens <= t1:
            w = (math.log(tokens) - math.log(t0)) / (math.log(t1) - math.log(t0))
            return math.exp((1 - w) * math.log(p0) + w * math.log(p1))
    if curve and curve[-1][0] == int(tokens):
        return curve[-1][1]
    return None


def main(
    runs: List[Path] = typer.Argument(..., help="pretrain output directories of the pilot"),
    rate: List[float] = typer.Option(..., help="quiet training tokens/s of each run's shape, in the order of RUNS"),
    budget_hours: List[float] = typer.Option([0.25, 0.5], help="training time budgets to compare at"),
) -> None:
    if len(rate) != len(runs):
        raise typer.BadParameter("give one --rate per run")
    curves = {run.name: eval_curve(run) for run in runs}
    steps = sorted({t for c in curves.values() for t, _ in c})
    print("| tokens seen | " + " | ".join(curves) + " |")
    print("|---|" + "---|" * len(curves))
    for tokens in steps:
        row = [ppl_at_tokens(c, tokens) for c in curves.values()]
        print(f"| {tokens:,} | " + " | ".join("" if p is None else f"{p:.1f}" for p in row) + " |")
    print()
    print("| training time | " + " | ".join(curves) + " |")
    print("|---|" + "---|" * len(curves))
    for hours in budget_hours:
        cells = []
        for (name, curve), r in zip(curves.items(), rate):
            tokens = r * hours * 3600
            p = ppl_at_tokens(curve, tokens)
            cells.append(f"{'-' if p is None else f'{p:.1f}'} ({tokens / 1e6:.2f}M tokens)")
        print(f"| {hours:g} h | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    typer.run(main)
