"""Tokenise corpus v3's training slices once: ``train/NNN.txt`` ->
``tokens/NNN.npz`` (what ``python -m spacy_elmo tokenise`` writes), the
registry corpus's training files -> ``tokens/base.npz``.

Resumable: a slice whose ``.npz`` exists and records the sha256 of the text
it was made from is skipped; ``--first N`` tokenises only the first N
slices (a run that reads those starts now, the rest can follow later).
"""
import json
from pathlib import Path
from typing import List

import typer

from common import sha256_of
from spacy_elmo.pretrain.reading import tokenise_slice

#: The registry corpus's sources the shipped model was last trained on (the
#: held-out slice's own eleven; linux_doc and perl_doc have their own held-out file).
BASE_SOURCES = ["bbc", "brown", "gcide", "moby_dick", "movie_dialog", "nlp_corpus", "python_doc",
                "shakespeare", "sotu", "wiki", "wordnet"]


def tokenise(texts: List[Path], out: Path, max_tokens: int) -> None:
    stamp = out.with_suffix(".json")
    digests = [sha256_of(t) for t in texts]
    if out.exists() and stamp.exists() and json.loads(stamp.read_text())["sha256"] == digests:
        return
    corpus = tokenise_slice(texts, out, "en", max_tokens)
    stamp.write_text(json.dumps({"texts": [t.name for t in texts], "sha256": digests,
                                 "tokens": corpus.stats.tokens, "windows": corpus.stats.windows}) + "\n")
    typer.echo(f"{out}: {corpus.stats.summary()}")


def main(
    corpus: Path = typer.Argument(..., help="corpus/pretrain3"),
    base: Path = typer.Option(Path("corpus/pretrain2"), help="The registry corpus"),
    first: int = typer.Option(0, help="Only the first N slices (0: all)"),
    max_tokens: int = typer.Option(64, help="Window length, as the run will use"),
) -> None:
    tokens = corpus / "tokens"
    tokens.mkdir(exist_ok=True)
    tokenise([base / "train" / f"{name}.txt" for name in BASE_SOURCES], tokens / "base.npz", max_tokens)
    slices = sorted((corpus / "train").glob("*.txt"))
    for text in slices[:first] if first else slices:
        tokenise([text], tokens / f"{text.stem}.npz", max_tokens)


if __name__ == "__main__":
    typer.run(main)
