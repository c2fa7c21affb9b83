"""The English biLM campaign's learning curve: held-out perplexity against
tokens seen, for one or more ``pretrain`` runs, with reference points (the
shipped models) and the targets drawn in.

    python scripts/campaign_curve.py RUN [RUN ...] --point "v1 (shipped):20557643:189.3" \
        --line "ship (-5%):179.8" --line "target:120" --plot ../docs/img/campaign_curve.png

Prints a Markdown table of every evaluation (tokens, held-out perplexity,
and the change per doubling of tokens between successive evaluations: the
slope that says whether more tokens still help) and, with ``--plot``, draws
the curves on log-log axes. Tokens are read from the runs' ``log.jsonl`` as
``pilot_table.py`` reads them.

A run that continued a committed snapshot (``pretrain --init DIR`` where
``DIR`` holds ``campaign_snapshot.py``'s ``snapshot.json`` and ``log.jsonl``)
counts its tokens from 0; its curve is drawn after the snapshot's, its
tokens shifted by the snapshot's ``tokens_seen``, so that one campaign is
one curve across machines. ``--after RUN=EARLIER`` says the same where the
``--init`` directory was another copy of EARLIER's weights (the shipped
model that EARLIER's snapshot became).
"""
import json
import math
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import typer

from pilot_table import eval_curve


def parse_point(text: str) -> Tuple[str, float, float]:
    try:
        label, tokens, ppl = text.rsplit(":", 2)
        return label, float(tokens), float(ppl)
    except ValueError:
        raise typer.BadParameter(f"--point {text!r}: give LABEL:TOKENS:PERPLEXITY") from None


def parse_line(text: str) -> Tuple[str, float]:
    try:
        label, ppl = text.rsplit(":", 1)
        return label, float(ppl)
    except ValueError:
        raise typer.BadParameter(f"--line {text!r}: give LABEL:PERPLEXITY") from None


def chained_curve(run: Path, earlier: Optional[Path] = None,
                  continued: Optional[Dict[Path, Path]] = None) -> List[Tuple[int, float]]:
    """The run's evaluations, after those of the run it continued, its tokens
    shifted by that run's: ``earlier`` (a snapshot or a run directory, named
    with ``--after`` when the run's ``--init`` was another copy of its
    weights, e.g. the shipped model), else the snapshot its ``--init``
    directory holds; a run that continued neither: its own curve. The
    earlier run is chained the same way (``continued``: every ``--after``),
    so that a campaign of several stages is one curve."""
    return _chain(run, earlier, continued or {})[0]


def tokens_trained(run: Path, default: int) -> int:
    """The tokens the run's last logged step had seen (a run stopped after
    its last evaluation trained on beyond it: the next stage continued from
    there); ``default`` when its log has no ``tokens_seen``."""
    seen = [json.loads(line).get("tokens_seen") for line in
            (run / "log.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    return max((int(t) for t in seen if t is not None), default=default)


def _chain(run: Path, earlier: Optional[Path], continued: Dict[Path, Path]) -> Tuple[List[Tuple[int, float]], int]:
    """(the chained curve, the tokens its own evaluations are shifted by)."""
    curve = eval_curve(run)
    if earlier is None:
        config = run / "config.json"
        init = json.loads(config.read_text(encoding="utf-8")).get("init") if config.is_file() else None
        if init and (Path(init) / "snapshot.json").is_file() and (Path(init) / "log.jsonl").is_file():
            earlier = Path(init)
    if earlier is None:
        return curve, 0
    before, shift = _chain(earlier, continued.get(earlier.resolve()), continued)
    snapshot = earlier / "snapshot.json"
    own = (int(json.loads(snapshot.read_text(encoding="utf-8"))["tokens_seen"]) if snapshot.is_file()
           else tokens_trained(earlier, max((t for t, _ in before), default=shift) - shift))
    offset = shift + own
    return [(t, p) for t, p in before if t <= offset] + [(t + offset, p) for t, p in curve], offset


def parse_after(text: str) -> Tuple[str, Path]:
    run, sep, earlier = text.partition("=")
    if not sep or not run or not earlier:
        raise typer.BadParameter(f"--after {text!r}: give RUN=EARLIER (RUN continued EARLIER's weights)")
    if not (Path(earlier) / "log.jsonl").is_file():
        raise typer.BadParameter(f"--after {text!r}: {earlier} has no log.jsonl (give a run or a snapshot)")
    return run, Path(earlier)


def per_doubling(curve: List[Tuple[int, float]]) -> List[Optional[float]]:
    """Relative change of perplexity per doubling of tokens between each
    evaluation and the one before it (None for the first)."""
    out: List[Optional[float]] = [None]
    for (t0, p0), (t1, p1) in zip(curve, curve[1:]):
        doublings = math.log2(t1 / t0) if t1 > t0 else 0.0
        out.append(None if doublings <= 0 else (p1 / p0) ** (1 / doublings) - 1)
    return out


def plain_log_ticks(axis, scale: float, suffix: str) -> None:
    """Label a log axis with plain numbers at 1, 2, 3 and 5 of each decade, in
    units of ``scale`` (matplotlib's default labels every minor tick as a power
    of ten, and they overlap)."""
    from matplotlib.ticker import FuncFormatter

    label = FuncFormatter(lambda v, _: f"{v / scale:g}{suffix}" if f"{v:.0e}"[0] in "1235" else "")
    axis.set_major_formatter(label)
    axis.set_minor_formatter(label)


def main(
    runs: List[Path] = typer.Argument(..., help="pretrain output directories"),
    point: List[str] = typer.Option([], help="a reference point LABEL:TOKENS:PERPLEXITY (repeatable)"),
    line: List[str] = typer.Option([], help="a horizontal line LABEL:PERPLEXITY (repeatable)"),
    plot: Optional[Path] = typer.Option(None, help="write the plot here (PNG)"),
    after: List[str] = typer.Option([], help="RUN=EARLIER: RUN continued EARLIER (a run or snapshot) with "
                                    "--init from another copy of its weights; drawn after it (repeatable)"),
) -> None:
    points = [parse_point(p) for p in point]
    continued = {Path(r).resolve(): e for r, e in map(parse_after, after)}
    lines = [parse_line(h) for h in line]
    curves = {}
    for run in runs:
        if not (run / "log.jsonl").is_file():
            raise typer.BadParameter(f"{run}: no log.jsonl (give a pretrain output directory)")
        curves[run.name] = chained_curve(run, continued.get(run.resolve()), continued)
    for name, curve in curves.items():
        print(f"{name}:\n\n| tokens seen | held-out ppl | change per doubling |\n|---|---|---|")
        for (tokens, ppl), slope in zip(curve, per_doubling(curve)):
            print(f"| {tokens / 1e6:.2f}M | {ppl:.1f} | {'' if slope is None else f'{100 * slope:+.1f}%'} |")
        print()
    if plot is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, curve in curves.items():
        if curve:
            ax.plot([t for t, _ in curve], [p for _, p in curve], marker=".", label=name)
    for label, tokens, ppl in points:
        ax.scatter([tokens], [ppl], marker="*", s=90, zorder=3, label=label)
    for label, ppl in lines:
        ax.axhline(ppl, linestyle="--", linewidth=0.8, color="grey")
        ax.annotate(label, (0.01, ppl), xycoords=("axes fraction", "data"), ha="left", va="bottom", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax.xaxis, 1e6, "M")
    plain_log_ticks(ax.yaxis, 1, "")
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("held-out perplexity (213,295 tokens)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", linewidth=0.3)
    fig.tight_layout()
    plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot, dpi=110)
    plt.close(fig)
    print(f"wrote {plot.name}")


if __name__ == "__main__":
    typer.run(main)
