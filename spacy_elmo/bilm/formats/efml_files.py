"""ELMoForManyLangs model directories, file by file: bounded reads of the
JSON, ``.dic`` and ``.pkl`` files, and the ``.dic`` writer. The choices are
named in :mod:`.efml`."""
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, Union

import torch

PathLike = Union[str, Path]

#: Largest ``.pkl`` file read (the published encoder.pkl is about 300 MB).
MAX_PKL_BYTES = 4 << 30
#: Largest ``.dic`` file read (published word.dic: a few MB).
MAX_DIC_BYTES = 256 << 20
#: Largest JSON file read (a config is about 1 KB).
MAX_JSON_BYTES = 1 << 20
#: Longest ``.dic`` line, in characters (a token, a tab, an id).
MAX_DIC_LINE_CHARS = 4096
#: Most digits of a ``.dic`` id (ids index an embedding of at most 10**9 rows).
MAX_DIC_ID_DIGITS = 9

FILES = ("config.json", "char.dic", "word.dic", "token_embedder.pkl", "encoder.pkl")


class EfmlFormatError(ValueError):
    """An ELMoForManyLangs model directory that is incomplete, malformed, or
    does not match its architecture."""


# ------------------------------------------------------------------ reading
def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    if not path.is_file():
        raise EfmlFormatError(
            f"{path.parent}: no {path.name} ({what}); an ELMoForManyLangs model directory holds "
            f"{', '.join(FILES)}"
        )
    size = path.stat().st_size
    if size > limit:
        raise EfmlFormatError(f"{path} is {size:,} bytes, more than the {limit:,} a {what} may have")
    return path.read_bytes()


def read_json(path: Path) -> Dict[str, Any]:
    raw = _read_bounded(path, MAX_JSON_BYTES, "JSON file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise EfmlFormatError(f"{path} is not UTF-8 JSON: {err}") from None
    if not isinstance(data, dict):
        raise EfmlFormatError(f"{path} holds a JSON {type(data).__name__}, expected an object")
    return data


def read_dic(path: PathLike) -> Dict[str, int]:
    """A ``.dic`` file as the reference reads it (see :mod:`.efml`)."""
    path = Path(path)
    raw = _read_bounded(path, MAX_DIC_BYTES, "vocabulary (.dic)")
    if raw.startswith(b"\xef\xbb\xbf"):
        raise EfmlFormatError(
            f"{path} starts with a byte-order mark (U+FEFF, which an editor adds): the reference reads it as part "
            "of the first token. Save the file as UTF-8 without a BOM"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise EfmlFormatError(f"{path} is not UTF-8 text: {err}") from None
    table: Dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if len(line) > MAX_DIC_LINE_CHARS:
            raise EfmlFormatError(
                f"{path}, line {number}: {len(line):,} characters, more than the {MAX_DIC_LINE_CHARS:,} of a "
                "'token<TAB>id' line; this is not a vocabulary file"
            )
        fields = line.strip().split("\t")
        if fields == [""]:
            continue
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        if len(fields) != 2:
            raise EfmlFormatError(
                f"{path}, line {number}: expected 'token<TAB>id', found {len(fields)} tab-separated fields"
            )
        token, index = fields
        if not (index.isascii() and index.isdigit() and len(index) <= MAX_DIC_ID_DIGITS):
            shown = index if len(index) <= 20 else index[:20] + "..."
            raise EfmlFormatError(
                f"{path}, line {number}: the id {shown!r} is not a non-negative integer of at most "
                f"{MAX_DIC_ID_DIGITS} digits"
            )
        table[token] = int(index)
    if not table:
        raise EfmlFormatError(f"{path} holds no entries")
    return table


def load_state_dict(path: PathLike) -> "OrderedDict[str, torch.Tensor]":
    """A ``.pkl`` state dict, read with ``weights_only=True``; only a map of
    names to finite floating-point tensors is accepted."""
    path = Path(path)
    if not path.is_file():
        _read_bounded(path, MAX_PKL_BYTES, "state dict (.pkl)")  # raises: names the missing file
    size = path.stat().st_size
    if size > MAX_PKL_BYTES:
        raise EfmlFormatError(f"{path} is {size:,} bytes, more than the {MAX_PKL_BYTES:,} a state dict may have")
    try:
        data = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError, RuntimeError, EOFError, ... from a bad or hostile file
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise EfmlFormatError(
            f"{path} is not a PyTorch state dict of tensors ({type(err).__name__}: {first[:300]}). It was read "
            "with torch.load(weights_only=True), which refuses pickles that build objects or run code; "
            "nothing from it was executed. Re-download the model, or re-save its state dicts of tensors."
        ) from None
    if not isinstance(data, dict):
        raise EfmlFormatError(f"{path} holds a {type(data).__name__}, expected a state dict (names -> tensors)")
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for key, value in data.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise EfmlFormatError(f"{path}: entry {key!r} is a {type(value).__name__}, expected a tensor")
        if not value.is_floating_point():
            raise EfmlFormatError(f"{path}: tensor {key!r} holds {value.dtype} values, expected floating point")
        value = value.float()
        if not torch.isfinite(value).all():
            raise EfmlFormatError(f"{path}: tensor {key!r} holds NaN or infinite values")
        out[key] = value
    return out


def write_dic(table: Dict[str, int], path: Path) -> None:
    lines = [f"{token}\t{index}\n" for token, index in sorted(table.items(), key=lambda item: item[1])]
    path.write_text("".join(lines), encoding="utf-8")
