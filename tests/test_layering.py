"""The package's floors import only downwards (docs/architecture.md):
``bilm/`` (pure PyTorch) nothing above it, ``hub/`` nothing of the model,
``pretrain/`` neither the spaCy component nor the thinc layers, ``layers/``
not the component, nothing but ``__main__`` the command line; and no two
modules of the package import each other, through any chain, counting the
imports made inside functions."""
import ast
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set

import pytest

from tests.helpers.paths import PACKAGE


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[str]:
    """Every module name an import in ``path`` may load, relative ones
    resolved against the package (``spacy_elmo.x.y``): ``import X`` gives X,
    ``from X import a`` gives X and ``X.a`` (``a`` may be a submodule).
    Imports inside functions count like those at the top."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(parts[: len(parts) - node.level] + ([node.module] if node.module else []))
            else:
                base = node.module
            yield base
            for alias in node.names:
                if alias.name != "*":
                    yield f"{base}.{alias.name}"


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _upward_imports(folder: str, allowed_inside: str, forbidden) -> List[str]:
    found = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        for module in _imports(path):
            if _within(module, allowed_inside):
                continue
            if any(_within(module, prefix) for prefix in forbidden):
                found.append(f"{path.relative_to(PACKAGE)}: {module}")
    return found


FLOORS = [
    ("bilm", "spacy_elmo.bilm", ("spacy", "thinc", "spacy_elmo")),
    ("hub", "spacy_elmo.hub", ("torch", "spacy", "thinc", "spacy_elmo")),
    ("pretrain", "spacy_elmo.pretrain", ("spacy_elmo.component", "spacy_elmo.layers", "spacy_elmo.cli")),
    ("layers", "spacy_elmo.layers", ("spacy_elmo.component", "spacy_elmo.cli")),
    ("senses", "spacy_elmo.senses", ("spacy_elmo.cli",)),
    ("component", "spacy_elmo.component", ("spacy_elmo.cli",)),
]


@pytest.mark.parametrize("folder,allowed_inside,forbidden", FLOORS, ids=[f[0] for f in FLOORS])
def test_floors_import_only_downwards(folder, allowed_inside, forbidden):
    found = _upward_imports(folder, allowed_inside, forbidden)
    assert not found, found


def test_the_rule_sees_a_violation(tmp_path, monkeypatch):
    """The check itself: a relative import out of bilm/ is resolved and caught."""
    fake = tmp_path / "spacy_elmo" / "bilm"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("from ..hub import resolve\nfrom .chars import x\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "spacy_elmo")
    assert list(_imports(fake / "bad.py")) == [
        "spacy_elmo.hub", "spacy_elmo.hub.resolve", "spacy_elmo.bilm.chars", "spacy_elmo.bilm.chars.x",
    ]


@pytest.mark.parametrize(
    "folder,source,caught",
    [
        ("pretrain", "def write():\n    from ..component.elmo import add_elmo\n",
         ["spacy_elmo.component.elmo", "spacy_elmo.component.elmo.add_elmo"]),
        ("pretrain", "from .. import layers\n", ["spacy_elmo.layers"]),
        ("layers", "from ..component import registrations\n",
         ["spacy_elmo.component", "spacy_elmo.component.registrations"]),
        ("component", "from .doc_data import x\nimport spacy_elmo.cli.inputs\n", ["spacy_elmo.cli.inputs"]),
        ("senses", "def show():\n    from ..cli._app import app\n", ["spacy_elmo.cli._app", "spacy_elmo.cli._app.app"]),
    ],
)
def test_a_planted_upward_import_is_caught(tmp_path, monkeypatch, folder, source, caught):
    """Each floor's rule fails on an upward import, also one made inside a
    function or written ``from .. import x``."""
    fake = tmp_path / "spacy_elmo" / folder
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text(source, encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "spacy_elmo")
    rule = next(f for f in FLOORS if f[0] == folder)
    assert _upward_imports(*rule) == [f"{folder}/bad.py: {module}" for module in caught]


# ----------------------------------------------------------------- cycles
def _graph(package: Path) -> Dict[str, Set[str]]:
    """Module -> the package's modules it imports. ``from P import a`` where
    ``P.a`` is a module is an arrow to ``P.a`` alone (Python loads ``P``
    first, but what is used is ``a``); any other name, an arrow to ``P``."""
    files = {_module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: Dict[str, Set[str]] = {}
    for name, path in files.items():
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in files)
            elif isinstance(node, ast.ImportFrom):
                base = (
                    ".".join(parts[: len(parts) - node.level] + ([node.module] if node.module else []))
                    if node.level else node.module
                )
                for alias in node.names:
                    if f"{base}.{alias.name}" in files:
                        targets.add(f"{base}.{alias.name}")
                    elif base in files:
                        targets.add(base)
        graph[name] = targets
    return graph


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module, and the
    modules that import themselves (Tarjan's algorithm, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_in_the_package():
    graph = _graph(PACKAGE)
    assert "spacy_elmo.hub.names" in graph and "spacy_elmo.hub.families" in graph["spacy_elmo.hub.resolving"]
    assert _cycles(graph) == []


def test_the_cycle_check_sees_a_cycle_through_a_function(tmp_path):
    """A planted loop a -> b -> c -> a, the last arrow an import inside a
    function, is found; so is the package face that only hands names on."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import run\n", encoding="utf-8")
    (package / "a.py").write_text("from . import b\n\ndef run():\n    return b\n", encoding="utf-8")
    (package / "b.py").write_text("from .c import helper\n", encoding="utf-8")
    (package / "c.py").write_text("def helper():\n    from .a import run\n    return run\n", encoding="utf-8")
    (package / "d.py").write_text("import pkg.b\nfrom pkg import c\n", encoding="utf-8")
    graph = _graph(package)
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.c"},
        "pkg.c": {"pkg.a"},
        "pkg.d": {"pkg.b", "pkg.c"},
    }
    assert _cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    (package / "c.py").write_text("def helper():\n    return 1\n", encoding="utf-8")
    assert _cycles(_graph(package)) == []


def test_no_module_takes_a_private_name_of_another():
    """What modules share they share publicly (the hub's stack included):
    no ``from .x import _name``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                found += [f"{path.relative_to(PACKAGE)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.endswith("__")]
    assert not found, found
