"""Remove the given directories (inside the project only): ``python scripts/clean.py training/quick metrics/quick``."""
import shutil
import sys
from pathlib import Path

root = Path.cwd().resolve()
for name in sys.argv[1:]:
    path = (root / name).resolve()
    if root not in path.parents:
        raise SystemExit(f"refusing to remove {path}: not inside {root}")
    shutil.rmtree(path, ignore_errors=True)
