"""The ``neighbours`` and ``senses`` commands' glue around :mod:`spacy_elmo.senses`:
loading the biLM the command line names, tokenising, printing."""
from pathlib import Path
from typing import Dict, List, Sequence

from .loading import load_bilm as _load
from .senses import nearest_uses, parse_layer, uses


def format_table(rows: List[Dict], per_word: bool = False) -> str:
    """The rows of :func:`sense_eval` as a plain-text table."""
    lines = [f"{'layer':<6} {'accuracy':>13} {'items':>6} {'tied':>6}"]
    for row in rows:
        name = str(row["layer"]) if row["layer"] != "mix" else "mean"
        note = "  (context-free: chance by the tie rule)" if row["layer"] == 0 else ""
        lines.append(f"{name:<6} {100 * row['accuracy']:>12.1f}% {row['items']:>6} {row['tied']:>6}{note}")
    lines.append("chance: 50.0% (two balanced senses a word); ties across senses score 1/2")
    if per_word:
        words = sorted(rows[0]["per_word"])
        head = " ".join(f"{('mean' if r['layer'] == 'mix' else 'L' + str(r['layer'])):>6}" for r in rows)
        lines.append("")
        lines.append(f"{'word':<10} {head}")
        for w in words:
            lines.append(f"{w:<10} " + " ".join(f"{100 * r['per_word'][w]:>5.0f}%" for r in rows))
    return "\n".join(lines)


def load_bilm(weights=None, options=None):
    """The biLM for the command line: like ``embed``, ``weights`` is a model
    name, a directory, a weights file or a URL (see :mod:`spacy_elmo.hub`),
    ``options`` optional beside it; no weights: the shipped English model."""
    if options is not None and weights is None:
        raise ValueError("--options needs --weights")
    return _load(
        None if weights is None else str(weights), None if options is None else str(options)
    ).eval()


def mark(tokens: Sequence[str], position: int) -> str:
    """The sentence with the use at ``position`` in brackets."""
    return " ".join(f"[{t}]" if i == position else t for i, t in enumerate(tokens))


def make_tokenizer(lang: str):
    """``text -> list of token texts`` by ``spacy.blank(lang)``'s tokenizer."""
    import spacy

    tokenizer = spacy.blank(lang).tokenizer
    return lambda text: [t.text for t in tokenizer(text)]


def neighbours_command(query: str, word: str, corpus: Path, k: int, layer: str, weights, options, lang: str, batch_size: int, echo) -> None:
    """``python -m spacy_elmo neighbours``: tokenise the query and the corpus
    lines that contain the word with ``spacy.blank(lang)``, then print the
    :func:`nearest_uses`."""
    which = parse_layer(layer)
    tokenize = make_tokenizer(lang)
    query_tokens = tokenize(query)
    positions = uses(query_tokens, word)
    if not positions:
        raise ValueError(f"{word!r} is not a token of the query {query_tokens}")
    needle = word.lower()
    sentences = []
    with open(corpus, encoding="utf-8") as fin:
        for line in fin:
            if needle in line.lower():  # cheap filter before tokenising
                tokens = tokenize(line.strip())
                if uses(tokens, word):
                    sentences.append(tokens)
    bilm = load_bilm(weights, options)
    if isinstance(which, int) and not 0 <= which < bilm.num_layers:
        raise ValueError(f"--layer must be 'mix' or in 0..{bilm.num_layers - 1}, found {which}")
    found = nearest_uses(bilm, query_tokens, positions[0], sentences, which, k, batch_size)
    name = "mean of the layers" if which == "mix" else f"layer {which}"
    echo(f"query: {mark(query_tokens, positions[0])}   ({name}; {len(sentences)} corpus sentences use {word!r})")
    for rank, n in enumerate(found, 1):
        echo(f"{rank:>3}  {n.score:.3f}  {mark(n.tokens, n.position)}")
    if not found:
        echo(f"no corpus sentence uses {word!r}")
