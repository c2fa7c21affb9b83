"""Train and evaluate a grid of runs of one task: systems x data fractions x seeds.

    python scripts/run_grid.py pos --systems baseline,elmo_tok2vec --fractions 1,10 --seeds 0,1,2 \\
        --max-steps 3000 --eval-frequency 200 --patience 1000 \\
        --elmo-weights W.hdf5 --elmo-options O.json

Each run (``system``, ``fraction`` %, ``seed``):

1. the training slice: the whole train set at 100%; otherwise the first
   ``ceil(fraction% * n)`` docs of the train set shuffled with
   ``random.Random(seed)`` (so for one seed the slices are nested, 1% in
   10%, and each seed draws its own slice: the variance over seeds covers
   both the training seed and which examples were drawn), written to
   ``CORPUS/<corpus>/slices/train_f<fraction>_s<seed>.spacy``;
2. ``python -m spacy train configs/<system>_<task>.cfg`` with the seed,
   the training budget (``max_steps``, ``eval_frequency``, ``patience``; the
   same for every system of the task) and the ELMo weights or the
   transformer directory, into ``TRAINING/<task>/<system>/f<fraction>_s<seed>/``
   (``model-best``, ``log.jsonl`` = dev curves, ``train.log``); wall-clock
   time measured around the command;
3. test scores of ``model-best`` with spaCy's ``evaluate`` (the function
   behind ``spacy evaluate --gold-preproc``) on the task's test set;
4. for the first seed of the largest fraction only (speed does not depend on
   the training slice): words/s on the first ``speed_docs`` test docs, set up
   as ``spacy benchmark speed`` does (its ``warmup`` epochs, then ``batches``
   x ``batch_size`` docs drawn at random), timed over the whole stream: all
   words / all seconds (``words_per_s``). spaCy's own figure, the mean of
   per-batch rates, is kept as ``words_per_s_batch_mean``: it overstates a
   pipeline whose component buffers docs across batches (the ``elmo``
   component's ``buffer_tokens``: one batch pays for the group, the next ones
   come out of the buffer almost free); model size on disk;
5. the learned ELMo mixes (softmax weights s_j and gamma of every mix,
   ``spacy_elmo.mix_weights``);

and writes ``METRICS/<task>/<system>/f<fraction>_s<seed>.json``. A run whose
metrics file exists is skipped (``--force`` redoes it), so the grid resumes
where it stopped; an ELMo run whose metrics were made with other biLM
weights (their sha256 differs from ``--elmo-weights``') is trained again,
so that after a new biLM ships the same command reruns exactly the ELMo
runs, and so is any run recorded with another budget (``max_steps``,
``eval_frequency``, ``patience``), so that a record always says what the
command asked for.

``--score-stopped``: for runs whose training was ended from outside before
its budget or patience stopped it (a session's end killed ``spacy train``),
skip step 2 and score the ``model-best`` the run left, as it stands. The
record says so (``stopped_early``: the last logged step), its times are the
training loop's wall seconds from ``log.jsonl`` and its CPU time is unknown
(``null``): the process that knew it is gone.
"""
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import typer

from common import CORPUS, ELMO_SYSTEMS, fraction_name, make_slice, portable_path, sha256_of, speed

MAIN_SCORE = {"pos": "tag_acc", "ner": "ents_f", "sentiment": "cats_macro_f"}
def split_list(text: str) -> List[str]:
    return [item.strip() for item in str(text).replace(";", ",").split(",") if item.strip()]


def corpus_stats(path: Path) -> Dict[str, int]:
    import spacy
    from spacy.tokens import DocBin

    docs = list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))
    return {"docs": len(docs), "words": sum(len(doc) for doc in docs)}


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def read_log(path: Path) -> List[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def train_run(config: Path, output: Path, train: Path, dev: Path, seed: int, budget: Dict[str, int],
              extra: List[str], threads: int = 0) -> Dict[str, float]:
    output.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "spacy", "train", str(config),
        "--output", str(output),
        "--paths.train", str(train), "--paths.dev", str(dev), "--paths.log", str(output / "log.jsonl"),
        "--system.seed", str(seed),
        "--training.max_steps", str(budget["max_steps"]),
        "--training.eval_frequency", str(budget["eval_frequency"]),
        "--training.patience", str(budget["patience"]),
        *extra,
    ]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if threads > 0:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    start = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    with (output / "train.log").open("w", encoding="utf-8") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        tail = (output / "train.log").read_text(encoding="utf-8")[-3000:]
        raise SystemExit(f"training failed ({config.name}, {output}):\n{tail}")
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    return {"wall": seconds, "cpu": cpu}


def other_bilm(record: dict, provenance: Dict[str, str]) -> Optional[str]:
    """The sha256 of the biLM weights an existing run's record names when it
    is not the one this grid uses; None when they are the same or the
    system has no biLM (or the record names none)."""
    wanted = provenance.get("elmo_weights_sha256")
    if wanted is None:
        return None
    recorded = record.get("provenance", {}).get("elmo_weights_sha256")
    return recorded if recorded is not None and recorded != wanted else None


def other_budget(record: dict, budget: Dict[str, int]) -> Optional[Dict[str, int]]:
    """The budget an existing run's record names when it is not this grid's
    (a record that names none is taken as this grid's)."""
    recorded = record.get("budget")
    return recorded if recorded is not None and recorded != budget else None


def main(
    task: str = typer.Argument(..., help="pos | ner | sentiment"),
    systems: str = typer.Option("baseline,elmo_listener,elmo_tok2vec,transformer", help="Comma-separated systems"),
    fractions: str = typer.Option("100", help="Comma-separated percentages of the train set"),
    seeds: str = typer.Option("0", help="Comma-separated seeds"),
    max_steps: int = typer.Option(2000, help="Training budget: optimizer steps"),
    eval_frequency: int = typer.Option(200, help="Dev evaluation every N steps"),
    patience: int = typer.Option(1000, help="Stop after N steps without a better dev score"),
    corpus_dir: Path = typer.Option(Path("corpus"), help="Holds <corpus>/{train,dev,test}.spacy"),
    configs: Path = typer.Option(Path("configs"), help="Holds <system>_<task>.cfg"),
    training_dir: Path = typer.Option(Path("training"), help="Where runs are trained"),
    metrics_dir: Path = typer.Option(Path("metrics"), help="Where each run's metrics JSON goes"),
    elmo_weights: Optional[Path] = typer.Option(None, help="biLM weights (hdf5, published format)"),
    elmo_options: Optional[Path] = typer.Option(None, help="biLM options JSON"),
    elmo_cache_mib: int = typer.Option(4096, help="MiB for the training-time cache of the frozen biLM's outputs "
                                       "(spacy_elmo.training_cache.v1)"),
    transformer: Path = typer.Option(Path("assets/minilm"), help="Hugging Face model directory"),
    speed_docs: int = typer.Option(2000, help="Test docs the speed benchmark draws from"),
    speed_batches: int = typer.Option(30, help="Batches timed by the speed benchmark (spaCy's minimum: 30)"),
    speed_warmup: int = typer.Option(1, help="Warm-up epochs over the benchmark docs"),
    speed_batch_size: int = typer.Option(64, help="Docs per batch in the speed benchmark"),
    threads: int = typer.Option(0, help="PyTorch threads (0: PyTorch's default, all cores). 1 on a machine "
                                "that runs other work: two threads spinning against a busy core are far slower"),
    keep_models: bool = typer.Option(False, help="Keep model-last (model-best is always kept)"),
    force: bool = typer.Option(False, help="Redo runs whose metrics exist"),
    score_stopped: bool = typer.Option(False, help="Do not train: score the model-best of runs whose training "
                                       "was ended from outside (see the module's docstring)"),
) -> None:
    if task not in CORPUS:
        raise typer.BadParameter(f"task must be one of {', '.join(CORPUS)}")
    data = corpus_dir / CORPUS[task]
    train, dev, test = (data / f"{part}.spacy" for part in ("train", "dev", "test"))
    fraction_list = sorted(float(f) for f in split_list(fractions))
    seed_list = [int(s) for s in split_list(seeds)]
    budget = {"max_steps": max_steps, "eval_frequency": eval_frequency, "patience": patience}
    if threads > 0:
        import torch

        torch.set_num_threads(threads)
    # Check every system first, so that a missing file stops the grid before any training.
    setups = {}
    for system in split_list(systems):
        config = configs / f"{system}_{task}.cfg"
        if not config.exists():
            raise SystemExit(f"no config {config}")
        extra: List[str] = []
        provenance: Dict[str, str] = {}
        if system in ELMO_SYSTEMS:
            if elmo_weights is None or elmo_options is None:
                raise SystemExit(f"{system} needs --elmo-weights and --elmo-options")
            for path in (elmo_weights, elmo_options):
                if not path.exists():
                    raise SystemExit(f"ELMo file not found: {path} (set the project's elmo_weights/elmo_options vars)")
            provenance = {"elmo_weights": portable_path(elmo_weights), "elmo_weights_sha256": sha256_of(elmo_weights)}
            extra += ["--paths.elmo_weights", str(elmo_weights), "--paths.elmo_options", str(elmo_options),
                      "--paths.elmo_cache_mib", str(elmo_cache_mib)]
        if system == "transformer":
            if not (transformer / "config.json").exists():
                raise SystemExit(f"no transformer model directory at {transformer} (run fetch-minilm)")
            extra += ["--paths.transformer", str(transformer)]
            provenance = {"transformer": portable_path(transformer)}
        setups[system] = (config, extra, provenance)
    for system, (config, extra, provenance) in setups.items():
        for fraction in fraction_list:
            for seed in seed_list:
                name = f"f{fraction_name(fraction)}_s{seed}"
                metrics_path = metrics_dir / task / system / f"{name}.json"
                if metrics_path.exists() and not force:
                    existing = json.loads(metrics_path.read_text(encoding="utf-8"))
                    other = other_bilm(existing, provenance)
                    other_steps = other_budget(existing, budget)
                    if other is None and other_steps is None:
                        typer.echo(f"[{task} {system} {name}] done, skipped")
                        continue
                    if other is not None:
                        typer.echo(f"[{task} {system} {name}] recorded with other biLM weights (sha256 {other[:16]}…): "
                                   f"training again with {provenance['elmo_weights_sha256'][:16]}…")
                    else:
                        typer.echo(
                            f"[{task} {system} {name}] recorded with another budget "
                            f"({json.dumps(other_steps, sort_keys=True)}): "
                            f"training again with {json.dumps(budget, sort_keys=True)}"
                        )
                output = training_dir / task / system / name
                train_slice = make_slice(train, fraction, seed, data / "slices")
                if score_stopped:
                    log = read_log(output / "log.jsonl")
                    if not log or not (output / "model-best").is_dir():
                        raise SystemExit(f"{output}: no log.jsonl with evaluations and model-best to score")
                    typer.echo(
                        f"[{task} {system} {name}] scoring model-best of a run stopped at step {log[-1]['step']}"
                    )
                    times = {"wall": log[-1]["seconds"], "cpu": None}
                else:
                    typer.echo(f"[{task} {system} {name}] training on {train_slice} ...")
                    times = train_run(config, output, train_slice, dev, seed, budget, extra, threads)
                    log = read_log(output / "log.jsonl")
                record = {
                    "task": task, "system": system, "fraction": fraction, "seed": seed,
                    "main_score": MAIN_SCORE[task], "budget": budget, "provenance": provenance,
                    "train_data": corpus_stats(train_slice),
                    "threads": threads,
                    "train_seconds": times["wall"],
                    "train_cpu_seconds": times["cpu"],
                    "train_loop_seconds": log[-1]["seconds"] if log else None,
                    "steps": log[-1]["step"] if log else None,
                    "epochs": log[-1]["epoch"] if log else None,
                    "dev_best": max((r["score"] for r in log), default=None),
                    "curve": [{"step": r["step"], "seconds": r["seconds"], "words": r["words"], "score": r["score"]}
                              for r in log],
                }
                if score_stopped:
                    record["stopped_early"] = log[-1]["step"]
                record.update(evaluate_run(output / "model-best", test, task,
                                           do_speed=(fraction == fraction_list[-1] and seed == seed_list[0]),
                                           speed_args=(speed_docs, speed_batches, speed_warmup, speed_batch_size)))
                metrics_path.parent.mkdir(parents=True, exist_ok=True)
                metrics_path.write_text(json.dumps(record, indent=1), encoding="utf-8")
                if not keep_models:
                    _remove(output / "model-last")
                score = record["test"].get(MAIN_SCORE[task])
                cpu = "unknown" if times["cpu"] is None else f"{times['cpu']:.0f} s"
                typer.echo(f"[{task} {system} {name}] test {MAIN_SCORE[task]} = {score}, "
                           f"trained in {times['wall']:.0f} s (CPU {cpu})")


def evaluate_run(model_dir: Path, test: Path, task: str, do_speed: bool, speed_args) -> dict:
    import spacy
    from spacy.cli.evaluate import evaluate

    import spacy_elmo

    start = time.perf_counter()
    scores = evaluate(str(model_dir), test, gold_preproc=True, silent=True)
    result = {"test": _jsonable(scores), "test_seconds": time.perf_counter() - start}
    nlp = spacy.load(model_dir)
    result["mixes"] = {name: {"s": [float(x) for x in s], "gamma": gamma}
                       for name, (s, gamma) in spacy_elmo.mix_weights(nlp).items()}
    if do_speed:
        result["speed"] = speed(nlp, test, *speed_args)
        result["size_bytes"] = dir_size(model_dir)
        elmo_dir = model_dir / "elmo"
        result["bilm_bytes"] = dir_size(elmo_dir) if elmo_dir.exists() else 0
    return result


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (int, float)) or value is None:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _remove(path: Path) -> None:
    import shutil

    if path.exists():
        shutil.rmtree(path)


if __name__ == "__main__":
    typer.run(main)
