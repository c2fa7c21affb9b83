"""What a user writes as weights -> local files: the one entry of the hub.

:func:`resolve` turns ``weights`` (and, optionally, ``options``) into two
local files in the published bilm-tf/AllenNLP format:

- ``None``, ``"english"`` or ``"default"``: the English biLM shipped inside
  the package (:func:`.names.shipped_model`); offline, nothing is downloaded.
- ``"small"``, ``"medium"``, ``"original"``, ``"original-5.5b"``: AllenNLP's
  published English ELMo (:data:`.names.PUBLISHED_MODELS`), downloaded once
  into the cache (:func:`.names.download`), read from there after.
- An ``http://``, ``https://`` (or ``file://``) URL: downloaded once into
  ``<cache>/urls/<hash of the URL>/<file name>`` (:func:`.names.fetch`).
- A local path: a weights file (its options given, or found next to it), or a
  directory holding ``weights.hdf5`` + ``options.json`` (what ``python -m
  spacy_elmo export`` writes) or one ``*weights.hdf5`` with its
  ``*options.json``.
- The other published families (:mod:`.families`): ``efml:<lang>`` and
  ``nlpl:<id>`` names, zips (local or URLs), and directories of
  ELMoForManyLangs models or NLPL's ``model.hdf5``. For an ELMoForManyLangs
  model the pair is ``(model directory, its config.json)``.

Names win over same-named relative paths: ``"small"`` is always the
published model; write ``"./small"`` for a directory called ``small``.
``pathlib.Path`` values are always paths. Names are case-insensitive.
"""
import os
import urllib.parse
from pathlib import Path
from typing import Optional, Tuple

from . import families
from .help import HOW_TO_GIVE_WEIGHTS
from .names import PUBLISHED_MODELS, SHIPPED_NAMES, ModelNotFoundError, PathLike, download, fetch, is_url, shipped_model
from .transport import Check, CheckOptions, check_url, redact


def resolve(
    weights: Optional[PathLike] = None,
    options: Optional[PathLike] = None,
    *,
    check: Optional[Check] = None,
    check_options: Optional[CheckOptions] = None,
    progress: bool = True,
) -> Tuple[Path, Path]:
    """Local ``(weights, options)`` files for a name, path or URL (see the
    module docstring), downloading into the cache what is not there yet
    (each download handed to ``check`` before it is kept; see
    :func:`.transport.fetch_files`).

    ``options`` may be left out for names, directories, and weights whose
    file name ends in ``weights.hdf5`` with the matching ``options.json``
    beside it (``x_weights.hdf5`` -> ``x_options.json``, or ``options.json``).
    """
    if weights is None:
        if options is not None:
            raise ValueError("options were given without weights")
        return shipped_model()
    if isinstance(weights, str) and families.parse_name(weights) is not None:
        if options is not None:
            raise ValueError(f"the model name {weights!r} comes with its options; leave options out")
        return families.resolve_name(weights, check=check, progress=progress)
    if isinstance(weights, str) and is_url(weights) and families.is_zip_path(urllib.parse.urlsplit(weights).path):
        return families.resolve_zip_url(weights, check=check, progress=progress)
    if isinstance(weights, str) and is_url(weights):
        check_url(weights)  # before anything prints it
        if options is None:
            options = _sibling_options_url(weights)
        return fetch(weights, options, check=check, check_options=check_options, progress=progress)
    if isinstance(weights, str) and _is_name(weights):
        key = weights.strip().lower()
        if key in SHIPPED_NAMES or key in PUBLISHED_MODELS:
            if options is not None:
                raise ValueError(f"the model name {weights!r} comes with its options; leave options out")
            return (
                shipped_model()
                if key in SHIPPED_NAMES
                else download(key, check=check, check_options=check_options, progress=progress)
            )
    path = Path(weights).expanduser()
    if path.is_dir():
        if options is not None:
            raise ValueError(f"{path} is a directory: leave options out, or give the weights file")
        return _directory_files(path)
    if path.is_file() and families.is_zip_path(path) and options is None:
        return families.resolve_local_zip(path, check=check)
    if path.is_file():
        if options is None:
            return path, _sibling_options(path)
        return fetch(path, options, check=check, check_options=check_options, progress=progress)
    raise ModelNotFoundError(
        f"{str(weights)!r} is neither a model name nor an existing file or directory. "
        f"{HOW_TO_GIVE_WEIGHTS}"
    )


def _is_name(value: str) -> bool:
    return not any(sep in value for sep in ("/", "\\", os.sep)) and not value.startswith(".")


def _sibling_options_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if not parts.path.endswith("weights.hdf5"):
        raise ValueError(
            f"cannot tell the options URL of {redact(url)}: give options = its options JSON (URL or path)"
        )
    return urllib.parse.urlunsplit(parts._replace(path=parts.path[: -len("weights.hdf5")] + "options.json"))


def _sibling_options(weights: Path) -> Path:
    candidates = []
    if weights.name.endswith("weights.hdf5"):
        candidates.append(weights.with_name(weights.name[: -len("weights.hdf5")] + "options.json"))
    candidates.append(weights.with_name("options.json"))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ValueError(
        f"no options JSON next to {weights} (looked for {', '.join(c.name for c in candidates)}): "
        "give options = 'path/options.json'"
    )


def _directory_files(folder: Path) -> Tuple[Path, Path]:
    other = families.directory_files(folder)  # ELMoForManyLangs, or NLPL's model.hdf5
    if other is not None:
        return other
    if (folder / "weights.hdf5").is_file():
        return folder / "weights.hdf5", _sibling_options(folder / "weights.hdf5")
    found = sorted(folder.glob("*weights.hdf5"))
    if len(found) == 1:
        return found[0], _sibling_options(found[0])
    raise ModelNotFoundError(
        f"{folder} holds {'no' if not found else 'several'} *weights.hdf5 files: expected weights.hdf5 "
        "and options.json (or give weights = the file and options = its options)"
    )
