"""WordNet 3.0's sense index for the paper's sense evaluation (``python -m
spacy_elmo wsd --sense-index``): ``usr/share/wordnet/index.sense`` of
Debian's ``wordnet-sense-index`` package (WordNet licence, Princeton
University), fetched by ``common.fetch_deb`` (sha256-pinned .deb)
and written to OUTPUT. The file itself is pinned too (:data:`INDEX_SHA256`):
if the archive no longer holds the pinned version and gives another, its
index.sense must still be the same bytes, or the script stops.
"""
import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import typer

import common

PACKAGE = "wordnet-sense-index"
#: Known (version, sha256 of the .deb), in the order tried (see common.fetch_deb).
KNOWN = [("1:3.0-37", "b22c7d3100470d90f812acc224718e4bd362d7ca427766fa3e11013c8c7895cf")]
MEMBER = "./usr/share/wordnet/index.sense"
#: sha256 of WordNet 3.0's index.sense (206,941 lines, 7,294,043 bytes).
INDEX_SHA256 = "ce997000ec806318ff1dfadf77d314ac527358e127d7bbe3d1f4e83a1c5c1c2b"
#: Most bytes read from the package's file tree (the .deb unpacks to about 8.2 MB).
MAX_TAR_BYTES = 64 << 20


def extract_index(deb: Path) -> bytes:
    """index.sense from the .deb's file tree (``dpkg-deb --fsys-tarfile``), bounded."""
    proc = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, timeout=common.CLIENT_TIMEOUT_S
    )
    if proc.returncode != 0:
        raise common.FetchError(
            f"`dpkg-deb --fsys-tarfile {deb}` failed:\n{proc.stderr.decode(errors='replace')[-2000:]}"
        )
    if len(proc.stdout) > MAX_TAR_BYTES:
        raise common.FetchError(f"{deb}: its file tree is {len(proc.stdout)} bytes, more than {MAX_TAR_BYTES}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        try:
            member = tar.getmember(MEMBER)
        except KeyError:
            raise common.FetchError(f"{deb}: no {MEMBER} in the package") from None
        return tar.extractfile(member).read()


def main(
    output: Path = typer.Argument(
        Path("assets/wordnet/index.sense"), help="Where to write index.sense (a directory: index.sense in it)"
    ),
    assets: Path = typer.Option(Path("assets"), help="Where to keep the downloaded .deb"),
) -> None:
    deb = common.fetch_deb(PACKAGE, KNOWN, assets)
    data = extract_index(deb.path)
    digest = hashlib.sha256(data).hexdigest()
    if digest != INDEX_SHA256:
        raise common.FetchError(
            f"{PACKAGE} {deb.version}: index.sense has sha256 {digest}, not WordNet 3.0's {INDEX_SHA256}: "
            "the archive's package changed; check it before pinning the new version"
        )
    if output.is_dir():
        output = output / "index.sense"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(data)
    typer.echo(
        f"{output}: WordNet 3.0 index.sense from {PACKAGE} {deb.version} ({len(data)} bytes, sha256 {digest[:12]}…)"
    )


if __name__ == "__main__":
    typer.run(main)
