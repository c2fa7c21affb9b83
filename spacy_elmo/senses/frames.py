"""Crossed-frame word-sense sets: the format of ``senses_en.txt``.

Why frames
----------
A sense set whose sentences differ between senses in *all* their words lets a
model that only echoes the surrounding words look as if it knew senses: a
biLM with random weights mixes the neighbouring tokens into a word's vector,
and the two senses of "bank" come with different neighbours. A *frame* is a
sentence written once for both senses of a word: its words are shared, and
only the cue slots differ, token for token, between the two fillings. The
evaluation holds out a frame's two sentences together (leave-one-frame-out,
see :mod:`spacy_elmo.senses`), so what the held-out pair shares tells
nothing about the sense, and every other frame adds one sentence to each
sense's side. A cue word is used once per sense of a word (no two cue words
of one sense share their first :data:`STEM_CHARS` letters), so no single cue
word, nor a spelling a character CNN could pick up, defines a sense's
centroid; and the words right beside the target belong to the frame.

Format (UTF-8 text)
-------------------
::

    # a comment
    == bank: river | money
    We walked to the [bank] this morning to {watch the ducks | deposit some cash} .

* ``== WORD: SENSE_A | SENSE_B`` starts a word; the frames below it are that
  word's. Sense labels are ``WORD/SENSE_A`` and ``WORD/SENSE_B``.
* A frame line is whitespace-separated tokens (spaCy's English tokens:
  punctuation apart, no contractions). It holds the target once as
  ``[WORD]``, and one or more cue slots ``{fill for A | fill for B}`` whose
  two fillings have the same number of tokens, so both sentences have the
  same length and the target the same position.
* The target's two neighbouring tokens must be frame words, not cue words.

Each frame gives two items (dicts as :func:`spacy_elmo.senses.load_senses`
returns): ``word``, ``sense``, ``tokens``, ``index`` (the target), ``frame``
(``"WORD:N"``, N counting the word's frames from 1) and ``cues`` (the
positions of the tokens in which the two fillings differ).
"""
import re
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union

#: Refuse sense files larger than this (bytes): the shipped set is ~60 kB.
MAX_BYTES = 16 * 2**20
#: Cue words of one sense of a word may not share this many leading letters
#: (lower-cased; shorter words are exempt, being mostly function words).
STEM_CHARS = 4

_HEADER = re.compile(r"^==\s*(\S+)\s*:\s*([^|]+?)\s*\|\s*([^|]+?)\s*$")
_SLOT = re.compile(r"\{([^{}|]*)\|([^{}|]*)\}")


class SenseDataError(ValueError):
    """A malformed sense set; the message names the file and line."""


def read_bounded(path: Union[str, Path]) -> str:
    """The text of ``path``, refusing files over :data:`MAX_BYTES`."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise SenseDataError(f"{path}: {size} bytes is more than a sense set may have ({MAX_BYTES}); split it")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise SenseDataError(
            f"{path}: not UTF-8 text ({err.reason} at byte {err.start}): save the set as UTF-8"
        ) from None


def parse_frames(text: str, source: str = "<frames>") -> List[Dict]:
    """Expand a frames text (format in the module docstring) into items,
    checking the format. Raises :class:`SenseDataError` listing every
    malformed line (``source:line: what is wrong``)."""
    items: List[Dict] = []
    errors: List[str] = []
    word: Optional[str] = None
    senses: Tuple[str, str] = ("", "")
    count = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{source}:{number}"
        if not line or line.startswith("#"):
            continue
        if line.startswith("=="):
            match = _HEADER.match(line)
            if not match:
                raise SenseDataError(f"{where}: a word header reads '== WORD: SENSE_A | SENSE_B', found {line!r}")
            word, senses, count = match.group(1).lower(), (match.group(2), match.group(3)), 0
            if senses[0] == senses[1]:
                raise SenseDataError(f"{where}: the two senses of {word!r} need different names")
            continue
        if word is None:
            raise SenseDataError(f"{where}: a frame before any '== WORD: SENSE_A | SENSE_B' header")
        count += 1
        try:
            pair = _expand(line, word, where)
        except SenseDataError as err:
            errors.append(str(err))
            continue
        for (tokens, cues), sense in zip(pair, senses):
            items.append(
                {"word": word, "sense": f"{word}/{sense}", "tokens": tokens, "index": tokens.index(f"[{word}]"),
                 "frame": f"{word}:{count}", "cues": cues}
            )
            items[-1]["tokens"] = [word if t == f"[{word}]" else t for t in tokens]
    if errors:
        raise SenseDataError("\n".join(errors))
    return items


def _expand(line: str, word: str, where: str) -> List[Tuple[List[str], List[int]]]:
    """The two token lists of a frame line and the positions of its cue tokens."""
    if "{" not in line:
        raise SenseDataError(f"{where}: a frame needs at least one cue slot {{A | B}}")
    stripped = _SLOT.sub(" ", line)
    if any(c in stripped for c in "{}|"):
        raise SenseDataError(f"{where}: unbalanced cue slot: write each as {{fill A | fill B}} with no nesting")
    sides: Tuple[List[str], List[str]] = ([], [])
    cues: List[int] = []
    position = 0
    for piece in re.split(r"(\{[^{}]*\})", line):
        if piece.startswith("{"):
            a, b = (part.split() for part in piece[1:-1].split("|"))
            if len(a) != len(b) or not a:
                raise SenseDataError(
                    f"{where}: the fillings of {piece} must have the same number of tokens (>= 1), found {len(a)} and "
                    f"{len(b)}"
                )
            cues.extend(position + i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            sides[0].extend(a)
            sides[1].extend(b)
            position += len(a)
        else:
            tokens = piece.split()
            sides[0].extend(tokens)
            sides[1].extend(tokens)
            position += len(tokens)
    target = f"[{word}]"
    for tokens in sides:
        marks = [i for i, t in enumerate(tokens) if t.startswith("[") and t.endswith("]") and len(t) > 2]
        if [tokens[i] for i in marks] != [target]:
            raise SenseDataError(f"{where}: a frame of {word!r} marks its target once, as {target}")
        if sum(t.lower() == word for t in tokens):
            raise SenseDataError(f"{where}: {word!r} appears outside its [{word}] mark; use it once")
    index = sides[0].index(target)
    if index - 1 in cues or index + 1 in cues:
        raise SenseDataError(f"{where}: the words right beside [{word}] must be frame words, not cue words")
    if not cues:
        raise SenseDataError(f"{where}: the two fillings are identical; the senses need different cue words")
    return [(sides[0], cues), (sides[1], cues)]


def stem_clashes(items: Iterable[Dict]) -> List[str]:
    """Cue words that share their first :data:`STEM_CHARS` letters with a
    cue word of another frame of the same sense of the same word: each
    clash as ``"sense: word (frame) ~ word (frame)"``. An empty list means
    no cue word (or spelling of it) recurs within a sense."""
    seen: Dict[tuple, Dict[str, tuple]] = defaultdict(dict)
    clashes = []
    for item in items:
        for position in item.get("cues", ()):
            token = item["tokens"][position].lower()
            if len(token) < STEM_CHARS:
                continue
            stem = token[:STEM_CHARS]
            earlier = seen[item["sense"]].get(stem)
            if earlier is not None and earlier[1] != item["frame"]:
                clashes.append(f"{item['sense']}: {earlier[0]} ({earlier[1]}) ~ {token} ({item['frame']})")
            else:
                seen[item["sense"]].setdefault(stem, (token, item["frame"]))
    return clashes
