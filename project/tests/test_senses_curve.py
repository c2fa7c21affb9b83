"""senses_curve.py: sense figures and the README's bank demo along a run."""
import json
import re
import shutil

import pytest
import typer
from typer.testing import CliRunner

import senses_curve
from tests.helpers.pretrain import tiny_config, write_corpus

BANK = senses_curve.REPO / "examples" / "bank.txt"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from spacy_elmo.pretrain import pretrain
    from spacy_elmo.pretrain.export import export

    tmp = tmp_path_factory.mktemp("senses_curve")
    pretrain(tiny_config(tmp, write_corpus(tmp / "corpus", n=120), max_steps=4, eval_every=2))
    return tmp / "out", export(tmp / "out", tmp / "step4")


def money_banks_printed_by_neighbours(directory, layer):
    """What the README's main job prints, counted: money banks are bank.txt's lines 9-16."""
    from spacy_elmo.cli import app

    result = CliRunner().invoke(app, ["neighbours", senses_curve.MONEY_QUERY, "--word", "bank", "--corpus", str(BANK),
                                      "--layer", str(layer), "--k", "4", "--model", str(directory)])
    assert result.exit_code == 0, result.output
    lines = BANK.read_text(encoding="utf-8").splitlines()
    money = [re.sub(r"\W", "", line) for line in lines[8:]]
    rows = [re.fullmatch(r"\s*\d+\s+[-\d.]+\s+(.*)", row).group(1) for row in result.output.splitlines()[1:5]]
    found = [re.sub(r"\W", "", row.replace("[bank]", "bank")) for row in rows]
    assert len(found) == 4
    return sum(f in money for f in found)


def test_bank_demo_counts_what_the_readme_command_prints(exported, tmp_path):
    run, directory = exported
    out = tmp_path / "curve.json"
    senses_curve.main([f"step4={directory}"], BANK, None, run, out)
    row = json.loads(out.read_text())["rows"][0]
    for layer in (1, 2):
        assert row["bank"][str(layer)]["money"] == money_banks_printed_by_neighbours(directory, layer)
    assert set(row["bank"]) == {"0", "1", "2", "mix"}
    assert row["senses"]["centroid"]["0"] == 0.5  # layer 0 is context-free: both senses of a frame tie


def test_step_and_tokens_come_from_the_runs_log(exported, tmp_path):
    run, directory = exported
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    at_step_2 = max(r["tokens_seen"] for r in records if r["event"] == "train" and r["step"] <= 2)
    assert 0 < at_step_2 < max(r["tokens_seen"] for r in records if r["event"] == "train")
    live = tmp_path / "live"  # a run still training: its log may end in a line cut off mid-write
    shutil.copytree(run, live)
    with (live / "log.jsonl").open("a", encoding="utf-8") as fout:
        fout.write('{"event": "train", "step": 5, "tok')
    out = tmp_path / "curve.json"
    senses_curve.main([f"step2={directory}", f"final={directory}"], BANK, None, live, out)
    rows = json.loads(out.read_text())["rows"]
    assert (rows[0]["step"], rows[0]["tokens_seen"]) == (2, at_step_2)
    assert "step" not in rows[1]  # not a stepN label, no history.jsonl
    assert str(tmp_path) not in out.read_text() and str(directory.parent) not in out.read_text()


def test_a_bank_file_that_is_not_the_demos_is_refused(exported, tmp_path):
    _, directory = exported
    short = tmp_path / "bank.txt"
    short.write_text("\n".join(BANK.read_text(encoding="utf-8").splitlines()[:10]) + "\n", encoding="utf-8")
    with pytest.raises(typer.BadParameter, match="expected 16 lines"):
        senses_curve.main([f"x={directory}"], short, None, None, None)
    with pytest.raises(typer.BadParameter, match="LABEL=DIR"):
        senses_curve.main([str(directory)], BANK, None, None, None)


def fake_row(label, tokens, centroid, nn):
    """A row as --json writes it: accuracies per method and layer (0, 1, 2, mix)."""
    return {"label": label, "tokens_seen": tokens, "heldout_ppl": 100.0,
            "senses": {"centroid": dict(zip("0 1 2 mix".split(), centroid)), "1nn": dict(zip("0 1 2 mix".split(), nn))},
            "bank": {layer: {"money": 1, "river": 4} for layer in ("0", "1", "2", "mix")}}


RANDOM = {m: {layer: {"mean": 0.5 if layer == "0" else 0.52} for layer in ("0", "1", "2", "mix")} for m in ("centroid", "1nn")}


def test_best_margin_is_the_best_contextual_layer_over_its_random_mean():
    row = fake_row("a", 10, (0.5, 0.60, 0.70, 0.90), (0.5, 0.62, 0.55, 0.90))
    margins = senses_curve.best_margins(row, RANDOM)
    assert margins["centroid"] == pytest.approx(18.0)  # layer 2; the mean of the layers (mix) is not a layer
    assert margins["1nn"] == pytest.approx(10.0)  # layer 1


def test_snapshot_gives_its_stage_tokens_and_tokens_override_them(tmp_path):
    snap = tmp_path / "snap"
    snap.mkdir()
    (snap / "snapshot.json").write_text(json.dumps({"step": 1073, "tokens_seen": 99_696_762,
                                                    "last_eval": {"dev_ppl": 88.10095},
                                                    "check": {"ppl": {"float32": 88.1, "float16": 88.11}}}))
    assert senses_curve.run_info("gpu4", snap, None) == {"step": 1073, "tokens_seen": 99_696_762, "heldout_ppl": 88.11}
    saved = tmp_path / "curve.json"
    saved.write_text(json.dumps({"rows": [fake_row("v4", 1, (0.5, 0.6, 0.69, 0.68), (0.5, 0.55, 0.62, 0.6)),
                                          fake_row("gpu4", 2, (0.5, 0.6, 0.68, 0.68), (0.5, 0.55, 0.63, 0.6))],
                                 "random": RANDOM}))
    out = tmp_path / "again.json"
    senses_curve.main(json_out=out, from_json=saved, tokens=["gpu4=702.5e6"])
    rows = json.loads(out.read_text())["rows"]
    assert [r["tokens_seen"] for r in rows] == [1, 702_500_000]
    with pytest.raises(typer.BadParameter, match="no biLM labelled v9"):
        senses_curve.main(from_json=saved, tokens=["v9=1e6"])
    with pytest.raises(typer.BadParameter, match="LABEL=N"):
        senses_curve.main(from_json=saved, tokens=["gpu4=lots"])


def test_plot_from_json_and_its_errors(tmp_path):
    saved = tmp_path / "curve.json"
    rows = [fake_row("b", 4e8, (0.5, 0.6, 0.69, 0.68), (0.5, 0.55, 0.62, 0.6)),
            fake_row("a", 5e7, (0.5, 0.6, 0.63, 0.62), (0.5, 0.55, 0.54, 0.6))]
    saved.write_text(json.dumps({"rows": rows, "random": RANDOM}))
    plot = tmp_path / "img" / "senses.png"
    senses_curve.main(from_json=saved, plot=plot)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved.write_text(json.dumps({"rows": rows, "random": None}))
    with pytest.raises(typer.BadParameter, match="give --random"):
        senses_curve.main(from_json=saved, plot=plot)
    with pytest.raises(typer.BadParameter, match="give --random"):
        senses_curve.main(["x=somewhere"], plot=plot)  # refused before any model is loaded
    with pytest.raises(typer.BadParameter, match="not both"):
        senses_curve.main(["x=somewhere"], from_json=saved)


def test_margin_slope_is_points_per_doubling_of_tokens():
    rows = [fake_row("a", 1e8, (0.5, 0.6, 0.62, 0.6), (0.5, 0.55, 0.52, 0.6)),
            fake_row("b", 2e8, (0.5, 0.6, 0.64, 0.6), (0.5, 0.55, 0.52, 0.6)),
            fake_row("c", 8e8, (0.5, 0.6, 0.68, 0.6), (0.5, 0.55, 0.52, 0.6)),
            fake_row("no tokens", None, (0.5, 0.9, 0.9, 0.9), (0.5, 0.9, 0.9, 0.9))]
    slopes = senses_curve.margin_slopes(rows, RANDOM)
    assert slopes["centroid"] == pytest.approx(2.0)  # +2 points per doubling, exactly on the line
    assert slopes["1nn"] == pytest.approx(0.0)  # layer 1 (0.55) is the best 1-NN layer throughout
    assert senses_curve.margin_slopes(rows[:1], RANDOM) == {}
