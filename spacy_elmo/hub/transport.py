"""Transport: URLs into the cache, bounded, locked and atomic.

A download streams (urllib, no extra dependency; a tqdm bar) into a temporary
file in the destination directory, with :data:`TIMEOUT_S` on every stall. It
is moved into place with ``os.replace`` only after its length matches
``Content-Length`` and the caller's ``check`` accepts the files (the hub knows
no weight format: :mod:`spacy_elmo.loading` hands in the published format's
check). The options file is moved first and the weights last, so a weights
file in the cache always has its options beside it. Any failure removes what
this call wrote (temporary files, directories it created) and raises one
:class:`DownloadError` naming the URL and the offline ways.

Two processes fetching the same model: the second waits on a lock file
(``fcntl.flock``, POSIX) and then finds the file in place. Where ``fcntl`` is
missing (Windows) both download under unique temporary names and the atomic
replace still leaves one good file. The lock file is removed on release (a
waiter that got the lock on a removed file takes it again).
"""
import contextlib
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: Seconds a connection may stall (connect, or between two reads).
TIMEOUT_S = 60.0
_CHUNK = 1 << 20

#: ``check(weights_path, options_path)``: raises ValueError or OSError when
#: the downloaded files are not a usable model.
Check = Callable[[Path, Path], object]


class DownloadError(OSError):
    """A download failed or gave files that do not load; nothing was cached."""


def fetch_files(
    sources: List[Tuple[Optional[str], Path]], *, check: Optional[Check], progress: bool, offline: str
) -> Tuple[Path, Path]:
    """``sources`` = [(weights URL or None, path), (options URL or None, path)];
    each URL is fetched into its path unless the path exists. What this call
    downloads is handed to ``check(weights, options)`` before it is moved into
    place (None: no format check); ``offline`` ends the error message."""
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
            if staged and check is not None:
                current_url = weights_url or options_url
                try:
                    check(staged.get(weights_path, weights_path), staged.get(options_path, options_path))
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


def _download(url: str, dest: Path, *, progress: bool) -> Path:
    """Stream ``url`` into a new temporary file beside ``dest``; check its length."""
    from tqdm import tqdm

    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    temp = Path(name)
    received, expected = 0, None
    try:
        with os.fdopen(fd, "wb") as out:
            request = urllib.request.Request(url, headers={"User-Agent": _user_agent()})
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


def _user_agent() -> str:
    """``spacy_elmo/<installed version>`` (from the package metadata: the hub
    imports nothing of the package above it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"spacy_elmo/{version('spacy_elmo')}"
    except PackageNotFoundError:
        return "spacy_elmo"


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
