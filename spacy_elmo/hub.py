"""ELMo models by name: the shipped English biLM, AllenNLP's published models, URLs.

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
- The other published families (:mod:`spacy_elmo.hub_families`):
  ``efml:<lang>`` and ``nlpl:<id>`` names, zips (local or URLs), and
  directories of ELMoForManyLangs models or NLPL's ``model.hdf5``. For an
  ELMoForManyLangs model the pair is ``(model directory, its config.json)``.

Choices:

- Names win over same-named relative paths: ``"small"`` is always the
  published model; write ``"./small"`` for a directory called ``small``.
  ``pathlib.Path`` values are always paths. Names are case-insensitive.
- The cache is laid out like the published bucket
  (``<cache>/<shape>/elmo_<shape>_weights.hdf5`` and ``..._options.json``),
  so files put there by hand, or a copy of the bucket, are used as they are,
  and a cache directory can itself be served as a mirror.
- A download streams (urllib, no extra dependency; a tqdm bar) into a
  temporary file in the destination directory. It is moved into place with
  ``os.replace`` only after its length matches ``Content-Length`` and the
  weights load against their options (every dataset present, of the right
  shape, finite). The options file is moved first and the weights last, so
  a weights file in the cache always has its options beside it. Any failure
  removes what this call wrote (temporary files, directories it created)
  and raises one :class:`DownloadError` naming the URL and the offline ways.
- Two processes fetching the same model: the second waits on a lock file
  (``fcntl.flock``, POSIX) and then finds the file in place. Where ``fcntl``
  is missing (Windows) both download under unique temporary names and the
  atomic replace still leaves one good file. The lock file is removed on
  release (a waiter that got the lock on a removed file takes it again).
"""
import contextlib
import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator, List, Optional, Tuple, Union

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

PathLike = Union[str, Path]

#: The English biLM that ships inside the package (weights.hdf5, options.json,
#: vocab.txt, MODEL_CARD.md): what ``weights = None``, ``"english"`` and
#: ``"default"`` mean. The one place that names it.
SHIPPED_MODEL_DIR = Path(__file__).parent / "models" / "english"
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
#: Seconds a connection may stall (connect, or between two reads).
TIMEOUT_S = 60.0
_CHUNK = 1 << 20

HOW_TO_GIVE_WEIGHTS = (
    "Give the elmo component weights by name, path or URL: "
    "nlp.add_pipe('elmo', config={'weights': NAME}), or in a config "
    "[components.elmo] or [initialize.components.elmo] weights = NAME, or "
    "spacy_elmo.BiLM.from_pretrained(NAME). Names: 'english' (shipped with the "
    "package; the default), and AllenNLP's published English ELMo 'small', "
    "'medium', 'original', 'original-5.5b' (downloaded once into the cache; "
    "other languages: 'efml:<lang>' (ELMoForManyLangs, e.g. 'efml:de') or 'nlpl:<id>' (the NLPL repository); "
    "ahead of time: python -m spacy_elmo download NAME). A path: a directory with "
    "weights.hdf5 and options.json, or weights = 'path/weights.hdf5' with "
    "options = 'path/options.json' (bilm-tf/AllenNLP format). Or an http(s) URL "
    "of a weights file (with options = its options URL)."
)


class ModelNotFoundError(ValueError):
    """A name, path or shipped model that does not exist."""


class DownloadError(OSError):
    """A download failed or gave files that do not load; nothing was cached."""


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
    progress: bool = True,
) -> Tuple[Path, Path]:
    """Local ``(weights, options)`` files for a name, path or URL (see the
    module docstring), downloading into the cache what is not there yet.

    ``options`` may be left out for names, directories, and weights whose
    file name ends in ``weights.hdf5`` with the matching ``options.json``
    beside it (``x_weights.hdf5`` -> ``x_options.json``, or ``options.json``).
    """
    if weights is None:
        if options is not None:
            raise ValueError("options were given without weights")
        return shipped_model()
    from . import hub_families as families

    if isinstance(weights, str) and families.parse_name(weights) is not None:
        if options is not None:
            raise ValueError(f"the model name {weights!r} comes with its options; leave options out")
        return families.resolve_name(weights, progress=progress)
    if isinstance(weights, str) and is_url(weights) and families.is_zip_path(urllib.parse.urlsplit(weights).path):
        return families.resolve_zip_url(weights, progress=progress)
    if isinstance(weights, str) and is_url(weights):
        if options is None:
            options = _sibling_options_url(weights)
        return fetch(weights, options, progress=progress)
    if isinstance(weights, str) and _is_name(weights):
        key = weights.strip().lower()
        if key in SHIPPED_NAMES or key in PUBLISHED_MODELS:
            if options is not None:
                raise ValueError(f"the model name {weights!r} comes with its options; leave options out")
            return shipped_model() if key in SHIPPED_NAMES else download(key, progress=progress)
    path = Path(weights).expanduser()
    if path.is_dir():
        if options is not None:
            raise ValueError(f"{path} is a directory: leave options out, or give the weights file")
        return _directory_files(path)
    if path.is_file() and families.is_zip_path(path) and options is None:
        return families.resolve_local_zip(path)
    if path.is_file():
        if options is None:
            return path, _sibling_options(path)
        return fetch(path, options, progress=progress)
    raise ModelNotFoundError(
        f"{str(weights)!r} is neither a model name nor an existing file or directory. "
        f"{HOW_TO_GIVE_WEIGHTS}"
    )


def download(name: str, *, progress: bool = True) -> Tuple[Path, Path]:
    """A published model by name (see :data:`PUBLISHED_MODELS`): its files in
    the cache, downloaded first if they are not there."""
    key = name.strip().lower()
    if key not in PUBLISHED_MODELS:
        raise ModelNotFoundError(f"unknown published model {name!r}; known: {', '.join(PUBLISHED_MODELS)}")
    weights_url, options_url = published_urls(key)
    weights_path, options_path = published_cache_paths(key)
    offline = (
        f"To use {key!r} offline, put {weights_path.name} and {options_path.name} in "
        f"{weights_path.parent} by hand (the cache; set {CACHE_ENV} to move it), or set "
        f"{MIRROR_ENV} to a base URL laid out like {PUBLISHED_BASE_URL} "
        f"(<base>/{PUBLISHED_MODELS[key]}/{weights_path.name} and .../{options_path.name}); "
        f"it then replaces the published base URL."
    )
    return _fetch_files(
        [(weights_url, weights_path), (options_url, options_path)], progress=progress, offline=offline
    )


def fetch(weights: PathLike, options: PathLike, *, progress: bool = True) -> Tuple[Path, Path]:
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
    pending = [dest for url, dest in sources if url is not None]
    offline = (
        "To work offline, download the files where you are online and give their "
        "local paths instead (weights = 'path/weights.hdf5', options = 'path/options.json'), "
        "or put them in the cache by hand: "
        + ", ".join(str(dest) for dest in pending)
        + "."
    )
    return _fetch_files(sources, progress=progress, offline=offline)


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
    from .hub_families import directory_files

    other = directory_files(folder)  # ELMoForManyLangs, or NLPL's model.hdf5
    if other is not None:
        return other
    if (folder / "weights.hdf5").is_file():
        return folder / "weights.hdf5", _sibling_options(folder / "weights.hdf5")
    found = sorted(folder.glob("*weights.hdf5"))
    if len(found) == 1:
        return found[0], _sibling_options(found[0])
    raise ModelNotFoundError(
        f"{folder} holds {'no' if not found else 'several'} *weights.hdf5 files: expected weights.hdf5 "
        f"and options.json (or give weights = the file and options = its options)"
    )


# ---------------------------------------------------------------- fetching
def check_files(weights: PathLike, options: PathLike) -> None:
    """Raise unless ``weights`` loads as the published weight format against
    ``options`` (every dataset present, of the right shape, finite). Reads
    the arrays without building a biLM."""
    from .bilm.options import BiLMOptions
    from .bilm.weights import read_datasets

    class _Sizes:
        def __init__(self, options):
            self.options = options

    read_datasets(weights, _Sizes(BiLMOptions.from_file(options)))


def _fetch_files(
    sources: List[Tuple[Optional[str], Path]], *, progress: bool, offline: str
) -> Tuple[Path, Path]:
    """``sources`` = [(weights URL or None, path), (options URL or None, path)];
    each URL is fetched into its path unless the path exists."""
    (weights_url, weights_path), (options_url, options_path) = sources
    if all(url is None or path.exists() for url, path in sources):
        return weights_path, options_path
    lock_target = weights_path if weights_url is not None else options_path
    created = _make_dirs([path.parent for url, path in sources if url is not None])
    temps: List[Path] = []
    current_url = None
    try:
        with _locked(lock_target.parent / f".{lock_target.name}.lock", progress=progress):
            staged = {}
            for url, path in sources:
                if url is not None and not path.exists():  # again: another process may have finished
                    current_url = url
                    temp = _download(url, path, progress=progress)
                    temps.append(temp)
                    staged[path] = temp
            if staged:
                current_url = weights_url or options_url
                try:
                    check_files(staged.get(weights_path, weights_path), staged.get(options_path, options_path))
                except (ValueError, OSError) as err:
                    detail = str(err)
                    for url, path in sources:  # name the download, not its temporary file
                        if path in staged:
                            detail = detail.replace(str(staged[path]), url)
                    raise _Failure(f"the download does not load as ELMo weights with its options: {detail}") from None
                for path in (options_path, weights_path):  # weights last: their presence means complete
                    if path in staged:
                        os.replace(staged.pop(path), path)
    except _Failure as err:
        _cleanup(temps, created)
        raise DownloadError(f"could not get {err.url or current_url}: {err}. Nothing was cached. {offline}") from None
    except BaseException:
        _cleanup(temps, created)
        raise
    return weights_path, options_path


class _Failure(Exception):
    def __init__(self, message: str, url: Optional[str] = None) -> None:
        super().__init__(message)
        self.url = url


def _download(url: str, dest: Path, *, progress: bool, max_bytes: Optional[int] = None) -> Path:
    """Stream ``url`` into a new temporary file beside ``dest``; check its
    length (and stop past ``max_bytes``, where given)."""
    from tqdm import tqdm

    from . import __version__

    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    temp = Path(name)
    received, expected = 0, None
    try:
        with os.fdopen(fd, "wb") as out:
            request = urllib.request.Request(url, headers={"User-Agent": f"spacy_elmo/{__version__}"})
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                length = response.headers.get("Content-Length")
                expected = int(length) if length is not None and length.strip().isdigit() else None
                with tqdm(
                    total=expected, unit="B", unit_scale=True, unit_divisor=1024,
                    desc=dest.name, disable=not progress,
                ) as bar:
                    while True:
                        chunk = response.read(_CHUNK)
                        if not chunk:
                            break
                        out.write(chunk)
                        received += len(chunk)
                        if max_bytes is not None and received > max_bytes:
                            raise _Failure(f"the download is larger than {max_bytes:,} bytes; refused", url)
                        bar.update(len(chunk))
        if expected is not None and received != expected:
            raise _Failure(f"received {received} of {expected} bytes (the download was cut short)", url)
    except _Failure:
        temp.unlink(missing_ok=True)
        raise
    except urllib.error.HTTPError as err:
        temp.unlink(missing_ok=True)
        raise _Failure(f"HTTP {err.code} {err.reason}", url) from None
    except urllib.error.URLError as err:
        temp.unlink(missing_ok=True)
        raise _Failure(f"no connection ({err.reason})", url) from None
    except Exception as err:  # http.client errors (IncompleteRead), timeouts, bad URLs, disk full
        temp.unlink(missing_ok=True)
        detail = f"received {received} of {expected} bytes: " if expected is not None else ""
        raise _Failure(f"{detail}{type(err).__name__}: {err}", url) from None
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def _make_dirs(folders: List[Path]) -> List[Path]:
    """Create ``folders``; return the directories this call created, deepest first."""
    created: List[Path] = []
    for folder in folders:
        missing = []
        probe = folder
        while not probe.exists() and probe != probe.parent:
            missing.append(probe)
            probe = probe.parent
        folder.mkdir(parents=True, exist_ok=True)
        created.extend(m for m in missing if m not in created)
    return sorted(created, key=lambda p: len(p.parts), reverse=True)


def _cleanup(temps: List[Path], created: List[Path]) -> None:
    for temp in temps:
        temp.unlink(missing_ok=True)
    for folder in created:  # only if empty: another process may be using it
        with contextlib.suppress(OSError):
            folder.rmdir()


@contextlib.contextmanager
def _locked(path: Path, *, progress: bool) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (no-op without fcntl)."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress:
                print(f"waiting for another process that is downloading into {path.parent}", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed that lock file: take the current one
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)
