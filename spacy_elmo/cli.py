"""Command line: ``python -m spacy_elmo COMMAND`` (typer)."""
import sys
from pathlib import Path
from typing import Any, List, Optional

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
    from .loading import DownloadError, resolve

    try:
        weights_path, options_path = resolve(name, options, progress=progress)
    except (ValueError, DownloadError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2)
    typer.echo(f"weights: {weights_path}")
    typer.echo(f"options: {options_path}")


def main() -> None:
    app()


def _setting(name: str, *flags: str, argument: bool = False) -> Any:
    """The option (or argument) for the PretrainConfig field ``name``, with
    the field's default and help: the dataclass is their one source."""
    from dataclasses import MISSING

    from .pretrain.config import PretrainConfig

    setting = PretrainConfig.setting(name)
    if setting.default_factory is not MISSING:
        default = setting.default_factory()
    else:
        default = ... if setting.default is MISSING else setting.default
    make = typer.Argument if argument else typer.Option
    return make(default, *flags, help=setting.metadata["help"])


def _config_value(value: Any) -> Any:
    """Paths as the strings config.json holds."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return [_config_value(v) for v in value]
    return value


@app.command()
def pretrain(
    train: List[Path] = _setting("train", argument=True),
    output: Path = _setting("output", "--output", "-o"),
    options: Optional[Path] = _setting("options"),
    shape: Optional[str] = _setting("shape"),
    init: Optional[Path] = _setting("init"),
    dev: List[Path] = _setting("dev"),
    lang: str = _setting("lang"),
    max_tokens: int = _setting("max_tokens"),
    vocab: Optional[Path] = _setting("vocab"),
    vocab_size: int = _setting("vocab_size"),
    min_count: int = _setting("min_count"),
    cutoffs: Optional[str] = _setting("cutoffs"),
    dev_fraction: float = _setting("dev_fraction"),
    batch_size: int = _setting("batch_size"),
    max_steps: int = _setting("max_steps"),
    optimizer: str = _setting("optimizer"),
    lr: Optional[float] = _setting("lr"),
    warmup_steps: int = _setting("warmup_steps"),
    schedule: str = _setting("schedule"),
    clip_norm: float = _setting("clip_norm"),
    dropout: float = _setting("dropout"),
    seed: int = _setting("seed"),
    log_every: int = _setting("log_every"),
    eval_every: Optional[int] = _setting("eval_every"),
    checkpoint_every: int = _setting("checkpoint_every"),
    device: str = _setting("device"),
    precision: str = _setting("precision"),
    strict: bool = _setting("strict"),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUTPUT/checkpoints/last.pt"),
    threads: Optional[int] = typer.Option(None, help="torch threads per process"),
    progress: bool = typer.Option(True, help="Show a progress bar"),
) -> None:
    """Train a biLM on your own text (torchrun for several processes); see docs/pretraining.md."""
    given = dict(locals())
    import logging
    from dataclasses import fields

    import torch

    from .pretrain import PretrainConfig
    from .pretrain import pretrain as run_pretrain
    from .pretrain.curve import plot_available
    from .pretrain.preflight import busy_machine_warning

    settings = {f.name: _config_value(given[f.name]) for f in fields(PretrainConfig) if f.name in given}
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if threads:
        torch.set_num_threads(threads)
    warning = busy_machine_warning(torch.get_num_threads())
    if warning:
        typer.echo(f"warning: {warning}", err=True)
    if not plot_available():
        typer.echo("note: no learning-curve plot without matplotlib (pip install 'spacy_elmo[pretrain]'); "
                   "log.jsonl has the figures, and `python -m spacy_elmo plot OUTPUT` draws it later", err=True)
    try:
        settings["cutoffs"] = [int(c) for c in cutoffs.split(",") if c.strip()] if cutoffs else None
    except ValueError:
        raise typer.BadParameter(f"--cutoffs must be comma-separated integers, found {cutoffs!r}")
    config = PretrainConfig(**settings)
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
    from .pretrain.curve import plot_learning_curve

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
    from .senses_command import neighbours_command

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
    from .senses import sense_eval
    from .senses_command import format_table, load_bilm

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


@app.command()
def perplexity(
    texts: List[Path] = typer.Argument(..., help="Held-out text: files (one sentence or paragraph a line) or directories, read as `pretrain` reads them"),
    model: Optional[str] = typer.Option(None, help="An exported model directory with vocab.txt and softmax.hdf5 beside the weights (default: the shipped English biLM)"),
    lang: str = typer.Option("en", help="Language of spaCy's blank tokenizer"),
    max_tokens: int = typer.Option(64, help="Window length in tokens, as in pretraining (the shipped model: 64)"),
    batch_size: int = typer.Option(128, help="Windows per batch"),
) -> None:
    """Held-out perplexity (forward, backward, geometric mean) of a biLM's language
    models on TEXTS: how well a model, or one adapted with `pretrain --init`,
    predicts text of your domain."""
    from . import hub
    from .pretrain.errors import PretrainError
    from .pretrain.perplexity import perplexity as held_out

    try:
        directory = Path(model) if model else hub.SHIPPED_MODEL_DIR
        result = held_out(directory, texts, lang=lang, max_tokens=max_tokens, batch_size=batch_size)
    except (PretrainError, ValueError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2)
    typer.echo(
        f"perplexity forward {result['ppl_forward']:.2f}, backward {result['ppl_backward']:.2f}, "
        f"mean {result['ppl']:.2f} over {result['tokens']:,} tokens ({100 * result['unk_fraction']:.1f}% <UNK>)"
    )
