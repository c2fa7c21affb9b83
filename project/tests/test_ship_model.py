"""ship_model.py: shipping a run (weights, history, card), the perplexity
gate, and --update-card adding senses and downstream figures."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import ship_model

SCRIPT = Path(ship_model.__file__)


@pytest.fixture
def run(tiny_run):
    return tiny_run


def stats_file(tmp_path):
    stats = {"sources": {"train": {"train_words": 1000, "heldout_words": 10},
                         "other": {"train_words": 5, "heldout_words": 1}},
             "extra_sources": {"extra": {"train_words": 7, "heldout_words": 2}}}
    path = tmp_path / "stats.json"
    path.write_text(json.dumps(stats), encoding="utf-8")
    return path


def ship(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          cwd=SCRIPT.parent.parent)


def senses_file(path, weights, sha=None):
    cell = {"mean": 0.5, "sd": 0.01, "min": 0.49, "max": 0.51, "seed0": 0.5}
    data = {
        "data": "the packaged set",
        "seeds": 3,
        "weights_sha256": sha or ship_model.sha256_of(weights),
        "model": {
            "centroid": {"0": 0.5, "1": 0.62, "2": 0.71, "mix": 0.69},
            "1nn": {"0": 0.5, "1": 0.6, "2": 0.65, "mix": 0.64},
        },
        "random": {m: {layer: cell for layer in ("0", "1", "2", "mix")} for m in ("centroid", "1nn")},
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_ship_then_update_card(run, tmp_path):
    target = tmp_path / "english"
    result = ship(
        run, target, "--corpus-stats", stats_file(tmp_path), "--command", "pretrain X", "--date", "2026-11-25"
    )
    assert result.returncode == 0, result.stderr
    history = [json.loads(line) for line in (target / "history.jsonl").read_text().splitlines()]
    assert len(history) == 1 and history[0]["command"] == "pretrain X"
    # The run trained on train/train.txt only: the card's corpus is that source.
    assert history[0]["corpus"] == {"train": {"train_words": 1000, "heldout_words": 10}}
    card = (target / "MODEL_CARD.md").read_text()
    assert "Not measured for this version." in card and "| train | 1,000 | 10 |" in card and "| other |" not in card
    assert "after `python -m weasel run fetch-registry-text`" in card  # the registry text's command
    # A run that read corpus v3's slices: its corpus is built by fetch-corpus.
    elsewhere = tmp_path / "v3"
    elsewhere.mkdir()
    (elsewhere / "options.json").write_bytes((target / "options.json").read_bytes())
    v3 = [dict(history[0], config=dict(history[0]["config"], train=["corpus/pretrain3/tokens/000.npz"]))]
    ship_model.write_card(elsewhere, v3, json.loads(stats_file(tmp_path).read_text()), "c")
    assert "after `python -m weasel run fetch-corpus`" in (elsewhere / "MODEL_CARD.md").read_text()
    # A run no better than the shipped model is refused.
    again = ship(run, target, "--corpus-stats", stats_file(tmp_path), "--command", "c", "--date", "2026-11-26")
    assert again.returncode != 0 and "not below the shipped model's" in again.stderr
    # Senses measured on other weights are refused; on these, they go on the card.
    wrong = senses_file(tmp_path / "wrong.json", None, sha="0" * 64)
    refused = ship("--update-card", target, "--corpus-stats", stats_file(tmp_path), "--senses", wrong)
    assert refused.returncode != 0 and "rerun benchmarks/senses_baseline.py" in refused.stderr
    summary = {"pos": {"baseline": {"1.0": {"n": 3, "test": [0.88, 0.002]}},
                       "elmo_tok2vec": {"1.0": {"n": 3, "test": [0.912, 0.002]}}},
               "ner": {"baseline": {"100.0": {"n": 3, "test": [0.29, 0.02]}}}}
    # A summary whose ELMo runs name other weights is refused; one naming these goes on the card.
    (tmp_path / "summary.json").write_text(json.dumps(dict(summary, elmo_weights_sha256=["0" * 64])), encoding="utf-8")
    refused = ship(
        "--update-card", target, "--corpus-stats", stats_file(tmp_path), "--downstream", tmp_path / "summary.json"
    )
    assert refused.returncode != 0 and "rerun the headline grid" in refused.stderr and "summary.json" in refused.stderr
    summary["elmo_weights_sha256"] = [ship_model.sha256_of(target / "weights.hdf5")]
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    senses = senses_file(tmp_path / "senses.json", target / "weights.hdf5")
    result = ship("--update-card", target, "--corpus-stats", stats_file(tmp_path), "--senses", senses,
                  "--downstream", tmp_path / "summary.json")
    assert result.returncode == 0, result.stderr
    card = (target / "MODEL_CARD.md").read_text()
    assert "| 2 | 65.0 | 50.0 ± 1.0 | 71.0 | 50.0 ± 1.0 |" in card
    assert "| POS (Brown), 1% of train | accuracy | 88.0 ± 0.2 (3) | 91.2 ± 0.2 (3) |" in card
    assert "NER (WNUT-2016)" not in card  # no ELMo score for it: no row
    assert "| 71.0 vs 50.0 | 91.2 vs 88.0 |" in card  # the history row
    assert "pretrain X" in card  # the command kept from the record
    assert ship("--update-card", run, target, "--corpus-stats", stats_file(tmp_path)).returncode != 0


def test_corpus_used_falls_back_to_the_default_sources(tmp_path):
    stats = json.loads(stats_file(tmp_path).read_text())
    assert ship_model.corpus_used({"train": [str(tmp_path / "gone")]}, stats) == stats["sources"]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "extra.txt").write_text("x\n")
    (tmp_path / "t" / "train.txt").write_text("x\n")
    assert set(ship_model.corpus_used({"train": [str(tmp_path / "t")]}, stats)) == {"train", "extra"}


def test_the_shipped_checkpoint_needs_an_evaluation_at_its_step(run):
    """A run still training: its last.pt may be ahead of the last held-out evaluation;
    the card's figures must be the shipped weights' own."""
    summary = ship_model.run_summary(run, 4, 123)
    assert (summary["step"], summary["tokens_seen"]) == (4, 123)
    with pytest.raises(SystemExit, match="no held-out evaluation at step 3"):
        ship_model.run_summary(run, 3, 100)


def test_an_earlier_run_counts_as_a_stage(run, tmp_path):
    """A model trained in stages (each run continuing the last one's export with
    --init): --earlier adds each earlier run's steps, tokens and time."""
    import shutil

    earlier = tmp_path / "stage1"
    shutil.copytree(run, earlier)
    direct = ship_model.run_summary(run)
    target = tmp_path / "english"
    result = ship(run, target, "--corpus-stats", stats_file(tmp_path), "--command", "c", "--date", "2026-11-25",
                  "--earlier", earlier)
    assert result.returncode == 0, result.stderr
    shipped = json.loads((target / "history.jsonl").read_text().splitlines()[-1])
    assert shipped["step"] == 2 * direct["step"] and shipped["tokens_seen"] == 2 * direct["tokens_seen"]
    assert shipped["stages"] == [{k: direct[k] for k in ("step", "tokens_seen", "train_hours", "dev_ppl",
                                                         "corpus_tokens")}]
    # Both stages read the same corpus: the card counts passes over it.
    passes = f"({shipped['tokens_seen'] / direct['corpus_tokens']:.2f} passes over the {direct['corpus_tokens']:,}"
    assert passes in (target / "MODEL_CARD.md").read_text()
    # A last stage on another corpus (a source given twice): no passes, each epoch its own.
    other = [dict(shipped, corpus_tokens=direct["corpus_tokens"] * 2)]
    ship_model.write_card(target, other, json.loads(stats_file(tmp_path).read_text()), "c")
    card = (target / "MODEL_CARD.md").read_text()
    assert "passes over" not in card
    assert f"in all stages (epochs differ between stages; the last stage's: {2 * direct['corpus_tokens']:,}" in card
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "log.jsonl").write_bytes((run / "log.jsonl").read_bytes())
    with pytest.raises(SystemExit, match="no config.json"):
        ship_model.run_summary(bare)
    with pytest.raises(SystemExit, match="no log.jsonl"):
        ship_model.run_summary(tmp_path)


def test_shipping_the_export_of_a_run_trained_elsewhere(run, tmp_path):
    """A run trained on another machine comes back as its log and its final
    export (the checkpoints stay there): --export ships those weights with the
    log's figures, only when the log ends with the run's end."""
    import shutil

    away = tmp_path / "away"
    away.mkdir()
    for name in ("log.jsonl", "config.json", "options.json"):
        shutil.copy(run / name, away / name)
    shutil.copytree(run / "export", tmp_path / "back")
    target = tmp_path / "english"
    result = ship(away, target, "--corpus-stats", stats_file(tmp_path), "--command", "c", "--date", "2026-11-26",
                  "--export", tmp_path / "back", "--machine", "NVIDIA H200")
    assert result.returncode == 0, result.stderr
    shipped = json.loads((target / "history.jsonl").read_text().splitlines()[-1])
    direct = ship_model.run_summary(run)
    assert (shipped["step"], shipped["tokens_seen"], shipped["machine"]) == (direct["step"], direct["tokens_seen"],
                                                                             "NVIDIA H200")
    assert (target / "weights.hdf5").read_bytes() == (run / "export" / "weights.hdf5").read_bytes()
    # A log cut before the run's end: its export may be of another step.
    lines = (away / "log.jsonl").read_text().splitlines()
    (away / "log.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    cut = ship(away, tmp_path / "other", "--corpus-stats", stats_file(tmp_path), "--command", "c",
               "--date", "2026-11-26", "--export", tmp_path / "back")
    assert cut.returncode != 0 and "ends neither with the run's end" in cut.stderr


def test_shipping_the_export_of_a_run_stopped_between_evaluations(run, tmp_path):
    """A run stopped by --time-limit (or a signal) logs a checkpoint and ``stopped``
    at a step with no evaluation: --export ships it with the held-out perplexity
    measured on the export itself, on the run's dev text."""
    import shutil

    from spacy_elmo.pretrain.perplexity import perplexity

    away = tmp_path / "away"
    away.mkdir()
    for name in ("config.json", "options.json"):
        shutil.copy(run / name, away / name)
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    kept = [r for r in records if r["event"] in ("start", "train") or (r["event"] == "eval" and r["step"] < 4)]
    kept += [{"event": "checkpoint", "step": 4, "reason": "signal"}, {"event": "stopped", "step": 4}]
    (away / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    dev = tmp_path / "heldout.txt"
    dev.write_text("the cat sat on the mat .\nthe dog ran to the park and back .\n" * 5)
    config = json.loads((away / "config.json").read_text())
    config["dev"] = [str(dev)]
    (away / "config.json").write_text(json.dumps(config))
    target = tmp_path / "english"
    result = ship(away, target, "--corpus-stats", stats_file(tmp_path), "--command", "c", "--date", "2026-11-26",
                  "--export", run / "export")
    assert result.returncode == 0, result.stderr
    shipped = json.loads((target / "history.jsonl").read_text().splitlines()[-1])
    expected = perplexity(run / "export", [dev])
    assert shipped["step"] == 4
    assert shipped["dev_ppl"] == pytest.approx(expected["ppl"], rel=1e-6)
    assert shipped["dev_tokens"] == expected["tokens"]
    # Without its dev text here the export cannot be measured: refused, nothing shipped.
    config["dev"] = [str(tmp_path / "gone.txt")]
    (away / "config.json").write_text(json.dumps(config))
    refused = ship(away, tmp_path / "other", "--corpus-stats", stats_file(tmp_path), "--command", "c",
                   "--date", "2026-11-26", "--export", run / "export")
    assert refused.returncode != 0 and "gone.txt" in refused.stderr and not (tmp_path / "other").exists()


def test_the_shipped_card_is_written_from_its_history(tmp_path):
    """The committed card is what write_card makes of history.jsonl (so the two
    never disagree), with one history table."""
    shipped = SCRIPT.parents[2] / "spacy_elmo" / "models" / "english"
    history = ship_model.read_history(shipped)
    current = history[-1]
    (tmp_path / "options.json").write_bytes((shipped / "options.json").read_bytes())
    ship_model.write_card(tmp_path, history, {"sources": current["corpus"]}, current["command"], current["note"])
    card = (shipped / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert (tmp_path / "MODEL_CARD.md").read_text(encoding="utf-8") == card
    assert card.count("| shipped | step |") == 1 and len(history) == card.count("\n| 2026-")


def test_shipping_by_the_curves_rule_marks_the_point(run, tmp_path):
    """--curve/--point: the English learning curve's rule decides (a held-out
    perplexity up to 5% worse ships when senses and new text improve), on the
    point measured on these very weights, which is then marked shipped."""
    target = tmp_path / "english"
    first = ship(run, target, "--corpus-stats", stats_file(tmp_path), "--command", "c", "--date", "2026-11-25")
    assert first.returncode == 0, first.stderr
    v0 = {"label": "v0", "tokens": 0, "shipped": "v0", "heldout_ppl": 90.0, "heldout_v3_ppl": 150.0,
          "semeval2007_f1": {"0": 36.0, "1": 46.0, "2": 50.0, "mean": 44.0}}
    candidate = {"label": "step 4", "tokens": 10, "shipped": None, "heldout_ppl": 94.0, "heldout_v3_ppl": 120.0,
                 "semeval2007_f1": {"0": 36.0, "1": 47.0, "2": 51.0, "mean": 44.7},
                 "weights_sha256": ship_model.sha256_of(run / "export" / "weights.hdf5")}
    curve = tmp_path / "curve.json"
    args = (run, target, "--corpus-stats", stats_file(tmp_path), "--command", "c", "--date", "2026-11-26",
            "--curve", curve, "--point", "step 4")
    # The senses did not improve: refused, nothing written.
    curve.write_text(json.dumps([v0, dict(candidate, semeval2007_f1={"2": 50.0})]))
    refused = ship(*args)
    assert refused.returncode != 0 and "SemEval-2007 F1 at the best layer 50.0 is not above v0's 50.0" in refused.stderr
    assert len((target / "history.jsonl").read_text().splitlines()) == 1
    # A point measured on other weights: refused, even with --force.
    curve.write_text(json.dumps([v0, dict(candidate, weights_sha256="0" * 64)]))
    other = ship(*args, "--force")
    assert other.returncode != 0 and "measured on other weights" in other.stderr
    assert len((target / "history.jsonl").read_text().splitlines()) == 1
    # The point holds (its held-out perplexity 4.4% above v0's): shipped as v1 and marked so.
    curve.write_text(json.dumps([v0, candidate]))
    shipped = ship(*args)
    assert shipped.returncode == 0, shipped.stderr
    assert len((target / "history.jsonl").read_text().splitlines()) == 2
    assert [p["shipped"] for p in json.loads(curve.read_text())] == ["v0", "v1"]
    assert ship(*args[:-1], "nowhere").returncode != 0
