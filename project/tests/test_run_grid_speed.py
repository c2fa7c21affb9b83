"""run_grid.speed: words/s over the whole stream, not spaCy's mean of per-batch rates;
remeasure_speed.py times a grid again, from trained or untrained pipelines."""

import json
import time
from pathlib import Path

import pytest
import remeasure_speed
import spacy
from spacy.language import Language
from spacy.tokens import Doc, DocBin

from common import speed

GROUP_DOCS = 32  # docs a buffering component collects before it works
GROUP_SECONDS = 0.2
TICK = 1e-6  # what the fake clock moves on each reading


class FakeClock:
    """``time.perf_counter`` for these tests: a group's work moves it
    GROUP_SECONDS, every reading a TICK, whatever the machine's load."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += TICK
        return self.now

    def work(self):
        self.now += GROUP_SECONDS


CLOCK = FakeClock()


@pytest.fixture
def fake_clock(monkeypatch):
    monkeypatch.setattr(time, "perf_counter", CLOCK)
    return CLOCK


class Buffering:
    """Works once per GROUP_DOCS docs (as the elmo component does per token
    buffer), then hands the group's docs out for free."""

    def __call__(self, doc):
        return next(self.pipe([doc]))

    def pipe(self, stream, batch_size=128):
        group = []
        for doc in stream:
            group.append(doc)
            if len(group) == GROUP_DOCS:
                CLOCK.work()
                yield from group
                group = []
        if group:
            CLOCK.work()
            yield from group


@Language.factory("test_buffering_component")
def make_buffering(nlp, name):
    return Buffering()


def test_speed_times_the_stream_of_a_buffering_pipeline(tmp_path, fake_clock):
    nlp = spacy.blank("en")
    docs = [nlp.make_doc(f"sentence number {i} has six words") for i in range(40)]
    DocBin(docs=docs).to_disk(tmp_path / "test.spacy")
    nlp.add_pipe("test_buffering_component")
    result = speed(nlp, tmp_path / "test.spacy", n_docs=40, batches=8, warmup_epochs=1, batch_size=8)
    # 8 x 8 = 64 docs of 6 words: two groups of 32, each one group of work.
    assert result["words"] == 64 * 6 and result["method"] == "stream"
    assert result["words_per_s"] == result["words"] / result["seconds"]
    # Two groups' work and a few readings of the clock.
    assert 2 * GROUP_SECONDS < result["seconds"] < 2 * GROUP_SECONDS + 1000 * TICK
    # spaCy's per-batch mean: one batch of four pays per group, the other three
    # are nearly free, so it overstates the stream's rate many times over.
    assert result["words_per_s_batch_mean"] > 3 * result["words_per_s"]


# --- remeasure_speed.py: a grid timed again after its pipelines are gone ---

PROJECT = Path(__file__).resolve().parents[1]
PARITY = PROJECT.parent / "tests" / "fixtures" / "elmo-parity"


def _tagged_corpus(root: Path) -> Path:
    nlp = spacy.blank("en")
    words = ["the", "old", "dog", "crossed", "a", "river"]
    tags = ["DT", "JJ", "NN", "VBD", "DT", "NN"]
    for part in ("train", "dev", "test"):
        docs = [Doc(nlp.vocab, words=words[i % 3:] + ["."], tags=tags[i % 3:] + ["."]) for i in range(12)]
        (root / "brown").mkdir(parents=True, exist_ok=True)
        DocBin(docs=docs).to_disk(root / "brown" / f"{part}.spacy")
    return root


def _run(metrics: Path, system: str, **extra) -> Path:
    path = metrics / "pos" / system / "f100_s0.json"
    path.parent.mkdir(parents=True)
    old = {"words_per_s": 1.0, "docs": 12, "batches": 2, "warmup_epochs": 1, "batch_size": 4, "method": "batch mean"}
    path.write_text(json.dumps({"task": "pos", "system": system, "fraction": 100.0, "seed": 0,
                                "test": {"tag_acc": 0.5}, "speed": old, **extra}), encoding="utf-8")
    return path


def _remeasure(metrics, corpus, untrained, rounds=1, weights=None, options=None):
    remeasure_speed.main(metrics, metrics.parent / "training", corpus_dir=corpus, threads=1, rounds=rounds,
                         untrained=untrained, configs=PROJECT / "configs", elmo_weights=weights,
                         elmo_options=options, transformer=Path("no-transformer-here"))


def test_remeasure_untrained_times_the_pipeline_built_from_its_config(tmp_path):
    corpus = _tagged_corpus(tmp_path / "corpus")
    path = _run(tmp_path / "metrics", "baseline")
    _remeasure(tmp_path / "metrics", corpus, untrained=False)  # no model-best on disk: left as it is
    assert json.loads(path.read_text())["speed"]["words_per_s"] == 1.0
    _remeasure(tmp_path / "metrics", corpus, untrained=True, rounds=3)
    run = json.loads(path.read_text())
    new = run["speed"]
    assert new["pipeline"] == "untrained" and new["method"] == "stream"
    assert len(new["rounds"]) == 3 and new["words_per_s"] == sorted(new["rounds"])[1]
    assert new["words"] > 0 and new["words_per_s"] == new["words"] / new["seconds"]
    assert run["speed_before"]["words_per_s"] == 1.0 and run["test"] == {"tag_acc": 0.5}


def test_remeasure_untrained_refuses_another_bilm(tmp_path):
    corpus = _tagged_corpus(tmp_path / "corpus")
    path = _run(tmp_path / "metrics", "elmo_tok2vec", provenance={"elmo_weights_sha256": "0" * 64,
                                                                 "elmo_weights": "w.hdf5"})
    with pytest.raises(SystemExit, match="is not the biLM pos/elmo_tok2vec was trained with"):
        _remeasure(tmp_path / "metrics", corpus, untrained=True, weights=PARITY / "weights.hdf5",
                   options=PARITY / "options.json")
    assert json.loads(path.read_text())["speed"]["words_per_s"] == 1.0
