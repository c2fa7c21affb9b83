"""Command line: ``python -m spacy_elmo COMMAND`` (typer)."""
import sys
from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(help="ELMo for spaCy: embed, download, pretrain, export.", no_args_is_help=True)


@app.callback()
def _root() -> None:
    """ELMo for spaCy: embed, download, pretrain, export."""


@app.command()
def embed(
    weights: Optional[str] = typer.Argument(None, help="biLM: a name (english, small, medium, original, original-5.5b), a directory, a weights hdf5 file (published format) or a URL; default: the English biLM shipped with the package"),
    options: Optional[str] = typer.Argument(None, help="biLM options JSON (path or URL), where WEIGHTS is a file without options.json beside it"),
    input_path: Optional[Path] = typer.Option(None, "--input", "-i", help="Text file, one whitespace-tokenised sentence a line (default: stdin)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write activations to this hdf5 file: dataset 'i' = sentence i, shape (L+1, n_tokens, dim)"),
    batch_size: int = typer.Option(64, help="Sentences per batch"),
) -> None:
    """Embed sentences with a biLM and report (or save) their layer activations.

    Prints one line per sentence: its index, the shape of its activations
    (layers, tokens, dim), its first 60 characters, and the L2 norm of each
    token's ELMo vector (the mean of the layers), as a quick look at the output."""
    import h5py

    from .bilm import BiLM
    from .hub import DownloadError

    try:
        model = BiLM.from_pretrained(weights, options).eval()
    except (ValueError, DownloadError) as err:  # OptionsError, WeightFileError name the file and the problem
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
        typer.echo(f"{i}\t{array.shape}\t{' '.join(sentence)[:60]}\ttoken vector norms: {norms[:80]}")


@app.command()
def download(
    name: str = typer.Argument(..., help="small, medium, original or original-5.5b (AllenNLP's published English ELMo), or a weights URL"),
    options: Optional[str] = typer.Option(None, help="Options URL or path, for a weights URL whose options URL is not its _weights.hdf5 -> _options.json"),
    progress: bool = typer.Option(True, help="Show a progress bar"),
) -> None:
    """Download a published ELMo model (or a URL) into the cache, once, and print
    where its files are. The cache is SPACY_ELMO_CACHE (default: spacy_elmo in
    the user's cache directory); SPACY_ELMO_MIRROR replaces the published base URL."""
    from .hub import DownloadError, resolve

    try:
        weights_path, options_path = resolve(name, options, progress=progress)
    except (ValueError, DownloadError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2)
    typer.echo(f"weights: {weights_path}")
    typer.echo(f"options: {options_path}")


def main() -> None:
    app()


@app.command()
def pretrain(
    train: List[Path] = typer.Argument(..., help="Training text: files (one sentence or paragraph a line, UTF-8), directories (read recursively) or .spacy files"),
    output: Path = typer.Option(..., "--output", "-o", help="Output directory: config, vocab, options, log.jsonl, checkpoints/, export/, learning_curve.png"),
    options: Optional[Path] = typer.Option(None, help="biLM options JSON (model sizes)"),
    shape: Optional[str] = typer.Option(None, help="Published shape instead of --options: small, medium or original"),
    init: Optional[Path] = typer.Option(None, help="Start from an exported model directory (weights.hdf5, options.json; vocab.txt and softmax.hdf5 are used when there): continue or adapt it"),
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
    eval_every: Optional[int] = typer.Option(None, help="Held-out perplexity every N steps (default: max-steps/20, 50..1000)"),
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
    from .pretrain.trainer import busy_machine_warning, plot_available

    warning = busy_machine_warning(torch.get_num_threads())
    if warning:
        typer.echo(f"warning: {warning}", err=True)
    if not plot_available():
        typer.echo("note: no learning-curve plot without matplotlib (pip install 'spacy_elmo[pretrain]'); "
                   "log.jsonl has the figures, and `python -m spacy_elmo plot OUTPUT` draws it later", err=True)
    try:
        cut = [int(c) for c in cutoffs.split(",") if c.strip()] if cutoffs else None
    except ValueError:
        raise typer.BadParameter(f"--cutoffs must be comma-separated integers, found {cutoffs!r}")
    config = PretrainConfig(
        train=[str(p) for p in train], output=str(output), dev=[str(p) for p in dev],
        options=str(options) if options else None, shape=shape, init=str(init) if init else None, lang=lang, max_tokens=max_tokens,
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
def plot(
    output: Path = typer.Argument(..., help="A pretraining output directory (holds log.jsonl)"),
) -> None:
    """Draw OUTPUT/learning_curve.png from OUTPUT/log.jsonl (needs matplotlib)."""
    from .pretrain.trainer import plot_learning_curve

    log = output / "log.jsonl"
    if not log.is_file():
        typer.echo(f"error: {log} not found", err=True)
        raise typer.Exit(2)
    try:
        plot_learning_curve(log, output / "learning_curve.png")
    except ImportError:
        typer.echo("error: the plot needs matplotlib: pip install 'spacy_elmo[pretrain]'", err=True)
        raise typer.Exit(2)
    typer.echo(f"wrote {output / 'learning_curve.png'}")


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


@app.command()
def neighbours(
    query: str = typer.Argument(..., help="The query sentence (tokenised with spacy.blank(LANG))"),
    word: str = typer.Option(..., help="The word of the query whose uses to compare (first match, ignoring case)"),
    corpus: Path = typer.Option(..., help="Text file, one sentence a line (tokenised with spacy.blank(LANG))"),
    k: int = typer.Option(5, help="How many neighbours"),
    layer: str = typer.Option("mix", help="biLM layer 0..L, or 'mix' (the mean of the layers)"),
    weights: Optional[Path] = typer.Option(None, help="biLM weights (default: the shipped model, if installed)"),
    options: Optional[Path] = typer.Option(None, help="biLM options JSON (default: options.json beside the weights)"),
    lang: str = typer.Option("en", help="spaCy language whose tokenizer splits the query and the corpus"),
    batch_size: int = typer.Option(64, help="Sentences per batch"),
) -> None:
    """Contextual nearest neighbours: the corpus uses of WORD nearest to its use in QUERY."""
    from .senses import neighbours_command

    try:
        neighbours_command(query, word, corpus, k, layer, weights, options, lang, batch_size, typer.echo)
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2)


@app.command()
def senses(
    data: Optional[Path] = typer.Option(None, help="Senses dataset, JSON lines (default: the shipped English set)"),
    weights: Optional[Path] = typer.Option(None, help="biLM weights (default: the shipped model, if installed)"),
    options: Optional[Path] = typer.Option(None, help="biLM options JSON (default: options.json beside the weights)"),
    per_word: bool = typer.Option(False, "--per-word", help="Also print each word's accuracy per layer"),
    method: str = typer.Option("centroid", help="centroid: nearest sense centroid (the paper's method); 1nn: nearest other use"),
    random_weights: bool = typer.Option(False, "--random-weights", help="The baseline: a biLM of the same shape with random weights (seed 0)"),
    batch_size: int = typer.Option(64, help="Sentences per batch"),
) -> None:
    """Word sense accuracy per biLM layer, leave-one-out within each word: each use
    takes the sense whose other uses' mean vector is nearest (or, with --method 1nn,
    the sense of the nearest other use)."""
    from .senses import format_table, load_bilm, sense_eval

    try:
        bilm = load_bilm(weights, options)
        if random_weights:
            import torch

            from .bilm import BiLM

            torch.manual_seed(0)
            bilm = BiLM(bilm.options).eval()
        rows = sense_eval(bilm, data, batch_size=batch_size, method=method)
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2)
    typer.echo(format_table(rows, per_word=per_word))
