"""Text lines, read as bytes and checked one at a time (bounded memory).

The rules every command follows (docs/cli.md): UTF-8, one sentence a line,
a byte-order mark at the start dropped, line ends (``\\n``, ``\\r\\n``)
removed and nothing else changed. A NUL byte (a binary file), bytes that are
not UTF-8 or a line longer than :data:`MAX_LINE_CHARS` characters raise
:class:`LineError`, naming the file and the line (1-based) and what to do.
A line is read with a bounded ``readline``, so a line of any length costs at
most ``4 * MAX_LINE_CHARS`` bytes of memory before it is refused.
"""

from typing import BinaryIO, Iterator

#: Longest line read, in characters (a sentence a line: longer is not a sentence).
MAX_LINE_CHARS = 100_000
#: The most bytes a line may take (a UTF-8 character takes at most 4).
MAX_LINE_BYTES = 4 * MAX_LINE_CHARS


class LineError(ValueError):
    """A line of the input that is not text as the commands read it."""


def raw_lines(stream: BinaryIO, where: str) -> Iterator[bytes]:
    """The lines of a binary stream, line ends kept; a line over
    :data:`MAX_LINE_BYTES` bytes raises :class:`LineError` (``where``: the
    setting and file, as error messages name them)."""
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise too_long(where, number)
        yield raw


def too_long(where: str, number: int) -> LineError:
    return LineError(f"{where}, line {number}: longer than {MAX_LINE_CHARS:,} characters. Give one sentence a line")


def decode_line(raw: bytes, number: int, where: str) -> str:
    """Line ``number`` (1-based) as text without its line end, checked as the
    module docstring says."""
    if b"\x00" in raw:
        raise LineError(
            f"{where}, line {number}: a NUL byte: this is a binary file, not text. Give UTF-8 text, one sentence a line"
        )
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LineError(
            f"{where}, line {number}: not UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1}: {err.reason}). "
            "The text must be UTF-8; convert it first, e.g. from latin-1: iconv -f latin1 -t utf-8 FILE > FILE.utf8"
        ) from None
    if number == 1:
        line = line.lstrip("\ufeff")
    line = line.rstrip("\r\n")
    if len(line) > MAX_LINE_CHARS:
        raise too_long(where, number)
    return line
