"""`spacy benchmark speed` on an `elmo` pipeline.

    python benchmarks/pipeline_speed.py project/corpus/brown/test.spacy --shape small

Builds ``spacy.blank("en")`` + ``elmo`` with random weights of a published
shape, saves it to a temporary directory and runs spaCy's own speed benchmark
on it (words per second, with its confidence interval). ``--precision bf16``
times the opt-in fast path.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import typer


def main(
    data: Path = typer.Argument(..., help=".spacy file with the docs to process"),
    shape: str = typer.Option("small", help="small, medium or original"),
    batch_size: int = typer.Option(64),
    n_batches: int = typer.Option(20),
    precision: str = typer.Option("fp32", help="fp32 (exact) or bf16"),
) -> None:
    import spacy

    import spacy_elmo
    from spacy_elmo.bilm.options import published_options

    nlp = spacy.blank("en")
    bilm = spacy_elmo.BiLM(published_options(shape)).eval()
    spacy_elmo.add_elmo(nlp, bilm=bilm, config={"model": {"precision": precision}})
    with tempfile.TemporaryDirectory() as tmp:
        nlp.to_disk(tmp)
        cmd = [sys.executable, "-m", "spacy", "benchmark", "speed", tmp, str(data),
               "--batch-size", str(batch_size), "--n-batches", str(n_batches)]
        typer.echo(" ".join(cmd[1:]))
        raise SystemExit(subprocess.call(cmd))


if __name__ == "__main__":
    typer.run(main)
