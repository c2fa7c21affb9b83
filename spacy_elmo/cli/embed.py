"""``embed`` and ``download``."""

from pathlib import Path
from typing import List, Optional

import typer

from ..embed.run import EmbedSettings
from ._app import (
    MODEL_WORDING,
    BatchSize,
    InputError,
    Lang,
    Model,
    Options,
    Progress,
    Whitespace,
    command,
    show_progress,
)
from .inputs import ProgressEmbedder, input_file, load_model, model_identity, read_lines, tokenization_name, tokenizer


@command()
def embed(
    model: Model = None,
    options: Options = None,
    input_path: Optional[Path] = typer.Option(
        None, "--input", "-i", help="UTF-8 text, one sentence a line (default: stdin)"
    ),
    output: Optional[str] = typer.Option(
        None,
        "--output",
        "-o",
        help="Write the vectors, tokens, line numbers and the model's identity here, streaming and resumable: an hdf5 "
        "file, or a directory of shards (several processes, or a name ending in /); see docs/embedding.md",
    ),
    lang: Lang = "en",
    whitespace: Whitespace = False,
    batch_size: BatchSize = 64,
    layers: str = typer.Option(
        "all", "--layers", help="With -o: the layers kept: all, top, mix (their mean) or numbers such as 0,2"
    ),
    dtype: str = typer.Option("float32", "--dtype", help="With -o: float32 or float16"),
    chunk_kb: int = typer.Option(
        1024, "--chunk-kb", min=1, help="With -o: the unit of work, resume and sharding: this many KiB of input lines"
    ),
    skip_blank: bool = typer.Option(
        False,
        "--skip-blank",
        help="With -o: leave out lines without tokens (their line numbers are kept for the others)",
    ),
    shard: Optional[str] = typer.Option(
        None,
        "--shard",
        metavar="I/N",
        help="With -o: embed shard I of N (0-based) into the directory -o, "
        "for N processes started by anything (a SLURM array, ...); under torchrun the ranks shard by themselves",
    ),
    device: str = typer.Option(
        "auto", "--device", help="With -o: auto (GPU LOCAL_RANK if there is one, else CPU), cpu, cuda, cuda:N"
    ),
    threads: int = typer.Option(
        0,
        "--threads",
        min=0,
        help="With -o, on the CPU: threads per process (0: the cores shared among the machine's processes)",
    ),
    progress: Progress = None,
) -> None:
    """Embed sentences with a biLM: print a summary line per sentence, or save everything with -o.

    Each line of the input is one sentence (an empty line, an empty
    sentence). A summary line gives the sentence's index, the shape of its
    activations (layers, tokens, dim), its first 60 characters and the L2
    norm of each token's ELMo vector (the mean of the layers).

    With -o the input is streamed in chunks (memory bounded, any size),
    sharded over processes (torchrun, or --shard I/N), and a stopped run
    resumes where it stopped when the same command is run again."""
    progress = show_progress(progress)
    input_file(input_path, "--input")
    if output is not None:
        _embed_to_output(
            model,
            options,
            input_path,
            output,
            lang,
            whitespace,
            progress,
            shard,
            device,
            threads,
            EmbedSettings(layers, dtype, batch_size, chunk_kb, skip_blank),
        )
        return
    bilm = load_model(model, options, progress)
    tokenize = tokenizer(lang, whitespace)
    sentences: List[List[str]] = list(tokenize(read_lines(input_path, "--input")))
    summaries: List[str] = [""] * len(sentences)
    for rows, arrays in ProgressEmbedder(bilm, progress).batches(sentences, batch_size):
        for i, array in zip(rows, arrays):
            norms = " ".join(f"{v:.3f}" for v in (array.mean(axis=0) ** 2).sum(-1) ** 0.5) if array.size else ""
            summaries[i] = f"{i}\t{array.shape}\t{' '.join(sentences[i])[:60]}\ttoken vector norms: {norms[:80]}"
    for line in summaries:
        typer.echo(line)


def _embed_to_output(
    model, options, input_path, output, lang, whitespace, progress, shard, device, threads, settings
) -> None:
    """``embed -o``: this process's shard, through :func:`spacy_elmo.embed.embed_corpus`."""
    from ..embed import detect_world, embed_corpus, place_model
    from ..embed.run import check_output

    world = detect_world(shard)
    if input_path is None and world.size > 1:
        raise InputError("several shards need --input (a file every process can read), not stdin")
    check_output(input_path, output, world)  # before the model is loaded or any text read
    tokenize = tokenizer(lang, whitespace)
    bilm = load_model(model, options, progress)
    place_model(bilm, world, device, threads)
    result = embed_corpus(
        bilm,
        input_path,
        output,
        model=model_identity(model, options),
        tokenize=tokenize,
        tokenization=tokenization_name(lang, whitespace),
        settings=settings,
        world=world,
        progress=progress,
    )
    resumed = f"; {result.resumed_chunks} chunks were finished by an earlier run" if result.resumed_chunks else ""
    typer.echo(f"wrote {result.sentences} sentences ({result.tokens} tokens) to {result.path}{resumed}")
    if result.manifest is not None:
        typer.echo(f"all shards written: {result.manifest}")


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
    from ..loading import resolve

    weights_path, options_path = resolve(name, options, progress=show_progress(progress), wording=MODEL_WORDING)
    typer.echo(f"weights: {weights_path}")
    typer.echo(f"options: {options_path}")
