"""What a new user meets first: the shipped configs train on real data as
they are, bad weights stop ``add_pipe``, and the wheel carries its licence
and entry points."""
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import spacy
from spacy.tokens import DocBin
from thinc.api import Config

from spacy_elmo.bilm import OptionsError, WeightFileError
from spacy_elmo.hub import ModelNotFoundError
from tests.helpers.paths import FIXTURES
from tests.helpers.paths import REPO as ROOT

CONFIGS = ROOT / "configs"
SAMPLE = FIXTURES / "training_sample"
SHIPPED = ROOT / "spacy_elmo" / "models" / "english"

# config -> (sample corpus, pipeline, columns the training table must show)
SHIPPED_CONFIGS = {
    "elmo_tagger.cfg": ("brown", ["elmo", "tagger"], ["LOSS TAGGER", "TAG_ACC"]),
    "elmo_ner.cfg": ("wnut", ["elmo", "ner"], ["LOSS NER", "ENTS_F"]),
    "elmo_tagger_ner.cfg": ("brown+wnut", ["elmo", "tagger", "ner"], ["LOSS TAGGER", "LOSS NER", "TAG_ACC", "ENTS_F"]),
    "elmo_textcat.cfg": ("sentiment", ["elmo", "textcat"], ["LOSS TEXTCAT", "CATS_SCORE"]),
}


def _corpus(name: str, split: str, tmp_path: Path) -> Path:
    if "+" not in name:
        return SAMPLE / f"{name}_{split}.spacy"
    vocab = spacy.blank("en").vocab
    docs = [
        doc for part in name.split("+") for doc in DocBin().from_disk(SAMPLE / f"{part}_{split}.spacy").get_docs(vocab)
    ]
    path = tmp_path / f"{name}_{split}.spacy"
    DocBin(docs=docs).to_disk(path)
    return path


def test_every_shipped_config_is_listed():
    assert {p.name for p in CONFIGS.glob("*.cfg")} == set(SHIPPED_CONFIGS)


@pytest.mark.parametrize("config_name", sorted(SHIPPED_CONFIGS))
def test_config_settings(config_name):
    config = Config().from_disk(CONFIGS / config_name, interpolate=False)
    corpus, pipeline, _ = SHIPPED_CONFIGS[config_name]
    assert config["nlp"]["pipeline"] == pipeline
    # Gold tokens wherever the data has them (tags, entities); a text label
    # needs none.
    gold = config_name != "elmo_textcat.cfg"
    assert config["corpora"]["train"]["gold_preproc"] is gold
    assert config["corpora"]["dev"]["gold_preproc"] is gold
    # No column that is zero by construction: pos_acc is not predicted.
    assert config["training"]["score_weights"].get("pos_acc") is None
    # Nothing a --code file would have to register.
    assert "spacy_elmo_project" not in (CONFIGS / config_name).read_text()
    header = (CONFIGS / config_name).read_text().split("[paths]")[0]
    assert "Data:" in header and f"configs/{config_name}" in header


@pytest.mark.parametrize("config_name", sorted(SHIPPED_CONFIGS))
def test_config_trains_on_real_sentences(config_name, tmp_path):
    """``python -m spacy train`` with the config as shipped (the shipped
    biLM, no --code), a handful of steps on real sentences of the matching
    corpus; the table has a column per trained component and score, none
    for the frozen elmo."""
    corpus, pipeline, columns = SHIPPED_CONFIGS[config_name]
    command = [
        sys.executable, "-m", "spacy", "train", str(CONFIGS / config_name),
        "--output", str(tmp_path / "out"),
        "--paths.train", str(_corpus(corpus, "train", tmp_path)),
        "--paths.dev", str(_corpus(corpus, "dev", tmp_path)),
        "--training.max_steps", "6", "--training.eval_frequency", "3",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    header = next(line for line in result.stdout.splitlines() if line.startswith("E "))
    for column in columns:
        assert column in header, header
    assert "LOSS ELMO" not in header and "POS_ACC" not in header, header
    trained = spacy.load(tmp_path / "out" / "model-last")
    assert trained.pipe_names == pipeline
    doc = trained("The river bank flooded after the storm.")
    assert doc._.elmo.layers.shape[:2] == (3, len(doc))
    if "textcat" in pipeline:
        assert set(doc.cats) == {"POSITIVE", "NEGATIVE"}


def test_text_file_as_weights_is_named_at_add_pipe(tmp_path):
    text = tmp_path / "weights.txt"
    text.write_text("these are not weights\n", encoding="utf-8")
    nlp = spacy.blank("en")
    with pytest.raises(WeightFileError, match=r"weights\.txt is not an HDF5 file"):
        nlp.add_pipe("elmo", config={"weights": str(text)})
    # Also with its options given, and as the weights of a directory.
    with pytest.raises(WeightFileError, match="not an HDF5 file"):
        nlp.add_pipe("elmo", config={"weights": str(text), "options": str(SHIPPED / "options.json")})
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.hdf5").write_text("text\n", encoding="utf-8")
    with pytest.raises(WeightFileError, match=r"model[/\\]weights\.hdf5 is not an HDF5 file"):
        nlp.add_pipe("elmo", config={"weights": str(tmp_path / "model")})
    assert nlp.pipe_names == []


def test_bad_options_at_add_pipe(tmp_path):
    options = tmp_path / "options.json"
    options.write_text("{not json", encoding="utf-8")
    nlp = spacy.blank("en")
    with pytest.raises(OptionsError, match="options.json"):
        nlp.add_pipe("elmo", config={"weights": str(SHIPPED / "weights.hdf5"), "options": str(options)})


@pytest.mark.parametrize(
    "weights, message",
    [
        ("{tmp}/gone/weights.hdf5", "gone/weights.hdf5' is neither a model name nor an existing file"),
        ("smal", "'smal' is neither a model name nor an existing file"),
        ("efml:xx", "no ELMoForManyLangs model for 'xx'"),
        ("nlpl:abc", "write nlpl:<id> or nlpl:<version>/<id>"),
        ("http://user:secret@example.org/weights.hdf5", "URLs with credentials"),
    ],
)
def test_bad_weights_stop_add_pipe_without_a_download(tmp_path, monkeypatch, weights, message):
    """Names that do not exist and paths that are not here stop ``add_pipe``
    with the package's message (and how to give weights); nothing is
    downloaded to tell."""
    def refuse(*args, **kwargs):
        raise AssertionError("add_pipe used the network")

    monkeypatch.setattr("urllib.request.urlopen", refuse)
    monkeypatch.setattr("urllib.request.OpenerDirector.open", refuse)
    nlp = spacy.blank("en")
    with pytest.raises((ValueError, OSError), match=message.replace("{tmp}", "").replace("(", r"\(")) as info:
        nlp.add_pipe("elmo", config={"weights": weights.replace("{tmp}", str(tmp_path))})
    assert nlp.pipe_names == []
    if "neither" in message:
        assert "nlp.add_pipe('elmo', config={'weights': NAME})" in str(info.value)


def test_a_saved_pipeline_loads_where_its_weights_setting_names_nothing(tmp_path):
    """``spacy.load`` rebuilds the component from the config, whose
    ``weights`` named a path of the machine it was saved on: the biLM comes
    from the saved files, so that setting is not checked again."""
    local = tmp_path / "model"
    local.mkdir()
    for name in ("weights.hdf5", "options.json"):
        (local / name).write_bytes((SHIPPED / name).read_bytes())
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(local)})
    nlp.initialize()
    expected = nlp("a river bank")._.elmo.layers
    nlp.to_disk(tmp_path / "pipeline")
    for name in ("weights.hdf5", "options.json"):
        (local / name).unlink()
    local.rmdir()
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.config["components"]["elmo"]["weights"] == str(local)
    assert (loaded("a river bank")._.elmo.layers == expected).all()
    with pytest.raises(ModelNotFoundError, match="is neither a model name"):  # a new component is checked
        loaded.add_pipe("elmo", name="second", config={"weights": str(local)})


def test_good_weights_pass_add_pipe():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(SHIPPED)})
    nlp.add_pipe("elmo", name="elmo2", config={"weights": str(SHIPPED / "weights.hdf5")})
    nlp.initialize()
    lstm = json.loads((SHIPPED / "options.json").read_text(encoding="utf-8"))["lstm"]
    assert nlp("a bank")._.elmo.layers.shape == (lstm["n_layers"] + 1, 2, 2 * lstm["projection_dim"])


def test_wheel_has_licence_and_entry_points(tmp_path):
    """The wheel a user builds from a checkout: LICENSE inside, the console
    script and spaCy's entry points declared, Python >= 3.10."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = tmp_path.glob("spacy_elmo-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
        licence = zf.read(f"{info}/licenses/LICENSE").decode()
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        metadata = zf.read(f"{info}/METADATA").decode()
    assert licence.startswith("MIT License") and "License-Expression: MIT" in metadata
    assert "Requires-Python: >=3.10" in metadata
    assert "spacy-elmo = spacy_elmo.__main__:main" in entry_points
    assert "elmo = spacy_elmo.component.elmo:make_elmo" in entry_points
    assert "spacy_elmo.ElmoTok2Vec.v1" in entry_points and "[spacy_span_getters]" in entry_points
    assert "spacy_elmo/models/english/weights.hdf5" in names
    assert "spacy_elmo/senses/senses_en.txt" in names


def test_project_logger_needs_no_code(tmp_path):
    """The project's configs name ``spacy_elmo.JsonlLogger.v1``: spaCy finds
    it through the package's entry point, without ``--code``; each
    evaluation is one JSON line with its time and words."""
    import json

    log = tmp_path / "log.jsonl"
    command = [
        sys.executable, "-m", "spacy", "train", str(ROOT / "project" / "configs" / "baseline_pos.cfg"),
        "--paths.train", str(SAMPLE / "brown_train.spacy"), "--paths.dev", str(SAMPLE / "brown_dev.spacy"),
        "--paths.log", str(log), "--training.max_steps", "4", "--training.eval_frequency", "2",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in records] == [0, 2, 4]
    assert all(isinstance(r["seconds"], (int, float)) and r["words"] > 0 for r in records[1:])
    assert 0.0 <= records[-1]["scores"]["tag_acc"] <= 1.0
