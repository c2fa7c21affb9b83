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

Two steps, so that what can be told without the network is told first:
:func:`locate` applies every rule about what a user wrote (which form it
is, the options that go with it, that a local path exists) and finds local
files, reading nothing but the file system's listings; :func:`obtain`
fetches what is not local yet. :func:`resolve` is both.
"""
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple, Union

from . import families
from .help import PYTHON, Wording
from .names import (
    PUBLISHED_MODELS,
    SHIPPED_NAMES,
    ModelNotFoundError,
    PathLike,
    download,
    fetch,
    is_url,
    shipped_model,
)
from .transport import Check, CheckOptions, check_url, redact

#: What :func:`locate` finds: local files, or what to fetch.
FILES, PUBLISHED, FAMILY, ZIP_URL, ZIP, URLS = "files", "published", "family", "zip-url", "zip", "urls"


class OptionsNotFoundError(ModelNotFoundError):
    """A local weights file whose options JSON is not beside it (``weights``:
    the file), so that a loader can first say whether the file is weights
    at all."""

    def __init__(self, message: str, weights: Path) -> None:
        super().__init__(message)
        self.weights = weights


@dataclass(frozen=True)
class Located:
    """What a user's weights (and options) name: ``kind`` :data:`FILES`
    (``weights``/``options`` are local files; for an ELMoForManyLangs model
    ``weights`` is its directory), :data:`PUBLISHED` or :data:`FAMILY` (a
    name), :data:`ZIP_URL`, :data:`ZIP` (a local zip), or :data:`URLS`
    (weights and options, at least one of them a URL)."""

    kind: str
    weights: Union[str, Path]
    options: Optional[Union[str, Path]] = None

    def pair(self) -> Tuple[Union[str, Path], Union[str, Path]]:
        """``(weights, options)`` of the kinds that name both (:data:`FILES`, :data:`URLS`)."""
        if self.options is None:
            raise ValueError(f"{self.weights}: a {self.kind} source names no options file")
        return self.weights, self.options


def resolve(
    weights: Optional[PathLike] = None,
    options: Optional[PathLike] = None,
    *,
    check: Optional[Check] = None,
    check_options: Optional[CheckOptions] = None,
    progress: bool = True,
    wording: Wording = PYTHON,
) -> Tuple[Path, Path]:
    """Local ``(weights, options)`` files for a name, path or URL (see the
    module docstring), downloading into the cache what is not there yet
    (each download handed to ``check`` before it is kept; see
    :func:`.transport.fetch_files`).

    ``options`` may be left out for names, directories, and weights whose
    file name ends in ``weights.hdf5`` with the matching ``options.json``
    beside it (``x_weights.hdf5`` -> ``x_options.json``, or ``options.json``).
    """
    return obtain(
        locate(weights, options, wording=wording), check=check, check_options=check_options, progress=progress
    )


def locate(
    weights: Optional[PathLike] = None, options: Optional[PathLike] = None, *, wording: Wording = PYTHON
) -> Located:
    """What ``weights`` and ``options`` name, with every rule about them
    applied and no download: the one home of those rules (options without
    weights, options given with a name, a directory or a zip, unknown
    names, paths that do not exist, refused URLs). Errors are worded for
    the entry point (``wording``)."""
    for value, setting in ((weights, wording.weights), (options, wording.options)):
        if value is not None and not isinstance(value, (str, Path)):
            raise ModelNotFoundError(
                f"{setting} must be a name, path or URL (a string), found {type(value).__name__} {value!r:.80}"
            )
    if weights is None:
        if options is not None:
            raise ValueError(wording.options_without_weights())
        return Located(FILES, *shipped_model())
    if isinstance(weights, str) and families.parse_name(weights) is not None:
        _no_options(options, wording, f"the model name {weights!r}")
        return Located(FAMILY, weights)
    if isinstance(weights, str) and is_url(weights):
        check_url(weights)  # before anything prints it
        if families.is_zip_path(urllib.parse.urlsplit(weights).path):
            _no_options(options, wording, f"the zip {redact(weights)}")
            return Located(ZIP_URL, weights)
        return Located(URLS, weights, _options_for(options, weights, wording))
    if isinstance(weights, str) and _is_name(weights):
        key = weights.strip().lower()
        if key in SHIPPED_NAMES or key in PUBLISHED_MODELS:
            _no_options(options, wording, f"the model name {weights!r}")
            return Located(FILES, *shipped_model()) if key in SHIPPED_NAMES else Located(PUBLISHED, key)
    path = Path(weights).expanduser()
    if path.is_dir():
        _no_options(options, wording, f"{path} is a directory, which")
        return Located(FILES, *_directory_files(path, wording))
    if path.is_file() and families.is_zip_path(path):
        _no_options(options, wording, f"the zip {path}")
        return Located(ZIP, path)
    if path.is_file():
        if options is None:
            return Located(FILES, path, _sibling_options(path, wording))
        options = _options_for(options, path, wording)
        return Located(URLS if is_url(options) else FILES, path, options)
    raise ModelNotFoundError(
        f"{wording.weights} {_shown(weights)} is neither a model name nor an existing file or directory. "
        f"{wording.advice}"
    )


def obtain(
    found: Located,
    *,
    check: Optional[Check] = None,
    check_options: Optional[CheckOptions] = None,
    progress: bool = True,
) -> Tuple[Path, Path]:
    """The local ``(weights, options)`` of what :func:`locate` found,
    fetched into the cache first where they are not there yet."""
    if found.kind == FILES:
        weights, options = found.pair()
        return Path(weights), Path(options)
    if found.kind == PUBLISHED:
        return download(str(found.weights), check=check, check_options=check_options, progress=progress)
    if found.kind == FAMILY:
        return families.resolve_name(str(found.weights), check=check, progress=progress)
    if found.kind == ZIP_URL:
        return families.resolve_zip_url(str(found.weights), check=check, progress=progress)
    if found.kind == ZIP:
        return families.resolve_local_zip(Path(found.weights), check=check)
    return fetch(*found.pair(), check=check, check_options=check_options, progress=progress)


def _shown(value: PathLike) -> str:
    """``value`` for a message: quoted, at most 200 characters, no credentials."""
    text = redact(str(value))
    return repr(text if len(text) <= 200 else text[:200] + "...")


def _no_options(options: Optional[PathLike], wording: Wording, what: str) -> None:
    if options is not None:
        raise ValueError(wording.comes_with_options(what))


def _options_for(options: Optional[PathLike], weights: PathLike, wording: Wording) -> PathLike:
    """The options that go with ``weights``: as given (a URL, or a local
    file that exists), or beside a weights URL."""
    if options is None:
        return _sibling_options_url(str(weights), wording)
    if isinstance(options, str) and is_url(options):
        check_url(options)
        return options
    path = Path(options).expanduser()
    if path.is_dir():
        raise ModelNotFoundError(f"{wording.options} {path} is a directory; give the options JSON file")
    if not path.is_file():
        raise ModelNotFoundError(
            f"{wording.options} {_shown(options)}: no such file; give the options JSON of the weights"
        )
    return path


def _is_name(value: str) -> bool:
    return not any(sep in value for sep in ("/", "\\", os.sep)) and not value.startswith(".")


def _sibling_options_url(url: str, wording: Wording) -> str:
    parts = urllib.parse.urlsplit(url)
    if not parts.path.endswith("weights.hdf5"):
        raise ValueError(
            f"cannot tell the options URL of {redact(url)}: give {wording.options} = its options JSON (URL or path)"
        )
    return urllib.parse.urlunsplit(parts._replace(path=parts.path[: -len("weights.hdf5")] + "options.json"))


def _sibling_options(weights: Path, wording: Wording = PYTHON, in_directory: bool = False) -> Path:
    candidates = []
    if weights.name.endswith("weights.hdf5"):
        candidates.append(weights.with_name(weights.name[: -len("weights.hdf5")] + "options.json"))
    candidates.append(weights.with_name("options.json"))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    fix = (
        f"put its options.json beside it, or give {wording.weights} = the weights file and "
        f"{wording.options} = its options JSON"
        if in_directory
        else f"give {wording.options} = the options JSON of the weights"
    )
    raise OptionsNotFoundError(
        f"no options JSON next to {weights} (looked for {', '.join(c.name for c in candidates)}): {fix}", weights
    )


def _directory_files(folder: Path, wording: Wording = PYTHON) -> Tuple[Path, Path]:
    other = families.directory_files(folder)  # ELMoForManyLangs, or NLPL's model.hdf5
    if other is not None:
        return other
    if (folder / "weights.hdf5").is_file():
        return folder / "weights.hdf5", _sibling_options(folder / "weights.hdf5", wording, in_directory=True)
    found = sorted(folder.glob("*weights.hdf5"))
    if len(found) == 1:
        return found[0], _sibling_options(found[0], wording, in_directory=True)
    raise ModelNotFoundError(
        f"{wording.weights} {folder} holds {'no' if not found else 'several'} *weights.hdf5 files: a model directory "
        f"holds weights.hdf5 and options.json, or an ELMoForManyLangs or NLPL model. {wording.advice}"
    )
