"""Small slices of every corpus for the ``quick`` workflow.

    python scripts/make_quick.py corpus corpus/quick --train 200 --dev 60 --test 60

For each corpus directory (brown, wnut, sentiment) under SOURCE, writes
``{train,dev,test}.spacy`` under TARGET with at most the given number of
docs, taken evenly spaced through each part (doc ``floor(i * n / k)`` for
``i < k``: deterministic, and every genre of Brown is represented).
"""
from pathlib import Path

import typer

CORPORA = ("brown", "wnut", "sentiment")


def evenly(n: int, k: int):
    if k >= n:
        return list(range(n))
    return [i * n // k for i in range(k)]


def main(
    source: Path = typer.Argument(..., help="Directory with brown/, wnut/, sentiment/"),
    target: Path = typer.Argument(..., help="Where to write the slices"),
    train: int = typer.Option(200, help="Train docs per corpus"),
    dev: int = typer.Option(60, help="Dev docs per corpus"),
    test: int = typer.Option(60, help="Test docs per corpus"),
) -> None:
    import spacy
    from spacy.tokens import DocBin

    vocab = spacy.blank("en").vocab
    for corpus in CORPORA:
        for part, k in (("train", train), ("dev", dev), ("test", test)):
            path = source / corpus / f"{part}.spacy"
            if not path.exists():
                raise SystemExit(f"missing {path}: run the data commands first (python -m weasel run data)")
            docs = list(DocBin().from_disk(path).get_docs(vocab))
            out = DocBin(store_user_data=True)
            for i in evenly(len(docs), k):
                out.add(docs[i])
            (target / corpus).mkdir(parents=True, exist_ok=True)
            out.to_disk(target / corpus / f"{part}.spacy")
            typer.echo(f"{corpus}/{part}: {len(out)} of {len(docs)} docs")


if __name__ == "__main__":
    typer.run(main)
