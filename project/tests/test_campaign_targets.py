"""campaign_targets.py: the issue's figures per shipped version, their slope
per doubling of tokens and the distance to each target."""
import json

import pytest
import typer
from typer.testing import CliRunner

import campaign_targets


def _entry(tokens, ppl, senses, pos_elmo, ner_elmo, sd=0.01):
    layers = {"0": {"centroid": {"model": 0.5, "random_mean": 0.5}},
              "1": {"centroid": {"model": 0.5 + senses / 200, "random_mean": 0.5},
                    "1nn": {"model": 0.5 + senses / 100, "random_mean": 0.5}},
              "mix": {"centroid": {"model": 0.99, "random_mean": 0.5}}}  # the mean of the layers is not a layer
    return {"tokens_seen": tokens, "dev_ppl": ppl, "parameters": 8_000_000, "shipped": "2026-01-01",
            "senses": {"layers": layers},
            "downstream": {campaign_targets.POS: {"baseline": {"mean": 0.9}, "elmo_tok2vec": {"mean": pos_elmo}},
                           campaign_targets.NER: {"baseline": {"mean": 0.30, "sd": sd},
                                                  "elmo_tok2vec": {"mean": ner_elmo, "sd": sd}}}}


def _model(tmp_path, entries):
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf8")
    return tmp_path


def test_figures_per_version():
    row = campaign_targets.figures(_entry(1_000_000, 100.0, 12.0, 0.95, 0.33), {1_000_000: 2})
    assert row["senses"] == pytest.approx(12.0)  # the best contextual layer and method (1-NN here), not the mix
    assert row["pos_cut"] == pytest.approx(50.0)  # 10% error -> 5%
    assert row["ner_gain"] == pytest.approx(3.0)
    assert row["ner_overlap"] is False  # 0.31 < 0.32
    assert row["money"] == 2
    assert campaign_targets.figures(_entry(1, 100.0, 1.0, 0.95, 0.31), {})["ner_overlap"] is True


def test_slope_is_per_doubling():
    assert campaign_targets.slope([(1_000, 10.0), (4_000, 14.0)]) == pytest.approx(2.0)
    assert campaign_targets.slope([(1_000, 10.0), (2_000, None)]) is None


def test_table_slopes_and_distance_to_targets(tmp_path, capsys):
    model = _model(tmp_path, [_entry(100e6, 100.0, 14.0, 0.94, 0.33), _entry(400e6, 90.0, 16.0, 0.945, 0.335)])
    campaign_targets.main(model, None, "a,b", tmp_path / "plot.png")
    out = capsys.readouterr().out
    assert "| a | 2026-01-01 | 8.0M | 100.0M | 100.0 | +14.0 | 40.0 |" in out
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in out.splitlines() if line.startswith("| ")}
    assert rows["sense margin over random weights (points)"][3] == "+1.00"  # +2 over two doublings
    assert rows["sense margin over random weights (points)"][5].startswith("4.0")  # (20 - 16) / 1
    assert rows["held-out perplexity"][5].startswith("met")
    assert rows["money query: money banks of 4"][5].startswith("–")  # not measured
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_a_label_per_version(tmp_path):
    model = _model(tmp_path, [_entry(1e6, 100.0, 1.0, 0.95, 0.31)])
    with pytest.raises(typer.BadParameter, match="1 versions"):
        campaign_targets.main(model, None, "a,b", None)


def test_missing_history_is_named(tmp_path):
    app = typer.Typer()
    app.command()(campaign_targets.main)
    result = CliRunner().invoke(app, [str(tmp_path)])
    assert result.exit_code != 0 and "history.jsonl" in result.output
