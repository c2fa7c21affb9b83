"""Committed outputs hold no path of the machine that made them; the writers' path rule."""
import json
import re

import pytest

from common import REPO, portable_config, portable_path, scrub

COMMITTED = [REPO / "project" / "metrics", REPO / "project" / "reports",
             REPO / "spacy_elmo" / "models", REPO / "project" / "campaign"]
TEXT_SUFFIXES = {".json", ".jsonl", ".md", ".txt", ".cfg", ".csv", ".yml", ".yaml", ".log"}
#: Top-level folders of machines' absolute paths (built from names, so this file holds none itself).
MACHINE_ROOTS = ("work", "home", "root", "tmp", "Users")
MACHINE_PATH = re.compile("|".join(f"/{name}/" for name in MACHINE_ROOTS) + r"|[A-Za-z]:\\\\")


def committed_text_files():
    return sorted(p for d in COMMITTED for p in d.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)


def test_the_scan_sees_the_committed_outputs():
    names = {p.relative_to(REPO).as_posix() for p in committed_text_files()}
    assert "project/reports/README.md" in names and "spacy_elmo/models/english/history.jsonl" in names
    assert sum(n.startswith("project/metrics/") for n in names) >= 26


@pytest.mark.parametrize("path", committed_text_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_machine_path_in_committed_outputs(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    found = MACHINE_PATH.search(text)
    assert found is None, (
        f"{path.relative_to(REPO)} holds a machine path near {text[found.start() - 40 : found.end() + 40]!r}"
    )


def test_portable_path_rule(tmp_path):
    assert portable_path(REPO / "spacy_elmo" / "models" / "english" / "weights.hdf5") == \
        "spacy_elmo/models/english/weights.hdf5"
    assert portable_path(tmp_path / "exports" / "step1250") == "step1250"
    assert portable_path("C:\\Users\\me\\heldout.txt") == "heldout.txt"
    assert portable_path(None) is None
    config = {"train": [str(tmp_path / "train")], "output": str(tmp_path / "en1"), "options": "project/configs/x.json",
              "lr": 0.002, "nested": {"dev": [str(REPO / "project" / "corpus" / "heldout.txt")]}}
    assert portable_config(config) == {"train": ["train"], "output": "en1", "options": "project/configs/x.json",
                                       "lr": 0.002, "nested": {"dev": ["project/corpus/heldout.txt"]}}
    assert MACHINE_PATH.search(json.dumps(portable_config(config))) is None
    assert scrub(f"Error: {REPO}/project/training/x not found") == "Error: project/training/x not found"


def test_report_shows_a_records_portable_path_as_written(tmp_path, monkeypatch):
    """run_grid writes the biLM's path relative to the repository's root; the
    report, run from project/ as weasel does, must not resolve it again."""
    import shutil

    import report

    record = REPO / "project" / "metrics" / "pos" / "elmo_tok2vec" / "f1_s0.json"
    written = json.loads(record.read_text(encoding="utf-8"))["provenance"]["elmo_weights"]
    assert not written.startswith("/") and (REPO / written).is_file()
    metrics = tmp_path / "metrics" / "pos" / "elmo_tok2vec"
    metrics.mkdir(parents=True)
    shutil.copy(record, metrics / record.name)
    monkeypatch.chdir(REPO / "project")
    report.main(tmp_path / "metrics", tmp_path / "out", "t", "", None)
    text = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert f"ELMo weights: `{written}`" in text
