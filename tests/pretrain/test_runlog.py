"""log.jsonl after a kill in mid-write: the resume moves the damaged lines
aside, so the log reads and plots again."""
import json

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo.pretrain import pretrain
from spacy_elmo.pretrain.runlog import RunLog, read_log
from tests.helpers.pretrain import tiny_config, write_corpus


def _lines(*records):
    return [json.dumps(r) + "\n" for r in records]


def test_rollback_drops_later_steps_and_moves_damaged_lines_aside(tmp_path):
    path = tmp_path / "log.jsonl"
    good = _lines({"event": "start", "step": 0}, {"event": "train", "step": 1, "loss": 2.0}, {"event": "note"})
    later = _lines({"event": "train", "step": 3, "loss": 1.5})
    cut = '{"event": "train", "step": 4, "lo'  # a kill in mid-write: no end, no newline
    path.write_bytes(
        "".join(good[:2] + ["not json\n"] + good[2:] + later).encode() + b"\xff\xfe binary\n" + cut.encode()
    )
    with pytest.raises(ValueError, match="not UTF-8 text"):
        read_log(path)
    assert RunLog(path, enabled=True).rollback(2) == 1
    assert read_log(path) == [json.loads(line) for line in good]
    assert path.read_text(encoding="utf-8") == "".join(good)
    quarantine = tmp_path / "log.jsonl.damaged"
    assert quarantine.read_bytes() == b"not json\n\xff\xfe binary\n" + cut.encode() + b"\n"
    # Appending after the rollback starts a line of its own.
    RunLog(path, enabled=True).write(event="resume", step=2)
    assert [r["event"] for r in read_log(path)] == ["start", "train", "note", "resume"]
    # A clean log is left as it is, byte for byte.
    before = path.read_bytes()
    assert RunLog(path, enabled=True).rollback(2) == 0
    assert path.read_bytes() == before and quarantine.read_bytes().count(b"\n") == 3


def test_resume_after_a_cut_off_log_line_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from spacy_elmo.cli import app

    torch.set_num_threads(1)
    corpus = write_corpus(tmp_path, 60)
    config = tiny_config(tmp_path, corpus, max_steps=4, checkpoint_every=2)
    pretrain(config, progress=False)
    log = tmp_path / "out" / "log.jsonl"
    with open(log, "a", encoding="utf-8") as fout:  # the run went on past its checkpoint and was killed mid-line
        fout.write(json.dumps({"event": "train", "step": 5, "loss": 1.0}) + '\n{"event": "train", "st')
    runner = CliRunner()
    assert runner.invoke(app, ["plot", str(tmp_path / "out")]).exit_code == 2  # the damaged log is named
    pretrain(tiny_config(tmp_path, corpus, max_steps=6, checkpoint_every=2), resume=True, progress=False)
    result = runner.invoke(app, ["plot", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    steps = [r["step"] for r in read_log(log) if r["event"] == "train"]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert (tmp_path / "out" / "log.jsonl.damaged").read_text(encoding="utf-8") == '{"event": "train", "st\n'
