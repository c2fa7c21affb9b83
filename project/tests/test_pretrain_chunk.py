"""pretrain_chunk.py: a kit packed here trains without spaCy, within its
budget, and comes back as a run that ship_model.py --export ships."""
import json
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

import pretrain_chunk

SCRIPT = Path(pretrain_chunk.__file__)


@pytest.fixture
def run(tiny_run):
    return tiny_run


def test_pack_train_unpack_ship(run, tmp_path):
    from spacy_elmo.pretrain.corpus_cache import load_corpus

    kit, out, back = tmp_path / "kit", tmp_path / "out", tmp_path / "back"
    subprocess.run([sys.executable, str(SCRIPT), "pack", str(run), str(run / "export"), str(kit), "--float16"],
                   check=True, cwd=SCRIPT.parent.parent)
    import h5py

    with h5py.File(kit / "init" / "weights.hdf5", "r") as packed_weights:
        dtypes = set()
        packed_weights.visititems(lambda name, obj: dtypes.add(obj.dtype) if isinstance(obj, h5py.Dataset) else None)
    assert numpy.dtype("float16") in dtypes and numpy.dtype("float32") not in dtypes
    manifest = json.loads((kit / "manifest.json").read_text())
    packed = load_corpus(kit / manifest["caches"]["train"])
    original = load_corpus(next((run / "corpus_cache").glob("*.npz")))
    assert len(packed.lengths()) == len(original.lengths())
    assert [packed.types[i] for i in packed.window(3)] == [original.types[i] for i in original.window(3)]
    assert packed.word_counts() == original.word_counts()
    assert numpy.all(numpy.diff(packed.to_arrays()["counts"][3:]) <= 0)  # renumbered by frequency
    # The lent machine has no spaCy: the chunk must not import it.
    code = ("import os, runpy, sys; sys.modules['spacy'] = None; sys.argv = sys.argv[1:]; "
            "sys.path.insert(0, os.path.dirname(sys.argv[0])); "  # as `python SCRIPT` puts it first
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    subprocess.run([sys.executable, "-c", code, str(SCRIPT), "train", str(kit), str(out), "--device", "cpu",
                    "--batches", "0,8", "--budget-s", "1", "--hard-s", "600", "--evals", "2", "--seed", "3",
                    "--work", str(tmp_path / "work")], check=True, cwd=SCRIPT.parent.parent)
    driver = (out / "driver.log").read_text()
    assert "batch 0 failed" in driver and "batch 8, 50 steps" in driver
    assert "\"output\": \"run\"" in driver  # not the lent machine's working directory
    record = json.loads((out / "config.json").read_text())
    assert record["train"] == json.loads((run / "config.json").read_text())["train"]
    assert record["batch_size"] == 8 and record["max_steps"] == 50 and record["device"] == "cpu"
    subprocess.run([sys.executable, str(SCRIPT), "unpack", str(out), str(back), "--kit", str(kit)], check=True)
    from spacy_elmo import load_bilm

    load_bilm(str(back / "export"))
    target = tmp_path / "english"
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"sources": {"train": {"train_words": 1, "heldout_words": 1}}}))
    shipped = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "ship_model.py"), str(back), str(target), "--corpus-stats", str(stats),
         "--command", "c", "--date", "2026-11-26", "--export", str(back / "export")],
        capture_output=True, text=True, cwd=SCRIPT.parent.parent)
    assert shipped.returncode == 0, shipped.stderr
    assert json.loads((target / "history.jsonl").read_text())["step"] == 50


def test_pack_refuses_a_run_without_its_cache(run, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("corpus_cache"))
    result = subprocess.run([sys.executable, str(SCRIPT), "pack", str(copy), str(run / "export"), str(tmp_path / "k")],
                            capture_output=True, text=True, cwd=SCRIPT.parent.parent)
    assert result.returncode != 0 and "no cache of" in result.stderr


def test_replan_fits_the_end_to_the_pace_after_warm_up():
    from pretrain_chunk import replan

    # Timed at 213 ms a step, 2,229 planned. Steps 50-200 took 37.5 s (250 ms each) and
    # 300 s are left: 1,200 more steps of that pace, so the end moves to step 1,400.
    assert replan(200, 150, 37.5, 300.0, 2229) == 1400
    # The pace improves later (150 steps in 30 s): the end moves later again, never past the plan.
    assert replan(400, 150, 30.0, 250.0, 2229) == 400 + int(250.0 * 150 / 30.0)
    assert replan(400, 150, 15.0, 500.0, 2229) == 2229
    assert replan(200, 150, 37.5, -5.0, 2229) == 201  # out of time: the next step ends it
    assert replan(2229, 150, 37.5, -5.0, 2229) == 2229
    assert replan(50, 0, 0.0, 100.0, 2229) == 2229  # no window yet: the plan stands
