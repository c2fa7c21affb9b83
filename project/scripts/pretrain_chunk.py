"""A time-boxed chunk of pretraining on a machine lent by the minute that
has PyTorch but not spaCy, and takes only a small bundle of files.

    python scripts/pretrain_chunk.py pack RUN INIT KIT [--float16]   # here
    PYTHONPATH=. python3 project/scripts/pretrain_chunk.py train KIT OUT --budget-s 500 --seed 3
                                   # there, from the repository's root (the package need not be installed)
    python scripts/pretrain_chunk.py unpack OUT RUN_DIR       # here again

``pack``: RUN is a ``pretrain`` output directory whose ``corpus_cache`` holds
the tokenised training and held-out text that its ``config.json`` names;
INIT is the model to continue (an export or a ``campaign_snapshot.py``
snapshot). KIT receives the two caches saved again compressed, with the
word types renumbered by frequency (the same windows, checked; 35 MB instead
of 97 for the 20.5M-token English corpus), INIT's files and
``manifest.json`` (the corpus paths and reading settings the caches were
made from).

``train``: runs ``spacy_elmo.pretrain`` on the KIT without spaCy (the caches
are found by the manifest instead of by their key, which needs spaCy's
version). It first times 25 steps at each ``--batches`` size and keeps the
one with the most tokens per second, then trains for as many steps as fit
``--budget-s`` (counted from the script's start), so that the linear decay
reaches 0 inside the budget; every 50 steps it compares the pace of
training since step 50 with the time left and moves the end so that the
decay reaches 0 there, never later than first planned (``replan``); a
watchdog sends SIGTERM at ``--hard-s`` (the trainer checkpoints and stops). The learning rate, unless ``--lr``, grows
more slowly than the square root of the batch (1e-3 at 1,024 windows, 1.5e-3
at 4,096), as the chunk continues a trained model. OUT receives the export
(``weights.hdf5`` split into parts of 15 MB), ``log.jsonl``,
``options.json``, ``driver.log`` and ``config.json`` with the manifest's
corpus and INIT paths (what the run really read), not the KIT's.

``unpack``: joins OUT into RUN_DIR (``export/``, ``log.jsonl``,
``config.json``, ``options.json``, ``vocab.txt``), which ``ship_model.py
RUN_DIR ... --export RUN_DIR/export`` ships. See docs/pretraining.md.
"""
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import List, Optional

import typer

from campaign_snapshot import FILES, to_float16

app = typer.Typer(add_completion=False, help=__doc__.split("\n")[0])
START = time.time()
PART = 15_000_000
LR_BY_BATCH = {1024: 1e-3, 2048: 1.2e-3, 4096: 1.5e-3}


def _portable(path: str) -> str:
    """A path as given when relative (to project/, as the commands use them), else portable."""
    from portable_paths import portable_path

    return path if not Path(path).is_absolute() else portable_path(path)


@app.command()
def pack(
    run: Path, init: Path, kit: Path,
    float16: bool = typer.Option(False, "--float16", help="store INIT's weights and softmax as float16 (half the "
                                 "size, as campaign_snapshot.py does: a float32 model of the English shape and the "
                                 "corpus together exceed 64 MiB)"),
) -> None:
    """Bundle RUN's tokenised corpus and INIT's model into KIT."""
    import numpy

    from spacy_elmo.pretrain.corpus import N_RESERVED_TYPES, Corpus
    from spacy_elmo.pretrain.corpus_cache import cache_key, load_corpus, save_corpus
    from spacy_elmo.pretrain.reading import list_files

    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    settings = {k: config[k] for k in ("lang", "max_tokens", "max_line_chars", "strict")}
    kit.mkdir(parents=True, exist_ok=True)
    caches = {}
    for role in ("train", "dev") if config.get("dev") else ("train",):
        key = cache_key(list_files(config[role]), *settings.values())
        name = f"corpus-{key[:24]}.npz"
        source = run / "corpus_cache" / name
        if not source.is_file():
            raise typer.BadParameter(f"{source}: no cache of {config[role]} (run `pretrain` on them once first)")
        before = load_corpus(source)
        arrays = before.to_arrays()
        counts = arrays["counts"]
        reserved = N_RESERVED_TYPES
        order = numpy.concatenate([numpy.arange(reserved), reserved + numpy.argsort(-counts[reserved:], kind="stable")])
        rank = numpy.empty_like(order)
        rank[order] = numpy.arange(len(order))
        after = Corpus.from_arrays([before.types[i] for i in order], rank[arrays["flat"]].astype(numpy.int32),
                                   arrays["offsets"], counts[order], before.stats)
        packed = kit / name
        save_corpus(after, packed, compressed=True)
        after = load_corpus(packed)
        sample = numpy.random.default_rng(0).integers(0, len(arrays["offsets"]) - 1, 1000)
        for w in sample:
            if [before.types[i] for i in before.window(int(w))] != [after.types[i] for i in after.window(int(w))]:
                raise SystemExit(f"{packed}: window {w} differs from {source}'s")
        caches[role] = name
        print(f"{role}: {source.stat().st_size / 1e6:.1f} MB -> {packed.stat().st_size / 1e6:.1f} MB")
    (kit / "init").mkdir(exist_ok=True)
    for name in FILES:
        if float16 and name.endswith(".hdf5"):
            to_float16(init / name, kit / "init" / name)
        else:
            shutil.copyfile(init / name, kit / "init" / name)
    manifest = {"train": config["train"], "dev": config.get("dev"), "init": _portable(str(init)), "settings": settings,
                "dev_fraction": config["dev_fraction"], "max_dev_windows": config["max_dev_windows"], "caches": caches}
    (kit / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _say(out: Path, *args) -> None:
    line = " ".join(str(a) for a in (f"[{time.time() - START:7.1f}s]", *args))
    print(line, flush=True)
    with open(out / "driver.log", "a", encoding="utf-8") as fout:
        fout.write(line + "\n")


REPLAN_EVERY = 50  # steps between checks of the training's pace against the budget


def replan(step: int, window_steps: int, window_s: float, left_s: float, ceiling: int) -> int:
    """The step at which training should end so that it fits the time left,
    at the pace of the last ``window_steps`` steps (``window_s`` seconds,
    evaluations included): never later than ``ceiling`` (the first plan) and
    never before the next step. The caller leaves the first ``REPLAN_EVERY``
    steps out of the window, as they hold the GPU's warm-up; neither they nor
    the 25 steps timed before training foretell the pace of training
    (docs/pretraining.md, sessions 31 and 32). The end may move later again
    when the pace improves, which raises the linearly decaying learning rate
    slightly."""
    if window_steps <= 0 or window_s <= 0:
        return ceiling
    fits = step + int(max(0.0, left_s) * window_steps / window_s)
    return min(ceiling, max(step + 1, fits))


@app.command()
def train(
    kit: Path, out: Path,
    budget_s: float = typer.Option(500.0, help="seconds from the start to the end of training"),
    hard_s: float = typer.Option(535.0, help="SIGTERM (checkpoint and stop) after this many seconds"),
    batches: str = typer.Option("1024,4096", help="batch sizes (windows) to time"),
    lr: Optional[float] = typer.Option(None, help="peak learning rate (default: by batch size, see above)"),
    seed: int = typer.Option(0),
    evals: int = typer.Option(8, help="held-out evaluations during the chunk"),
    device: str = typer.Option("cuda"),
    work: Path = typer.Option(Path("/tmp/pretrain_chunk"), help="where the run directory is made"),
) -> None:
    """Train one chunk from KIT; the result goes to OUT."""
    import torch

    from spacy_elmo.pretrain import reading
    from spacy_elmo.pretrain.config import PretrainConfig
    from spacy_elmo.pretrain.export import export
    from spacy_elmo.pretrain.trainer import pretrain

    kit, out = kit.resolve(), out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((kit / "manifest.json").read_text(encoding="utf-8"))
    data = work / "data"
    (data / "train").mkdir(parents=True, exist_ok=True)
    (data / "train" / "kit.txt").write_text("see manifest.json\n")
    (data / "dev.txt").write_text("see manifest.json\n")
    keys = {str(data / "train"): manifest["caches"]["train"], str(data / "dev.txt"): manifest["caches"].get("dev")}

    def kit_key(files, *settings):  # the path read_corpus asks for -> its packed cache (no spaCy)
        name = keys[str(files[0].parent if files[0].parent.name == "train" else files[0])]
        return name[len("corpus-"):-len(".npz")] + "0" * 40

    reading.cache_key = kit_key

    def run_dir(name: str) -> Path:
        path = work / name
        shutil.rmtree(path, ignore_errors=True)
        (path / "corpus_cache").mkdir(parents=True)
        for cache in manifest["caches"].values():
            os.symlink(kit / cache, path / "corpus_cache" / cache)
        return path

    def config(path: Path, batch: int, steps: int, rate: float, eval_every: int) -> PretrainConfig:
        return PretrainConfig(
            train=[str(data / "train")], dev=[str(data / "dev.txt")] if "dev" in manifest["caches"] else None,
            dev_fraction=manifest["dev_fraction"], max_dev_windows=manifest["max_dev_windows"],
            output=str(path), init=str(kit / "init"),
            vocab=str(kit / "init" / "vocab.txt"), max_tokens=manifest["settings"]["max_tokens"],
            lang=manifest["settings"]["lang"], max_line_chars=manifest["settings"]["max_line_chars"],
            strict=manifest["settings"]["strict"], batch_size=batch, max_steps=steps, lr=rate,
            warmup_steps=min(100, steps // 10), seed=seed, log_every=10, eval_every=eval_every,
            checkpoint_every=10**9, device=device, precision="bf16",
        )

    class Timed(Exception):
        pass

    def time_batch(batch: int) -> float:
        stamps: List[float] = []

        def callback(step, record):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            stamps.append(time.perf_counter())
            if step >= 25:
                raise Timed()

        try:
            pretrain(config(run_dir(f"time{batch}"), batch, 10**6, 1e-5, 10**6), progress=False, callback=callback)
        except Timed:
            pass
        per_step = (stamps[-1] - stamps[9]) / (len(stamps) - 10)
        _say(out, f"batch {batch}: {per_step * 1000:.1f} ms/step")
        return per_step

    _say(out, "torch", torch.__version__, device, torch.cuda.get_device_name(0) if device.startswith("cuda") else "")
    timing = {}
    for batch in (int(b) for b in batches.split(",")):
        try:
            timing[batch] = time_batch(batch)
        except Exception as err:  # out of the device's memory at a large batch: keep the others
            _say(out, f"batch {batch} failed: {type(err).__name__}: {str(err)[:300]}")
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    if not timing:
        raise SystemExit("no batch size could be timed")
    batch = max(timing, key=lambda b: b / timing[b])
    left = budget_s - (time.time() - START) - 25  # the final evaluation, checkpoint and export
    steps = max(50, int(left / timing[batch]) - 3 * evals)  # an evaluation costs about 3 steps
    rate = lr if lr is not None else LR_BY_BATCH.get(batch, 1e-3)
    _say(out, f"batch {batch}, {steps} steps, lr {rate}")
    path = run_dir("run")

    def watchdog():
        time.sleep(max(1.0, hard_s - (time.time() - START)))
        _say(out, "hard limit: SIGTERM")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watchdog, daemon=True).start()
    run_config = config(path, batch, steps, rate, max(50, steps // evals))
    window = {}  # where the pace is measured from: step 50 and its time, after the warm-up

    def follow_pace(step, record):
        if step % REPLAN_EVERY:
            return
        if not window:
            window.update(step=step, time=time.time())
            return
        planned = record["config"].max_steps
        window_steps, window_s = step - window["step"], time.time() - window["time"]
        fitted = replan(step, window_steps, window_s, START + budget_s - 25 - time.time(), steps)
        if fitted != planned:
            record["config"].max_steps = fitted
            _say(out, f"step {step}: {window_s / window_steps * 1000:.1f} ms/step since step {window['step']}, "
                      f"max_steps {planned} -> {fitted}")

    summary = pretrain(run_config, progress=False, callback=follow_pace)
    summary["output"] = path.name  # the lent machine's working directory means nothing once back
    _say(out, "summary", json.dumps(summary, default=str))
    if summary.get("stopped"):
        export(path, path / "export")
    weights = (path / "export" / "weights.hdf5").read_bytes()
    for i in range(0, len(weights), PART):
        (out / f"weights.hdf5.part{i // PART:02d}").write_bytes(weights[i:i + PART])
    for name in ("softmax.hdf5", "options.json"):
        shutil.copyfile(path / "export" / name, out / name)
    shutil.copyfile(path / "log.jsonl", out / "log.jsonl")
    record = json.loads((path / "config.json").read_text(encoding="utf-8"))
    record.update(train=manifest["train"], dev=manifest["dev"], init=manifest["init"], output=out.name,
                  vocab=manifest["init"] + "/vocab.txt", planned_max_steps=steps, max_steps=run_config.max_steps)
    (out / "config.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    _say(out, "written", sorted(p.name for p in out.iterdir()))


@app.command()
def unpack(out: Path, run_dir: Path, kit: Path = typer.Option(..., help="the KIT the chunk trained from")) -> None:
    """Join a chunk's OUT into a run directory that ship_model.py --export reads."""
    parts = sorted(out.glob("weights.hdf5.part*"))
    if not parts:
        raise typer.BadParameter(f"{out}: no weights.hdf5.part* (the output of `train`)")
    (run_dir / "export").mkdir(parents=True, exist_ok=True)
    with open(run_dir / "export" / "weights.hdf5", "wb") as fout:
        for part in parts:
            fout.write(part.read_bytes())
    for name in ("softmax.hdf5", "options.json"):
        shutil.copyfile(out / name, run_dir / "export" / name)
    shutil.copyfile(kit / "init" / "vocab.txt", run_dir / "export" / "vocab.txt")
    for name in ("log.jsonl", "config.json", "options.json"):
        shutil.copyfile(out / name, run_dir / name)
    shutil.copyfile(kit / "init" / "vocab.txt", run_dir / "vocab.txt")
    print(f"{run_dir}: export/ and the chunk's log")


if __name__ == "__main__":
    app()
