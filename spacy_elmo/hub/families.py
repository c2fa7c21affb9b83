"""Names, zips and directories of the other published ELMo families.

* ``efml:<lang>``: the ELMoForManyLangs model of a language (HIT-SCIR,
  trained on CoNLL-2018 text), served by the NLPL repository as
  ``http://vectors.nlpl.eu/repository/11/<id>.zip``; ids 136-179 follow
  :data:`EFML_LANGUAGES` in order.
* ``nlpl:<id>`` (or ``nlpl:<version>/<id>``): any NLPL repository zip, e.g.
  its bilm-tf ELMo models (``model.hdf5``, ``options.json``, ``vocab.txt``,
  ``meta.json``). Without a version, ids up to 179 are looked up in
  repository version 1.1 (``/11/``) and later ids in 2.0 (``/20/``).
* A local ``.zip`` file or an http(s) URL of one: unpacked into the cache.
* A directory: an ELMoForManyLangs model (``config.json`` + ``encoder.pkl``),
  or a bilm-tf model stored as ``model.hdf5`` + ``options.json`` (NLPL's
  names), at its top or one level down.

Choices:

* Zips go through the cache like every download (:mod:`.transport`: a
  lock, a temporary file, a length check, nothing left behind on failure)
  and are unpacked into ``<cache>/nlpl/<version>/<id>/`` (names),
  ``<cache>/urls/<hash>/<name>/`` (URLs) or ``<cache>/zips/<hash of the
  content>/`` (local zips). A model directory in the cache is used as it
  is, with no network: to work offline, unzip the file there by hand (or
  give the zip or its directory as the weights).
* Unpacking is bounded and confined: at most :data:`MAX_MEMBERS` members
  and :data:`MAX_UNPACKED_BYTES` bytes in all, checked against the sizes
  the zip's headers declare before anything is written (and against the
  free disk space), and counted while writing (a member that holds more
  than it declares is refused); no absolute names, no ``..``, no links;
  only regular files are written. Everything is unpacked into a temporary
  directory beside the destination, the model in it is handed to the
  caller's ``check`` (the hub knows no weight format: :mod:`spacy_elmo.loading`
  hands in one that loads either family), and only then is the directory
  moved into place.
* An ELMoForManyLangs directory is told by its file names alone
  (:data:`EFML_MARKERS`), here only: the hub hands such a model on as its
  directory (bilm-tf models as two files), and the loader reads a
  directory with the format module (:mod:`spacy_elmo.bilm.formats.efml`).
* ``SPACY_ELMO_NLPL_MIRROR`` (a URL, or a local directory, laid out like
  ``http://vectors.nlpl.eu/repository``: ``<base>/<version>/<id>.zip``)
  replaces the NLPL base URL, as ``SPACY_ELMO_MIRROR`` does for AllenNLP's.
"""
import hashlib
import os
import re
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import List, Optional, Tuple

from .names import CACHE_ENV, ModelNotFoundError, cache_dir, check_cache, env_base_url, url_cache_path
from .transport import Check, DownloadError, FetchFailure, cleanup, download_to_temp, locked, make_dirs

#: ELMoForManyLangs languages in the order of their NLPL ids (136 onwards).
EFML_LANGUAGES = (
    "ar", "bg", "ca", "cs", "cu", "da", "de", "el", "en", "es", "et", "eu", "fa", "fi", "fr", "ga", "gl", "grc",
    "he", "hi", "hr", "hu", "id", "it", "ja", "ko", "la", "lv", "nl", "nb", "nn", "pl", "pt", "ro", "ru", "sk",
    "sl", "sv", "tr", "ug", "uk", "ur", "vi", "zh",
)
EFML_FIRST_ID = 136
NLPL_BASE_URL = "http://vectors.nlpl.eu/repository"
NLPL_MIRROR_ENV = "SPACY_ELMO_NLPL_MIRROR"
#: Repository version of the ids up to :data:`NLPL_V11_LAST_ID`; later ids: "20".
NLPL_V11_LAST_ID = 179

#: Bounds of a zip: members, and bytes unpacked in all (the largest
#: published ELMo zips unpack to about 1 GB).
MAX_MEMBERS = 64
MAX_UNPACKED_BYTES = 8 << 30
#: Largest zip downloaded.
MAX_ZIP_BYTES = 8 << 30
#: The files that make a directory an ELMoForManyLangs model.
EFML_MARKERS = ("config.json", "encoder.pkl")


class UnsafeArchiveError(ValueError):
    """A zip that would write outside its directory, or past the bounds."""


def efml_id(lang: str) -> int:
    """The NLPL id of the ELMoForManyLangs model of ``lang``."""
    key = lang.strip().lower()
    if key not in EFML_LANGUAGES:
        raise ModelNotFoundError(
            f"no ELMoForManyLangs model for {lang if len(lang) <= 20 else lang[:20] + '...'!r}; "
            f"languages: {', '.join(EFML_LANGUAGES)}"
        )
    return EFML_FIRST_ID + EFML_LANGUAGES.index(key)


def nlpl_base_url() -> str:
    """``SPACY_ELMO_NLPL_MIRROR`` if set, else :data:`NLPL_BASE_URL`."""
    return env_base_url(NLPL_MIRROR_ENV, NLPL_BASE_URL)


def parse_name(value: str) -> Optional[Tuple[str, int]]:
    """``(version, id)`` of an ``efml:<lang>`` or ``nlpl:[<version>/]<id>``
    name; None for anything else."""
    if not isinstance(value, str) or ":" not in value:
        return None
    scheme, _, rest = value.strip().partition(":")
    scheme = scheme.lower()
    if scheme == "efml":
        return "11", efml_id(rest)
    if scheme == "nlpl":
        match = _NLPL_ID.fullmatch(rest.strip())
        if match is None:
            shown = repr(value if len(value) <= 40 else value[:40] + "...")
            raise ModelNotFoundError(
                f"{shown} is not an NLPL name: write nlpl:<id> or nlpl:<version>/<id> (digits 0-9, at most "
                "6 each), e.g. nlpl:136 or nlpl:20/210"
            )
        version, number = match.group(1), int(match.group(2))
        return version or ("11" if number <= NLPL_V11_LAST_ID else "20"), number
    return None


#: ``[<version>/]<id>``: ASCII digits only (``str.isdigit`` takes "²" and
#: other scripts' digits), bounded.
_NLPL_ID = re.compile(r"(?:([0-9]{1,6})/)?([0-9]{1,6})", re.ASCII)


def name_url(version: str, number: int) -> str:
    return f"{nlpl_base_url()}/{version}/{number}.zip"


# -------------------------------------------------------------- resolving
def resolve_name(value: str, *, check: Optional[Check] = None, progress: bool = True) -> Tuple[Path, Path]:
    """The model files of an ``efml:``/``nlpl:`` name, downloaded and
    unpacked into the cache once."""
    parsed = parse_name(value)
    assert parsed is not None
    version, number = parsed
    dest = cache_dir() / "nlpl" / version / str(number)
    url = name_url(version, number)
    offline = (
        f"To use {value!r} offline, download {NLPL_BASE_URL}/{version}/{number}.zip where you are online and "
        f"unzip it into {dest} (the cache; set {CACHE_ENV} to move it), or give the zip or its directory "
        f"as the weights, or set {NLPL_MIRROR_ENV} to a base URL or directory laid out like {NLPL_BASE_URL} "
        f"(<base>/{version}/{number}.zip)."
    )
    return fetch_zip(url, dest, check=check, progress=progress, offline=offline)


def resolve_zip_url(url: str, *, check: Optional[Check] = None, progress: bool = True) -> Tuple[Path, Path]:
    cached = url_cache_path(url)
    dest = cached.with_name(cached.name[: -len(".zip")] if cached.name.lower().endswith(".zip") else cached.name + ".d")
    offline = (
        f"To work offline, download {url} where you are online and give the zip (or the directory it unpacks to) "
        "as the weights."
    )
    return fetch_zip(url, dest, check=check, progress=progress, offline=offline)


def resolve_local_zip(path: Path, *, check: Optional[Check] = None) -> Tuple[Path, Path]:
    """A local zip: unpacked once into ``<cache>/zips/<hash of its content>/``."""
    digest = hashlib.sha256()
    with open(path, "rb") as fin:
        for chunk in iter(lambda: fin.read(1 << 20), b""):
            digest.update(chunk)
    dest = cache_dir() / "zips" / digest.hexdigest()[:16]
    check_cache([], folders=[dest])
    if dest.is_dir():
        return model_files(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with locked(dest.parent / f".{dest.name}.lock", progress=False):
        if not dest.is_dir():
            _unpack_checked(path, dest, check)
    return model_files(dest)


def fetch_zip(url: str, dest: Path, *, check: Optional[Check], progress: bool, offline: str) -> Tuple[Path, Path]:
    """``url`` (a zip) unpacked into ``dest`` unless it is there already; the
    model in it handed to ``check`` first (None: no format check). The
    cache is checked first (:func:`check_cache`), as for every download."""
    check_cache([dest.parent / (dest.name + ".zip")], folders=[dest])
    if dest.is_dir():
        return model_files(dest)
    created = make_dirs([dest.parent])
    temp: Optional[Path] = None
    try:
        with locked(dest.parent / f".{dest.name}.lock", progress=progress):
            if not dest.is_dir():  # again: another process may have finished
                temp = download_to_temp(
                    url, dest.parent / (dest.name + ".zip"), progress=progress, max_bytes=MAX_ZIP_BYTES
                )
                try:
                    _unpack_checked(temp, dest, check)
                except (ValueError, OSError) as err:
                    raise FetchFailure(f"the zip does not hold a loadable ELMo model: {err}", url) from None
    except FetchFailure as err:
        _discard(temp)
        cleanup([], created)
        raise DownloadError(f"could not get {err.url or url}: {err}. Nothing was cached. {offline}") from None
    except BaseException:
        _discard(temp)
        cleanup([], created)
        raise
    _discard(temp)
    return model_files(dest)


def _discard(path: Optional[Path]) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def _unpack_checked(archive: Path, dest: Path, check: Optional[Check]) -> None:
    """Unpack into a temporary directory beside ``dest``, hand the model
    there to ``check``, then move it into place."""
    staging = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part"))
    try:
        safe_unpack(archive, staging)
        weights, options = model_files(staging)
        if check is not None:
            check(weights, options)
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def safe_unpack(archive: Path, target: Path) -> None:
    """Extract ``archive`` into ``target`` within the bounds (module docstring)."""
    root = target.resolve()
    with _open_zip(archive) as zf:
        members = zip_members(zf, archive)
        declared = sum(info.file_size for info, _ in members)
        free = shutil.disk_usage(root).free
        if declared > free:
            raise UnsafeArchiveError(
                f"{archive} unpacks to {declared:,} bytes (the sizes its members declare), and {root.parent} has "
                f"{free:,} bytes free; nothing was unpacked. Free disk space, or set {CACHE_ENV} to a larger disk"
            )
        written = 0
        for info, parts in members:
            dest = (root / Path(*parts)).resolve()
            if root not in dest.parents:
                raise UnsafeArchiveError(
                    f"{archive}: member {info.filename!r:.200} would be written outside the directory"
                )
            dest.parent.mkdir(parents=True, exist_ok=True)
            member_written = 0
            with zf.open(info) as src, open(dest, "xb") as out:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    written += len(chunk)
                    member_written += len(chunk)
                    if member_written > info.file_size:
                        raise UnsafeArchiveError(
                            f"{archive}: member {info.filename!r:.200} holds more than the {info.file_size:,} "
                            "bytes it declares"
                        )
                    if written > MAX_UNPACKED_BYTES:
                        raise UnsafeArchiveError(f"{archive} unpacks to more than {MAX_UNPACKED_BYTES:,} bytes")
                    out.write(chunk)


def check_zip(archive: Path) -> None:
    """Raise unless ``archive`` is a zip whose listing :func:`safe_unpack`
    accepts (nothing is unpacked)."""
    with _open_zip(archive) as zf:
        zip_members(zf, archive)


def _open_zip(archive: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as err:
        raise UnsafeArchiveError(f"{archive} is not a zip file ({err})") from None


def zip_members(zf: zipfile.ZipFile, archive: Path) -> List[Tuple[zipfile.ZipInfo, Tuple[str, ...]]]:
    """The regular files of a zip with their path parts, every member
    checked against the bounds first (count, names, links)."""
    members = zf.infolist()
    if len(members) > MAX_MEMBERS:
        raise UnsafeArchiveError(f"{archive} holds {len(members)} members, more than {MAX_MEMBERS}")
    files = []
    seen = set()
    for info in members:
        name = info.filename
        parts = PurePosixPath(name.replace("\\", "/")).parts
        key = "/".join(parts).casefold()
        if key in seen:
            raise UnsafeArchiveError(
                f"{archive} holds two members named {name!r:.200} (or names that differ only in case): which one "
                "is the model's is not clear; rebuild the zip with one of each"
            )
        seen.add(key)
        if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
            raise UnsafeArchiveError(f"{archive}: member {name!r:.200} would be written outside the directory")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise UnsafeArchiveError(f"{archive}: member {name!r:.200} is a link; links are not unpacked")
        if not info.is_dir():
            files.append((info, parts))
    declared = sum(info.file_size for info, _ in files)
    if declared > MAX_UNPACKED_BYTES:
        raise UnsafeArchiveError(
            f"{archive}: its members declare {declared:,} bytes unpacked, more than the {MAX_UNPACKED_BYTES:,} a model "
            "zip may unpack to; nothing was unpacked"
        )
    return files


# ------------------------------------------------------------ directories
def directory_files(folder: Path) -> Optional[Tuple[Path, Path]]:
    """``(model directory, its config.json)`` of an ELMoForManyLangs model,
    or ``(model.hdf5, options.json)`` of an NLPL bilm-tf one, at the top of
    ``folder``; None otherwise."""
    if is_efml_dir(folder):
        return folder, folder / "config.json"
    if (folder / "model.hdf5").is_file() and (folder / "options.json").is_file():
        return folder / "model.hdf5", folder / "options.json"
    return None


def model_files(folder: Path) -> Tuple[Path, Path]:
    """As :func:`directory_files`, at the top of ``folder`` or one level down."""
    found = directory_files(folder)
    if found is not None:
        return found
    subdirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    for sub in subdirs:
        found = directory_files(sub)
        if found is not None:
            return found
    names = sorted(p.name for p in folder.iterdir())[:12]
    raise ModelNotFoundError(
        f"{folder} holds no ELMo model ({', '.join(names) or 'nothing'}): expected an ELMoForManyLangs "
        "directory (config.json, char.dic, word.dic, token_embedder.pkl, encoder.pkl) or bilm-tf weights "
        "(model.hdf5 + options.json, or weights.hdf5 + options.json)"
    )


def is_efml_dir(path: object) -> bool:
    """Whether ``path`` is a directory holding :data:`EFML_MARKERS`."""
    if not isinstance(path, (str, Path)):
        return False
    path = Path(path)
    return path.is_dir() and all((path / name).is_file() for name in EFML_MARKERS)


def is_zip_path(value: object) -> bool:
    return isinstance(value, (str, Path)) and str(value).lower().endswith(".zip")
