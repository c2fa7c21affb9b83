"""fetch_sense_index.py: index.sense out of a .deb, checked against its pin
(a .deb built here with dpkg-deb; no network: the archive is faked)."""
import hashlib
import shutil
import subprocess

import fetch_sense_index
import pytest

import common

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (a Debian machine)")

INDEX = b"bank%1:14:00:: 08420278 1 20\nbank%1:17:01:: 09213565 2 25\n"


def build_deb(tmp_path, index: bytes):
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        "Package: wordnet-sense-index\nVersion: 1:3.0-37\nArchitecture: all\nMaintainer: test <t@example.org>\n"
        "Description: test\n", encoding="utf-8")
    (root / "usr/share/wordnet").mkdir(parents=True)
    (root / "usr/share/wordnet/index.sense").write_bytes(index)
    deb = tmp_path / "assets" / common.deb_filename("wordnet-sense-index", "1:3.0-37")
    deb.parent.mkdir()
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True, capture_output=True)
    return deb


def test_extracts_the_pinned_file(tmp_path, monkeypatch):
    deb = build_deb(tmp_path, INDEX)
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    monkeypatch.setattr(fetch_sense_index, "KNOWN", [("1:3.0-37", digest)])
    monkeypatch.setattr(fetch_sense_index, "INDEX_SHA256", hashlib.sha256(INDEX).hexdigest())
    out = tmp_path / "wordnet" / "index.sense"
    fetch_sense_index.main(out, deb.parent)  # the .deb is in assets: nothing is downloaded
    assert out.read_bytes() == INDEX
    folder = tmp_path / "into"  # a directory as OUTPUT: index.sense in it
    folder.mkdir()
    fetch_sense_index.main(folder, deb.parent)
    assert (folder / "index.sense").read_bytes() == INDEX


def test_a_changed_file_stops(tmp_path, monkeypatch):
    deb = build_deb(tmp_path, INDEX + b"extra%1:00:00:: 1 1 0\n")
    monkeypatch.setattr(fetch_sense_index, "KNOWN", [("1:3.0-37", hashlib.sha256(deb.read_bytes()).hexdigest())])
    monkeypatch.setattr(fetch_sense_index, "INDEX_SHA256", hashlib.sha256(INDEX).hexdigest())
    with pytest.raises(common.FetchError, match="index.sense has sha256 .* not WordNet 3.0's"):
        fetch_sense_index.main(tmp_path / "index.sense", deb.parent)
    assert not (tmp_path / "index.sense").exists()


def test_pinned_deb_checksum_is_enforced(tmp_path, monkeypatch):
    deb = build_deb(tmp_path, INDEX)
    monkeypatch.setattr(fetch_sense_index, "KNOWN", [("1:3.0-37", "0" * 64)])
    with pytest.raises(common.FetchError, match="does not match the expected"):
        fetch_sense_index.main(tmp_path / "index.sense", deb.parent)
