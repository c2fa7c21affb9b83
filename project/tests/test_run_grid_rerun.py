"""run_grid.py: a finished run is skipped, unless it is an ELMo run recorded
with other biLM weights than the grid's (then it is trained again)."""
import json

import run_grid
import typer
from typer.testing import CliRunner

from common import sha256_of

APP = typer.Typer()
APP.command()(run_grid.main)


BUDGET = {"max_steps": 2000, "eval_frequency": 200, "patience": 1000}  # run_grid's defaults


def write_record(path, sha=None, budget=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    provenance = {"elmo_weights_sha256": sha} if sha else {}
    record = {"test": {"tag_acc": 0.5}, "provenance": provenance}
    if budget is not None:
        record["budget"] = budget
    path.write_text(json.dumps(record), encoding="utf-8")


def read(path):
    return json.loads(path.read_text(encoding="utf-8"))


def test_other_bilm_names_the_recorded_weights_only_when_they_differ(tmp_path):
    record = tmp_path / "f1_s0.json"
    write_record(record, "a" * 64)
    assert run_grid.other_bilm(read(record), {"elmo_weights_sha256": "a" * 64}) is None
    assert run_grid.other_bilm(read(record), {"elmo_weights_sha256": "b" * 64}) == "a" * 64
    assert run_grid.other_bilm(read(record), {}) is None  # tok2vec, MiniLM: no biLM to compare
    write_record(record)
    assert run_grid.other_bilm(read(record), {"elmo_weights_sha256": "b" * 64}) is None  # the record names none


def grid(tmp_path, weights):
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    (configs / "elmo_tok2vec_pos.cfg").write_text("[nlp]\n", encoding="utf-8")  # not valid: training it fails
    options = tmp_path / "options.json"
    options.write_text("{}", encoding="utf-8")
    return CliRunner().invoke(APP, [
        "pos", "--systems", "elmo_tok2vec", "--fractions", "100", "--seeds", "0",
        "--elmo-weights", str(weights), "--elmo-options", str(options),
        "--corpus-dir", str(tmp_path / "corpus"), "--configs", str(configs),
        "--training-dir", str(tmp_path / "training"), "--metrics-dir", str(tmp_path / "metrics")])


def test_an_elmo_run_of_the_same_weights_is_skipped_and_one_of_other_weights_is_not(tmp_path):
    weights = tmp_path / "weights.hdf5"
    weights.write_bytes(b"the shipped biLM")
    record = tmp_path / "metrics" / "pos" / "elmo_tok2vec" / "f100_s0.json"
    write_record(record, sha256_of(weights))
    before = record.read_text(encoding="utf-8")
    result = grid(tmp_path, weights)
    assert result.exit_code == 0, result.output
    assert "done, skipped" in result.output
    assert record.read_text(encoding="utf-8") == before

    weights.write_bytes(b"a newer biLM")
    result = grid(tmp_path, weights)
    assert "recorded with other biLM weights" in result.output
    assert "done, skipped" not in result.output
    # The grid went on to train it (and failed here, as this test gives it no corpus): the old record stands.
    assert result.exit_code != 0
    assert record.read_text(encoding="utf-8") == before


def test_other_budget_names_the_recorded_budget_only_when_it_differs(tmp_path):
    record = tmp_path / "f1_s0.json"
    write_record(record, budget=BUDGET)
    assert run_grid.other_budget(read(record), dict(BUDGET)) is None
    assert run_grid.other_budget(read(record), dict(BUDGET, max_steps=4000)) == BUDGET
    write_record(record)
    assert run_grid.other_budget(read(record), BUDGET) is None  # the record names none


def test_a_run_recorded_with_another_budget_is_trained_again(tmp_path):
    weights = tmp_path / "weights.hdf5"
    weights.write_bytes(b"the shipped biLM")
    record = tmp_path / "metrics" / "pos" / "elmo_tok2vec" / "f100_s0.json"
    write_record(record, sha256_of(weights), budget=BUDGET)
    result = grid(tmp_path, weights)
    assert "done, skipped" in result.output
    write_record(record, sha256_of(weights), budget=dict(BUDGET, max_steps=1500))
    result = grid(tmp_path, weights)
    assert "recorded with another budget" in result.output and "done, skipped" not in result.output
    assert result.exit_code != 0  # it went on to train (no corpus here)
