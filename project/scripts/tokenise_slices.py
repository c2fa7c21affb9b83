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
from pathlib import Path
from typing import List

import typer

from common import BASE_SOURCES, base_parts, tokenise


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
