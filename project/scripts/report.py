"""The report: tables and plots from the runs' metrics.

    python scripts/report.py metrics reports --title "ELMo vs tok2vec"

Reads ``METRICS/<task>/<system>/f<fraction>_s<seed>.json`` (written by
``run_grid.py``) and writes into OUTPUT:

- ``README.md``: per task, a table of the systems at 100% of the training
  data, or at the task's largest fraction where none ran 100% (test score
  mean ± standard deviation over seeds, n = seeds; the other scores; words/s
  of the speed benchmark, all words over all seconds; size on disk; training
  time, wall-clock and CPU); the sample-efficiency table (score per fraction);
  the learned ELMo mixes (softmax weights s_j and gamma per component and
  mix, mean over seeds at the main table's fraction);
- ``sample_efficiency.png``: test score against the fraction of training
  data, per task and system (error bars: standard deviation over seeds);
- ``mixes.png``: s_j per layer and gamma, per task, system and mix;
- ``curves.png``: dev score against step and against training seconds, for
  the first seed at the main table's fraction, per task and system;
- ``summary.json``: the aggregated numbers (per task, system and fraction)
  and ``elmo_weights_sha256``, the biLM weights of its ELMo runs;
- with ``--trend DIR`` (``trend.py``'s output): the task score against the
  biLM's held-out perplexity, a table and ``trend.png``.
"""
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional

import typer

from common import is_absolute, portable_path

TASKS = {
    "pos": ("Brown POS (tagger)", "tag_acc", "accuracy"),
    "ner": ("WNUT-2016 NER", "ents_f", "F1"),
    "sentiment": ("rt-polarity sentiment (textcat)", "cats_macro_f", "macro-F"),
}
SYSTEM_ORDER = ["baseline", "elmo_listener", "elmo_tok2vec", "transformer"]
SYSTEM_NAMES = {
    "baseline": "spaCy tok2vec",
    "elmo_listener": "ELMo listener (mix only)",
    "elmo_tok2vec": "ELMo [x; ELMo] + encoder",
    "transformer": "MiniLM-L6 (spacy-transformers)",
}
EXTRA_SCORES = {"ner": [("ents_p", "P"), ("ents_r", "R")], "sentiment": [("cats_micro_f", "accuracy")]}


def load(metrics: Path) -> List[dict]:
    runs = []
    for path in sorted(metrics.glob("*/*/*.json")):
        if path.parts[-3] not in TASKS:  # e.g. metrics/trend/<label>/bilm.json
            continue
        runs.append(json.loads(path.read_text(encoding="utf-8")))
    return runs


def mean_sd(values: List[float]):
    values = [v for v in values if v is not None]
    if not values:
        return None, None, 0
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), sd, len(values)


def fmt(mean, sd, n, scale=100.0, digits=1):
    if mean is None:
        return "–"
    if n > 1:
        return f"{mean * scale:.{digits}f} ± {sd * scale:.{digits}f} (n={n})"
    return f"{mean * scale:.{digits}f}"


def order(systems):
    return sorted(systems, key=lambda s: (SYSTEM_ORDER.index(s) if s in SYSTEM_ORDER else 99, s))


def aggregate(runs: List[dict]) -> Dict:
    """{task: {system: {fraction: [runs]}}}"""
    grid: Dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for run in runs:
        grid[run["task"]][run["system"]][run["fraction"]].append(run)
    return grid


def main_fraction(by_system: Dict) -> float:
    """The fraction a task's main table shows: 100% where any system ran it,
    else the largest fraction in the grid (the converged grid runs POS at 1%
    only)."""
    fractions = {f for runs in by_system.values() for f in runs}
    return 100.0 if 100.0 in fractions else max(fractions)


def task_table(task: str, by_system: Dict) -> List[str]:
    _, key, label = TASKS[task]
    fraction = main_fraction(by_system)
    extra = EXTRA_SCORES.get(task, [])
    head = ["system", f"test {label}"] + [name for _, name in extra] + [
        "words/s", "size (MB)", "of which biLM", "train time (min)", "train CPU (min)", "steps", "dev best"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for system in order(by_system):
        runs = by_system[system].get(fraction, [])
        if not runs:
            continue
        row = [SYSTEM_NAMES.get(system, system), fmt(*mean_sd([r["test"].get(key) for r in runs]))]
        for extra_key, _ in extra:
            row.append(fmt(*mean_sd([r["test"].get(extra_key) for r in runs])))
        timed = [r for r in runs if "speed" in r]
        if timed:
            r = timed[0]
            mark = "" if r["speed"].get("method") == "stream" else " †"
            row += [
                f"{r['speed']['words_per_s']:,.0f}{mark}",
                f"{r['size_bytes'] / 1e6:.1f}",
                f"{r['bilm_bytes'] / 1e6:.1f}",
            ]
        else:
            row += ["–", "–", "–"]
        row.append(fmt(*mean_sd([r["train_seconds"] for r in runs]), scale=1 / 60))
        row.append(fmt(*mean_sd([r.get("train_cpu_seconds") for r in runs]), scale=1 / 60))
        row.append(fmt(*mean_sd([r["steps"] for r in runs]), scale=1, digits=0))
        row.append(fmt(*mean_sd([r["dev_best"] for r in runs])))
        lines.append("| " + " | ".join(row) + " |")
    return lines


def stopped_note(by_system: Dict) -> List[str]:
    """A line naming the runs whose training was ended from outside before
    their budget or patience stopped them (``run_grid.py --score-stopped``)."""
    stopped = [f"{SYSTEM_NAMES.get(system, system)} {fraction:g}% seed {run['seed']} at step {run['stopped_early']:,}"
               for system in order(by_system) for fraction, runs in sorted(by_system[system].items())
               for run in sorted(runs, key=lambda r: r["seed"]) if run.get("stopped_early") is not None]
    if not stopped:
        return []
    return ["Stopped before their budget or patience ended them (the training process was ended from outside; "
            "the model-best they left was scored as it stood, `run_grid.py --score-stopped`; their train time is "
            "the training loop's wall time, their CPU time unknown): " + "; ".join(stopped) + ".", ""]


def efficiency_table(task: str, by_system: Dict) -> List[str]:
    fractions = sorted({f for runs in by_system.values() for f in runs})
    if len(fractions) < 2:
        return []
    lines = ["| system | " + " | ".join(f"{f:g}%" for f in fractions) + " |", "|---|" + "---|" * len(fractions)]
    key = TASKS[task][1]
    for system in order(by_system):
        cells = [fmt(*mean_sd([r["test"].get(key) for r in by_system[system].get(f, [])])) for f in fractions]
        lines.append(f"| {SYSTEM_NAMES.get(system, system)} | " + " | ".join(cells) + " |")
    return lines


def mix_rows(task: str, by_system: Dict) -> List[List[str]]:
    rows = []
    for system in order(by_system):
        runs = by_system[system].get(main_fraction(by_system), []) or by_system[system][max(by_system[system])]
        names = sorted({name for r in runs for name in r.get("mixes", {})})
        for name in names:
            ss = [r["mixes"][name]["s"] for r in runs if name in r.get("mixes", {})]
            gammas = [r["mixes"][name]["gamma"] for r in runs if name in r.get("mixes", {})]
            s_mean = [statistics.fmean(col) for col in zip(*ss)]
            rows.append([task, SYSTEM_NAMES.get(system, system), name, s_mean, statistics.fmean(gammas), len(ss)])
    return rows


def plots(grid: Dict, output: Path) -> List[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    # Sample efficiency.
    tasks = [t for t in TASKS if t in grid and len({f for s in grid[t].values() for f in s}) > 1]
    if tasks:
        fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            key = TASKS[task][1]
            for system in order(grid[task]):
                fractions = sorted(grid[task][system])
                stats = [mean_sd([r["test"].get(key) for r in grid[task][system][f]]) for f in fractions]
                ax.errorbar(fractions, [100 * m for m, _, _ in stats], yerr=[100 * s for _, s, _ in stats],
                            marker="o", capsize=3, label=SYSTEM_NAMES.get(system, system))
            ax.set_xscale("log")
            ax.set_xlabel("% of training data")
            ax.set_ylabel(f"test {TASKS[task][2]}")
            ax.set_title(TASKS[task][0])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(output / "sample_efficiency.png", dpi=110)
        plt.close(fig)
        written.append("sample_efficiency.png")
    # Mixes.
    rows = [row for task in TASKS if task in grid for row in mix_rows(task, grid[task])]
    if rows:
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows) + 2), 4))
        n_layers = max(len(row[3]) for row in rows)
        width = 0.8 / n_layers
        for j in range(n_layers):
            ax.bar([i + j * width for i in range(len(rows))], [row[3][j] if j < len(row[3]) else 0 for row in rows],
                   width=width, label=f"s_{j}")
        for i, row in enumerate(rows):
            ax.text(i + 0.4 - width / 2, 1.02, f"γ={row[4]:.2f}", ha="center", fontsize=7)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))])
        ax.set_xticklabels([f"{row[0]}\n{row[1]}\n{row[2]}" for row in rows], fontsize=6)
        ax.set_ylim(0, 1.12)
        ax.set_ylabel("softmax layer weight s_j")
        ax.set_title("Learned ELMo mixes (layer 0 = token encoder, 1..L = LSTM layers)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(output / "mixes.png", dpi=110)
        plt.close(fig)
        written.append("mixes.png")
    # Training curves.
    tasks = [t for t in TASKS if t in grid]
    if tasks:
        fig, axes = plt.subplots(2, len(tasks), figsize=(5.5 * len(tasks), 7), squeeze=False)
        for col, task in enumerate(tasks):
            for system in order(grid[task]):
                runs = grid[task][system].get(main_fraction(grid[task])) or grid[task][system][max(grid[task][system])]
                run = min(runs, key=lambda r: r["seed"])
                curve = run.get("curve", [])
                if not curve:
                    continue
                label = SYSTEM_NAMES.get(system, system)
                axes[0][col].plot(
                    [p["step"] for p in curve], [100 * p["score"] for p in curve], marker=".", label=label
                )
                axes[1][col].plot(
                    [p["seconds"] / 60 for p in curve], [100 * p["score"] for p in curve], marker=".", label=label
                )
            axes[0][col].set_title(f"{TASKS[task][0]}: dev {TASKS[task][2]}")
            axes[0][col].set_xlabel("step")
            axes[1][col].set_xlabel("training minutes (wall-clock)")
            for row in (0, 1):
                axes[row][col].grid(alpha=0.3)
                axes[row][col].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(output / "curves.png", dpi=110)
        plt.close(fig)
        written.append("curves.png")
    return written


def trend_section(trend: Path, grid: Dict, output: Path) -> List[str]:
    """Task score per biLM, ordered by held-out perplexity, with the main
    grid's baseline at the same task and fraction for reference."""
    rows = []
    for info_path in sorted(trend.glob("*/bilm.json")):
        info = json.loads(info_path.read_text(encoding="utf-8"))
        for run_dir in sorted(p for p in info_path.parent.glob("*/*") if p.is_dir()):
            runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(run_dir.glob("*.json"))]
            by_fraction = defaultdict(list)
            for run in runs:
                by_fraction[run["fraction"]].append(run)
            for fraction, rs in by_fraction.items():
                task, system = rs[0]["task"], rs[0]["system"]
                rows.append((info, task, system, fraction, mean_sd([r["test"].get(TASKS[task][1]) for r in rs])))
    if not rows:
        return []
    rows.sort(key=lambda row: (row[1], row[2], row[3], -row[0]["ppl"]))
    lines = ["## Task score against biLM quality", "",
             "The same system, task, data slice and budget with biLMs of different held-out perplexity "
             "(`python -m spacy_elmo perplexity` on the pretraining corpus's held-out text); "
             "the baseline row is spaCy's tok2vec on the same slice.", "",
             "| task | system | data | biLM | held-out perplexity | test score |", "|---|---|---|---|---|---|"]
    for info, task, system, fraction, (mean, sd, n) in rows:
        lines.append(f"| {task} | {SYSTEM_NAMES.get(system, system)} | {fraction:g}% | {info['label']} | "
                     f"{info['ppl']:.1f} | {fmt(mean, sd, n)} |")
    for task, fraction in sorted({(row[1], row[3]) for row in rows}):
        base = grid.get(task, {}).get("baseline", {}).get(fraction, [])
        if base:
            lines.append(f"| {task} | {SYSTEM_NAMES['baseline']} | {fraction:g}% | – | – | "
                         f"{fmt(*mean_sd([r['test'].get(TASKS[task][1]) for r in base]))} |")
    lines.append("")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One panel per task and slice that has a series of two or more biLMs.
    series = {}
    for task, system, fraction in sorted({(row[1], row[2], row[3]) for row in rows}):
        points = sorted((row[0]["ppl"], row[4]) for row in rows if row[1:4] == (task, system, fraction))
        if len(points) >= 2:
            series.setdefault((task, fraction), []).append((system, points))
    if not series:
        return lines
    fig, axes = plt.subplots(1, len(series), figsize=(5.5 * len(series), 3.8), squeeze=False)
    for ax, ((task, fraction), systems) in zip(axes[0], sorted(series.items())):
        for system, points in systems:
            ax.errorbar([p for p, _ in points], [100 * m for _, (m, _, _) in points],
                        yerr=[100 * sd for _, (_, sd, _) in points], marker="o", capsize=3,
                        label=SYSTEM_NAMES.get(system, system))
        base = grid.get(task, {}).get("baseline", {}).get(fraction, [])
        if base:
            mean = mean_sd([r["test"].get(TASKS[task][1]) for r in base])[0]
            ax.axhline(100 * mean, linestyle="--", color="grey", label=SYSTEM_NAMES["baseline"])
        ax.set_xscale("log")
        ax.invert_xaxis()
        ax.set_title(f"{TASKS[task][0]}, {fraction:g}% of train")
        ax.set_xlabel("biLM held-out perplexity (log scale; better to the right)")
        ax.set_ylabel(f"test {TASKS[task][2]}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output / "trend.png", dpi=110)
    plt.close(fig)
    return lines + ["![trend.png](trend.png)", ""]


def main(
    metrics: Path = typer.Argument(..., help="Directory of run metrics (run_grid.py's --metrics-dir)"),
    output: Path = typer.Argument(..., help="Where to write README.md and the plots"),
    title: str = typer.Option("ELMo vs tok2vec vs a small transformer", help="Report title"),
    note: str = typer.Option("", help="A line under the title (e.g. which biLM weights)"),
    trend: Optional[Path] = typer.Option(
        None, help="trend.py's metrics directory: add the score-against-perplexity section"
    ),
) -> None:
    runs = load(metrics)
    if not runs:
        raise SystemExit(f"no metrics under {metrics}")
    grid = aggregate(runs)
    output.mkdir(parents=True, exist_ok=True)
    written = plots(grid, output)
    lines = [f"# {title}", ""]
    if note:
        lines += [note, ""]
    weights = sorted({(r["provenance"].get("elmo_weights"), r["provenance"].get("elmo_weights_sha256"))
                      for r in runs if r.get("provenance", {}).get("elmo_weights")})
    for path, digest in weights:
        # run_grid writes the path portable already (relative to the repository's root):
        # resolving it again would make it relative to the working directory.
        shown = portable_path(path) if is_absolute(str(path)) else path
        lines.append(f"ELMo weights: `{shown}` (sha256 `{digest[:16]}…`)")
    budgets = sorted({(r["task"], json.dumps(r["budget"], sort_keys=True)) for r in runs})
    for task, budget in budgets:
        lines.append(f"Budget, {task}: `{budget}`")
    lines += ["", f"{len(runs)} runs. Scores ×100; ± is the standard deviation over seeds (n runs).", ""]
    speeds = [r["speed"] for r in runs if "speed" in r]
    if speeds:
        lines += ["words/s: all words / all seconds of `nlp.pipe` over the speed benchmark's stream "
                  "(run_grid.py's `speed`, one run per system and task)."
                  + (" † marks a figure from an older version of the benchmark, spaCy's mean of per-batch "
                     "rates (close to the stream figure for a pipeline that does not buffer docs; "
                     "the run's pipeline was not at hand to time again)."
                     if any(s.get("method") != "stream" for s in speeds) else "")
                  + (" Timed side by side in one process (`scripts/remeasure_speed.py --untrained`): each "
                     "system's pipeline built from its config and initialised (the trained pipeline's work: "
                     "training changes weight values, not shapes), every run timed in turn, "
                     f"median of {max(len(s.get('rounds', [])) for s in speeds)} rounds."
                     if any(s.get("pipeline") == "untrained" for s in speeds) else ""), ""]
    for task in TASKS:
        if task not in grid:
            continue
        lines += [f"## {TASKS[task][0]}", "", f"At {main_fraction(grid[task]):g}% of the training data:", ""]
        lines += task_table(task, grid[task]) + [""]
        lines += stopped_note(grid[task])
        eff = efficiency_table(task, grid[task])
        if eff:
            lines += [f"Sample efficiency (test {TASKS[task][2]} by % of the training data):", ""] + eff + [""]
    mixes = [row for task in TASKS if task in grid for row in mix_rows(task, grid[task])]
    if mixes:
        lines += [
            "## Learned ELMo mixes",
            "",
            "softmax(w) per biLM layer (0 = token encoder) and gamma; mean over seeds at the fraction of the task's "
            "main table. "
            "`name[1]` is a component's second mix (ELMo at the output).",
            "",
        ]
        n_layers = max(len(row[3]) for row in mixes)
        lines.append("| task | system | mix | " + " | ".join(f"s_{j}" for j in range(n_layers)) + " | gamma | n |")
        lines.append("|" + "---|" * (n_layers + 5))
        for task, system, name, s, gamma, n in mixes:
            lines.append(
                f"| {task} | {system} | {name} | " + " | ".join(f"{x:.3f}" for x in s) + f" | {gamma:.3f} | {n} |"
            )
        lines.append("")
    for png in written:
        lines += [f"![{png}]({png})", ""]
    if trend is not None and trend.exists():
        lines += trend_section(trend, grid, output)
    (output / "README.md").write_text("\n".join(lines), encoding="utf-8")
    summary = {task: {system: {str(f): {"n": len(rs), "test": mean_sd([r["test"].get(TASKS[task][1]) for r in rs])[:2]}
                               for f, rs in fr.items()} for system, fr in sy.items()} for task, sy in grid.items()}
    # Which biLM the ELMo figures come from (ship_model.py --update-card checks it).
    summary["elmo_weights_sha256"] = sorted({digest for _, digest in weights if digest})
    (output / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    typer.echo(f"wrote {output / 'README.md'} and {', '.join(written)}")


if __name__ == "__main__":
    typer.run(main)
