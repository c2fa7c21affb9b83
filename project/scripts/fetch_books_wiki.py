"""Corpus v3: the registry corpus (``fetch_pretrain_text.py``) plus about 330M
words of English from public git repositories, in training slices.

| source | repository @ commit | files | licence of the text |
|---|---|---|---|
| gutenberg | LuEE-C/FewShotAuthorClassificationMetaLearning @ 4c84f81 | ``Gutenberg/txt/*.txt`` (books, headers stripped upstream) | public domain (US) |
| wiki2015 | jason-feng/wikiVisual @ 1c0fac9 | ``text/A[A-D]/wiki_NN`` (WikiExtractor) | CC BY-SA 3.0 |
| wiki2014 | ZhouYii/PatchedDistro @ 961716d | ``data/A[A-I]/wiki_NN`` (WikiExtractor) | CC BY-SA 3.0 |
| wiki2018 | Vibhas-hs-edu/WikiTasks @ 52b1f16 | ``text/AA/wiki_NN`` (WikiExtractor) | CC BY-SA 3.0 |
| fomc | sophia-jihye/Collecting_FOMC_Minutes @ ea2b8e1 | ``Minutes/*/*.txt`` | US federal publication, public domain |

Each source is read from a git repository at its pinned commit
(``--git NAME=PATH``: a clone or bare mirror holding that commit; without
it the script clones from GitHub into ``--assets``), with ``git ls-tree``
and ``git cat-file --batch``, so a blob missing from a partial copy is
skipped and counted instead of stopping the build. Every input file's
sha256 is checked against ``pins/corpus3_inputs.tsv.gz`` (``--write-pins``
writes it); a file whose bytes differ stops the build naming it.

Cleaning: byte-order marks and soft hyphens dropped, HTML entities and
left-over tags of WikiExtractor removed, the ``<doc>`` lines dropped (the
title line stays), Gutenberg's hard-wrapped lines joined into paragraphs
and its ``_italic_`` marks removed, paragraphs naming Project Gutenberg
dropped; then the registry corpus's rules (``normalise``, ``split_long``,
``is_prose``). Undecodable bytes (a few books in Latin-1) are read as
cp1252.

De-duplication, against the registry corpus (``--base``: its training
files and both held-out files) and within the new text: a line whose
letters and digits, lower-cased, were seen before is dropped; a document
(book, article, minutes) more than 20% of whose lines were seen before,
in the registry corpus or an earlier document (Moby Dick, Milton,
Wikipedia leads, a second edition of a book, minutes uploaded twice), is
dropped whole.

Held-out: a line of the new sources goes to ``heldout_v3.txt`` when the
registry corpus's hash rule holds it out at 1 per mille (about 330k words),
reported separately from the registry corpus's slice, which is copied
unchanged (``heldout.txt``, its pinned sha256 checked; ``heldout_new.txt``).

Training slices: every document goes whole to slice ``sha256(source/path/id)
mod N_SLICES``, so each slice is a random sample of the documents of every
source and any set of slices is a fair sample of the corpus;
``train/NNN.txt``. ``stats.json``: per source files, missing blobs,
documents kept and dropped, lines and words (whitespace) in training and
held out, duplicate lines dropped; per slice words and sha256.
"""  # noqa: E501 (the table of sources)
import gzip
import hashlib
import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import typer

from common import HELDOUT_SHA256, is_heldout, is_prose, normalise, sha256_of, split_long

N_SLICES = 96
HELDOUT_PER_MILLE = 1
DUPLICATE_DOCUMENT_SHARE = 0.2
PINS = Path(__file__).resolve().parent.parent / "pins" / "corpus3_inputs.tsv.gz"

# name: (repository, commit, path prefix, file pattern, kind, licence)
SOURCES: Dict[str, Tuple[str, str, str, str, str, str]] = {
    "fomc": ("sophia-jihye/Collecting_FOMC_Minutes", "ea2b8e16b3e004d02b7b6954ce76857c371799b1",
             "Minutes", r"Minutes/\d{4}/[^/]+\.txt", "plain", "US federal publication, public domain"),
    "wiki2018": ("Vibhas-hs-edu/WikiTasks", "52b1f163137bc40b0f67cbf129d5dab4f6fd5901",
                 "text/AA", r"text/AA/wiki_\d\d", "wiki", "CC BY-SA 3.0"),
    "wiki2015": ("jason-feng/wikiVisual", "1c0fac92f29f17c1603bfffbe864e0dfdff66897",
                 "text", r"text/A[A-D]/wiki_\d\d", "wiki", "CC BY-SA 3.0"),
    "wiki2014": ("ZhouYii/PatchedDistro", "961716d8a5a0df1a6373a4d61e360a0b5d1b85cd",
                 "data", r"data/A[A-I]/wiki_\d\d", "wiki", "CC BY-SA 3.0"),
    "gutenberg": ("LuEE-C/FewShotAuthorClassificationMetaLearning", "4c84f818a17dc19b592dbcd0fa004f2c6df8116a",
                  "Gutenberg/txt", r"Gutenberg/txt/[^/]+\.txt", "gutenberg", "public domain (US)"),
}

_TAG = re.compile(r"</?[a-zA-Z][^<>]{0,200}>")
_ITALIC = re.compile(r"(?<!\w)_([^_\n]{1,200}?)_(?!\w)")
_DOC_START = re.compile(r'^<doc id="([^"]*)"')
_KEY = re.compile(r"[^0-9a-z]+")


def line_key(line: str) -> bytes:
    """The de-duplication key: the line's letters and digits, lower-cased."""
    return hashlib.sha1(_KEY.sub("", line.lower()).encode("utf-8")).digest()[:12]


def decode(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    return text.replace("\ufeff", "").replace("\r\n", "\n").replace("\r", "\n")


def clean_lines(paragraphs: Iterator[str]) -> Iterator[str]:
    for paragraph in paragraphs:
        for line in split_long(normalise(paragraph)):
            if is_prose(line):
                yield line


def gutenberg_documents(path: str, text: str) -> Iterator[Tuple[str, List[str]]]:
    paragraphs = []
    for block in re.split(r"\n[ \t]*\n", text):
        if "gutenberg" in block.lower():
            continue
        paragraphs.append(_ITALIC.sub(r"\1", block.replace("\n", " ")))
    yield path, list(clean_lines(iter(paragraphs)))


def wiki_documents(path: str, text: str) -> Iterator[Tuple[str, List[str]]]:
    doc_id, lines = None, []
    for raw in text.split("\n"):
        start = _DOC_START.match(raw)
        if start:
            doc_id, lines = start.group(1), []
        elif raw.startswith("</doc>"):
            if doc_id is not None:
                yield f"{path}#{doc_id}", list(clean_lines(iter(lines)))
            doc_id, lines = None, []
        elif doc_id is not None:
            lines.append(_TAG.sub(" ", html.unescape(raw)))


def plain_documents(path: str, text: str) -> Iterator[Tuple[str, List[str]]]:
    yield path, list(clean_lines(iter(re.split(r"\n[ \t]*\n", text))))


KINDS = {"gutenberg": gutenberg_documents, "wiki": wiki_documents, "plain": plain_documents}


def git_files(git_dir: Path, commit: str, prefix: str, pattern: str) -> Iterator[Tuple[str, Optional[bytes]]]:
    """(path, bytes) of every file under ``prefix`` matching ``pattern`` at
    ``commit``, in path order; bytes None for a blob the copy lacks."""
    listing = subprocess.run(["git", "-C", str(git_dir), "ls-tree", "-r", "-z", commit, "--", prefix],
                             check=True, capture_output=True).stdout.decode("utf-8")
    wanted = re.compile(pattern)
    entries = []
    for record in listing.split("\0"):
        if not record:
            continue
        meta, path = record.split("\t", 1)
        if meta.split()[1] == "blob" and wanted.fullmatch(path):
            entries.append((path, meta.split()[2]))
    entries.sort()
    proc = subprocess.Popen(["git", "-C", str(git_dir), "cat-file", "--batch"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        for path, blob in entries:
            proc.stdin.write(blob.encode("ascii") + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) < 3 or header[1] == b"missing":
                yield path, None
                continue
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)
            yield path, data
    finally:
        proc.stdin.close()
        proc.wait()


def repository(name: str, given: Dict[str, Path], assets: Path) -> Path:
    repo, commit = SOURCES[name][0], SOURCES[name][1]
    path = given.get(name)
    if path is None:
        path = assets / repo.replace("/", "+")
        if not path.exists():
            subprocess.run(
                ["git", "clone", "--bare", "--filter=blob:limit=4m", f"https://github.com/{repo}", str(path)],
                check=True,
            )
    known = subprocess.run(["git", "-C", str(path), "cat-file", "-e", commit + "^{commit}"], capture_output=True)
    if known.returncode != 0:
        raise SystemExit(f"{path}: no commit {commit} of {repo}; give --git {name}=DIR with a copy holding it")
    return path


def read_pins() -> Dict[Tuple[str, str], str]:
    if not PINS.exists():
        return {}
    with gzip.open(PINS, "rt", encoding="utf-8") as fin:
        return {(s, p): h for s, p, h in (line.rstrip("\n").split("\t") for line in fin)}


def base_keys(base: Path) -> set:
    keys = set()
    for path in sorted((base / "train").glob("*.txt")) + [base / "heldout.txt", base / "heldout_new.txt"]:
        with path.open(encoding="utf-8") as fin:
            keys.update(line_key(line) for line in fin)
    return keys


def slice_of(document: str) -> int:
    return int.from_bytes(hashlib.sha256(document.encode("utf-8")).digest()[:8], "big") % N_SLICES


def main(
    out: Path = typer.Argument(..., help="Output directory (corpus/pretrain3)"),
    base: Path = typer.Option(
        ..., help="The registry corpus built by fetch_pretrain_text.py --extra-sources linux_doc,perl_doc"
    ),
    git: List[str] = typer.Option([], help="NAME=PATH: a local git copy of a source's repository"),
    assets: Path = typer.Option(Path("assets"), help="Where repositories are cloned when no --git is given"),
    only: str = typer.Option("", help="Comma-separated sources to build (default: all); the rest are left out"),
    write_pins: bool = typer.Option(
        False, "--write-pins", help="Record every input's sha256 in pins/ instead of checking"
    ),
) -> None:
    if sha256_of(base / "heldout.txt") != HELDOUT_SHA256:
        raise SystemExit(f"{base}/heldout.txt is not the pinned held-out slice; rebuild --base first")
    given = {}
    for item in git:
        name, _, path = item.partition("=")
        if name not in SOURCES or not path:
            raise SystemExit(f"--git {item}: expected NAME=PATH with NAME one of {', '.join(SOURCES)}")
        given[name] = Path(path)
    names = [n for n in SOURCES if not only or n in only.split(",")]
    pins = read_pins()
    seen = base_keys(base)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train").mkdir(exist_ok=True)
    for name in ("heldout.txt", "heldout_new.txt"):
        shutil.copyfile(base / name, out / name)
    slices = [(out / "train" / f"{i:03d}.txt").open("w", encoding="utf-8") for i in range(N_SLICES)]
    slice_words = [0] * N_SLICES
    inputs: List[str] = []
    stats: Dict[str, Dict] = {}
    with (out / "heldout_v3.txt").open("w", encoding="utf-8") as heldout:
        for name in names:
            repo, commit, prefix, pattern, kind, licence = SOURCES[name]
            counts = dict(repository=repo, commit=commit, licence=licence, files=0, missing_blobs=0, documents=0,
                          documents_duplicate=0, train_lines=0, train_words=0, heldout_lines=0, heldout_words=0,
                          duplicate_lines=0)
            git_dir = repository(name, given, assets)
            for path, data in git_files(git_dir, commit, prefix, pattern):
                if data is None:
                    counts["missing_blobs"] += 1
                    continue
                digest = hashlib.sha256(data).hexdigest()
                inputs.append(f"{name}\t{path}\t{digest}")
                if not write_pins and pins.get((name, path), digest) != digest:
                    raise SystemExit(f"{repo}@{commit[:7]}:{path}: sha256 {digest} is not the pinned one")
                counts["files"] += 1
                for document, lines in KINDS[kind](path, decode(data)):
                    keys = [line_key(line) for line in lines]
                    if lines and sum(k in seen for k in keys) > DUPLICATE_DOCUMENT_SHARE * len(lines):
                        counts["documents_duplicate"] += 1
                        continue
                    counts["documents"] += 1
                    index = slice_of(f"{name}/{document}")
                    target = slices[index]
                    for line, key in zip(lines, keys):
                        if key in seen:
                            counts["duplicate_lines"] += 1
                            continue
                        seen.add(key)
                        words = len(line.split())
                        if is_heldout(line, HELDOUT_PER_MILLE):
                            heldout.write(line + "\n")
                            counts["heldout_lines"] += 1
                            counts["heldout_words"] += words
                        else:
                            target.write(line + "\n")
                            counts["train_lines"] += 1
                            counts["train_words"] += words
                            slice_words[index] += words
            stats[name] = counts
            typer.echo(f"{name}: {json.dumps(counts)}")
    for handle in slices:
        handle.close()
    if write_pins:
        PINS.parent.mkdir(parents=True, exist_ok=True)
        with gzip.GzipFile(PINS, "wb", mtime=0) as fout:
            fout.write("".join(line + "\n" for line in sorted(inputs)).encode("utf-8"))
    base_stats = json.loads((base / "stats.json").read_text(encoding="utf-8"))
    summary = {
        "sources": stats,
        "base": {
            "directory": base.name,
            "total": base_stats.get("total"),
            "extra_total": base_stats.get("extra_total"),
        },
        "heldout_per_mille": HELDOUT_PER_MILLE,
        "slices": [
            {"file": f"train/{i:03d}.txt", "words": slice_words[i], "sha256": sha256_of(out / "train" / f"{i:03d}.txt")}
            for i in range(N_SLICES)
        ],
        "heldout_v3_sha256": sha256_of(out / "heldout_v3.txt"),
        "inputs_sha256": hashlib.sha256("".join(line + "\n" for line in sorted(inputs)).encode("utf-8")).hexdigest(),
    }
    (out / "stats.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    typer.echo(f"wrote {out}: {sum(slice_words):,} training words in {N_SLICES} slices")


if __name__ == "__main__":
    typer.run(main)
