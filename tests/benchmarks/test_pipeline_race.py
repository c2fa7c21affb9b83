"""benchmarks/pipeline_race.py runs end to end on real text (a few docs),
writes its JSON without machine paths, and names a missing --text file."""
import json
import subprocess
import sys

from tests.helpers.paths import EXAMPLES, REPO

SCRIPT = REPO / "benchmarks" / "pipeline_race.py"


def test_race_writes_its_figures(tmp_path):
    out = tmp_path / "race.json"
    cmd = [sys.executable, str(SCRIPT), "--text", str(EXAMPLES / "bank.txt"), "--docs", "6", "--rounds", "1",
           "--threads", "1", "--load", "1", "--path", "bilm", "--path", "elmo", "--path", "tok2vec_tagger",
           "--elmo-threads", "auto", "--json", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["docs"] == 6 and data["words"] > 60 and data["load"] == 1 and data["text"] == "bank.txt"
    assert set(data["words_per_second"]) == {"bilm", "elmo", "tok2vec_tagger"}
    for by_threads in data["words_per_second"].values():
        assert len(by_threads["1"]) == 1 and by_threads["1"][0] > 0
    assert str(tmp_path) not in out.read_text() and str(REPO) not in out.read_text()
    assert "bilm" in result.stdout and "words/s" in result.stdout


def test_race_names_a_missing_text(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), "--text", "none.txt"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode != 0 and "none.txt" in result.stderr and "no such file" in result.stderr


def test_race_times_the_given_model(tmp_path, parity_paths):
    """--model/--options reach every ELMo path (the parity fixture's biLM has 48-dimensional layers,
    the shipped one 128), and the JSON names the model without its path."""
    import importlib.util

    import spacy

    weights, options = (str(p) for p in parity_paths)
    spec = importlib.util.spec_from_file_location("pipeline_race", SCRIPT)
    race = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(race)
    paths = race.build_paths(None, ["elmo", "elmo_ner"], None, weights, options)
    for name in ("elmo", "elmo_ner"):
        nlp = paths[name].__defaults__[0]  # each path closes over its pipeline
        doc = nlp(spacy.blank("en").make_doc("The bank by the river ."))
        assert doc._.elmo.layers.shape == (3, 6, 48), name
    out = tmp_path / "race.json"
    cmd = [sys.executable, str(SCRIPT), "--text", str(EXAMPLES / "bank.txt"), "--docs", "3", "--rounds", "1",
           "--path", "bilm", "--path", "elmo_ner", "--model", weights, "--options", options, "--json", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["model"] == "weights.hdf5" and set(data["words_per_second"]) == {"bilm", "elmo_ner"}
