"""``embed`` and ``download``."""
from pathlib import Path
from typing import List, Optional

import typer

from ._app import BatchSize, InputError, Lang, Model, Options, Progress, Whitespace, command, pick, show_progress
from .inputs import (
    STDIN,
    ProgressEmbedder,
    input_file,
    load_model,
    model_identity,
    output_file,
    read_lines,
    tokenization_name,
    tokenizer,
)


def _old_positionals(extra: List[str], model: Optional[str], options: Optional[str]):
    """``embed WEIGHTS [OPTIONS]``, the old spelling of ``--model``/``--options``
    (deprecated, out of the help)."""
    if len(extra) > 2 or any(arg.startswith("-") for arg in extra):
        raise InputError(f"unexpected arguments {' '.join(extra)}: give the model with --model (see --help)")
    model = pick(model, extra[0] if extra else None, "--model", "the positional WEIGHTS")
    return model, pick(options, extra[1] if len(extra) > 1 else None, "--options", "the positional OPTIONS")


@command(context_settings={"allow_extra_args": True})
def embed(
    ctx: typer.Context,
    model: Model = None,
    options: Options = None,
    input_path: Optional[Path] = typer.Option(
        None, "--input", "-i", help="UTF-8 text, one sentence a line (default: stdin)"
    ),
    output: Optional[Path] = typer.Option(
        None,
        "--output",
        "-o",
        help="Write the activations, the tokens and the model's identity to this hdf5 file (see docs/cli.md)",
    ),
    lang: Lang = "en",
    whitespace: Whitespace = False,
    batch_size: BatchSize = 64,
    progress: Progress = None,
) -> None:
    """Embed sentences with a biLM: print a summary line per sentence, or save everything with -o.

    Each line of the input is one sentence (an empty line, an empty
    sentence). A summary line gives the sentence's index, the shape of its
    activations (layers, tokens, dim), its first 60 characters and the L2
    norm of each token's ELMo vector (the mean of the layers)."""
    progress = show_progress(progress)
    model, options = _old_positionals(ctx.args, model, options)
    input_file(input_path, "--input")
    output_file(output, "--output")
    bilm = load_model(model, options, progress)
    tokenize = tokenizer(lang, whitespace)
    sentences: List[List[str]] = list(tokenize(read_lines(input_path, "--input")))
    writer = None
    if output is not None:
        from .. import __version__
        from .embed_file import EmbedWriter

        attrs = dict(model_identity(model, options), tokenization=tokenization_name(lang, whitespace),
                     input=str(input_path) if input_path else STDIN, spacy_elmo_version=__version__)
        writer = EmbedWriter(output, sentences, attrs)
    summaries: List[str] = [""] * len(sentences)
    try:
        for rows, arrays in ProgressEmbedder(bilm, progress).batches(sentences, batch_size):
            for i, array in zip(rows, arrays):
                if writer is not None:
                    writer.write(i, array)
                norms = " ".join(f"{v:.3f}" for v in (array.mean(axis=0) ** 2).sum(-1) ** 0.5) if array.size else ""
                summaries[i] = f"{i}\t{array.shape}\t{' '.join(sentences[i])[:60]}\ttoken vector norms: {norms[:80]}"
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if writer is not None:
        writer.close()
        typer.echo(f"wrote {len(sentences)} sentences to {output}")
    for line in summaries:
        typer.echo(line)


@command()
def download(
    name: str = typer.Argument(
        ...,
        help="small, medium, original or original-5.5b (AllenNLP's published English ELMo), efml:<lang> "
             "(ELMoForManyLangs, e.g. efml:de), nlpl:<id> (the NLPL repository), or a weights or zip URL",
    ),
    options: Options = None,
    progress: Progress = None,
) -> None:
    """Download a published ELMo model (or a URL) into the cache, once, and print where its files are.

    The cache is SPACY_ELMO_CACHE (default: spacy_elmo in the user's cache
    directory); SPACY_ELMO_MIRROR replaces the published base URL. The
    English model shipped with the package needs no download."""
    from ..hub import resolve

    weights_path, options_path = resolve(name, options, progress=show_progress(progress))
    typer.echo(f"weights: {weights_path}")
    typer.echo(f"options: {options_path}")
