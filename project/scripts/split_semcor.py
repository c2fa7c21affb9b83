"""SemCor split by document, for a sense measure with less noise than
SemEval-2007's 455 instances: every ``--every``-th document of SemCor (the
first, the eleventh, ...) is held out, the others make the centroids.
Writes ``semcor_train`` and ``semcor_heldout`` (``.data.xml`` and
``.gold.key.txt``, the framework's format) into OUTPUT, for
``python -m spacy_elmo wsd --train OUTPUT/semcor_train.data.xml --test
OUTPUT/semcor_heldout.data.xml``. Whole documents go one way, so no held-out
sentence has a neighbour among the centroids' sentences.
"""
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List

import typer

from spacy_elmo.senses.wsd import MAX_KEY_BYTES, MAX_XML_BYTES, keys_beside, read_bounded

PARTS = ("semcor_train", "semcor_heldout")


def split(data: Path, out: Path, every: int) -> Dict[str, int]:
    """Write the two parts; returns the number of documents in each."""
    root = ET.fromstring(read_bounded(data, MAX_XML_BYTES, "data file"))
    parts = {name: ET.Element(root.tag, root.attrib) for name in PARTS}
    part_of: Dict[str, str] = {}
    for number, text in enumerate(root.findall("text")):
        name = PARTS[1] if number % every == 0 else PARTS[0]
        parts[name].append(text)
        part_of[text.get("id", "")] = name
    if not part_of:
        raise SystemExit(f"{data}: no <text> documents; is it SemCor in the framework's format?")
    out.mkdir(parents=True, exist_ok=True)
    for name, element in parts.items():
        ET.ElementTree(element).write(out / f"{name}.data.xml", encoding="UTF-8", xml_declaration=True)
    keys: Dict[str, List[str]] = {name: [] for name in PARTS}
    key_file = keys_beside(data)
    for line in read_bounded(key_file, MAX_KEY_BYTES, "gold key file").decode("utf-8").splitlines():
        if line.strip():
            document = line.split(maxsplit=1)[0].rsplit(".", 2)[0]  # semcor.d000.s00000.t000 -> semcor.d000
            if document not in part_of:
                raise SystemExit(f"{key_file}: key {line.split()[0]!r} names no document of {data}")
            keys[part_of[document]].append(line)
    for name, lines in keys.items():
        (out / f"{name}.gold.key.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {name: len(element) for name, element in parts.items()}


def main(
    data: Path = typer.Argument(..., help="SemCor's .data.xml (or .data.xml.gz), its gold keys beside it"),
    output: Path = typer.Argument(..., help="Directory for semcor_train.* and semcor_heldout.*"),
    every: int = typer.Option(10, min=2, help="Hold out every N-th document"),
) -> None:
    counts = split(data, output, every)
    typer.echo(f"{output}: {counts[PARTS[0]]} documents for the centroids, {counts[PARTS[1]]} held out")


if __name__ == "__main__":
    typer.run(main)
