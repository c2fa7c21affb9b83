"""run_grid.py --score-stopped: a run whose training was ended from outside is
scored from the model-best it left, without training, and its record says so."""
import json

import run_grid
import spacy
import typer
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from typer.testing import CliRunner

WORDS = [["The", "dog", "runs", "."], ["A", "cat", "sleeps", "."], ["The", "bird", "sings", "."]]
APP = typer.Typer()
APP.command()(run_grid.main)
TAGS = [["DT", "NN", "VBZ", "."], ["DT", "NN", "VBZ", "."], ["DT", "NN", "VBZ", "."]]


def tagged_docs(nlp):
    return [Doc(nlp.vocab, words=w, tags=t) for w, t in zip(WORDS, TAGS)]


def test_score_stopped_scores_model_best_without_training(tmp_path):
    nlp = spacy.blank("en")
    docs = tagged_docs(nlp)
    brown = tmp_path / "corpus" / "brown"
    brown.mkdir(parents=True)
    for part in ("train", "dev", "test"):
        DocBin(docs=docs).to_disk(brown / f"{part}.spacy")
    tagger = nlp.add_pipe("tagger")
    examples = [Example(nlp.make_doc(" ".join(d.text.split())), d) for d in docs]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(30):
        nlp.update(examples, sgd=optimizer)
    assert tagger.labels
    run = tmp_path / "training" / "pos" / "baseline" / "f100_s0"
    run.mkdir(parents=True)
    nlp.to_disk(run / "model-best")
    curve = [{"epoch": 1, "step": s, "score": 0.5 + s / 1000, "seconds": 10 * s, "words": 12 * s} for s in (200, 400)]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve))
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "baseline_pos.cfg").write_text("[nlp]\n")  # never read: nothing trains
    result = CliRunner().invoke(APP, [
        "pos", "--systems", "baseline", "--fractions", "100", "--seeds", "0", "--score-stopped",
        "--corpus-dir", str(tmp_path / "corpus"), "--configs", str(configs),
        "--training-dir", str(tmp_path / "training"), "--metrics-dir", str(tmp_path / "metrics"),
        "--speed-docs", "3", "--speed-batches", "30", "--speed-warmup", "0", "--speed-batch-size", "2"])
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "metrics" / "pos" / "baseline" / "f100_s0.json").read_text())
    assert record["stopped_early"] == 400 and record["steps"] == 400
    assert record["train_cpu_seconds"] is None and record["train_seconds"] == 4000
    assert record["dev_best"] == 0.9
    assert record["test"]["tag_acc"] == 1.0
    assert not (run / "train.log").exists()


def test_score_stopped_refuses_a_run_that_left_no_model(tmp_path):
    nlp = spacy.blank("en")
    brown = tmp_path / "corpus" / "brown"
    brown.mkdir(parents=True)
    for part in ("train", "dev", "test"):
        DocBin(docs=tagged_docs(nlp)).to_disk(brown / f"{part}.spacy")
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "baseline_pos.cfg").write_text("[nlp]\n")
    result = CliRunner().invoke(APP, [
        "pos", "--systems", "baseline", "--score-stopped", "--corpus-dir", str(tmp_path / "corpus"),
        "--configs", str(configs), "--training-dir", str(tmp_path / "training"),
        "--metrics-dir", str(tmp_path / "metrics")])
    assert result.exit_code != 0 and "model-best" in str(result.exception or result.output)
    assert not (tmp_path / "metrics").exists()
