"""Names, paths and URLs of ELMo models -> local files.

:func:`resolve` turns what a user writes as ``weights`` (and, optionally,
``options``) into two local files in the published bilm-tf/AllenNLP format:

- ``None``, ``"english"`` or ``"default"``: the English biLM shipped inside
  the package (:data:`SHIPPED_MODEL_DIR`); offline, nothing is downloaded.
- ``"small"``, ``"medium"``, ``"original"``, ``"original-5.5b"``: AllenNLP's
  published English ELMo (:data:`PUBLISHED_MODELS`), downloaded once from
  :data:`PUBLISHED_BASE_URL` (or the mirror in ``SPACY_ELMO_MIRROR``) into
  the cache (:func:`cache_dir`, ``SPACY_ELMO_CACHE``), read from there after.
- An ``http://``, ``https://`` (or ``file://``) URL: downloaded once into
  ``<cache>/urls/<hash of the URL>/<file name>``.
- A local path: a weights file (its options given, or found next to it), or a
  directory holding ``weights.hdf5`` + ``options.json`` (what ``python -m
  spacy_elmo export`` writes) or one ``*weights.hdf5`` with its
  ``*options.json``.

Choices:

- Names win over same-named relative paths: ``"small"`` is always the
  published model; write ``"./small"`` for a directory called ``small``.
  ``pathlib.Path`` values are always paths. Names are case-insensitive.
- The cache is laid out like the published bucket
  (``<cache>/<shape>/elmo_<shape>_weights.hdf5`` and ``..._options.json``),
  so files put there by hand, or a copy of the bucket, are used as they are,
  and a cache directory can itself be served as a mirror.
- Downloads go through :mod:`.transport` (bounded, locked, atomic), with the
  format check the caller hands in (``check``; :mod:`spacy_elmo.loading`
  gives the published format's).
"""
import hashlib
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Optional, Tuple, Union

from .help import HOW_TO_GIVE_WEIGHTS, published_offline, urls_offline
from .transport import Check, fetch_files

PathLike = Union[str, Path]

#: The English biLM that ships inside the package (weights.hdf5, options.json,
#: vocab.txt, MODEL_CARD.md): what ``weights = None``, ``"english"`` and
#: ``"default"`` mean. The one place that names it.
SHIPPED_MODEL_DIR = Path(__file__).parent.parent / "models" / "english"
SHIPPED_NAMES = ("english", "default")

#: Where AllenNLP published the English ELMo models of the paper.
PUBLISHED_BASE_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
#: Name -> AllenNLP's shape directory; the files are
#: ``<base>/<shape>/elmo_<shape>_weights.hdf5`` and ``..._options.json``.
PUBLISHED_MODELS = {
    "small": "2x1024_128_2048cnn_1xhighway",
    "medium": "2x2048_256_2048cnn_1xhighway",
    "original": "2x4096_512_2048cnn_2xhighway",
    "original-5.5b": "2x4096_512_2048cnn_2xhighway_5.5B",
}

CACHE_ENV = "SPACY_ELMO_CACHE"
MIRROR_ENV = "SPACY_ELMO_MIRROR"
URL_PREFIXES = ("http://", "https://", "file://")


class ModelNotFoundError(ValueError):
    """A name, path or shipped model that does not exist."""


# ------------------------------------------------------------------ places
def cache_dir() -> Path:
    """``SPACY_ELMO_CACHE`` if set, else ``spacy_elmo`` in the user's cache
    directory: ``$XDG_CACHE_HOME`` or ``~/.cache`` (Linux), ``~/Library/Caches``
    (macOS), ``%LOCALAPPDATA%`` (Windows)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":  # pragma: no cover
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":  # pragma: no cover
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "spacy_elmo"


def base_url() -> str:
    """``SPACY_ELMO_MIRROR`` (a URL, or a local directory, laid out like the
    published bucket) if set, else :data:`PUBLISHED_BASE_URL`."""
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    if not mirror:
        return PUBLISHED_BASE_URL
    if not is_url(mirror):
        mirror = Path(mirror).expanduser().resolve().as_uri()
    return mirror.rstrip("/")


def published_files(name: str) -> Tuple[str, str]:
    """File names of a published model: ``(elmo_<shape>_weights.hdf5, elmo_<shape>_options.json)``."""
    shape = PUBLISHED_MODELS[name.lower()]
    return f"elmo_{shape}_weights.hdf5", f"elmo_{shape}_options.json"


def published_urls(name: str, base: Optional[str] = None) -> Tuple[str, str]:
    """``(weights URL, options URL)`` of a published model under ``base``
    (default: :func:`base_url`)."""
    base = (base or base_url()).rstrip("/")
    shape = PUBLISHED_MODELS[name.lower()]
    weights, options = published_files(name)
    return f"{base}/{shape}/{weights}", f"{base}/{shape}/{options}"


def published_cache_paths(name: str) -> Tuple[Path, Path]:
    """Where a published model lives in the cache (same layout as the bucket)."""
    folder = cache_dir() / PUBLISHED_MODELS[name.lower()]
    weights, options = published_files(name)
    return folder / weights, folder / options


def url_cache_path(url: str) -> Path:
    """``<cache>/urls/<first 16 hex of sha256(url)>/<file name of the URL>``."""
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    name = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).name
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "download"
    return cache_dir() / "urls" / digest / name


def is_url(value: object) -> bool:
    return isinstance(value, str) and value.lower().startswith(URL_PREFIXES)


# ---------------------------------------------------------------- resolving
def shipped_model() -> Tuple[Path, Path]:
    """``(weights.hdf5, options.json)`` of the shipped English biLM."""
    folder = Path(SHIPPED_MODEL_DIR)
    weights, options = folder / "weights.hdf5", folder / "options.json"
    if weights.is_file() and options.is_file():
        return weights, options
    raise ModelNotFoundError(
        f"The English biLM that ships with spacy_elmo is not in this installation "
        f"(expected {weights} and {options}). {HOW_TO_GIVE_WEIGHTS}"
    )


def resolve(
    weights: Optional[PathLike] = None,
    options: Optional[PathLike] = None,
    *,
    check: Optional[Check] = None,
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
    if isinstance(weights, str) and is_url(weights):
        if options is None:
            options = _sibling_options_url(weights)
        return fetch(weights, options, check=check, progress=progress)
    if isinstance(weights, str) and _is_name(weights):
        key = weights.strip().lower()
        if key in SHIPPED_NAMES or key in PUBLISHED_MODELS:
            if options is not None:
                raise ValueError(f"the model name {weights!r} comes with its options; leave options out")
            return shipped_model() if key in SHIPPED_NAMES else download(key, check=check, progress=progress)
    path = Path(weights).expanduser()
    if path.is_dir():
        if options is not None:
            raise ValueError(f"{path} is a directory: leave options out, or give the weights file")
        return _directory_files(path)
    if path.is_file():
        if options is None:
            return path, _sibling_options(path)
        return fetch(path, options, progress=progress)
    raise ModelNotFoundError(
        f"{str(weights)!r} is neither a model name nor an existing file or directory. "
        f"{HOW_TO_GIVE_WEIGHTS}"
    )


def download(name: str, *, check: Optional[Check] = None, progress: bool = True) -> Tuple[Path, Path]:
    """A published model by name (see :data:`PUBLISHED_MODELS`): its files in
    the cache, downloaded first if they are not there."""
    key = name.strip().lower()
    if key not in PUBLISHED_MODELS:
        raise ModelNotFoundError(f"unknown published model {name!r}; known: {', '.join(PUBLISHED_MODELS)}")
    weights_url, options_url = published_urls(key)
    weights_path, options_path = published_cache_paths(key)
    offline = published_offline(
        key, weights_path, options_path, PUBLISHED_MODELS[key], PUBLISHED_BASE_URL, CACHE_ENV, MIRROR_ENV
    )
    return fetch_files(
        [(weights_url, weights_path), (options_url, options_path)], check=check, progress=progress, offline=offline
    )


def fetch(
    weights: PathLike, options: PathLike, *, check: Optional[Check] = None, progress: bool = True
) -> Tuple[Path, Path]:
    """Weights and options given as URLs and/or local paths: each URL is
    downloaded once into ``<cache>/urls/`` (see :func:`url_cache_path`)."""
    sources = []
    for value in (weights, options):
        if is_url(value):
            sources.append((str(value), url_cache_path(str(value))))
        else:
            path = Path(value).expanduser()
            if path.is_dir():
                raise ModelNotFoundError(f"{path} is a directory; expected a file here (weights .hdf5 or options .json)")
            if not path.is_file():
                raise ModelNotFoundError(f"file not found: {path}")
            sources.append((None, path))
    offline = urls_offline(dest for url, dest in sources if url is not None)
    return fetch_files(sources, check=check, progress=progress, offline=offline)


def _is_name(value: str) -> bool:
    return not any(sep in value for sep in ("/", "\\", os.sep)) and not value.startswith(".")


def _sibling_options_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if not parts.path.endswith("weights.hdf5"):
        raise ValueError(
            f"cannot tell the options URL of {url}: give options = its options JSON (URL or path)"
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
        f"give options = 'path/options.json'"
    )


def _directory_files(folder: Path) -> Tuple[Path, Path]:
    if (folder / "weights.hdf5").is_file():
        return folder / "weights.hdf5", _sibling_options(folder / "weights.hdf5")
    found = sorted(folder.glob("*weights.hdf5"))
    if len(found) == 1:
        return found[0], _sibling_options(found[0])
    raise ModelNotFoundError(
        f"{folder} holds {'no' if not found else 'several'} *weights.hdf5 files: expected weights.hdf5 "
        f"and options.json (or give weights = the file and options = its options)"
    )
