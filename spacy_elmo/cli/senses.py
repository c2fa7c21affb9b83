"""``neighbours`` and ``senses``: word senses in ELMo space (see docs/senses.md)."""
from pathlib import Path
from typing import Optional

import typer

from ._app import BatchSize, InputError, Lang, Model, Options, Progress, Whitespace, command, pick, show_progress
from .inputs import ProgressEmbedder, input_file, load_model, read_lines, tokenizer

LAYER_HELP = (
    "Which activations to compare: 0 (the context-free character encoding), 1..L (the LSTM layers), or mix "
    "(the default: the plain mean of all layers, the unweighted ELMo vector). In the ELMo paper (section 5.3) the "
    "top LSTM layer (L) separates word senses best and the first (1) part-of-speech tags"
)


@command()
def neighbours(
    query: str = typer.Argument(..., help="The query sentence"),
    word: str = typer.Option(..., help="The word of the query whose uses to compare (its first use, ignoring case)"),
    corpus: Path = typer.Option(..., help="UTF-8 text, one sentence a line, searched for uses of WORD"),
    k: int = typer.Option(5, min=1, help="How many neighbours"),
    layer: str = typer.Option("mix", help=LAYER_HELP),
    model: Model = None,
    options: Options = None,
    lang: Lang = "en",
    whitespace: Whitespace = False,
    batch_size: BatchSize = 64,
    progress: Progress = None,
    old_weights: Optional[str] = typer.Option(None, "--weights", hidden=True),
) -> None:
    """Contextual nearest neighbours: the uses of WORD in the corpus nearest to its use in QUERY.

    The query and the corpus are tokenised alike (spaCy's tokenizer for
    LANG, or --whitespace); a use is a token equal to WORD, ignoring case."""
    from ..senses import nearest_uses, parse_layer, uses
    from ..senses.display import mark

    progress = show_progress(progress)
    model = pick(model, old_weights, "--model", "--weights")
    which = parse_layer(layer)
    input_file(corpus, "--corpus")
    tokenize = tokenizer(lang, whitespace)
    query_tokens = next(tokenize([query]))
    positions = uses(query_tokens, word)
    if not positions:
        raise InputError(f"--word {word!r} is not a token of the query {query_tokens}")
    needle = word.lower()
    candidates = (line for line in read_lines(corpus, "--corpus") if needle in line.lower())  # cheap filter first
    sentences = [tokens for tokens in tokenize(candidates) if uses(tokens, word)]
    bilm = load_model(model, options, progress)
    if isinstance(which, int) and not 0 <= which < bilm.num_layers:
        raise InputError(f"--layer must be 'mix' or in 0..{bilm.num_layers - 1}, found {which}")
    found = nearest_uses(ProgressEmbedder(bilm, progress), query_tokens, positions[0], sentences, which, k, batch_size)
    name = "mean of the layers" if which == "mix" else f"layer {which}"
    typer.echo(f"query: {mark(query_tokens, positions[0])}   ({name}; {len(sentences)} corpus sentences use {word!r})")
    for rank, n in enumerate(found, 1):
        typer.echo(f"{rank:>3}  {n.score:.3f}  {mark(n.tokens, n.position)}")
    if not found:
        typer.echo(f"no corpus sentence uses {word!r}")


@command()
def senses(
    data: Optional[Path] = typer.Option(
        None,
        help="Senses dataset: crossed frames (the format of docs/senses.md), or a .jsonl file of word, sense, tokens, "
        "index and optionally frame (default: the shipped English set)",
    ),
    model: Model = None,
    options: Options = None,
    per_word: bool = typer.Option(False, "--per-word", help="Also print each word's accuracy per layer"),
    method: str = typer.Option("centroid", help="centroid: nearest sense centroid (the paper's method); 1nn: nearest other use"),
    random_weights: bool = typer.Option(False, "--random-weights", help="The baseline: a biLM of the same shape with random weights (seed 0)"),
    batch_size: BatchSize = 64,
    progress: Progress = None,
    old_weights: Optional[str] = typer.Option(None, "--weights", hidden=True),
) -> None:
    """Word sense accuracy per biLM layer, leave-one-frame-out within each word.

    Each use takes the sense whose mean vector over the word's other frames
    is nearest (or, with --method 1nn, the sense of the nearest use in
    another frame); items without frames are left out one by one. The
    dataset gives its tokens, so no tokenizer runs."""
    from ..senses import load_senses, random_like, sense_eval
    from ..senses.display import format_table

    progress = show_progress(progress)
    model = pick(model, old_weights, "--model", "--weights")
    items = load_senses(input_file(data, "--data"))
    bilm = load_model(model, options, progress)
    if random_weights:
        bilm = random_like(bilm, seed=0)
    rows = sense_eval(ProgressEmbedder(bilm, progress), items, batch_size=batch_size, method=method)
    typer.echo(format_table(rows, per_word=per_word))
