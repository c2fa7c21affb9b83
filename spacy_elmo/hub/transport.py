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
waiter that got the lock on a removed file takes it again), and released on
every failure (the ``finally`` of :func:`locked`).

Bounds (docs/reliability.md has the table):

- **size**: every file has a limit known before its first byte
  (``max_bytes``: the caller's, else :data:`MAX_OPTIONS_BYTES` for an
  options file and :data:`MAX_DOWNLOAD_BYTES` for anything else). A
  ``Content-Length`` above it is refused before the body is read; a body
  without one is read to at most limit + 1 bytes, then refused.
- **disk**: the free space of the destination's file system
  (``shutil.disk_usage``) must hold the ``Content-Length``, or the limit
  where the server sends none.
- **time**: :data:`TIMEOUT_S` on connecting and on every read (a stall), and
  a deadline on the whole file (:func:`deadline_s`, from
  ``SPACY_ELMO_DOWNLOAD_TIMEOUT``), checked after every read: a server that
  trickles bytes fails at the deadline (a read that stalls ends at most
  :data:`TIMEOUT_S` after it).
- **order**: the options are fetched and checked (``check_options``) before
  the weights are requested; what the options check returns bounds the
  weights' size.
- **web pages**: a response that is HTML (by its ``Content-Type``, or by
  its first bytes) is refused: none of the files is a web page, and a
  captive portal or an error page answers with one (status 200).
- **URLs**: http, https and file only. ``file://`` is read with the same
  limits and must name a regular file (not ``/dev/zero``, a FIFO or a
  directory): a local mirror (``SPACY_ELMO_MIRROR`` = a directory) goes
  through the same code as a remote one. URLs with credentials
  (``user:password@``) are refused: the weights setting is saved in a
  pipeline's config, so a password in it would be written to disk and shared;
  no message prints a URL's user information (:func:`redact`).
"""
import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: Seconds a connection may stall (connect, or between two reads).
TIMEOUT_S = 60.0
#: The environment variable that sets the deadline of one file, in seconds.
DEADLINE_ENV = "SPACY_ELMO_DOWNLOAD_TIMEOUT"
#: The default deadline of one file: an hour, time for the largest published
#: file (357 MiB) at 100 kB/s.
DEADLINE_S = 3600.0
#: The size limit of an options file (a published one is about 500 bytes).
MAX_OPTIONS_BYTES = 1 << 20
#: The size limit of a file nobody gave a limit for: twice the float32 bytes
#: of the largest biLM the options allow (10**9 parameters), room for float64.
MAX_DOWNLOAD_BYTES = 8 << 30
#: The most bytes one read asks for.
_CHUNK = 1 << 20
URL_SCHEMES = ("http", "https", "file")

#: ``check(weights_path, options_path)``: raises ValueError or OSError when
#: the downloaded files are not a usable model.
Check = Callable[[Path, Path], object]
#: ``check_options(options_path)``: raises ValueError or OSError when the
#: options are not usable; returns the most bytes the weights may take under
#: them (or None: no bound beyond the others).
CheckOptions = Callable[[Path], Optional[int]]


class DownloadError(OSError):
    """A download failed, was refused, or gave files that do not load;
    nothing was cached."""


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#\s]*@")


def redact(text: str) -> str:
    """``text`` with the user information of every URL in it (``user:password@``)
    replaced by ``***@``."""
    return _USERINFO.sub(r"\1***@", text)


def check_url(url: str) -> None:
    """Refuse a URL this package will not fetch: a scheme other than http,
    https or file, or user information (credentials) in it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in URL_SCHEMES:
        raise DownloadError(f"{redact(url)}: only http://, https:// and file:// URLs are downloaded")
    if "@" in parts.netloc:
        raise DownloadError(
            f"{redact(url)}: URLs with credentials (user:password@) are refused, since the weights "
            "setting is saved in a pipeline's config. Download the file yourself and give its local "
            "path, or serve it (or a mirror, SPACY_ELMO_MIRROR) without credentials."
        )


def deadline_s() -> float:
    """Seconds one file may take in all: ``SPACY_ELMO_DOWNLOAD_TIMEOUT`` if
    set (a positive number), else :data:`DEADLINE_S`."""
    raw = os.environ.get(DEADLINE_ENV, "").strip()
    if not raw:
        return DEADLINE_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise DownloadError(
            f"{DEADLINE_ENV}={raw!r} is not a number of seconds greater than 0; set it to, say, 3600, or unset it"
        )
    return value


def fetch_files(
    sources: List[Tuple[Optional[str], Path]],
    *,
    check: Optional[Check],
    progress: bool,
    offline: str,
    check_options: Optional[CheckOptions] = None,
    max_bytes: Optional[int] = None,
) -> Tuple[Path, Path]:
    """``sources`` = [(weights URL or None, path), (options URL or None, path)];
    each URL is fetched into its path unless the path exists. The options come
    first and go to ``check_options`` before the weights are requested (its
    result bounds the weights' size, as does ``max_bytes``); what this call
    downloads is handed to ``check(weights, options)`` before it is moved into
    place (None: no format check); ``offline`` ends the error message."""
    (weights_url, weights_path), (options_url, options_path) = sources
    if all(url is None or path.exists() for url, path in sources):
        return weights_path, options_path
    for url, _ in sources:
        if url is not None:
            check_url(url)
    lock_target = weights_path if weights_url is not None else options_path
    temps: List[Path] = []
    created: List[Path] = []
    current_url = None
    try:
        created = make_dirs([path.parent for url, path in sources if url is not None])
        with locked(lock_target.parent / f".{lock_target.name}.lock", progress=progress):
            staged = {}
            weights_limit = MAX_DOWNLOAD_BYTES if max_bytes is None else max_bytes
            if options_url is not None and not options_path.exists():  # again: another process may have finished
                current_url = options_url
                temps.append(
                    download_to_temp(options_url, options_path, progress=progress, max_bytes=MAX_OPTIONS_BYTES)
                )
                staged[options_path] = temps[-1]
            if check_options is not None and weights_url is not None and not weights_path.exists():
                bound = _checked_options(
                    check_options,
                    staged.get(options_path, options_path),
                    options_url if options_path in staged else None,
                )
                if bound is not None:
                    weights_limit = min(weights_limit, bound)
            if weights_url is not None and not weights_path.exists():
                current_url = weights_url
                temps.append(download_to_temp(weights_url, weights_path, progress=progress, max_bytes=weights_limit))
                staged[weights_path] = temps[-1]
            if staged and check is not None:
                current_url = weights_url or options_url
                try:
                    check(staged.get(weights_path, weights_path), staged.get(options_path, options_path))
                except (ValueError, OSError) as err:
                    detail = str(err)
                    for url, path in sources:  # name the download, not its temporary file
                        if url is not None and path in staged:
                            detail = detail.replace(str(staged[path]), url)
                    raise FetchFailure(
                        f"the download does not load as ELMo weights with its options: {detail}"
                    ) from None
            for path in (options_path, weights_path):  # weights last: their presence means complete
                if path in staged:
                    os.replace(staged.pop(path), path)
    except FetchFailure as err:
        cleanup(temps, created)
        message = f"could not get {err.url or current_url}: {err}. Nothing was cached. {offline}"
        raise DownloadError(redact(message)) from None
    except OSError as err:  # the cache's folders, lock or temporary files
        cleanup(temps, created)
        if isinstance(err, DownloadError):
            raise DownloadError(redact(str(err))) from None
        where = f" {err.filename}" if err.filename else ""
        raise DownloadError(
            redact(
                f"could not write the download into the cache{where}: {err.strerror or err}. Nothing was cached. "
                f"{offline}"
            )
        ) from None
    except BaseException:
        cleanup(temps, created)
        raise
    return weights_path, options_path


class FetchFailure(Exception):
    """A download that failed (``url``: the file's); the caller turns it
    into one :class:`DownloadError` with the offline ways, after cleaning up."""

    def __init__(self, message: str, url: Optional[str] = None) -> None:
        super().__init__(message)
        self.url = url


def _checked_options(check_options: CheckOptions, path: Path, url: Optional[str]) -> Optional[int]:
    """Run the options check; a downloaded file's problem is a failed download
    (named by its URL), a local file's is raised as it is."""
    if url is None:
        return check_options(path)
    try:
        return check_options(path)
    except (ValueError, OSError) as err:
        detail = str(err).replace(str(path), url)
        raise FetchFailure(f"the options do not load (the weights were not requested): {detail}", url) from None


def _local_file(url: str) -> Path:
    """The regular file a ``file://`` URL names (not a device, FIFO or directory)."""
    path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
    if not path.exists():
        raise FetchFailure(f"no such file: {path}", url)
    if not path.is_file():
        raise FetchFailure(f"{path} is not a regular file (a directory, device or FIFO); give a file", url)
    return path


def download_to_temp(
    url: str, dest: Path, *, progress: bool, max_bytes: Optional[int] = None, deadline: Optional[float] = None
) -> Path:
    """Stream ``url`` into a new temporary file beside ``dest`` and return it:
    at most ``max_bytes`` (default :data:`MAX_DOWNLOAD_BYTES`), within
    ``deadline`` seconds in all (default :func:`deadline_s`), with the free
    disk space checked first and the length checked against
    ``Content-Length`` after."""
    from tqdm import tqdm

    check_url(url)
    limit = MAX_DOWNLOAD_BYTES if max_bytes is None else int(max_bytes)
    seconds = deadline_s() if deadline is None else float(deadline)
    ends = time.monotonic() + seconds
    if url.lower().startswith("file:"):
        _local_file(url)
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    temp = Path(name)
    received, expected = 0, None
    try:
        with os.fdopen(fd, "wb") as out:
            request = urllib.request.Request(url, headers={"User-Agent": _user_agent()})
            opener = urllib.request.build_opener(_CheckedRedirects)
            with opener.open(request, timeout=max(0.001, min(TIMEOUT_S, seconds))) as response:
                length = response.headers.get("Content-Length")
                expected = int(length) if length is not None and length.strip().isdigit() else None
                if expected is not None and expected > limit:
                    raise FetchFailure(
                        f"the server announces {expected:,} bytes (Content-Length), more than the {limit:,} "
                        "this file may take; refused before reading it", url
                    )
                _refuse_web_page(response.headers.get("Content-Type"), url)
                _check_free_space(dest.parent, expected if expected is not None else limit, expected is not None, url)
                with tqdm(
                    total=expected, unit="B", unit_scale=True, unit_divisor=1024,
                    desc=dest.name, disable=not progress,
                ) as bar:
                    while True:
                        # read1: whatever one read brings (at most a chunk, never past
                        # limit + 1), so the deadline is checked between reads
                        chunk = response.read1(min(_CHUNK, limit + 1 - received))
                        if not chunk:
                            break
                        if received == 0:
                            _refuse_web_page(None, url, chunk)
                        out.write(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
                        if received > limit:
                            raise FetchFailure(f"the file is larger than the {limit:,} bytes it may take; refused", url)
                        if time.monotonic() > ends:
                            raise FetchFailure(
                                f"not finished after {seconds:g} s (received {received:,}"
                                f"{f' of {expected:,}' if expected is not None else ''} bytes); on a slow "
                                f"connection set {DEADLINE_ENV} to more seconds", url
                            )
        if expected is not None and received != expected:
            raise FetchFailure(f"received {received} of {expected} bytes (the download was cut short)", url)
    except FetchFailure:
        temp.unlink(missing_ok=True)
        raise
    except urllib.error.HTTPError as err:
        temp.unlink(missing_ok=True)
        raise FetchFailure(f"HTTP {err.code} {err.reason}", url) from None
    except urllib.error.URLError as err:
        temp.unlink(missing_ok=True)
        raise FetchFailure(f"no connection ({err.reason})", url) from None
    except DownloadError as err:  # a redirect refused by check_url
        temp.unlink(missing_ok=True)
        raise FetchFailure(f"refused a redirect to {err}", url) from None
    except Exception as err:  # http.client errors (IncompleteRead), timeouts, bad URLs, disk full
        temp.unlink(missing_ok=True)
        detail = f"received {received} of {expected} bytes: " if expected is not None else ""
        raise FetchFailure(f"{detail}{type(err).__name__}: {err}", url) from None
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, each target checked like the URL given
    (:func:`check_url`): no credentials, no other scheme."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        check_url(urllib.parse.urljoin(req.full_url, newurl))
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_WEB_PAGE = re.compile(
    rb"^(\xef\xbb\xbf)?\s*(<!doctype\s+html|<html|<head|<\?xml[^>]*>\s*<!doctype\s+html)", re.IGNORECASE
)


def _refuse_web_page(content_type: Optional[str], url: str, first: bytes = b"") -> None:
    """No file this hub fetches (hdf5, JSON, zip) is a web page: a server
    that answers with HTML (a captive portal's login page, a proxy's or a
    mirror's error page, with status 200) is refused, by its
    ``Content-Type`` or by the page's first bytes."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media in ("text/html", "application/xhtml+xml") or _WEB_PAGE.match(first[:512]):
        shown = f"Content-Type {media}" if media in ("text/html", "application/xhtml+xml") else "an HTML page"
        raise FetchFailure(
            f"the server answered with a web page ({shown}), not the file: a login page of a captive portal or "
            "proxy, or an error page of the mirror; check the URL and the network (open it in a browser)",
            url,
        )


def _check_free_space(folder: Path, needed: int, announced: bool, url: str) -> None:
    free = shutil.disk_usage(folder).free
    if needed > free:
        what = "the file's Content-Length" if announced else "the file's size limit (the server sent no Content-Length)"
        raise FetchFailure(
            f"not enough free disk space in {folder}: {what} is {needed:,} bytes, {free:,} are free", url
        )


def _user_agent() -> str:
    """``spacy_elmo/<installed version>`` (from the package metadata: the hub
    imports nothing of the package above it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"spacy_elmo/{version('spacy_elmo')}"
    except PackageNotFoundError:
        return "spacy_elmo"


def make_dirs(folders: List[Path]) -> List[Path]:
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


def cleanup(temps: List[Path], created: List[Path]) -> None:
    """Remove ``temps`` and the ``created`` directories that are empty."""
    for temp in temps:
        temp.unlink(missing_ok=True)
    for folder in created:  # only if empty: another process may be using it
        with contextlib.suppress(OSError):
            folder.rmdir()


@contextlib.contextmanager
def locked(path: Path, *, progress: bool) -> Iterator[None]:
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
