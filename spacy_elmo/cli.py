"""Command line: ``python -m spacy_elmo COMMAND`` (typer)."""
import sys
from pathlib import Path
from typing import List, Optional

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

    try:
        model = BiLM.from_hdf5(weights, options).eval()
    except ValueError as err:  # OptionsError, WeightFileError: they name the file and the problem
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2)
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


@app.command()
def pretrain(
    train: List[Path] = typer.Argument(..., help="Training text: files (one sentence or paragraph a line, UTF-8), directories (read recursively) or .spacy files"),
    output: Path = typer.Option(..., "--output", "-o", help="Output directory: config, vocab, options, log.jsonl, checkpoints/, export/, learning_curve.png"),
    options: Optional[Path] = typer.Option(None, help="biLM options JSON (model sizes)"),
    shape: Optional[str] = typer.Option(None, help="Published shape instead of --options: small, medium or original"),
    dev: List[Path] = typer.Option([], help="Held-out text (repeatable); default: --dev-fraction of the training windows"),
    lang: str = typer.Option("en", help="spaCy language whose tokenizer splits the text (spacy.blank(lang))"),
    max_tokens: int = typer.Option(100, help="Longer lines are cut into windows of at most this many tokens"),
    vocab: Optional[Path] = typer.Option(None, help="Use this vocabulary file (one word a line, <S> </S> <UNK> first) instead of building one"),
    vocab_size: int = typer.Option(50_000, help="Largest vocabulary built from the corpus (specials included)"),
    min_count: int = typer.Option(1, help="Words rarer than this become <UNK>"),
    cutoffs: Optional[str] = typer.Option(None, help="Adaptive-softmax cluster boundaries, e.g. 2000,20000 (default by vocab size)"),
    dev_fraction: float = typer.Option(0.01, help="Fraction of windows held out when no --dev is given (at most 2000)"),
    batch_size: int = typer.Option(32, help="Windows per batch and process"),
    max_steps: int = typer.Option(10_000, help="Optimizer steps"),
    optimizer: str = typer.Option("adam", help="adam or adagrad"),
    lr: Optional[float] = typer.Option(None, help="Learning rate (default: adam 1e-3, adagrad 0.2)"),
    warmup_steps: int = typer.Option(0, help="Linear warm-up steps"),
    schedule: str = typer.Option("linear", help="After warm-up: linear (decay to 0 at max-steps) or constant"),
    clip_norm: float = typer.Option(10.0, help="Global gradient-norm clipping"),
    dropout: float = typer.Option(0.1, help="Dropout on LSTM inputs and the top layer"),
    seed: int = typer.Option(0, help="Seed of the weights, the data order and the held-out split"),
    log_every: int = typer.Option(10, help="Log training loss every N steps"),
    eval_every: int = typer.Option(500, help="Held-out perplexity every N steps"),
    checkpoint_every: int = typer.Option(1000, help="Checkpoint every N steps (and on SIGTERM/SIGINT, and at the end)"),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N"),
    precision: str = typer.Option("fp32", help="fp32, bf16 (autocast) or fp16 (autocast + GradScaler, CUDA only)"),
    strict: bool = typer.Option(False, help="Fail on bad input (binary/empty files, bad UTF-8, huge lines) instead of skipping it"),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUTPUT/checkpoints/last.pt"),
    threads: Optional[int] = typer.Option(None, help="torch threads per process"),
    progress: bool = typer.Option(True, help="Show a progress bar"),
) -> None:
    """Train a biLM on your own text (torchrun for several processes); see docs/pretraining.md."""
    import logging

    import torch

    from .pretrain import PretrainConfig
    from .pretrain import pretrain as run_pretrain

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if threads:
        torch.set_num_threads(threads)
    try:
        cut = [int(c) for c in cutoffs.split(",") if c.strip()] if cutoffs else None
    except ValueError:
        raise typer.BadParameter(f"--cutoffs must be comma-separated integers, found {cutoffs!r}")
    config = PretrainConfig(
        train=[str(p) for p in train], output=str(output), dev=[str(p) for p in dev],
        options=str(options) if options else None, shape=shape, lang=lang, max_tokens=max_tokens,
        strict=strict, vocab=str(vocab) if vocab else None, vocab_size=vocab_size, min_count=min_count,
        cutoffs=cut, dev_fraction=dev_fraction, batch_size=batch_size, max_steps=max_steps,
        optimizer=optimizer, lr=lr, warmup_steps=warmup_steps, schedule=schedule, clip_norm=clip_norm,
        dropout=dropout, seed=seed, log_every=log_every, eval_every=eval_every,
        checkpoint_every=checkpoint_every, device=device, precision=precision,
    )
    try:
        summary = run_pretrain(config, resume=resume, progress=progress)
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2)
    import os

    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 reports
        return
    if summary.get("stopped"):
        typer.echo(f"stopped at step {summary['step']}; checkpoint in {output}/checkpoints/last.pt (continue with --resume)")
    elif summary.get("dev"):
        d = summary["dev"]
        typer.echo(
            f"step {summary['step']}: held-out perplexity forward {d['dev_ppl_forward']:.2f}, backward "
            f"{d['dev_ppl_backward']:.2f}, mean {d['dev_ppl']:.2f} (unigram {summary['unigram_dev_ppl']:.2f}); "
            f"exported to {output}/export"
        )
    else:
        typer.echo(
            f"step {summary['step']}: done, exported to {output}/export; no held-out perplexity: no held-out "
            "text (--dev-fraction 0, or too few windows to hold any out: give --dev FILE, or more text)"
        )


@app.command()
def export(
    output: Path = typer.Argument(..., help="A pretraining output directory"),
    target: Path = typer.Argument(..., help="Write weights.hdf5, options.json and vocab.txt here"),
    checkpoint: Optional[Path] = typer.Option(None, help="Checkpoint file (default: OUTPUT/checkpoints/last.pt)"),
    nlp: Optional[Path] = typer.Option(None, "--nlp", help="Also write a spaCy pipeline (blank LANG + an elmo component) here, for spacy.load"),
    lang: Optional[str] = typer.Option(None, help="Language of the --nlp pipeline (default: the --lang the biLM was trained with)"),
) -> None:
    """Export a pretrained biLM to the published hdf5 + options JSON format, with its
    vocabulary, and optionally as a spaCy pipeline with an elmo component."""
    from .pretrain import export as run_export
    from .pretrain import export_pipeline

    try:
        path = run_export(output, target, checkpoint)
        typer.echo(f"wrote {path}/weights.hdf5, options.json, vocab.txt")
        if nlp is not None:
            typer.echo(f"wrote the spaCy pipeline {export_pipeline(output, nlp, lang, checkpoint)}")
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2)
