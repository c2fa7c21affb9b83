"""run_grid.py: a finished run is skipped, unless it is an ELMo run recorded
with other biLM weights than the grid's (then it is trained again)."""
import json

import typer
from typer.testing import CliRunner

import run_grid
from registry_fetch import sha256_of

APP = typer.Typer()
APP.command()(run_grid.main)


def write_record(path, sha=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    provenance = {"elmo_weights_sha256": sha} if sha else {}
    path.write_text(json.dumps({"test": {"tag_acc": 0.5}, "provenance": provenance}), encoding="utf-8")


def test_other_bilm_names_the_recorded_weights_only_when_they_differ(tmp_path):
    record = tmp_path / "f1_s0.json"
    write_record(record, "a" * 64)
    assert run_grid.other_bilm(record, {"elmo_weights_sha256": "a" * 64}) is None
    assert run_grid.other_bilm(record, {"elmo_weights_sha256": "b" * 64}) == "a" * 64
    assert run_grid.other_bilm(record, {}) is None  # tok2vec, MiniLM: no biLM to compare
    write_record(record)
    assert run_grid.other_bilm(record, {"elmo_weights_sha256": "b" * 64}) is None  # the record names none


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
