"""campaign_snapshot.py: a run's last checkpoint as a float16 export that
`pretrain --init` continues from, with the run's log and a portable summary."""
import json

import h5py
import numpy
import pytest
import typer

import campaign_snapshot
from tests.helpers.pretrain import tiny_config, write_corpus


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from spacy_elmo.pretrain import pretrain

    tmp = tmp_path_factory.mktemp("snapshot_run")
    config = tiny_config(tmp, write_corpus(tmp / "corpus", n=120), max_steps=4, eval_every=2)
    pretrain(config)
    return tmp / "out"


def _datasets(path):
    found = {}
    with h5py.File(path, "r") as fin:
        fin.visititems(lambda name, obj: found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return found


def test_snapshot_is_the_export_in_float16(run, tmp_path):
    from spacy_elmo.pretrain.export import export

    full = export(run, tmp_path / "fp32")
    target = tmp_path / "campaign" / "en2"
    campaign_snapshot.main(run, target, None)
    assert sorted(p.name for p in target.iterdir()) == sorted(campaign_snapshot.FILES + ("log.jsonl", "snapshot.json"))
    for name in ("weights.hdf5", "softmax.hdf5"):
        small, exact = _datasets(target / name), _datasets(full / name)
        assert small.keys() == exact.keys()
        for key, value in exact.items():
            assert small[key].dtype == (numpy.float16 if value.dtype.kind == "f" else value.dtype), key
            numpy.testing.assert_allclose(small[key].astype(numpy.float32), value, rtol=1e-3, atol=1e-4)
    with h5py.File(target / "softmax.hdf5", "r") as a, h5py.File(full / "softmax.hdf5", "r") as b:
        assert dict(a.attrs)["format"] == dict(b.attrs)["format"]
        assert list(a.attrs["cutoffs"]) == list(b.attrs["cutoffs"])
    summary = json.loads((target / "snapshot.json").read_text())
    assert summary["step"] == 4 and summary["tokens_seen"] > 0 and summary["last_eval"]["step"] == 4
    text = (target / "snapshot.json").read_text()
    assert str(tmp_path) not in text and str(run) not in text
    logged = [json.loads(line) for line in (target / "log.jsonl").read_text().splitlines()]
    assert logged == [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def test_the_log_stops_at_the_checkpoint(run, tmp_path):
    """A run still training logs steps its last checkpoint does not hold: left out."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    with (copy / "log.jsonl").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"event": "train", "step": 5, "tokens_seen": 10**6}) + "\n")
        log.write(json.dumps({"event": "eval", "step": 5, "dev_ppl": 1.0}) + "\n")
    campaign_snapshot.main(copy, tmp_path / "snap", None)
    summary = json.loads((tmp_path / "snap" / "snapshot.json").read_text())
    assert summary["step"] == 4 and summary["tokens_seen"] < 10**6 and summary["last_eval"]["step"] == 4
    assert all(json.loads(line).get("step", 0) <= 4 for line in (tmp_path / "snap" / "log.jsonl").read_text().splitlines())


def test_pretrain_init_continues_from_the_snapshot(run, tmp_path, caplog):
    """The float16 files load into a fresh model (biLM and softmax), close to the float32 export."""
    import torch

    from spacy_elmo.bilm.model import BiLM
    from spacy_elmo.pretrain.export import export

    target = tmp_path / "snap"
    campaign_snapshot.main(run, target, None)
    full = export(run, tmp_path / "fp32")
    sentences = [["The", "cat", "sees", "the", "fish", "."], ["A", "dog", "."]]
    a = BiLM.from_hdf5(target / "weights.hdf5", target / "options.json").embed_sentences(sentences)
    b = BiLM.from_hdf5(full / "weights.hdf5", full / "options.json").embed_sentences(sentences)
    for x, y in zip(a, b):
        numpy.testing.assert_allclose(x, y, atol=2e-2)
    from spacy_elmo.pretrain import pretrain

    corpus = write_corpus(tmp_path / "corpus", n=60, seed=1)
    config = tiny_config(tmp_path, corpus, output="continued", max_steps=2, init=str(target), options=None,
                         vocab=str(target / "vocab.txt"))
    with caplog.at_level("INFO", logger="spacy_elmo.pretrain.export"):
        pretrain(config)
    assert "initialised the biLM and the softmax from" in caplog.text
    records = [json.loads(line) for line in (tmp_path / "continued" / "log.jsonl").read_text().splitlines()]
    assert any(r["event"] == "train" and r["step"] == 2 and torch.isfinite(torch.tensor(r["loss"])) for r in records)


def test_not_a_run_is_named(tmp_path):
    with pytest.raises(typer.BadParameter, match="no log.jsonl and config.json"):
        campaign_snapshot.main(tmp_path, tmp_path / "out", None)


def test_check_measures_both_files(run, tmp_path):
    text = write_corpus(tmp_path / "held", n=20, seed=3)
    campaign_snapshot.main(run, tmp_path / "snap", text)
    check = json.loads((tmp_path / "snap" / "snapshot.json").read_text())["check"]
    assert check["text"] == "train.txt" and set(check["ppl"]) == {"float32", "float16"}
    assert check["ppl"]["float16"] == pytest.approx(check["ppl"]["float32"], rel=1e-2)
