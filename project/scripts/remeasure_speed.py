"""Measure the words/s of a grid's runs again, side by side, with ``run_grid.py``'s
current speed function, and rewrite the ``speed`` field of their metrics.

    python scripts/remeasure_speed.py metrics training [--threads 1] [--rounds 3]
    python scripts/remeasure_speed.py metrics/converged training/converged --untrained --rounds 3 \\
        --elmo-weights W.hdf5 --elmo-options O.json --transformer assets/minilm

Every ``METRICS/<task>/<system>/f<pct>_s<seed>.json`` that has a speed figure
(run_grid times the first seed of the largest fraction) is timed on the same
test docs with the same docs/batches/batch size/warm-up as recorded, and its
``speed`` replaced (the figure it first replaced is kept as ``speed_before``).
Scores are not touched.

Which pipeline is timed:

* by default the trained one, ``TRAINING/<task>/<system>/f<pct>_s<seed>/model-best``;
  runs whose pipeline is not on this machine are listed and left as they are;
* with ``--untrained``, the run's pipeline built again from its config
  (``CONFIGS/<system>_<task>.cfg``, initialised on the run's training slice as
  ``spacy train`` does, saved and loaded back as ``model-best`` is), so that
  a grid can be timed again after its pipelines are gone. Its words/s are the
  trained pipeline's: training changes the values of the weights, not the
  work (the same layers and shapes; the entity recognizer makes one move per
  token whatever it predicts; the tagger and the text classifier score every
  token and doc alike). The biLM given must be the one the run was trained
  with (checked by sha256), and the record says ``"pipeline": "untrained"``.

``--rounds N`` times every selected run N times, in turn (round robin over
the runs, all pipelines loaded first), so that a drift of the machine's speed
hits all systems alike; the median round is kept and all rounds' words/s are
listed in ``speed["rounds"]``. Run it on a quiet machine.
"""
import json
import statistics
import tempfile
from pathlib import Path
from typing import List, Optional

import typer

from common import CORPUS, ELMO_SYSTEMS, make_slice, sha256_of, speed


def untrained_pipeline(run: dict, config_path: Path, corpus_dir: Path, elmo_weights: Optional[Path],
                       elmo_sha256: Optional[str], elmo_options: Optional[Path], transformer: Path, workdir: Path):
    """The run's pipeline, initialised from its config and loaded back from disk
    (``elmo_sha256``: that of ``elmo_weights``, hashed once for all runs)."""
    import spacy
    from spacy import util
    from spacy.training.initialize import init_nlp

    if not config_path.exists():
        raise SystemExit(f"no config {config_path} for {run['task']}/{run['system']} (--configs)")
    data = corpus_dir / CORPUS[run["task"]]
    train = make_slice(data / "train.spacy", float(run["fraction"]), int(run["seed"]), data / "slices")
    overrides = {"paths.train": str(train), "paths.dev": str(data / "dev.spacy"), "system.seed": int(run["seed"])}
    if run["system"] in ELMO_SYSTEMS:
        if elmo_weights is None or elmo_options is None:
            raise SystemExit(f"{run['system']} needs --elmo-weights and --elmo-options to be built untrained")
        trained_with = run.get("provenance", {}).get("elmo_weights_sha256")
        if trained_with and elmo_sha256 != trained_with:
            raise SystemExit(f"--elmo-weights {elmo_weights} is not the biLM {run['task']}/{run['system']} was trained "
                             f"with (sha256 {trained_with[:16]}...): its speed would be another model's. Give that "
                             f"model's weights ({run['provenance'].get('elmo_weights')}).")
        overrides.update({"paths.elmo_weights": str(elmo_weights), "paths.elmo_options": str(elmo_options),
                          "paths.elmo_cache_mib": 64})
    if run["system"] == "transformer":
        if not (transformer / "config.json").exists():
            raise SystemExit(f"no transformer model directory at {transformer} (run fetch-minilm, or --transformer)")
        overrides["paths.transformer"] = str(transformer)
    config = util.load_config(config_path, overrides=overrides, interpolate=False)
    nlp = init_nlp(config, use_gpu=-1)
    out = workdir / f"{run['task']}_{run['system']}"
    nlp.to_disk(out)
    return spacy.load(out)


def main(
    metrics: Path = typer.Argument(..., help="run_grid.py's metrics directory"),
    training: Path = typer.Argument(..., help="run_grid.py's training directory"),
    corpus_dir: Path = typer.Option(Path("corpus"), help="Holds <corpus>/{train,dev,test}.spacy"),
    threads: int = typer.Option(1, help="torch threads (0: PyTorch's default)"),
    rounds: int = typer.Option(1, min=1, help="Times each run is timed, round robin; the median is kept"),
    untrained: bool = typer.Option(False, "--untrained", help="Time each run's pipeline built from its config "
                                   "(untrained: the same work) instead of its trained model-best"),
    configs: Path = typer.Option(Path("configs"), help="Holds <system>_<task>.cfg (--untrained)"),
    elmo_weights: Optional[Path] = typer.Option(None, help="The runs' biLM weights (--untrained)"),
    elmo_options: Optional[Path] = typer.Option(None, help="The runs' biLM options (--untrained)"),
    transformer: Path = typer.Option(Path("assets/minilm"), help="Hugging Face model directory (--untrained)"),
) -> None:
    import spacy
    import torch

    import spacy_elmo  # noqa: F401  (registers the factories)

    if threads > 0:
        torch.set_num_threads(threads)
    elmo_sha256 = sha256_of(elmo_weights) if untrained and elmo_weights is not None else None
    jobs: List[tuple] = []
    with tempfile.TemporaryDirectory() as workdir:
        for path in sorted(metrics.glob("*/*/*.json")):
            task, system = path.parts[-3], path.parts[-2]
            if task not in CORPUS:
                continue
            run = json.loads(path.read_text(encoding="utf-8"))
            old = run.get("speed")
            if not old:
                continue
            if untrained:
                nlp = untrained_pipeline(run, configs / f"{system}_{task}.cfg", corpus_dir, elmo_weights,
                                         elmo_sha256, elmo_options, transformer, Path(workdir))
            else:
                model = training / task / system / path.stem / "model-best"
                if not model.exists():
                    typer.echo(f"{path}: {model} missing, left as it is ({old['words_per_s']:,.0f} words/s, "
                               f"{old.get('method', 'batch mean')}); --untrained times it built from its config")
                    continue
                nlp = spacy.load(model)
            jobs.append((path, run, nlp, []))
        for _ in range(rounds):
            for path, run, nlp, results in jobs:
                old = run["speed"]
                task = path.parts[-3]
                results.append(speed(nlp, corpus_dir / CORPUS[task] / "test.spacy", old["docs"], old["batches"],
                                     old["warmup_epochs"], old["batch_size"]))
    for path, run, _, results in jobs:
        old = run["speed"]
        median = statistics.median_low([r["words_per_s"] for r in results])
        new = dict(next(r for r in results if r["words_per_s"] == median))
        new["rounds"] = [r["words_per_s"] for r in results]
        new["pipeline"] = "untrained" if untrained else "trained"
        run.setdefault("speed_before", old)  # the first figure it replaced, kept across re-runs
        run["speed"] = new
        path.write_text(json.dumps(run, indent=1), encoding="utf-8")
        typer.echo(f"{path}: {old['words_per_s']:,.0f} -> {new['words_per_s']:,.0f} words/s "
                   f"(rounds {', '.join(f'{w:,.0f}' for w in new['rounds'])}; {new['pipeline']} pipeline)")


if __name__ == "__main__":
    typer.run(main)
