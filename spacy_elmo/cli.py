"""Command line: ``python -m spacy_elmo COMMAND`` (typer)."""
import sys
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(help="ELMo for spaCy: embed, pretrain, export, benchmark.", no_args_is_help=True)


@app.callback()
def _root() -> None:
    """ELMo for spaCy: embed, pretrain, export, benchmark."""


@app.command()
def embed(
    weights: Path = typer.Argument(..., help="biLM weights, published hdf5 format"),
    options: Path = typer.Argument(..., help="biLM options JSON"),
    input_path: Optional[Path] = typer.Option(None, "--input", "-i", help="Text file, one whitespace-tokenised sentence a line (default: stdin)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write activations to this hdf5 file: dataset 'i' = sentence i, shape (L+1, n_tokens, dim)"),
    batch_size: int = typer.Option(64, help="Sentences per batch"),
) -> None:
    """Embed sentences with a biLM and report (or save) their layer activations."""
    import h5py

    from .bilm import BiLM

    model = BiLM.from_hdf5(weights, options).eval()
    text = input_path.read_text(encoding="utf-8") if input_path else sys.stdin.read()
    sentences = [line.split() for line in text.splitlines()]
    embeddings = model.embed_sentences(sentences, batch_size=batch_size)
    if output is not None:
        with h5py.File(output, "w") as fout:
            for i, array in enumerate(embeddings):
                fout.create_dataset(str(i), data=array)
        typer.echo(f"wrote {len(embeddings)} sentences to {output}")
    for i, (sentence, array) in enumerate(zip(sentences, embeddings)):
        norms = " ".join(f"{v:.3f}" for v in (array.mean(axis=0) ** 2).sum(-1) ** 0.5) if array.size else ""
        typer.echo(f"{i}\t{array.shape}\t{' '.join(sentence)[:60]}\t|v|: {norms[:80]}")


@app.command()
def benchmark(
    shapes: str = typer.Option("small,medium,original", help="Comma-separated published shapes"),
    sentences: int = typer.Option(256, help="Number of sentences (5-40 tokens each)"),
    batch_size: int = typer.Option(64, help="Sentences per batch"),
    fast: bool = typer.Option(True, help="Also time the bf16 fast path"),
    device: str = typer.Option("cpu", help="cpu or cuda"),
    threads: Optional[int] = typer.Option(None, help="torch threads (default: torch's choice)"),
    output: Optional[Path] = typer.Option(None, help="Write the rows as JSON here"),
    text: Optional[Path] = typer.Option(None, help="Take the sentences from this file (one a line, 5-40 tokens) instead of synthetic text"),
) -> None:
    """Embedding speed on random weights of the published shapes, with the matmul peak."""
    import json

    import torch

    from .benchmark import run

    if threads:
        torch.set_num_threads(threads)
    rows = run([s.strip() for s in shapes.split(",") if s.strip()], sentences, batch_size, fast, device, echo=typer.echo, text=str(text) if text else None)
    if output:
        output.write_text(json.dumps(rows, indent=2))


def main() -> None:
    app()
