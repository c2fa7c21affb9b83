"""The shipped model, AllenNLP's published names, their URLs and the cache.

:func:`shipped_model` is the English biLM inside the package
(:data:`SHIPPED_MODEL_DIR`); :func:`download` fetches AllenNLP's published
English ELMo by name (:data:`PUBLISHED_MODELS`) from
:data:`PUBLISHED_BASE_URL` (or the mirror in ``SPACY_ELMO_MIRROR``) into the
cache (:func:`cache_dir`, ``SPACY_ELMO_CACHE``) once, and :func:`fetch`
weights and options given as URLs (into ``<cache>/urls/<hash of the
URL>/<file name>``) or local paths. :mod:`.resolving` decides which of these
a user's ``weights`` names.

Choices:

- The cache is laid out like the published bucket
  (``<cache>/<shape>/elmo_<shape>_weights.hdf5`` and ``..._options.json``),
  so files put there by hand, or a copy of the bucket, are used as they are,
  and a cache directory can itself be served as a mirror.
- Downloads go through :mod:`.transport` (bounded, locked, atomic), with the
  format checks the caller hands in (``check`` for the pair,
  ``check_options`` for the options, run before the weights are requested;
  :mod:`spacy_elmo.loading` gives the published format's).
- A published weights file may take at most
  :data:`PUBLISHED_WEIGHTS_MAX_BYTES` (its float32 parameters plus a
  quarter); a URL's weights at most what their options' check allows.
- The cache is checked before a download (:func:`check_cache`): a
  ``SPACY_ELMO_CACHE`` that is a file or not writable, and a cache entry that
  is a dangling symbolic link or not a regular file, are
  errors (:class:`CacheError`) naming the setting or the entry and what to do. A
  symbolic link to a regular file is a file put there by hand, and used.
"""
import hashlib
import os
import sys
import urllib.parse
from pathlib import Path
from typing import List, Optional, Tuple, Union

from .help import HOW_TO_GIVE_WEIGHTS, published_offline, urls_offline
from .transport import Check, CheckOptions, DownloadError, check_url, fetch_files, redact

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

#: The most bytes a published weights file may take: its float32 parameters
#: (``parameter_count`` of its options x 4: 51.9, 106.9 and 357.1 MiB) plus a
#: quarter for the hdf5 layout, rounded up to MiB. Known before the first byte.
PUBLISHED_WEIGHTS_MAX_BYTES = {
    "small": 65 << 20,
    "medium": 134 << 20,
    "original": 447 << 20,
    "original-5.5b": 447 << 20,
}

CACHE_ENV = "SPACY_ELMO_CACHE"
MIRROR_ENV = "SPACY_ELMO_MIRROR"
URL_PREFIXES = ("http://", "https://", "file://")


class ModelNotFoundError(ValueError):
    """A name, path or shipped model that does not exist."""


class CacheError(ValueError):
    """The cache cannot be used: ``SPACY_ELMO_CACHE`` is a file or not
    writable, or an entry in it is broken (a dangling link, not a file)."""


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
    return env_base_url(MIRROR_ENV, PUBLISHED_BASE_URL)


def env_base_url(env: str, default: str) -> str:
    """The base URL in the environment variable ``env`` (a URL, or a local
    directory as a ``file://`` URL), else ``default``."""
    mirror = os.environ.get(env, "").strip()
    if not mirror:
        return default
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
    """``<cache>/urls/<first 16 hex of sha256(url)>/<file name of the URL>``.
    The file name is the URL path's last segment, decoded; one that is empty
    or decodes to ``.``, ``..`` or something with a ``/`` or ``\\`` in it is
    refused (:class:`~.transport.DownloadError`)."""
    check_url(url)
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    segment = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    if segment in ("", ".", "..") or any(c in segment for c in "/\\\0"):
        raise DownloadError(
            f"{redact(url)}: the URL does not end in a file name (its last part decodes to {segment!r}); "
            "give the URL of the file itself"
        )
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in segment)
    return cache_dir() / "urls" / digest / name


def check_cache(paths, folders=()) -> None:
    """Raise :class:`CacheError` unless the cache can hold ``paths`` (files
    under :func:`cache_dir`) and ``folders`` (directories under it, such as
    an unpacked zip): the cache is a directory, writable (or can be
    made) where a file is missing, no entry on the way is a dangling symbolic link, each folder is a
    directory and each existing file a regular file (or a link to one)."""
    root = cache_dir()
    setting = f"{CACHE_ENV}={os.environ[CACHE_ENV]}" if os.environ.get(CACHE_ENV) else f"the cache {root}"
    fix = f"set {CACHE_ENV} to a writable directory"
    probe = root
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent  # the nearest thing that is there
    if probe.is_symlink() and not probe.exists():
        raise CacheError(
            f"{setting}: {probe} is a symbolic link to {os.readlink(probe)}, which does not exist; remove it or {fix}"
        )
    if not probe.is_dir():
        raise CacheError(f"{setting}: {probe} is a file, not a directory; {fix}, or remove the file")
    paths = list(paths)
    missing = [Path(path) for path in [*paths, *folders] if not Path(path).exists()]
    if missing and not os.access(probe, os.W_OK | os.X_OK):  # a read-only cache that holds the files is fine
        raise CacheError(f"{setting}: {probe} is not writable; {fix}, or make it writable (chmod u+w {probe})")
    for path, leaf_is_file in [(p, True) for p in paths] + [(f, False) for f in folders]:
        entry = Path(path)
        entries = [entry] + [p for p in entry.parents if root in p.parents]
        for item in reversed(entries):
            is_file = leaf_is_file and item == entry
            if item.is_symlink() and not item.exists():
                raise CacheError(
                    f"the cache entry {item} is a symbolic link to {os.readlink(item)}, which does not exist; "
                    f"remove it (rm {item}) and it is downloaded again"
                )
            if item.exists() and (not item.is_file() if is_file else not item.is_dir()):
                kind = "a regular file" if is_file else "a directory"
                remove = f"rm -r {item}" if item.is_dir() and not item.is_symlink() else f"rm {item}"
                raise CacheError(
                    f"the cache entry {item} is not {kind}; remove it ({remove}) and it is downloaded again"
                )


def cache_entry(path: PathLike) -> Optional[Path]:
    """The cache entry that holds ``path`` (what to remove so that it is
    downloaded again): a published model's folder, a URL's folder, an
    unpacked zip's folder; None when ``path`` is not in the cache."""
    root = cache_dir()
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        return None
    depth = {"urls": 2, "zips": 2, "nlpl": 3}.get(parts[0] if parts else "", 1)
    return root.joinpath(*parts[:depth]) if len(parts) >= depth else None


def stale_hint(path: PathLike) -> str:
    """For a file of the cache that does not load: where it is, the link
    on its way if any (an entry put there by hand that points elsewhere),
    and how to clear it; ``""`` outside the cache."""
    entry = cache_entry(path)
    if entry is None:
        return ""
    on_the_way = [p for p in [Path(path), *Path(path).parents] if p == entry or entry in p.parents]
    link = next((p for p in on_the_way if p.is_symlink()), None)
    pointing = f", through {link}, a link to {os.readlink(link)}" if link is not None else ""
    remove = f"rm -r {entry}" if entry.is_dir() and not entry.is_symlink() else f"rm {entry}"
    return (
        f"{path} is in the cache{pointing}; if that entry is stale or damaged, remove it ({remove}) "
        "and it is downloaded again on the next use"
    )


def is_url(value: object) -> bool:
    return isinstance(value, str) and value.lower().startswith(URL_PREFIXES)


# ------------------------------------------------------------------- files
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


def download(
    name: str, *, check: Optional[Check] = None, check_options: Optional[CheckOptions] = None, progress: bool = True
) -> Tuple[Path, Path]:
    """A published model by name (see :data:`PUBLISHED_MODELS`): its files in
    the cache, downloaded first if they are not there (the weights at most
    :data:`PUBLISHED_WEIGHTS_MAX_BYTES`)."""
    key = name.strip().lower()
    if key not in PUBLISHED_MODELS:
        raise ModelNotFoundError(f"unknown published model {name!r}; known: {', '.join(PUBLISHED_MODELS)}")
    weights_url, options_url = published_urls(key)
    weights_path, options_path = published_cache_paths(key)
    offline = published_offline(
        key, weights_path, options_path, PUBLISHED_MODELS[key], PUBLISHED_BASE_URL, CACHE_ENV, MIRROR_ENV
    )
    check_cache([weights_path, options_path])
    return fetch_files(
        [(weights_url, weights_path), (options_url, options_path)],
        check=check,
        check_options=check_options,
        progress=progress,
        offline=offline,
        max_bytes=PUBLISHED_WEIGHTS_MAX_BYTES[key],
    )


def fetch(
    weights: PathLike,
    options: PathLike,
    *,
    check: Optional[Check] = None,
    check_options: Optional[CheckOptions] = None,
    progress: bool = True,
) -> Tuple[Path, Path]:
    """Weights and options given as URLs and/or local paths: each URL is
    downloaded once into ``<cache>/urls/`` (see :func:`url_cache_path`)."""
    sources: List[Tuple[Optional[str], Path]] = []
    for value in (weights, options):
        if is_url(value):
            sources.append((str(value), url_cache_path(str(value))))
        else:
            path = Path(value).expanduser()
            if path.is_dir():
                raise ModelNotFoundError(
                    f"{path} is a directory; expected a file here (weights .hdf5 or options .json)"
                )
            if not path.is_file():
                raise ModelNotFoundError(f"file not found: {path}")
            sources.append((None, path))
    downloads = [dest for url, dest in sources if url is not None]
    if downloads:
        check_cache(downloads)
    offline = urls_offline(downloads)
    return fetch_files(sources, check=check, check_options=check_options, progress=progress, offline=offline)
