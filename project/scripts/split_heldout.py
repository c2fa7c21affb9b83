"""Split a built corpus's held-out text into one file per source, grouped by kind.

``fetch_pretrain_text.py`` writes each source's held-out lines one source after
another, in ``stats.json``'s order: ``heldout.txt`` (the pinned slice of the
default sources) and ``heldout_new.txt`` (the extra sources'). This script cuts
them back into ``OUT/<kind>/<source>.txt`` (default OUT: ``CORPUS/heldout_parts``),
checking every source's lines against the sha256 ``stats.json`` recorded for
them, so that a perplexity can be reported per source or per kind:

    python -m spacy_elmo perplexity corpus/pretrain2/heldout_parts/prose \\
        corpus/pretrain2/heldout_parts/reference --each --model MODEL

gives the slice's prose part, its reference part and (``all``) the whole slice,
the figure every model of the project is compared on.

Kinds: ``reference`` is text that defines or documents (dictionary entries,
WordNet glosses, software manuals: ``REFERENCE_SOURCES``), ``prose`` is every
other source (news, speeches, novels, plays, dialogue, encyclopaedia leads);
the extra sources' lines go under ``new/`` (never part of the pinned slice).
"""
import hashlib
import json
from pathlib import Path
from typing import Dict, List, Optional

import typer

REFERENCE_SOURCES = frozenset({"gcide", "wordnet", "python_doc", "linux_doc", "perl_doc"})


def kind_of(source: str) -> str:
    return "reference" if source in REFERENCE_SOURCES else "prose"


def split(corpus: Path, out: Path) -> Dict[str, Dict[str, int]]:
    """Write ``out/<kind>/<source>.txt`` (``out/new/<source>.txt`` for the
    extra sources) for every source with held-out lines; return ``{path
    relative to out: {"lines", "words"}}``.
    Stops (SystemExit naming the file and source) when the text does not
    match ``stats.json``."""
    stats_path = corpus / "stats.json"
    try:
        stats = json.loads(stats_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise SystemExit(f"{stats_path}: cannot read the corpus statistics ({err}); build the corpus first "
                         "(weasel run fetch-registry-text)")
    written: Dict[str, Dict[str, int]] = {}
    for text_name, table, folder in (("heldout.txt", stats.get("sources"), None),
                                     ("heldout_new.txt", stats.get("extra_sources"), "new")):
        if not table:
            continue
        path = corpus / text_name
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise SystemExit(f"{path}: cannot read the held-out text ({err}); rebuild the corpus")
        expected = sum(counts["heldout_lines"] for counts in table.values())
        if len(lines) != expected:
            raise SystemExit(f"{path}: {len(lines):,} lines, but {stats_path} lists {expected:,} held-out lines "
                             "for its sources: the two files are from different builds; rebuild the corpus")
        start = 0
        for source, counts in table.items():
            part = lines[start : start + counts["heldout_lines"]]
            start += counts["heldout_lines"]
            body = "".join(line + "\n" for line in part)
            if hashlib.sha256(body.encode("utf-8")).hexdigest() != counts["heldout_sha256"]:
                raise SystemExit(f"{path}: the held-out lines of {source} do not match their sha256 in {stats_path}; "
                                 "rebuild the corpus")
            if not part:
                continue  # no held-out line: no file (an empty file would only be skipped when read)
            relative = f"{folder or kind_of(source)}/{source}.txt"
            target = out / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body, encoding="utf-8")
            written[relative] = {"lines": len(part), "words": sum(len(line.split()) for line in part)}
    if not written:
        raise SystemExit(f"{stats_path}: lists no sources")
    return written


def main(
    corpus: Path = typer.Argument(Path("corpus/pretrain2"), help="A corpus built by fetch_pretrain_text.py"),
    out: Optional[Path] = typer.Option(None, help="Where to write <kind>/<source>.txt (default: CORPUS/heldout_parts)"),
) -> None:
    out = out or corpus / "heldout_parts"
    written = split(corpus, out)
    kinds: Dict[str, List[int]] = {}
    for relative, counts in written.items():
        totals = kinds.setdefault(relative.split("/")[0], [0, 0, 0])
        totals[0] += 1
        totals[1] += counts["lines"]
        totals[2] += counts["words"]
    for kind, (n, lines, words) in kinds.items():
        typer.echo(f"{out}/{kind}: {n} sources, {lines:,} lines, {words:,} words")


if __name__ == "__main__":
    typer.run(main)
