"""The package's layers import only downwards: ``bilm/`` (pure PyTorch)
nothing above it, ``hub/`` nothing of the model (docs/architecture.md)."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "spacy_elmo"


def _imports(path: Path):
    """(module, level) of every import in ``path``, relative ones resolved
    against the package (``spacy_elmo.x.y``)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level]
                yield ".".join(base + ([node.module] if node.module else []))
            else:
                yield node.module


@pytest.mark.parametrize(
    "folder,allowed_inside,forbidden",
    [
        ("bilm", "spacy_elmo.bilm", ("spacy", "thinc", "spacy_elmo")),
        ("hub", "spacy_elmo.hub", ("torch", "spacy", "thinc", "spacy_elmo")),
    ],
)
def test_layers_import_only_downwards(folder, allowed_inside, forbidden):
    found = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        for module in _imports(path):
            if module == allowed_inside or module.startswith(allowed_inside + "."):
                continue
            if module.split(".")[0] in forbidden:
                found.append(f"{path.relative_to(PACKAGE)}: {module}")
    assert not found, found


def test_the_rule_sees_a_violation(tmp_path, monkeypatch):
    """The check itself: a relative import out of bilm/ is resolved and caught."""
    fake = tmp_path / "spacy_elmo" / "bilm"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("from ..hub import resolve\nfrom .chars import x\n", encoding="utf-8")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path / "spacy_elmo")
    assert list(_imports(fake / "bad.py")) == ["spacy_elmo.hub", "spacy_elmo.bilm.chars"]
