"""``neighbours`` and ``senses``: word senses in ELMo space (see docs/senses.md)."""
from pathlib import Path
from typing import Dict, List, Optional

import typer

from ._app import BatchSize, InputError, Lang, Model, Options, Progress, Whitespace, command, show_progress
from .inputs import (
    ProgressEmbedder,
    input_file,
    load_model,
    model_files,
    output_file,
    read_lines,
    sha256_file,
    tokenizer,
)

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
) -> None:
    """Contextual nearest neighbours: the uses of WORD in the corpus nearest to its use in QUERY.

    The query and the corpus are tokenised alike (spaCy's tokenizer for
    LANG, or --whitespace); a use is a token equal to WORD, ignoring case."""
    from ..senses import nearest_uses, parse_layer, uses
    from ..senses.display import mark

    progress = show_progress(progress)
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
    method: str = typer.Option(
        "centroid", help="centroid: nearest sense centroid (the paper's method); 1nn: nearest other use"
    ),
    random_weights: bool = typer.Option(
        False, "--random-weights", help="The baseline: a biLM of the same shape with random weights (seed 0)"
    ),
    batch_size: BatchSize = 64,
    progress: Progress = None,
) -> None:
    """Word sense accuracy per biLM layer, leave-one-frame-out within each word.

    Each use takes the sense whose mean vector over the word's other frames
    is nearest (or, with --method 1nn, the sense of the nearest use in
    another frame); items without frames are left out one by one. The
    dataset gives its tokens, so no tokenizer runs."""
    from ..senses import load_senses, random_like, sense_eval
    from ..senses.display import format_table

    progress = show_progress(progress)
    items = load_senses(input_file(data, "--data"))
    bilm = load_model(model, options, progress)
    if random_weights:
        bilm = random_like(bilm, seed=0)
    rows = sense_eval(ProgressEmbedder(bilm, progress), items, batch_size=batch_size, method=method)
    typer.echo(format_table(rows, per_word=per_word))


@command()
def wsd(
    train: List[Path] = typer.Option(
        ...,
        "--train",
        metavar="PATH",
        help="Training data with sense keys (SemCor): a *.data.xml[.gz] beside its *.gold.key.txt[.gz], or a "
        "directory holding one (the framework's root: Training_Corpora/SemCor). Repeat for more files",
    ),
    test: List[Path] = typer.Option(
        ...,
        "--test",
        metavar="PATH",
        help="Test sets: *.data.xml[.gz] files beside their keys, or a directory of them (the framework's root: "
        "every set in Evaluation_Datasets, ALL included). Repeat for more",
    ),
    sense_index: Path = typer.Option(
        ...,
        "--sense-index",
        metavar="PATH",
        help="WordNet 3.0's index.sense (Debian's wordnet-sense-index: usr/share/wordnet/index.sense), for the "
        "first-sense fallback and baseline",
    ),
    model: Model = None,
    options: Options = None,
    random_seeds: int = typer.Option(
        3, "--random-seeds", min=0, help="Random-weights baselines of the model's shape, seeds 0..N-1 (0: none)"
    ),
    cache: Optional[Path] = typer.Option(
        None,
        "--cache",
        metavar="DIR",
        help="Where sense centroids are kept between runs (default: wsd/ in the model cache)",
    ),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="Compute the centroids, neither reading nor writing the cache"
    ),
    json_out: Optional[Path] = typer.Option(None, "--json", metavar="OUT", help="Also write the figures as JSON"),
    batch_size: BatchSize = 64,
    progress: Progress = None,
) -> None:
    """All-words word sense disambiguation the ELMo paper's way (section 5.3, Table 5): F1 per layer.

    Embeds the training data with the biLM, averages each sense's vectors
    per layer, and labels each test instance with the nearest (cosine) of
    its lemma+POS's senses seen in training, WordNet's first sense where
    none was seen. Prints F1 per layer and per test set, with the WordNet
    first-sense, training most-frequent-sense and random-weights rows."""
    import json

    from ..hub import names
    from ..senses import wsd as protocol

    progress = show_progress(progress)
    output_file(json_out, "--json")
    for setting, paths in (("--train", train), ("--test", test)):
        for path in paths:
            if not path.exists():
                raise InputError(f"{setting} {path}: no such file or directory")
    input_file(sense_index, "--sense-index")
    index = protocol.read_sense_index(sense_index)
    train_sets = [protocol.read_set(p) for path in train for p in protocol.find_sets(path, "train")]
    test_sets = [protocol.read_set(p) for path in test for p in protocol.find_sets(path, "test")]
    seen = set()
    for s in test_sets:
        if s.name in seen:
            raise InputError(f"--test: two test sets named {s.name!r}: give each set once")
        seen.add(s.name)
    cache_dir = None if no_cache else (cache if cache is not None else names.cache_dir() / "wsd")
    bilm = load_model(model, options, progress)
    report = protocol.run(bilm, train_sets, test_sets, index, range(random_seeds), cache_dir, batch_size, progress)
    for what, seconds in report.seconds.items():
        notes: Dict[Optional[bool], str] = {
            True: " (centroids read from the cache)",
            False: " (training data embedded)",
        }
        note = notes.get(report.cached.get(what), "")
        typer.echo(f"{what}: {seconds:.1f} s{note}", err=True)
    train_name = "SemCor" if all(s.name.lower() == "semcor" for s in train_sets) else "training"
    typer.echo(protocol.format_table(report, train_name))
    if json_out is not None:
        data = protocol.report_json(report)
        data["model"] = _model_record(model, options, protocol.model_digest(bilm), bilm.num_layers)
        data["sense_index_sha256"] = index.sha256
        json_out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _model_record(model: Optional[str], options: Optional[str], digest: str, layers: int) -> Dict[str, object]:
    """What identifies the biLM in ``wsd --json``: ``--model`` as given, the
    sha256 of its weights and options files (when they are files) and the
    digest of its loaded weights that keys the centroid cache."""
    weights_path, options_path = model_files(model, options)
    record: Dict[str, object] = {
        "model": model if model is not None else "english",
        "weights_digest": digest,
        "layers": layers,
    }
    for key, path in (("weights_sha256", weights_path), ("options_sha256", options_path)):
        if Path(path).is_file():
            record[key] = sha256_file(Path(path))
    return record
