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


def _flip_inside_the_largest_tensor(path):
    """Change bytes of a tensor's data in place (the archive keeps its
    length and layout; torch.load reads it without complaint)."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as zf:
        info = max((i for i in zf.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[info.header_offset + 26: info.header_offset + 30])
    start = info.header_offset + 30 + name_length + extra_length + info.file_size // 2
    for i in range(start, start + 16):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _checkpoint(step):
    from spacy_elmo.pretrain.checkpoint import CHECKPOINT_FORMAT, DIGEST, state_digest

    state = {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "model": {"w": torch.arange(5000.0) * step},
        "rng": [(1, 2.5, None)],
    }
    state[DIGEST] = state_digest(state)
    return state


def test_a_checkpoint_changed_in_place_is_refused_and_resume_takes_the_previous(tmp_path, caplog):
    save_keeping_previous(_checkpoint(2), tmp_path)
    save_keeping_previous(_checkpoint(4), tmp_path)
    assert load_checkpoint(tmp_path / "last.pt")["step"] == 4  # the digest survives torch.save/load
    _flip_inside_the_largest_tensor(tmp_path / "last.pt")
    assert not torch.equal(torch.load(tmp_path / "last.pt", weights_only=True)["model"]["w"], torch.arange(5000.0) * 4)
    with pytest.raises(
        PretrainError, match=r"last\.pt is damaged: its contents do not match the SHA-256 saved in it.*prev\.pt"
    ):
        load_checkpoint(tmp_path / "last.pt")
    with caplog.at_level(logging.WARNING, logger="spacy_elmo.pretrain.checkpoint"):
        state, used = load_resume_checkpoint(tmp_path)
    assert used == tmp_path / "prev.pt" and state["step"] == 2
    assert "do not match the SHA-256" in caplog.text


def test_a_checkpoint_without_its_digest_is_refused(tmp_path):
    from spacy_elmo.pretrain.checkpoint import DIGEST

    state = _checkpoint(1)
    del state[DIGEST]
    torch.save(state, tmp_path / "last.pt")
    with pytest.raises(PretrainError, match="carry no digest"):
        load_checkpoint(tmp_path / "last.pt")
