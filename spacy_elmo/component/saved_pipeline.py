"""Reading the ``elmo`` component's files of a saved pipeline, defensively.

``nlp.to_disk`` writes two files for the component: ``elmo/cfg`` (JSON: the
storage settings) and ``elmo/model`` (thinc's msgpack; inside it the biLM's
options and weights in the published hdf5 format, with a SHA-256 checksum
of both). ``spacy.load`` and ``nlp.from_disk`` read them through
:func:`read_cfg_file` and :func:`load_model_file`, which

* refuse a file above a size bound unread (``MAX_CFG_BYTES``,
  ``MAX_MODEL_BYTES``), so a huge or endless file (a device, a sparse
  file) costs no memory;
* recognise files of other formats by their first bytes (a Python pickle,
  a ``torch.save`` zip, hdf5, gzip) and say what the file is; nothing in
  them is run;
* turn every failure of the msgpack and JSON readers (a truncated or
  garbled file, a header that claims more bytes or entries than the file
  holds: msgpack bounds those by the file's size before allocating) into a
  :class:`SavedPipelineError` that names the file and says what to do.

The checksum itself is written and checked with the biLM's bytes
(:func:`spacy_elmo.layers.bilm_shim.bilm_checksum`). :func:`read_component`
and :func:`read_component_bytes` are the component's ``from_disk`` and
``from_bytes``.
"""
import json
import math
from pathlib import Path
from typing import Any, Dict, Optional

from spacy import util

from ..bilm.options import MAX_PARAMETERS
from ..layers.bilm_shim import RESAVE, msgpack_map

#: ``elmo/cfg`` holds three small settings (a few hundred bytes).
MAX_CFG_BYTES = 1 << 20
#: ``elmo/model`` holds the biLM's float32 weights; the options refuse more
#: than ``MAX_PARAMETERS`` of them, so a larger file cannot be a valid one
#: (plus 64 MiB for hdf5's and msgpack's framing and the options).
MAX_MODEL_BYTES = 4 * MAX_PARAMETERS + (64 << 20)

class SavedPipelineError(ValueError):
    """A file of a saved ``elmo`` component that cannot be read: missing,
    too large, of another format, truncated or garbled."""


# First bytes of formats that people put in place of a component's files.
_MAGIC = (
    (b"PK\x03\x04", "a zip archive (the format torch.save writes)"),
    (
        b"\x89HDF\r\n\x1a\n",
        "an hdf5 file (a weight file: give it at initialization, [initialize.components.elmo] weights)",
    ),
    (b"\x1f\x8b", "a gzip file"),
)


def describe_foreign(data: bytes) -> Optional[str]:
    """What ``data`` is when its first bytes show a format that no elmo
    component file has; None otherwise. A pickle starts with the PROTO
    opcode (0x80) and its protocol number (2..5)."""
    if not data:
        return "empty"
    if data[0] == 0x80 and len(data) > 1 and 2 <= data[1] <= 5:
        return "a Python pickle (it was not unpickled: pickles can run code)"
    for magic, what in _MAGIC:
        if data.startswith(magic):
            return what
    return None


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit``
    bytes; a :class:`SavedPipelineError` otherwise (the size is checked
    before anything is read)."""
    if not path.exists():
        raise SavedPipelineError(f"{path} is missing; {RESAVE}")
    if not path.is_file():
        raise SavedPipelineError(f"{path} is not a regular file (a directory or a device); {RESAVE}")
    size = path.stat().st_size
    if size > limit:
        raise SavedPipelineError(
            f"{path} holds {size:,} bytes, more than the {limit:,} that this file can hold "
            f"for a valid elmo component; it was not read. {RESAVE}"
        )
    with path.open("rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:  # grew while being read
        raise SavedPipelineError(f"{path} grew past {limit:,} bytes while it was read; {RESAVE}")
    return data


def parse_cfg(data: bytes, where: str) -> Dict[str, Any]:
    """The component's settings from the JSON of ``elmo/cfg``, checked
    (store, dtype and mix; see :class:`spacy_elmo.component.elmo.Elmo`)."""
    from .doc_data import DTYPES, STORES

    foreign = describe_foreign(data)
    if foreign is not None:
        raise SavedPipelineError(f"{where} is {foreign}, not the JSON settings that nlp.to_disk writes; {RESAVE}")
    try:
        cfg = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise SavedPipelineError(f"{where} is not readable JSON (truncated or damaged: {err}); {RESAVE}") from None
    if not isinstance(cfg, dict):
        raise SavedPipelineError(f"{where} holds a JSON {type(cfg).__name__}, expected an object; {RESAVE}")
    problems = []
    if cfg.get("store", "layers") not in STORES:
        problems.append(f"'store' must be one of {STORES}, found {cfg.get('store')!r}")
    if cfg.get("dtype", "float32") not in DTYPES:
        problems.append(f"'dtype' must be one of {DTYPES}, found {cfg.get('dtype')!r}")
    mix = cfg.get("mix")
    if mix is not None and not (
        isinstance(mix, list)
        and all(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) for w in mix)
    ):
        problems.append(f"'mix' must be null or a list of finite numbers, found {mix!r}")
    if problems:
        raise SavedPipelineError(f"{where}: " + "; ".join(problems) + f". {RESAVE}")
    return cfg


def read_cfg_file(path: Path) -> Dict[str, Any]:
    """``elmo/cfg`` of a saved pipeline, bounded and checked."""
    return parse_cfg(read_bounded(path, MAX_CFG_BYTES), str(path))


def load_model_bytes(model, data: bytes, where: str) -> None:
    """``model.from_bytes(data)`` (thinc), with every failure named after
    ``where``: the biLM's own errors (:class:`~spacy_elmo.OptionsError`,
    :class:`~spacy_elmo.WeightFileError`, a checksum mismatch) get the name
    put in front; anything the readers raise on a damaged file becomes a
    :class:`SavedPipelineError`."""
    from ..bilm import OptionsError, WeightFileError

    foreign = describe_foreign(data)
    if foreign is not None:
        raise SavedPipelineError(
            f"{where} is {foreign}, not the msgpack file that nlp.to_disk writes for the elmo component; {RESAVE}"
        )
    try:
        model.from_bytes(data)
    except (OptionsError, WeightFileError) as err:
        # The biLM's reader sees bytes only: name the file here.
        err.args = (f"{where}: {err}",) + err.args[1:]
        raise
    except Exception as err:  # msgpack and thinc raise many unrelated classes on damaged input
        raise SavedPipelineError(
            f"{where} is not a readable elmo model file (truncated or damaged: {type(err).__name__}: {err}); {RESAVE}"
        ) from None


def load_model_file(model, path: Path) -> None:
    """``elmo/model`` of a saved pipeline into ``model``, bounded and named."""
    load_model_bytes(model, read_bounded(path, MAX_MODEL_BYTES), str(path))


def read_component(component, path: Path, exclude) -> None:
    """``Elmo.from_disk``: ``cfg``, ``vocab`` and ``model`` of ``path`` into
    ``component``, each file read bounded and checked."""
    deserialize = {
        "cfg": lambda p: component.cfg.update(read_cfg_file(Path(p))),
        "vocab": lambda p: component.vocab.from_disk(p, exclude=exclude),
        "model": lambda p: load_model_file(component.model, Path(p)),
    }
    util.from_disk(Path(path), deserialize, exclude)


def read_component_bytes(component, data: bytes, exclude) -> None:
    """``Elmo.from_bytes``: the same checks as :func:`read_component`, the
    failures naming ``the elmo component's bytes``."""
    where = f"the {component.name} component's bytes"
    deserialize = {
        "cfg": lambda b: component.cfg.update(
            parse_cfg(b.encode("utf-8") if isinstance(b, str) else b, f"{where} (cfg)")
        ),
        "vocab": lambda b: component.vocab.from_bytes(b, exclude=exclude),
        "model": lambda b: load_model_bytes(component.model, b, f"{where} (model)"),
    }
    util.from_dict(msgpack_map(data, where, SavedPipelineError), deserialize, exclude)
