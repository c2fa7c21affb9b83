"""Tokenise corpus v3's training slices once: ``train/NNN.txt`` ->
``tokens/NNN.npz`` (what ``python -m spacy_elmo tokenise`` writes), the
registry corpus's training files -> ``tokens/base.npz``.

Resumable: a slice whose ``.npz`` exists and records the sha256 of the text
it was made from is skipped; ``--first N`` tokenises only the first N
slices and ``--slices 82-95,3`` only those named (a run that reads those
starts now, the rest can follow later). ``--base-parts K`` also cuts the
registry corpus into K parts of every K-th line (``tokens/base-J.npz``), so
that a short run can mix a fifth of it, say, instead of all 16.6M tokens.
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


def parse_slices(spec: str) -> List[int]:
    """``"82-95,3"`` -> [82, ..., 95, 3]; the settings' own error otherwise."""
    numbers: List[int] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise typer.BadParameter(f"{part!r} is not a slice number or range like 82-95", param_hint="--slices")
        if low > high:
            raise typer.BadParameter(f"{part!r}: the range runs backwards", param_hint="--slices")
        numbers.extend(range(low, high + 1))
    return numbers


def base_parts(base: Path, out: Path, parts: int) -> List[Path]:
    """Every ``parts``-th line of the registry corpus's eleven sources, as
    ``parts`` text files (each samples every source alike)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"part-{j}.txt" for j in range(parts)]
    handles = [p.open("w", encoding="utf-8") for p in paths]
    try:
        n = 0
        for name in BASE_SOURCES:
            with (base / "train" / f"{name}.txt").open(encoding="utf-8") as fin:
                for line in fin:
                    handles[n % parts].write(line)
                    n += 1
    finally:
        for handle in handles:
            handle.close()
    return paths


def main(
    corpus: Path = typer.Argument(..., help="corpus/pretrain3"),
    base: Path = typer.Option(Path("corpus/pretrain2"), help="The registry corpus"),
    first: int = typer.Option(0, help="Only the first N slices (0: all)"),
    slices: str = typer.Option("", help="Only these slices, e.g. 82-95,3 (empty: all, or --first)"),
    base_parts_n: int = typer.Option(0, "--base-parts", help="Also cut the registry corpus into this many parts"),
    max_tokens: int = typer.Option(64, help="Window length, as the run will use"),
) -> None:
    tokens = corpus / "tokens"
    tokens.mkdir(exist_ok=True)
    tokenise([base / "train" / f"{name}.txt" for name in BASE_SOURCES], tokens / "base.npz", max_tokens)
    if base_parts_n > 0:
        for j, part in enumerate(base_parts(base, corpus / "base", base_parts_n)):
            tokenise([part], tokens / f"base-{j}.npz", max_tokens)
    texts = sorted((corpus / "train").glob("*.txt"))
    if slices:
        wanted = parse_slices(slices)
        named = {int(t.stem): t for t in texts if t.stem.isdigit()}
        missing = [n for n in wanted if n not in named]
        if missing:
            raise typer.BadParameter(f"{corpus / 'train'} has no slice {missing[0]:03d}.txt", param_hint="--slices")
        texts = [named[n] for n in wanted]
    elif first:
        texts = texts[:first]
    for text in texts:
        tokenise([text], tokens / f"{text.stem}.npz", max_tokens)


if __name__ == "__main__":
    typer.run(main)
