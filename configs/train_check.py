"""Train each shipped config on matching real data and print what it scored.

    python configs/train_check.py CORPUS_DIR OUTPUT_DIR [--steps 300]

CORPUS_DIR holds the corpora the project fetches (``cd project && python -m
weasel run fetch-brown`` etc., or ``project/scripts/fetch_*.py``):
``brown/`` (tags), ``wnut/`` (entities), ``sentiment/`` (two exclusive
classes), each with ``train.spacy`` and ``dev.spacy``. Every config is
trained as it ships (``python -m spacy train``), only the number of steps,
the evaluation frequency, the number of development documents (the first
``--dev-limit``, so that a short run is not spent evaluating) and the output
directory are given on the command line:

- ``elmo_tagger.cfg`` on Brown,
- ``elmo_ner.cfg`` on WNUT-2016,
- ``elmo_tagger_ner.cfg`` on Brown and WNUT together: no registry corpus has
  both tags and entities on the same text, so the training and development
  sets are the WNUT documents plus as many Brown documents (``tagger_ner/``
  in OUTPUT_DIR). Brown documents carry no entity annotation and WNUT
  documents no tags, and spaCy treats both as missing (not as "no entity"
  or "empty tag"), so each component learns from the documents that have
  its labels and is scored on them,
- ``elmo_textcat.cfg`` on the rt-polarity snippets.

For each run it prints spaCy's training table and then one summary line:
config, data, steps, wall-clock seconds and the final dev scores of
``model-last``. The table and the figures go into docs/training.md.
"""
import json
import subprocess
import sys
import time
from pathlib import Path

import spacy
import typer
from spacy.tokens import DocBin

CONFIGS = Path(__file__).resolve().parent

RUNS = [
    ("elmo_tagger.cfg", "brown", ["tag_acc"]),
    ("elmo_ner.cfg", "wnut", ["ents_f", "ents_p", "ents_r"]),
    ("elmo_tagger_ner.cfg", "tagger_ner", ["tag_acc", "ents_f"]),
    ("elmo_textcat.cfg", "sentiment", ["cats_score"]),
]


def mixed_corpus(corpus: Path, out: Path) -> Path:
    """The WNUT documents plus as many Brown documents, per split."""
    vocab = spacy.blank("en").vocab
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        wnut = list(DocBin().from_disk(corpus / "wnut" / f"{split}.spacy").get_docs(vocab))
        brown = list(DocBin().from_disk(corpus / "brown" / f"{split}.spacy").get_docs(vocab))[: len(wnut)]
        DocBin(docs=wnut + brown).to_disk(out / f"{split}.spacy")
    return out


def main(
    corpus: Path = typer.Argument(..., help="directory with brown/, wnut/, sentiment/ (train.spacy, dev.spacy)"),
    output: Path = typer.Argument(..., help="where the trained pipelines go"),
    steps: int = typer.Option(300, help="training steps per config"),
    eval_frequency: int = typer.Option(100, help="steps between evaluations"),
    dev_limit: int = typer.Option(1000, help="development documents per evaluation (0: all)"),
) -> None:
    for name in ("brown", "wnut", "sentiment"):
        for split in ("train", "dev"):
            if not (corpus / name / f"{split}.spacy").is_file():
                raise typer.BadParameter(
                    f"{corpus / name / split}.spacy is missing: fetch it with project/scripts/fetch_{name}.py"
                )
    mixed_corpus(corpus, output / "tagger_ner")
    summary = []
    for config, data, keys in RUNS:
        data_dir = output / "tagger_ner" if data == "tagger_ner" else corpus / data
        command = [
            sys.executable, "-m", "spacy", "train", str(CONFIGS / config),
            "--output", str(output / config.removesuffix(".cfg")),
            "--paths.train", str(data_dir / "train.spacy"), "--paths.dev", str(data_dir / "dev.spacy"),
            "--training.max_steps", str(steps), "--training.eval_frequency", str(eval_frequency),
            "--corpora.dev.limit", str(dev_limit),
        ]
        print(
            "$ python -m spacy train configs/"
            + config
            + " "
            + " ".join(command[5:]).replace(str(output), "OUT").replace(str(corpus), "CORPUS"),
            flush=True,
        )
        start = time.perf_counter()
        subprocess.run(command, check=True)
        seconds = time.perf_counter() - start
        meta = json.loads(
            (output / config.removesuffix(".cfg") / "model-last" / "meta.json").read_text(encoding="utf-8")
        )
        scores = ", ".join(f"{k} {100 * meta['performance'][k]:.1f}" for k in keys)
        summary.append(f"| `{config}` | {data} | {steps} | {seconds:.0f} | {scores} |")
    print("\n| config | data | steps | seconds | dev scores of model-last |\n|---|---|---|---|---|")
    print("\n".join(summary))


if __name__ == "__main__":
    typer.run(main)
