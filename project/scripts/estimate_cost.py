"""Estimate the CPU time of the ``all`` workflow from measured per-word costs.

    python scripts/estimate_cost.py --elmo-weights W --elmo-options O --output reports/cost_estimate.md

For each system and task it builds the pipeline from ``configs/`` exactly
as ``spacy train`` does (``init_nlp``), then measures process CPU time
(user + sys, all threads) per word of:

- a training update on batches not seen before (``update_first``: for the
  ELMo systems this includes the biLM, which runs once per sentence thanks
  to the training-time output cache, ``spacy_elmo.training_cache.v1``);
- a training update on the same batches again (``update_again``: the ELMo
  cache hits; the transformer runs in full every time);
- prediction of unseen docs (``predict_first``: dev evaluation the first
  time, test evaluation and the speed benchmark) and of the same docs again
  (``predict_again``: later dev evaluations).

From those and the plan in ``project.yml`` (systems, fractions, seeds,
budget, corpus sizes) it adds up, per run: the words the budget trains on
(batch sizes compounding from 100 to 1000 words per step by 1.001, as in the
configs), of which the first pass over the slice costs ``update_first`` and
the rest ``update_again``; the dev evaluations; the test evaluation and the
speed benchmark; and a fixed start-up cost per run. All runs are assumed to
use their full ``max_steps`` (early stopping can only shorten them).

CPU time is the measure because it is what the runs need from a 2-core
machine whatever else runs on it; on an idle machine wall-clock time is
at most the CPU time (spaCy's own layers use one core, PyTorch both).
"""
import json
import time
from pathlib import Path
from typing import Dict, List, Optional

import typer

SCRIPTS = Path(__file__).resolve().parent

CORPUS = {"pos": "brown", "ner": "wnut", "sentiment": "sentiment"}
STARTUP_CPU_S = {"baseline": 10.0, "elmo_listener": 12.0, "elmo_tok2vec": 12.0, "transformer": 25.0}


def step_words(step: int) -> float:
    return min(1000.0, 100.0 * 1.001 ** step)


def budget_words(max_steps: int) -> float:
    return sum(step_words(s) for s in range(max_steps + 1))


def batches(examples, words: int, n: int):
    out, batch, size = [], [], 0
    for eg in examples:
        batch.append(eg)
        size += len(eg.reference)
        if size >= words:
            out.append(batch)
            batch, size = [], 0
            if len(out) == n:
                break
    return out


def measure(config_path: Path, overrides: Dict[str, str], train: Path, dev: Path, n_batches: int,
            predict_words: int) -> Dict[str, float]:
    from spacy.training import Corpus
    from spacy.training.initialize import init_nlp
    from spacy.util import load_config

    import spacy_elmo.component.elmo  # noqa: F401

    config = load_config(config_path, overrides=overrides, interpolate=False)
    nlp = init_nlp(config)
    from thinc.api import Adam

    optimizer = Adam(5e-5 if "transformer" in nlp.pipe_names else 0.001)
    train_egs = list(Corpus(train, gold_preproc=True)(nlp))
    dev_egs = list(Corpus(dev, gold_preproc=True)(nlp))
    todo = batches(train_egs, 1000, n_batches)
    result = {}
    for name in ("update_first", "update_again"):
        words = 0
        start = time.process_time()
        for batch in todo:
            nlp.update(batch, sgd=optimizer, drop=0.1, losses={})
            words += sum(len(eg.reference) for eg in batch)
        result[name] = (time.process_time() - start) / words
    docs, words = [], 0
    for eg in dev_egs:
        docs.append(eg.predicted)
        words += len(eg.predicted)
        if words >= predict_words:
            break
    for name in ("predict_first", "predict_again"):
        start = time.process_time()
        list(nlp.pipe([d.copy() for d in docs], batch_size=64))
        result[name] = (time.process_time() - start) / words
    return result


def corpus_words(path: Path) -> int:
    import spacy
    from spacy.tokens import DocBin

    return sum(len(d) for d in DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))


def plan_from_vars(v: Dict) -> List[Dict]:
    """The runs of ``all``, mirroring project.yml's train-* commands."""
    split = lambda s: [x for x in str(s).split(",") if x]  # noqa: E731
    runs = []
    for system in split(v["systems"]):
        for seed in split(v["large_data_seeds"]):
            runs.append(("pos", system, 100, seed))
        for seed in split(v["seeds"]):
            runs.append(("ner", system, 100, seed))
            runs.append(("sentiment", system, 100, seed))
    for system in split(v["efficiency_systems"]):
        for seed in split(v["large_data_seeds"]):
            runs.append(("pos", system, 10, seed))
        for seed in split(v["seeds"]):
            runs.append(("pos", system, 1, seed))
            runs.append(("ner", system, 10, seed))
            runs.append(("ner", system, 1, seed))
    return [{"task": t, "system": s, "fraction": f, "seed": seed} for t, s, f, seed in runs]


def run_cost(run: Dict, costs: Dict, v: Dict, sizes: Dict, first_seed: str) -> float:
    task, system, fraction = run["task"], run["system"], run["fraction"]
    c = costs[(system, task)]
    max_steps = int(v[f"{task}_max_steps"])
    eval_frequency = int(v[f"{task}_eval_frequency"])
    slice_words = sizes[task]["train"] * fraction / 100
    trained = budget_words(max_steps)
    first = min(trained, slice_words)
    cpu = first * c["update_first"] + (trained - first) * c["update_again"]
    n_evals = max_steps // eval_frequency + 1
    dev = sizes[task]["dev"]
    cpu += dev * c["predict_first"] + (n_evals - 1) * dev * c["predict_again"]
    cpu += sizes[task]["test"] * c["predict_first"]
    if fraction == 100 and run["seed"] == first_seed:
        speed_words = min(int(v["speed_docs"]), 10**9) * sizes[task]["words_per_doc"]
        speed_words = min(speed_words, sizes[task]["test"])
        bench = int(v["speed_batches"]) * int(v["speed_batch_size"]) * sizes[task]["words_per_doc"]
        cpu += (speed_words * int(v["speed_warmup"]) + bench) * c["predict_first"]
    return cpu + STARTUP_CPU_S.get(system, 10.0)


def main(
    elmo_weights: Path = typer.Option(..., help="biLM weights (random weights of the right shape will do)"),
    elmo_options: Path = typer.Option(..., help="biLM options JSON"),
    project: Path = typer.Option(Path("project.yml"), help="The project file (its vars give the plan)"),
    corpus_dir: Path = typer.Option(Path("corpus")),
    configs: Path = typer.Option(Path("configs")),
    transformer: Path = typer.Option(Path("assets/minilm")),
    systems: str = typer.Option("baseline,elmo_listener,elmo_tok2vec,transformer"),
    tasks: str = typer.Option("pos,ner,sentiment"),
    n_batches: int = typer.Option(4, help="Batches of ~1000 words timed per measurement"),
    predict_words: int = typer.Option(3000, help="Dev words timed per prediction measurement"),
    costs_json: Optional[Path] = typer.Option(None, help="Reuse measured costs from this JSON (skip measuring)"),
    output: Path = typer.Option(Path("reports/cost_estimate.md")),
    threads: int = typer.Option(1, help="PyTorch threads while measuring (1: the work itself, no spinning)"),
) -> None:
    import srsly
    import torch

    torch.set_num_threads(threads)

    v = srsly.read_yaml(project)["vars"]
    sizes = {}
    for task in tasks.split(","):
        data = corpus_dir / CORPUS[task]
        from spacy.tokens import DocBin

        n_docs = len(DocBin().from_disk(data / "test.spacy"))
        sizes[task] = {part: corpus_words(data / f"{part}.spacy") for part in ("train", "dev", "test")}
        sizes[task]["words_per_doc"] = sizes[task]["test"] / max(1, n_docs)
    if costs_json is not None and costs_json.exists():
        raw = json.loads(costs_json.read_text())
        costs = {tuple(k.split("/")): c for k, c in raw.items()}
    else:
        costs = {}
        for system in systems.split(","):
            for task in tasks.split(","):
                overrides = {"paths.train": str(corpus_dir / CORPUS[task] / "train.spacy"),
                             "paths.dev": str(corpus_dir / CORPUS[task] / "dev.spacy")}
                if system.startswith("elmo"):
                    overrides.update({"paths.elmo_weights": str(elmo_weights), "paths.elmo_options": str(elmo_options)})
                if system == "transformer":
                    overrides["paths.transformer"] = str(transformer)
                data = corpus_dir / CORPUS[task]
                costs[(system, task)] = measure(configs / f"{system}_{task}.cfg", overrides, data / "train.spacy",
                                                data / "dev.spacy", n_batches, predict_words)
                typer.echo(
                    f"{system}/{task}: "
                    + ", ".join(f"{k} {1000 * x:.3f} ms/word" for k, x in costs[(system, task)].items())
                )
        output.parent.mkdir(parents=True, exist_ok=True)
        output.with_suffix(".json").write_text(json.dumps({"/".join(k): c for k, c in costs.items()}, indent=1))
    plan = [r for r in plan_from_vars(v) if r["system"] in systems.split(",") and r["task"] in tasks.split(",")]
    first_seed = str(v["large_data_seeds"]).split(",")[0]
    totals: Dict = {}
    for run in plan:
        run["seed"] = str(run["seed"])
        cpu = run_cost(run, costs, v, sizes, first_seed if run["task"] == "pos" else str(v["seeds"]).split(",")[0])
        key = (run["system"], run["task"])
        totals[key] = totals.get(key, 0.0) + cpu
    lines = ["# CPU-time estimate of `weasel run all`", "",
             "Per-word costs measured by `scripts/estimate_cost.py` (process CPU time, ms per word):", "",
             "| system | task | update, first pass | update, again | predict, first | predict, again |",
             "|---|---|---|---|---|---|"]
    for (system, task), c in costs.items():
        lines.append(f"| {system} | {task} | {1000 * c['update_first']:.3f} | {1000 * c['update_again']:.3f} | "
                     f"{1000 * c['predict_first']:.3f} | {1000 * c['predict_again']:.3f} |")
    lines += [
        "",
        "Estimated CPU hours of the `all` plan (full `max_steps` every run):",
        "",
        "| system | " + " | ".join(tasks.split(",")) + " | total |",
        "|---|" + "---|" * (len(tasks.split(",")) + 1),
    ]
    grand = 0.0
    for system in systems.split(","):
        row = [totals.get((system, t), 0.0) / 3600 for t in tasks.split(",")]
        grand += sum(row)
        lines.append(f"| {system} | " + " | ".join(f"{x:.1f}" for x in row) + f" | {sum(row):.1f} |")
    lines += ["", f"Total: {grand:.1f} CPU hours, {len(plan)} runs."]
    output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    typer.echo("\n".join(lines))


if __name__ == "__main__":
    typer.run(main)
