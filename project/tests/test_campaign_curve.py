"""campaign_curve.py: the table of evaluations (tokens scaled to the
evaluation's step, change per doubling of tokens), the plot, bad arguments."""
import json

import pytest
import typer
from typer.testing import CliRunner

import campaign_curve


def write_run(folder, records):
    folder.mkdir()
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return folder


def test_table_and_plot(tmp_path):
    run = write_run(tmp_path / "en2", [
        {"event": "train", "step": 100, "tokens_seen": 1_000_000},
        {"event": "eval", "step": 100, "dev_ppl": 400.0},
        {"event": "train", "step": 200, "tokens_seen": 2_000_000},
        {"event": "eval", "step": 200, "dev_ppl": 300.0},
    ])
    app = typer.Typer()
    app.command()(campaign_curve.main)
    out = tmp_path / "img" / "curve.png"
    result = CliRunner().invoke(app, [str(run), "--point", "v1:20557643:189.3", "--line", "target:120", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert "| 1.00M | 400.0 |  |" in result.output
    # 400 -> 300 over one doubling of tokens: -25.0%
    assert "| 2.00M | 300.0 | -25.0% |" in result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_per_doubling_over_two_doublings():
    slopes = campaign_curve.per_doubling([(1_000, 400.0), (4_000, 100.0)])
    assert slopes[0] is None
    assert slopes[1] == pytest.approx(-0.5)


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(typer.BadParameter, match="LABEL:TOKENS:PERPLEXITY"):
        campaign_curve.parse_point("shipped:189.3")
    app = typer.Typer()
    app.command()(campaign_curve.main)
    result = CliRunner().invoke(app, [str(tmp_path)])
    assert result.exit_code != 0
    assert "no log.jsonl" in result.output


def snapshot_and_continued(tmp_path, init=None):
    """A snapshot (1M tokens, ppl 400) and a run of 500k tokens (ppl 350) started
    with --init INIT (default: the snapshot itself)."""
    snap = write_run(tmp_path / "snapshot", [
        {"event": "train", "step": 100, "tokens_seen": 1_000_000},
        {"event": "eval", "step": 100, "dev_ppl": 400.0},
    ])
    (snap / "snapshot.json").write_text(json.dumps({"step": 100, "tokens_seen": 1_000_000}), encoding="utf-8")
    run = write_run(tmp_path / "continued", [
        {"event": "train", "step": 50, "tokens_seen": 500_000},
        {"event": "eval", "step": 50, "dev_ppl": 350.0},
    ])
    (run / "config.json").write_text(json.dumps({"init": str(init or snap)}), encoding="utf-8")
    return snap, run


def test_a_run_continued_from_a_snapshot_is_drawn_after_it(tmp_path):
    snap, run = snapshot_and_continued(tmp_path)
    assert campaign_curve.chained_curve(run) == [(1_000_000, 400.0), (1_500_000, 350.0)]
    # --init from a plain export (no snapshot.json): the run's own curve.
    (snap / "snapshot.json").unlink()
    assert campaign_curve.chained_curve(run) == [(500_000, 350.0)]


def test_after_chains_a_run_started_from_another_copy_of_the_weights(tmp_path):
    snap, run = snapshot_and_continued(tmp_path, init=tmp_path / "shipped")
    assert campaign_curve.chained_curve(run) == [(500_000, 350.0)]
    assert campaign_curve.chained_curve(run, snap) == [(1_000_000, 400.0), (1_500_000, 350.0)]
    assert campaign_curve.parse_after(f"{run}={snap}") == (str(run), snap)
    with pytest.raises(typer.BadParameter, match="RUN=EARLIER"):
        campaign_curve.parse_after(str(run))
    with pytest.raises(typer.BadParameter, match="no log.jsonl"):
        campaign_curve.parse_after(f"{run}={tmp_path}")


def test_three_stages_make_one_curve(tmp_path):
    """A run (1M tokens), a snapshot of its continuation (+500k) and a third
    stage (+2M) continued from it: the third stage's tokens are shifted by
    both earlier stages' (--after applies along the whole chain)."""
    first = write_run(tmp_path / "first", [
        {"event": "train", "step": 100, "tokens_seen": 1_000_000},
        {"event": "eval", "step": 100, "dev_ppl": 400.0},
    ])
    second = write_run(tmp_path / "second", [
        {"event": "train", "step": 50, "tokens_seen": 500_000},
        {"event": "eval", "step": 50, "dev_ppl": 350.0},
        {"event": "train", "step": 60, "tokens_seen": 600_000},
    ])
    (second / "snapshot.json").write_text(json.dumps({"step": 60, "tokens_seen": 600_000}), encoding="utf-8")
    third = write_run(tmp_path / "third", [
        {"event": "train", "step": 10, "tokens_seen": 2_000_000},
        {"event": "eval", "step": 10, "dev_ppl": 200.0},
    ])
    continued = {second.resolve(): first, third.resolve(): second}
    curve = campaign_curve.chained_curve(third, second, continued)
    assert curve == [(1_000_000, 400.0), (1_500_000, 350.0), (3_600_000, 200.0)]


def test_a_stage_stopped_after_its_last_evaluation_shifts_the_next_by_all_it_trained(tmp_path):
    """The first stage evaluated at 1M tokens and trained on to 1.2M before it
    was stopped and continued: the next stage starts at 1.2M, not 1M."""
    first = write_run(tmp_path / "first", [
        {"event": "train", "step": 100, "tokens_seen": 1_000_000},
        {"event": "eval", "step": 100, "dev_ppl": 400.0},
        {"event": "train", "step": 120, "tokens_seen": 1_200_000},
        {"event": "checkpoint", "step": 120, "reason": "stopped"},
    ])
    second = write_run(tmp_path / "second", [
        {"event": "train", "step": 10, "tokens_seen": 100_000},
        {"event": "eval", "step": 10, "dev_ppl": 380.0},
    ])
    assert campaign_curve.chained_curve(second, first) == [(1_000_000, 400.0), (1_300_000, 380.0)]
