"""trend.py reuses the main grid's runs of the same biLM and budget, also
where its label's directory still holds runs of an earlier biLM."""
import json

import trend

BUDGET = ["--max-steps", "1500", "--eval-frequency", "150", "--patience", "600"]


def _record(path, digest, max_steps=1500, score=0.9):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"provenance": {"elmo_weights_sha256": digest}, "test": {"tag_acc": score},
                                "budget": {"max_steps": max_steps, "eval_frequency": 150, "patience": 600}}))


def _digest(path):
    return json.loads(path.read_text())["provenance"]["elmo_weights_sha256"]


def test_a_record_of_other_weights_under_the_label_is_replaced(tmp_path):
    main, out = tmp_path / "metrics", tmp_path / "trend" / "shipped"
    _record(main / "pos" / "elmo_tok2vec" / "f1_s0.json", "new")
    _record(main / "pos" / "elmo_tok2vec" / "f1_s1.json", "new", max_steps=999)  # another budget: trained again
    _record(out / "pos" / "elmo_tok2vec" / "f1_s0.json", "old")  # the label's earlier biLM
    _record(out / "pos" / "elmo_tok2vec" / "f1_s1.json", "old")
    trend.reuse_matching_runs(main, out, "pos", "elmo_tok2vec", "new", BUDGET)
    assert _digest(out / "pos" / "elmo_tok2vec" / "f1_s0.json") == "new"
    assert _digest(out / "pos" / "elmo_tok2vec" / "f1_s1.json") == "old"  # left for run_grid to train again


def test_a_record_of_the_same_weights_is_kept(tmp_path):
    main, out = tmp_path / "metrics", tmp_path / "trend" / "shipped"
    _record(main / "pos" / "elmo_tok2vec" / "f1_s0.json", "new", score=0.5)
    _record(out / "pos" / "elmo_tok2vec" / "f1_s0.json", "new", score=0.7)
    trend.reuse_matching_runs(main, out, "pos", "elmo_tok2vec", "new", BUDGET)
    assert json.loads((out / "pos" / "elmo_tok2vec" / "f1_s0.json").read_text())["test"]["tag_acc"] == 0.7
