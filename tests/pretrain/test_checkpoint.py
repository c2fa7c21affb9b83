"""The previous checkpoint is kept beside last.pt, and a resume falls back
to it when last.pt is damaged, saying so."""
import logging

import pytest
import torch

from spacy_elmo.pretrain import PretrainError, load_checkpoint, pretrain
from spacy_elmo.pretrain.checkpoint import load_resume_checkpoint, save_keeping_previous
from spacy_elmo.pretrain.runlog import read_log
from tests.helpers.pretrain import tiny_config, write_corpus


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_saving_keeps_the_previous_checkpoint(tmp_path):
    save_keeping_previous({"n": torch.tensor(1)}, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
    save_keeping_previous({"n": torch.tensor(2)}, tmp_path)
    save_keeping_previous({"n": torch.tensor(3)}, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "prev.pt"]
    assert int(torch.load(tmp_path / "last.pt", weights_only=True)["n"]) == 3
    assert int(torch.load(tmp_path / "prev.pt", weights_only=True)["n"]) == 2


def test_resume_from_the_previous_checkpoint_when_last_is_damaged(tmp_path, caplog):
    torch.set_num_threads(1)
    corpus = write_corpus(tmp_path, 60)
    config = tiny_config(tmp_path, corpus, max_steps=4, checkpoint_every=2)
    pretrain(config, progress=False)
    folder = tmp_path / "out" / "checkpoints"
    assert load_checkpoint(folder / "last.pt")["step"] == 4 and load_checkpoint(folder / "prev.pt")["step"] == 2
    uninterrupted = load_checkpoint(folder / "last.pt")["model"]
    _truncate(folder / "last.pt")
    with caplog.at_level(logging.WARNING, logger="spacy_elmo.pretrain.checkpoint"):
        state, used = load_resume_checkpoint(folder)
    assert used == folder / "prev.pt" and state["step"] == 2
    assert f"{folder / 'last.pt'} cannot be used (the checkpoint {folder / 'last.pt'} is damaged" in caplog.text
    assert f"resuming from the previous checkpoint {folder / 'prev.pt'} (step 2)" in caplog.text
    summary = pretrain(config, resume=True, progress=False)
    assert summary["step"] == 4
    resumed = load_checkpoint(folder / "last.pt")["model"]
    for name, value in uninterrupted.items():
        assert torch.equal(value, resumed[name]), name
    records = read_log(tmp_path / "out" / "log.jsonl")
    assert [r.get("checkpoint") for r in records if r["event"] == "resume"] == ["prev.pt"]
    assert [r["step"] for r in records if r["event"] == "train"] == [1, 2, 3, 4]


def test_resume_names_both_checkpoints_when_neither_loads(tmp_path):
    for name in ("last.pt", "prev.pt"):
        torch.save({"format": "spacy_elmo.pretrain.checkpoint/1", "w": torch.arange(5000.0)}, tmp_path / name)
        _truncate(tmp_path / name)
    with pytest.raises(
        PretrainError,
        match=r"(?s)last\.pt is damaged.*The previous checkpoint cannot be used either: .*prev\.pt is damaged",
    ):
        load_resume_checkpoint(tmp_path)
    (tmp_path / "last.pt").unlink()
    with pytest.raises(
        PretrainError, match=r"(?s)checkpoint not found: .*last\.pt\nThe previous checkpoint cannot be used either"
    ):
        load_resume_checkpoint(tmp_path)
