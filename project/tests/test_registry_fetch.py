"""The one fetch helper: sha256 checks, Debian versions and package lists (no network: the clients are faked)."""
import hashlib
import subprocess

import pytest

import common
from common import FetchError, fetch, fetch_deb


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FakeApt:
    """``apt-cache madison`` / ``apt-get update`` / ``apt-get download`` against an in-memory archive."""

    def __init__(self, archive, lists_filled=True):
        self.archive = archive  # version -> bytes
        self.lists_filled = lists_filled
        self.calls = []

    def __call__(self, cmd, cwd=None):
        self.calls.append(cmd)
        out, rc = "", 0
        if cmd[:2] == ["apt-cache", "madison"]:
            if self.lists_filled:
                out = "".join(f" pkg | {v} | http://deb.debian.org/debian bookworm/main all Packages\n"
                              for v in self.archive)
        elif cmd[:2] == ["apt-get", "update"]:
            self.lists_filled = True
        elif cmd[:2] == ["apt-get", "download"]:
            name, version = cmd[2].split("=", 1)
            if version in self.archive and self.lists_filled:
                (cwd / common.deb_filename(name, version)).write_bytes(self.archive[version])
            else:
                rc = 100
        return subprocess.CompletedProcess(cmd, rc, out, "E: not found" if rc else "")


def test_a_wrong_sha256_deletes_the_file_and_names_it(tmp_path):
    (tmp_path / "pkg.whl").write_bytes(b"tampered")
    with pytest.raises(FetchError, match="pkg.whl: sha256 .* does not match"):
        fetch("pip", "pkg==1", "pkg.whl", _sha(b"original"), tmp_path)
    assert not (tmp_path / "pkg.whl").exists()
    (tmp_path / "pkg.whl").write_bytes(b"original")
    assert fetch("pip", "pkg==1", "pkg.whl", _sha(b"original"), tmp_path) == tmp_path / "pkg.whl"


def test_deb_takes_the_first_known_version_the_archive_has(tmp_path, monkeypatch):
    apt = FakeApt({"2+deb12u9": b"security", "2+deb12u8": b"main"})
    monkeypatch.setattr(common, "_run", apt)
    known = [("2+deb12u9", _sha(b"security")), ("2+deb12u8", _sha(b"main"))]
    deb = fetch_deb("pkg", known, tmp_path)
    assert (deb.version, deb.pinned, deb.path.read_bytes()) == ("2+deb12u9", True, b"security")
    # Superseded: the security version left the archive; the main-pocket one is pinned too.
    deb.path.unlink()
    apt.archive.pop("2+deb12u9")
    deb = fetch_deb("pkg", known, tmp_path)
    assert (deb.version, deb.pinned) == ("2+deb12u8", True)
    # Already in assets: no client call at all.
    apt.calls.clear()
    assert fetch_deb("pkg", known, tmp_path).version == "2+deb12u8" and apt.calls == []


def test_deb_runs_apt_get_update_on_a_fresh_machine(tmp_path, monkeypatch):
    apt = FakeApt({"1.0-1": b"deb"}, lists_filled=False)
    monkeypatch.setattr(common, "_run", apt)
    monkeypatch.setattr(common.os, "geteuid", lambda: 0)
    deb = fetch_deb("pkg", [("1.0-1", _sha(b"deb"))], tmp_path)
    assert deb.pinned and ["apt-get", "update"] in apt.calls


def test_deb_without_root_says_to_run_apt_get_update(tmp_path, monkeypatch):
    apt = FakeApt({"1.0-1": b"deb"}, lists_filled=False)
    monkeypatch.setattr(common, "_run", apt)
    monkeypatch.setattr(common.os, "geteuid", lambda: 1000)
    with pytest.raises(FetchError, match="run `sudo apt-get update`"):
        fetch_deb("pkg", [("1.0-1", _sha(b"deb"))], tmp_path)
    assert ["apt-get", "update"] not in apt.calls


def test_deb_falls_back_to_the_newest_version_unpinned(tmp_path, monkeypatch):
    apt = FakeApt({"3+deb12u1": b"newer"})
    monkeypatch.setattr(common, "_run", apt)
    deb = fetch_deb("pkg", [("2+deb12u9", _sha(b"security"))], tmp_path)
    assert (deb.version, deb.pinned, deb.path.read_bytes()) == ("3+deb12u1", False, b"newer")


def test_a_pinned_deb_with_another_sha256_stops(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "_run", FakeApt({"1.0-1": b"rebuilt"}))
    with pytest.raises(FetchError, match="does not match"):
        fetch_deb("pkg", [("1.0-1", _sha(b"deb"))], tmp_path)


def test_epoch_in_the_file_name():
    assert common.deb_filename("wordnet-base", "1:3.0-37") == "wordnet-base_1%3a3.0-37_all.deb"


def test_deb_refreshes_stale_lists_before_falling_back(tmp_path, monkeypatch):
    """Lists made before the pinned security update know only the older main-pocket version."""
    archive_now = {"2+deb12u9": b"security", "2+deb12u8": b"main"}

    class StaleApt(FakeApt):
        def __call__(self, cmd, cwd=None):
            if cmd[:2] == ["apt-get", "update"]:
                self.archive = archive_now
            return super().__call__(cmd, cwd)

    apt = StaleApt({"2+deb12u8": b"main"})
    monkeypatch.setattr(common, "_run", apt)
    monkeypatch.setattr(common.os, "geteuid", lambda: 0)
    # The older version is pinned too, but the preferred one is looked for first.
    deb = fetch_deb("pkg", [("2+deb12u9", _sha(b"security")), ("2+deb12u8", _sha(b"main"))], tmp_path)
    assert (deb.version, deb.pinned, deb.path.read_bytes()) == ("2+deb12u9", True, b"security")
    assert apt.calls.count(["apt-get", "update"]) == 1
