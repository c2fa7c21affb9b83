"""The report's tables from run records."""
import json
import shutil

from common import REPO


def test_a_grid_without_100_percent_gets_its_main_table_at_its_fraction(tmp_path, monkeypatch):
    """The converged grid runs POS at 1% only: its main table shows the 1% runs
    (mean over seeds), not an empty 100% table."""
    import report

    source = REPO / "project" / "metrics" / "converged" / "pos"
    accuracies = {}
    for system in ("baseline", "elmo_tok2vec"):
        (tmp_path / "metrics" / "pos" / system).mkdir(parents=True)
        for record in sorted((source / system).glob("f1_s*.json")):
            shutil.copy(record, tmp_path / "metrics" / "pos" / system / record.name)
            accuracies.setdefault(system, []).append(json.loads(record.read_text())["test"]["tag_acc"])
    monkeypatch.chdir(REPO / "project")
    report.main(tmp_path / "metrics", tmp_path / "out", "t", "", None)
    text = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "At 1% of the training data:" in text and "At 100% of the training data:" not in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    for system, name in (("baseline", "spaCy tok2vec"), ("elmo_tok2vec", "ELMo [x; ELMo] + encoder")):
        mean = 100 * sum(accuracies[system]) / len(accuracies[system])
        assert rows[name].split(" | ")[1].startswith(f"{mean:.1f} ± "), rows[name]
    assert "| pos | ELMo [x; ELMo] + encoder | tagger |" in text  # the mix of the 1% runs


def test_runs_stopped_from_outside_are_named_under_their_table(tmp_path, monkeypatch):
    import report

    source = REPO / "project" / "metrics" / "converged" / "pos" / "baseline"
    (tmp_path / "metrics" / "pos" / "baseline").mkdir(parents=True)
    for record in sorted(source.glob("f1_s*.json")):
        data = json.loads(record.read_text())
        if data["seed"] == 1:
            data.update(stopped_early=2600, train_cpu_seconds=None)
        (tmp_path / "metrics" / "pos" / "baseline" / record.name).write_text(json.dumps(data))
    monkeypatch.chdir(REPO / "project")
    report.main(tmp_path / "metrics", tmp_path / "out", "t", "", None)
    text = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "spaCy tok2vec 1% seed 1 at step 2,600." in text
    assert "seed 0 at step" not in text and "seed 2 at step" not in text
    row = next(line for line in text.splitlines() if line.startswith("| spaCy tok2vec"))
    assert row.split(" | ")[6].endswith("(n=2)")  # train CPU: the two runs that know it
