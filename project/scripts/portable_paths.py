"""Paths as the project's committed outputs write them: never of the machine.

Metrics, reports and the shipped model's history are committed, so a path
in them must mean the same on every checkout. :func:`portable_path` writes
a path inside the repository relative to the repository's root
(``spacy_elmo/models/english/weights.hdf5``) and a path outside it as its
last component only (``heldout.txt``, ``step1250``): what the file was, not
where it lay on one machine. :func:`portable_config` applies that to every
absolute path in a (nested) record; :func:`scrub` to free text such as an
error message.
"""
import re
from pathlib import Path, PureWindowsPath
from typing import Any, Optional, Union

#: The repository's root (this file is ``project/scripts/portable_paths.py``).
REPO = Path(__file__).resolve().parents[2]

_ABSOLUTE = re.compile(r"^(?:/|[A-Za-z]:[\\/]|\\\\)")


def is_absolute(text: str) -> bool:
    return bool(_ABSOLUTE.match(text))


def portable_path(path: Union[str, Path, None]) -> Optional[str]:
    """``path`` relative to the repository root, or its name when outside it."""
    if path is None:
        return None
    text = str(path)
    if re.match(r"^[A-Za-z]:[\\/]|^\\\\", text):
        return PureWindowsPath(text).name
    resolved = Path(text).resolve()
    try:
        return resolved.relative_to(REPO).as_posix()
    except ValueError:
        return resolved.name


def portable_config(value: Any) -> Any:
    """Every absolute path string in a JSON-like ``value`` made portable."""
    if isinstance(value, dict):
        return {k: portable_config(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable_config(v) for v in value]
    if isinstance(value, str) and is_absolute(value):
        return portable_path(value)
    return value


def scrub(text: str) -> str:
    """Free text with the repository's root removed from its paths."""
    return text.replace(str(REPO) + "/", "").replace(str(REPO), ".")
