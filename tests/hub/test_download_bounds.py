"""Downloads are bounded in size, disk, time and order, never print
credentials, and name a broken cache (issue 26, points 1 and 2).

Every test runs against a server on 127.0.0.1 in a thread, under a file-size
limit (RLIMIT_FSIZE, 64 MiB, set for the test and restored after), so a
regression that streams without a bound fails on a write instead of filling
the disk."""
import fcntl
import os
import re
import resource
import shutil
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from spacy_elmo import BiLM, hub, loading
from spacy_elmo.bilm.options import BiLMOptions, parameter_count, published_options
from spacy_elmo.hub import CacheError, DownloadError
from tests.helpers.paths import PARITY

SMALL = hub.PUBLISHED_MODELS["small"]
FSIZE_LIMIT = 64 << 20
SERVER_LIFETIME_S = 120
PASSWORD = "s3cr3t-Pa55"


@pytest.fixture(autouse=True)
def file_size_limit():
    """No file this process writes may pass FSIZE_LIMIT (a write past it
    fails with EFBIG instead of SIGXFSZ killing the test run)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    limit = FSIZE_LIMIT if hard == resource.RLIM_INFINITY else min(FSIZE_LIMIT, hard)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


class _Handler(BaseHTTPRequestHandler):
    """GET /<mode>/<path under the served root>. Modes: bucket (the file),
    huge (announces 10**15 bytes), endless (zeros, no Content-Length),
    trickle (the file's length announced, one byte every 0.2 s),
    redirect (302 to the same path with credentials in the URL)."""

    protocol_version = "HTTP/1.0"

    def do_GET(self):  # noqa: N802
        server = self.server
        mode, _, rest = self.path.lstrip("/").partition("/")
        with server.lock:
            server.requests.append(self.path)
        try:
            if mode == "huge":
                self.send_response(200)
                self.send_header("Content-Length", str(10**15))
                self.end_headers()
                self.wfile.write(b"\0" * 4096)
            elif mode == "endless":
                self.send_response(200)
                self.end_headers()
                block = b"\0" * (1 << 16)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    self.wfile.write(block)
            elif mode == "trickle":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
            elif mode == "redirect":
                self.send_response(302)
                port = server.server_address[1]
                self.send_header("Location", f"http://user:{PASSWORD}@127.0.0.1:{port}/bucket/{rest}")
                self.end_headers()
            elif mode == "bucket" and (server.root / rest).is_file():
                body = (server.root / rest).read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_error(404)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading: what a bounded download does

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "served"
    folder = root / SMALL
    folder.mkdir(parents=True)
    shutil.copy(PARITY / "weights.hdf5", folder / f"elmo_{SMALL}_weights.hdf5")
    shutil.copy(PARITY / "options.json", folder / f"elmo_{SMALL}_options.json")
    big = root / "big" / SMALL
    big.mkdir(parents=True)
    shutil.copy(PARITY / "weights.hdf5", big / f"elmo_{SMALL}_weights.hdf5")
    (big / f"elmo_{SMALL}_options.json").write_bytes(b" " * (2 << 20) + (PARITY / "options.json").read_bytes())
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.root, httpd.requests, httpd.lock, httpd.daemon_threads = root, [], threading.Lock(), True
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    timer = threading.Timer(SERVER_LIFETIME_S, httpd.shutdown)
    timer.daemon = True
    timer.start()
    yield httpd
    timer.cancel()
    httpd.shutdown()
    httpd.server_close()


def files_in(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def largest_file(folder: Path) -> int:
    return max((p.stat().st_size for p in folder.rglob("*") if p.is_file()), default=0)


def parity_weights_limit() -> int:
    return loading.weights_max_bytes(BiLMOptions.from_file(PARITY / "options.json"))


# ------------------------------------------------------------------ sizes
def test_published_limits_cover_the_published_files_with_a_margin():
    for name, shape in (
        ("small", "small"),
        ("medium", "medium"),
        ("original", "original"),
        ("original-5.5b", "original"),
    ):
        floats = 4 * parameter_count(published_options(shape))
        assert floats < hub.PUBLISHED_WEIGHTS_MAX_BYTES[name] <= 1.3 * floats
    assert hub.MAX_OPTIONS_BYTES == BiLMOptions.MAX_FILE_BYTES == 1 << 20


def test_a_content_length_of_10_15_is_refused_before_reading(server, cache):
    with pytest.raises(DownloadError) as info:
        loading.resolve(f"{server.url}/huge/x_weights.hdf5", str(PARITY / "options.json"), progress=False)
    message = str(info.value)
    assert "1,000,000,000,000,000 bytes (Content-Length)" in message and "refused before reading" in message
    assert f"{parity_weights_limit():,}" in message
    assert files_in(cache) == []


def test_a_body_past_the_limit_without_content_length_stops_at_limit_plus_one(server, cache):
    limit = parity_weights_limit()
    assert limit < FSIZE_LIMIT
    with pytest.raises(DownloadError, match=f"larger than the {limit:,} bytes"):
        loading.resolve(f"{server.url}/endless/x_weights.hdf5", str(PARITY / "options.json"), progress=False)
    assert files_in(cache) == []


def test_an_endless_options_file_is_refused_at_1_mib_and_the_weights_never_requested(server, cache, monkeypatch):
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/endless")
    with pytest.raises(DownloadError, match=f"larger than the {1 << 20:,} bytes") as info:
        loading.download("small", progress=False)
    assert f"elmo_{SMALL}_options.json" in str(info.value)
    assert server.requests == [f"/endless/{SMALL}/elmo_{SMALL}_options.json"]
    assert files_in(cache) == []


def test_a_big_options_file_is_refused_before_the_weights_are_requested(server, cache, monkeypatch):
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket/big")
    with pytest.raises(DownloadError, match="refused before reading"):
        loading.download("small", progress=False)
    assert server.requests == [f"/bucket/big/{SMALL}/elmo_{SMALL}_options.json"]
    assert files_in(cache) == []
    # a good mirror then works: nothing was left behind
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")
    weights, options = loading.download("small", progress=False)
    assert weights.read_bytes() == (PARITY / "weights.hdf5").read_bytes()


def test_not_enough_free_disk_is_refused_before_reading(server, cache, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(hub.transport.shutil, "disk_usage", lambda path: real(path)._replace(free=10_000))
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")
    with pytest.raises(DownloadError, match="not enough free disk space") as info:
        loading.download("small", progress=False)
    assert "Content-Length is 287 bytes, 10,000 are free" not in str(info.value)  # the options (287 bytes) fit
    size = (PARITY / "weights.hdf5").stat().st_size
    assert f"Content-Length is {size:,} bytes, 10,000 are free" in str(info.value)
    assert files_in(cache) == []


# ------------------------------------------------------------------- time
def test_a_trickling_server_fails_at_the_deadline_and_frees_the_lock(server, cache, monkeypatch):
    monkeypatch.setenv(hub.DEADLINE_ENV, "1")
    weights_url = f"{server.url}/trickle/x_weights.hdf5"
    weights_path = hub.url_cache_path(weights_url)
    lock_path = weights_path.parent / f".{weights_path.name}.lock"
    outcome = {}

    def run():
        try:
            loading.resolve(weights_url, str(PARITY / "options.json"), progress=False)
        except DownloadError as err:
            outcome["error"] = str(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    held_seen = False
    while thread.is_alive() and not held_seen:
        if lock_path.exists():
            fd = os.open(lock_path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                held_seen = True  # the download holds the lock while it runs
            finally:
                os.close(fd)
        time.sleep(0.02)
    thread.join(timeout=30)
    assert not thread.is_alive(), "the download did not stop at its deadline"
    assert held_seen
    assert "not finished after 1 s" in outcome["error"] and hub.DEADLINE_ENV in outcome["error"]
    # it stopped at the deadline, not at the end of the trickle (1,000 bytes, 200 s)
    received = int(re.search(r"received ([\d,]+) of 1,000 bytes", outcome["error"]).group(1).replace(",", ""))
    assert received < 1000
    # the lock is free for the next process at once: released, its file removed
    assert files_in(cache) == []
    lock_path.parent.mkdir(parents=True)
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


@pytest.mark.parametrize("value", ["0", "-5", "soon", "inf", "nan"])
def test_a_bad_deadline_setting_is_named(server, cache, monkeypatch, value):
    monkeypatch.setenv(hub.DEADLINE_ENV, value)
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")
    with pytest.raises(DownloadError, match=f"{hub.DEADLINE_ENV}='{value}' is not a number of seconds"):
        loading.download("small", progress=False)
    assert server.requests == []


# ---------------------------------------------------------- file:// URLs
def test_file_urls_are_read_with_the_same_limits(server, cache, tmp_path):
    with pytest.raises(DownloadError, match="/dev/zero is not a regular file"):
        loading.resolve(str(PARITY / "weights.hdf5"), "file:///dev/zero", progress=False)
    with pytest.raises(DownloadError, match="/dev/zero is not a regular file"):
        loading.resolve("file:///dev/zero", str(PARITY / "options.json"), progress=False)
    big = tmp_path / "big_options.json"
    big.write_bytes(b" " * (2 << 20) + b"{}")
    with pytest.raises(DownloadError, match="refused"):
        loading.resolve(str(PARITY / "weights.hdf5"), big.as_uri(), progress=False)
    assert largest_file(cache) == 0
    # a regular local file by file:// is fine
    weights, options = loading.resolve(
        (PARITY / "weights.hdf5").as_uri(), (PARITY / "options.json").as_uri(), progress=False
    )
    assert weights.read_bytes() == (PARITY / "weights.hdf5").read_bytes()


# ----------------------------------------------------------- credentials
def test_credentials_in_a_url_are_refused_and_never_printed(server, cache):
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    url = f"http://user:{PASSWORD}@127.0.0.1:{server.server_address[1]}/bucket/{SMALL}/elmo_{SMALL}_weights.hdf5"
    for call in (
        lambda: BiLM.from_pretrained(url, progress=False),
        lambda: loading.resolve(url, progress=False),
        lambda: loading.resolve(url, str(PARITY / "options.json"), progress=False),
        lambda: loading.resolve(
            str(PARITY / "weights.hdf5"), url.replace("weights.hdf5", "options.json"), progress=False
        ),
    ):
        with pytest.raises(DownloadError) as info:
            call()
        assert PASSWORD not in str(info.value) and "credentials" in str(info.value)
        assert "http://***@127.0.0.1" in str(info.value)
    result = CliRunner().invoke(app, ["download", url, "--no-progress"])
    assert result.exit_code == 2 and PASSWORD not in result.output and "credentials" in result.output
    # a redirect to a URL with credentials is refused the same way
    redirect = f"{server.url}/redirect/{SMALL}/elmo_{SMALL}_weights.hdf5"
    with pytest.raises(DownloadError, match="refused a redirect") as info:
        loading.resolve(redirect, str(PARITY / "options.json"), progress=False)
    assert PASSWORD not in str(info.value)
    assert server.requests == [f"/redirect/{SMALL}/elmo_{SMALL}_weights.hdf5"]
    assert files_in(cache) == []


def test_redact_hides_user_information_only():
    text = "could not get https://me:pw@host.example/a@b and http://host/x (ftp://u@h/)"
    assert hub.redact(text) == "could not get https://***@host.example/a@b and http://host/x (ftp://***@h/)"


# ------------------------------------------------------------ the cache
@pytest.mark.parametrize("name", ["%2e%2e", "..", "%2E%2e", "a%2Fb", "a%5Cb", ""])
def test_a_url_without_a_usable_file_name_is_refused(server, cache, name):
    url = f"{server.url}/bucket/{name}"
    with pytest.raises(DownloadError, match="does not end in a file name"):
        loading.resolve(url, str(PARITY / "options.json"), progress=False)
    assert server.requests == [] and not cache.exists()


def test_a_cache_setting_that_is_a_file_is_named(server, tmp_path, monkeypatch):
    afile = tmp_path / "not_a_dir"
    afile.write_text("x")
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")
    for value in (afile, afile / "below"):
        monkeypatch.setenv(hub.CACHE_ENV, str(value))
        with pytest.raises(CacheError) as info:
            loading.download("small", progress=False)
        assert f"{hub.CACHE_ENV}={value}" in str(info.value) and "is a file, not a directory" in str(info.value)
    assert server.requests == []


def test_a_read_only_cache_is_named(server, cache, monkeypatch):
    """A cache directory without write permission. Root may write into any
    directory, so under root the permission check sees the directory's mode
    bits as any other user would (os.access for the owner's bits)."""
    cache.mkdir()
    cache.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(
            hub.names.os,
            "access",
            lambda path, mode, **kw: (
                real(path, mode, **kw) and not (mode & os.W_OK and not os.stat(path).st_mode & 0o200)
            ),
        )
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")
    try:
        with pytest.raises(CacheError) as info:
            loading.download("small", progress=False)
    finally:
        cache.chmod(0o755)
    assert f"{hub.CACHE_ENV}={cache}: {cache} is not writable" in str(info.value)
    assert f"set {hub.CACHE_ENV} to a writable directory" in str(info.value)
    assert server.requests == [] and files_in(cache) == []
    # a read-only cache that holds the files is used as it is
    shape = cache / SMALL
    shape.mkdir()
    shutil.copy(PARITY / "weights.hdf5", shape / f"elmo_{SMALL}_weights.hdf5")
    shutil.copy(PARITY / "options.json", shape / f"elmo_{SMALL}_options.json")
    cache.chmod(0o555)
    try:
        assert loading.download("small", progress=False) == hub.published_cache_paths("small")
    finally:
        cache.chmod(0o755)
    assert server.requests == []


def test_dangling_and_foreign_cache_entries_are_named_with_how_to_clear_them(server, cache, monkeypatch, tmp_path):
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")
    weights, options = hub.published_cache_paths("small")
    folder = weights.parent
    cache.mkdir()
    # the model's folder is a dangling link
    folder.symlink_to(tmp_path / "gone")
    with pytest.raises(
        CacheError,
        match=f"the cache entry {folder} is a symbolic link to .*gone, which does not exist; remove it \\(rm "
              f"{folder}\\)",
    ):
        loading.download("small", progress=False)
    folder.unlink()
    folder.mkdir()
    # the weights entry is a dangling link
    weights.symlink_to(tmp_path / "gone.hdf5")
    with pytest.raises(
        CacheError, match=f"the cache entry {weights} is a symbolic link .* remove it \\(rm {weights}\\)"
    ):
        BiLM.from_pretrained("small", progress=False)
    weights.unlink()
    # the weights entry links to a device, or is a directory
    weights.symlink_to("/dev/zero")
    with pytest.raises(
        CacheError, match=f"the cache entry {weights} is not a regular file; remove it \\(rm {weights}\\)"
    ):
        loading.download("small", progress=False)
    weights.unlink()
    weights.mkdir()
    with pytest.raises(CacheError, match=f"not a regular file; remove it \\(rm -r {weights}\\)"):
        loading.download("small", progress=False)
    weights.rmdir()
    assert server.requests == []
    # a link to a real file is a file put there by hand: used, nothing downloaded
    weights.symlink_to(PARITY / "weights.hdf5")
    shutil.copy(PARITY / "options.json", options)
    assert loading.download("small", progress=False) == (weights, options)
    assert server.requests == []
