"""english_curve.py: a line per run, each from the point it started from."""
import json

import english_curve
import pytest

import common

POINTS = [
    {"label": "v5", "tokens": 0, "heldout_ppl": 87.6, "heldout_v3_ppl": 153.3, "shipped": "v5",
     "semeval2007_f1": {"0": 36.0, "1": 46.6, "2": 50.8, "mean": 44.5}, "best_layer": "2",
     "semcor_heldout_f1": {"0": 47.7, "1": 58.7, "2": 61.7, "mean": 56.0}},
    {"label": "narrow 10M", "tokens": 10_000_000, "heldout_ppl": 91.9, "heldout_v3_ppl": 124.2, "run": "narrow",
     "start": "v5", "semeval2007_f1": {"0": 36.3, "1": 46.2, "2": 49.7, "mean": 44.1}, "best_layer": "2"},
    {"label": "wide 12M", "tokens": 12_000_000, "heldout_ppl": 91.0, "heldout_v3_ppl": 122.0, "run": "wide",
     "start": "narrow 10M", "semeval2007_f1": {"0": 36.0, "1": 47.0, "2": 51.0, "mean": 44.7}, "best_layer": "2",
     "semcor_heldout_f1": {"0": 47.7, "1": 59.0, "2": 62.5, "mean": 56.4}},
]


def _spy_on_lines(monkeypatch):
    """The labelled lines the plot draws, as (axes, label, xs, ys, colour), in order."""
    import matplotlib.axes

    drawn = []
    real_plot = matplotlib.axes.Axes.plot

    def spy(ax, xs, ys, *args, **kwargs):
        if kwargs.get("label"):
            drawn.append((ax, kwargs["label"], list(xs), list(ys), kwargs.get("color")))
        return real_plot(ax, xs, ys, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    return drawn


def test_each_run_is_drawn_from_the_point_it_started_from(tmp_path, monkeypatch):
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps(POINTS))
    lines = _spy_on_lines(monkeypatch)
    english_curve.plot(curve=curve, out=tmp_path / "curve.png")
    drawn = [(label, xs, ys) for _, label, xs, ys, _ in lines]
    assert (tmp_path / "curve.png").stat().st_size > 10_000
    # Four panels; the wide run starts at the narrow point it branched from, the narrow one at v5.
    assert ("narrow", [0.0, 10.0], [87.6, 91.9]) in drawn
    assert ("wide", [10.0, 12.0], [91.9, 91.0]) in drawn
    assert ("wide", [10.0, 12.0], [49.7, 51.0]) in drawn
    # A panel leaves out points that lack its figure (SemCor: not measured on "narrow 10M").
    assert ("wide", [12.0], [62.5]) in drawn
    assert len([d for d in drawn if d[0] == "wide"]) == 4


def test_every_run_is_drawn_in_a_colour_of_its_own(tmp_path, monkeypatch):
    """More runs than colours: none is left out, and neighbours differ."""
    points = [dict(POINTS[0])] + [
        {"label": f"run {i}", "tokens": 1_000_000 * (i + 1), "heldout_ppl": 90.0 + i, "run": f"run {i}", "start": "v5"}
        for i in range(len(english_curve.RUN_COLOURS) + 1)
    ]
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps(points))
    drawn = _spy_on_lines(monkeypatch)
    english_curve.plot(curve=curve, out=tmp_path / "curve.png")
    first_panel = [(label, colour) for ax, label, _, _, colour in drawn if ax is drawn[0][0]]
    # v5 has no run of its own: it is "pretrain-english", drawn first
    assert [label for label, _ in first_panel] == ["pretrain-english"] + [f"run {i}" for i in range(len(points) - 1)]
    colours = [colour for _, colour in first_panel]
    assert all(a != b for a, b in zip(colours, colours[1:]))


def test_measure_refuses_an_unknown_start_before_measuring(tmp_path):
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps(POINTS))
    with pytest.raises(SystemExit, match="--start 'nowhere': no point of that label"):
        english_curve.measure(export=tmp_path / "missing", label="x", tokens=1, shipped=None, run="wide",
                              start="nowhere", parts="ppl", curve=curve)
    assert json.loads(curve.read_text()) == POINTS


def test_measure_names_what_is_missing_before_measuring(tmp_path):
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps(POINTS))
    with pytest.raises(SystemExit, match=r"missing before measuring: .*index\.sense.*fetch-sense-index"):
        english_curve.measure(export=tmp_path / "missing", label="x", tokens=1, shipped=None, run="wide",
                              start="v5", parts="semeval", curve=curve, wsd_train=curve, wsd_test=curve,
                              sense_index=tmp_path / "index.sense", heldout=curve, heldout_v3=curve,
                              semcor_split=tmp_path)
    assert json.loads(curve.read_text()) == POINTS


def test_grown_share_measures_the_dimensions_past_the_width(tiny_run, tmp_path):
    """The share of a grown model's vectors in its new dimensions: none past
    its own width, some past the width it grew from, all past zero."""
    from spacy_elmo.bilm.options import BiLMOptions
    from spacy_elmo.pretrain.export import init_from_export
    from spacy_elmo.pretrain.model import PretrainModel
    from spacy_elmo.pretrain.vocab import Vocab
    from tests.helpers.models import small_options

    exported = tiny_run / "export"
    vocab = Vocab.from_file(exported / "vocab.txt")
    model = PretrainModel(BiLMOptions.from_dict(small_options(**{"lstm.projection_dim": 12})), len(vocab))
    init_from_export(model, exported, vocab, seed=1)
    grown = tmp_path / "grown"
    grown.mkdir()
    model.bilm.to_hdf5(grown / "weights.hdf5", grown / "options.json")
    text = tmp_path / "text.txt"
    text.write_text("The cat sees the red ball .\nOur teacher likes some bread again .\n", encoding="utf-8")
    assert english_curve.grown_share(grown, text, width=12) == {"0": 0.0, "1": 0.0, "2": 0.0}
    assert english_curve.grown_share(grown, text, width=0) == {"0": 1.0, "1": 1.0, "2": 1.0}
    shares = english_curve.grown_share(grown, text, width=8)
    assert all(0.01 < share < 0.99 for share in shares.values())


def test_rate_reads_one_leg_of_a_run_log_and_refuses_a_resume_between(tmp_path):
    log = tmp_path / "log.jsonl"
    records = [{"event": "start"}]
    for step, speed in ((10, 1000.0), (20, 3000.0), (30, 2000.0)):
        records.append({"event": "train", "step": step, "tokens_per_s": speed, "tokens_seen": step * 100,
                        "time": 1000.0 + step * 2})
    records.append({"event": "resume", "step": 30})
    records.append({"event": "train", "step": 40, "tokens_per_s": 9000.0, "tokens_seen": 4000, "time": 5.0})
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    # Steps 10-30: median of 1,000/3,000/2,000; 2,000 tokens in 40 s.
    assert english_curve.reading_rate(log, 10, 30) == {
        "steps": "10-30", "records": 3, "median_tokens_per_s": 2000, "tokens_per_hour": 180000}
    with pytest.raises(SystemExit, match="resumed at step 30"):
        english_curve.reading_rate(log, 10, 40)
    with pytest.raises(SystemExit, match="fewer than two"):
        english_curve.reading_rate(log, 35, 50)


def test_rate_reads_only_the_last_run_when_a_block_was_begun_again(tmp_path):
    log = tmp_path / "log.jsonl"
    records = [{"event": "start"},
               {"event": "train", "step": 20, "tokens_per_s": 300.0, "tokens_seen": 2000, "time": 10.0},
               {"event": "start"}]
    for step, speed in ((20, 1000.0), (40, 2000.0)):
        records.append({"event": "train", "step": step, "tokens_per_s": speed, "tokens_seen": step * 100,
                        "time": 9000.0 + step * 2})
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    # Only the second run's steps 20 and 40: 2,000 tokens in 40 s.
    assert english_curve.reading_rate(log, 20, 40) == {
        "steps": "20-40", "records": 2, "median_tokens_per_s": 1500, "tokens_per_hour": 180000}


def test_a_point_ships_only_when_senses_and_new_text_improve_and_the_registry_slice_holds():
    shipped = POINTS[0]
    better = {"label": "better", "heldout_ppl": 91.9, "heldout_v3_ppl": 120.0,
              "semeval2007_f1": {"0": 36.0, "1": 47.0, "2": 51.0, "mean": 44.7}}
    assert common.ship_verdict(better, shipped) == []  # 91.9 is 4.9% above 87.6
    worse_registry = dict(better, heldout_ppl=92.1)  # 5.1% above
    assert common.ship_verdict(worse_registry, shipped) == [
        "the registry slice's perplexity 92.1 is more than 5% above v5's 87.6 (at most 91.98)"]
    same_senses = dict(better, semeval2007_f1={"0": 50.8, "1": 47.0, "2": 49.0, "mean": 48.9})
    assert common.ship_verdict(same_senses, shipped) == [
        "SemEval-2007 F1 at the best layer 50.8 is not above v5's 50.8"]
    old_text = dict(better, heldout_v3_ppl=153.3)
    assert common.ship_verdict(old_text, shipped) == [
        "the new sources' perplexity 153.3 is not below v5's 153.3"]
    unmeasured = {k: v for k, v in better.items() if k != "semeval2007_f1"}
    assert common.ship_verdict(unmeasured, shipped) == [
        "'better' has no semeval2007_f1: measure it with --parts ppl,semeval"]


def test_verdict_compares_with_the_last_shipped_version(tmp_path, capsys):
    import typer

    curve = tmp_path / "curve.json"
    after = dict(POINTS[2], label="after v6", tokens=14_000_000, heldout_v3_ppl=119.0,
                 semeval2007_f1={"0": 36.0, "1": 47.0, "2": 52.0, "mean": 45.0})
    curve.write_text(json.dumps([*POINTS, dict(POINTS[2], label="v6", tokens=13_000_000, shipped="v6"), after]))
    english_curve.verdict("after v6", curve=curve)
    assert capsys.readouterr().out == "'after v6' may ship over 'v6'\n"
    # "wide 12M" beats v5 on all three, but v6 is the version to beat now.
    with pytest.raises(typer.Exit) as stopped:
        english_curve.verdict("wide 12M", curve=curve)
    assert stopped.value.exit_code == 1
    assert capsys.readouterr().out.startswith("'wide 12M' does not ship over 'v6':")
    with pytest.raises(SystemExit, match="no point labelled 'nowhere'"):
        english_curve.verdict("nowhere", curve=curve)
