"""ELMoForManyLangs models: parity with the reference package's outputs,
its character-id quirks, the architecture fallback, malformed directories,
the spaCy pipeline and the export round trip."""
import json
import logging
import pickle
import shutil
import zipfile

import numpy
import pytest
import spacy
import torch
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.bilm.chars import CharVocabulary
from spacy_elmo.bilm.fast import InferenceEngine
from spacy_elmo.bilm.fast.token_cache import type_keys
from spacy_elmo.bilm.formats import efml
from spacy_elmo.bilm.formats.efml import EfmlFormatError
from tests.helpers.paths import EXAMPLES, FIXTURES

EFML = FIXTURES / "efml"
MODELS = ("with_words", "chars_only")


@pytest.fixture(scope="module")
def sentences():
    return json.loads((EFML / "sentences.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def reference():
    with numpy.load(EFML / "outputs.npz", allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def assert_parity(ours, reference, name):
    assert len(ours) == sum(1 for key in reference if key.startswith(name + "/"))
    for i, array in enumerate(ours):
        expected = reference[f"{name}/{i}"]
        assert array.shape == expected.shape
        error = float(numpy.abs(array - expected).max() / numpy.abs(expected).max())
        assert error <= 1e-5, (name, i, error)


def copy_model(tmp_path, name="with_words"):
    target = tmp_path / name
    shutil.copytree(EFML / name, target)
    return target


# ------------------------------------------------------------------ parity
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("batch_size", [64, 1, 3])
def test_outputs_equal_the_reference_package(name, batch_size, sentences, reference):
    model = BiLM.from_pretrained(str(EFML / name)).eval()
    assert_parity(model.embed_sentences(sentences, batch_size=batch_size), reference, name)


@pytest.mark.parametrize("engine", [dict(packed_weights=True), dict(packed_weights=False), dict(type_products=False)])
def test_inference_engine_paths_keep_parity(engine, sentences, reference):
    model = efml.load(EFML / "with_words").eval()
    model.engine = InferenceEngine("fp32", **engine)
    assert_parity(model.embed_sentences(sentences), reference, "with_words")


def test_differs_from_the_bilm_tf_reading_of_the_same_weights(sentences, reference):
    """The family's settings matter: with TensorFlow's +1 forget bias the
    outputs move away from the reference (so the parity above can fail)."""
    model = efml.load(EFML / "with_words").eval()
    for layer in model.layers:
        layer.forget_offset[layer.cell_dim : 2 * layer.cell_dim] = 1.0
    out = model.embed_sentences(sentences[:1])[0]
    assert numpy.abs(out[1:] - reference["with_words/0"][1:]).max() > 1e-2


def test_fixture_weights_are_read_in_both_serializations():
    assert not zipfile.is_zipfile(EFML / "with_words" / "token_embedder.pkl")  # legacy (pre-1.6)
    assert zipfile.is_zipfile(EFML / "with_words" / "encoder.pkl")
    table = efml.load_state_dict(EFML / "with_words" / "token_embedder.pkl")
    assert table["char_emb_layer.embedding.weight"].shape == (64, 5)


# ------------------------------------------------------- character quirks
def test_character_ids_follow_the_reference():
    chars = {"<oov>": 0, "<pad>": 1, "<bos>": 2, "<eos>": 3, "<bow>": 4, "<eow>": 5, "a": 6, "б": 7, "中": 8}
    words = {"<oov>": 0, "<pad>": 1, "<bos>": 2, "ab": 3, "a" * 48: 4}
    vocab = CharVocabulary(chars, words, max_chars=50)
    ids = vocab.token_ids("aб中z")
    # +1 scheme; the first mark is <eow>'s id, the closing one <bow>'s (the reference swaps them)
    assert ids[:7].tolist() == [6, 7, 8, 9, 1, 5, 2]
    assert (ids[7:50] == 2).all() and ids[50] == 1  # <pad> after the word; the word is out of vocabulary
    bos = vocab.token_ids("<bos>")
    assert bos[:4].tolist() == [6, 3, 5, 2] and bos[50] == 3
    assert vocab.token_ids("<bos>").tolist() == vocab.batch_ids([["x"]])[0][0, 0].tolist()
    long = vocab.token_ids("a" * 60)  # cut to 48 code points: its prefix's word id
    assert long[50] == 5 and long[49] == 5 and (long[1:49] == 7).all()
    assert vocab.token_ids("ab")[50] == 4


def test_whitespace_entry_of_a_dic_is_the_ideographic_space(tmp_path):
    path = tmp_path / "char.dic"
    path.write_text("a\t0\n\u3000\t1\n \t2\n\nb\t3\n", encoding="utf-8")
    table = efml.read_dic(path)
    assert table == {"a": 0, "\u3000": 2, "b": 3}  # both whitespace lines are the \u3000 entry; the last wins


def test_bad_dic_lines_are_named(tmp_path):
    path = tmp_path / "word.dic"
    path.write_text("a\t0\nb\t1\t2\n", encoding="utf-8")
    with pytest.raises(EfmlFormatError, match=r"word.dic, line 2: expected 'token<TAB>id'"):
        efml.read_dic(path)
    path.write_text("a\tzero\n", encoding="utf-8")
    with pytest.raises(EfmlFormatError, match="line 1: the id 'zero' is not a non-negative integer"):
        efml.read_dic(path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xef\xbb\xbf<oov>\t0\n<pad>\t1\n", "starts with a byte-order mark"),
        (b"<oov>\t0\nx\t" + b"9" * (1 << 20) + b"\n", "line 2: 1,048,578 characters, more than the 4,096"),
        (b"<oov>\t0\n" + b"x" * (1 << 20) + b"\t5\n", "line 2: 1,048,578 characters, more than the 4,096"),
        (b"<oov>\t0\nx\t" + b"9" * 4000 + b"\n", r"the id '99999999999999999999\.\.\.' is not a non-negative integer"),
        (b"<oov>\t0\nx\t\xd9\xa3\n", "is not a non-negative integer"),
    ],
    ids=["bom", "long-id-line", "long-token-line", "huge-id", "arabic-digit"],
)
def test_hostile_dic_files_get_a_bounded_clear_message(tmp_path, content, message):
    """A byte-order mark, a line of a megabyte, an id of thousands of digits
    or of another script's digits: the package's own message, naming the
    file and the line, at most a few hundred characters long."""
    path = tmp_path / "char.dic"
    path.write_bytes(content)
    with pytest.raises(EfmlFormatError, match=message) as info:
        efml.read_dic(path)
    assert str(path) in str(info.value) and len(str(info.value)) < 400


def test_large_word_ids_give_distinct_cache_keys():
    rows = torch.tensor([[3, 4, 40000], [3, 4, 40000 + 65536]])
    keys = type_keys(rows)
    assert keys[0] != keys[1]


# ------------------------------------------------------- the architecture
def test_missing_architecture_is_inferred_and_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="spacy_elmo"):
        model = efml.load(EFML / "chars_only")
    assert any("inferred it from the state dicts' shapes" in r.getMessage() for r in caplog.records)
    o = model.options
    assert (o.lstm_dim, o.projection_dim, o.n_layers, o.n_highway, o.word_embedding_dim) == (12, 8, 2, 2, 0)
    assert o.filters == [(1, 4), (2, 4), (3, 6)] and (o.cell_clip, o.proj_clip) == (3.0, 3.0)


def test_the_reference_packages_bundled_architecture_is_used_by_name(tmp_path):
    arch, source = efml.find_architecture(tmp_path, {"config_path": "/x/y/cnn_50_100_512_4096_sample.json"})
    assert "reference package" in source
    assert arch["encoder"]["dim"] == 4096 and arch["token_embedder"]["word_dim"] == 100
    # the fixture's weights do not fit that architecture: every tensor is named
    folder = copy_model(tmp_path)
    (folder / "tiny_cnn_50_6.json").unlink()
    config = json.loads((folder / "config.json").read_text())
    config["config_path"] = "/home/other/cnn_50_100_512_4096_sample.json"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        EfmlFormatError, match=r"tensor 'char_emb_layer.embedding.weight' has shape \(64, 5\), expected \(64, 50\)"
    ):
        efml.load(folder)


def test_architecture_files_outside_the_directory_are_not_read(tmp_path):
    outside = tmp_path / "arch.json"
    outside.write_text(json.dumps({"encoder": {}}))
    folder = tmp_path / "model"
    folder.mkdir()
    arch, source = efml.find_architecture(folder, {"config_path": "../arch.json"})
    assert arch is None


# ------------------------------------------------------ malformed models
def test_missing_dic_is_named(tmp_path):
    folder = copy_model(tmp_path)
    (folder / "word.dic").unlink()
    with pytest.raises(EfmlFormatError, match=r"no word.dic"):
        BiLM.from_pretrained(str(folder))


def test_a_pickle_with_code_is_refused_and_not_run(tmp_path):
    folder = copy_model(tmp_path)
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('x')",))

    torch.save({"projection.weight": Payload()}, folder / "token_embedder.pkl")
    with pytest.raises(
        EfmlFormatError, match=r"token_embedder.pkl is not a PyTorch state dict of tensors.*weights_only=True"
    ):
        efml.load(folder)
    assert not marker.exists()
    # the same with a plain pickle file
    (folder / "encoder.pkl").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(EfmlFormatError, match="encoder.pkl is not a PyTorch state dict"):
        efml.load_state_dict(folder / "encoder.pkl")
    assert not marker.exists()


def test_shapes_that_do_not_match_are_named(tmp_path):
    folder = copy_model(tmp_path)
    table = efml.load_state_dict(folder / "encoder.pkl")
    table["backward_layer_1.state_projection.weight"] = torch.zeros(8, 13)
    torch.save(table, folder / "encoder.pkl")
    with pytest.raises(
        EfmlFormatError, match=r"backward_layer_1.state_projection.weight' has shape \(8, 13\), expected \(8, 12\)"
    ):
        efml.load(folder)


def test_dic_ids_beyond_the_embedding_are_refused(tmp_path):
    folder = copy_model(tmp_path)
    with open(folder / "char.dic", "a", encoding="utf-8") as out:
        out.write("ж\t500\n")
    with pytest.raises(EfmlFormatError, match=r"char.dic holds ids in \[0, 500\] but the char embedding has 64 rows"):
        efml.load(folder)


def test_unsupported_encoder_is_named(tmp_path):
    folder = copy_model(tmp_path)
    arch = json.loads((folder / "tiny_cnn_50_6.json").read_text())
    arch["encoder"]["name"] = "lstm"
    (folder / "tiny_cnn_50_6.json").write_text(json.dumps(arch))
    with pytest.raises(EfmlFormatError, match="encoder 'lstm' is not supported"):
        efml.load(folder)


# ---------------------------------------------------------- spaCy and export
def test_pipeline_by_path_saved_and_loaded_without_the_directory(tmp_path, sentences, reference):
    folder = copy_model(tmp_path)
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"weights": str(folder)})
    nlp.initialize()
    words = sentences[0]
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words=words))
    assert_parity([numpy.asarray(doc._.elmo.layers)], {"m/0": reference["with_words/0"]}, "m")
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(folder)
    loaded = spacy.load(tmp_path / "pipeline")
    again = loaded(spacy.tokens.Doc(loaded.vocab, words=words))
    numpy.testing.assert_array_equal(numpy.asarray(again._.elmo.layers), numpy.asarray(doc._.elmo.layers))


def _flip_weights(state):
    weights = bytearray(state["weights"])
    for i in range(len(weights) // 2, len(weights) // 2 + 64):
        weights[i] ^= 0x55
    state["weights"] = bytes(weights)


def _swap_two_words(state):
    words = state["vocabulary"]["words"]
    words[3][1], words[4][1] = words[4][1], words[3][1]


@pytest.mark.parametrize("edit", [_flip_weights, _swap_two_words, lambda state: state.pop("sha256")],
                         ids=["flipped-weights", "swapped-word-ids", "no-checksum"])
def test_a_saved_efml_biLM_changed_after_saving_is_refused(tmp_path, edit):
    """Flipped weight bytes or an edited vocabulary keep every shape valid:
    the SHA-256 saved with an ELMoForManyLangs biLM refuses them, as it does
    for bilm-tf ones."""
    from spacy_elmo import WeightFileError
    from tests.helpers.models import rewrite_saved_bilm

    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"weights": str(EFML / "with_words")})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipeline")
    spacy.load(tmp_path / "pipeline")  # as saved: loads
    rewrite_saved_bilm(tmp_path / "pipeline" / "elmo" / "model", edit)
    with pytest.raises(WeightFileError, match="SHA-256 checksum") as info:
        spacy.load(tmp_path / "pipeline")
    assert str(tmp_path / "pipeline" / "elmo" / "model") in str(info.value)


def test_initialize_block_takes_the_directory(tmp_path, sentences, reference):
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo")
    nlp.config["initialize"]["components"]["elmo"] = {"weights": str(EFML / "chars_only")}
    nlp.initialize()
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words=sentences[1]))
    assert_parity([numpy.asarray(doc._.elmo.layers)], {"m/0": reference["chars_only/1"]}, "m")


def test_export_round_trip_is_exact(tmp_path, sentences, reference):
    model = efml.load(EFML / "with_words")
    efml.save(model, tmp_path / "out")
    again = efml.load(tmp_path / "out")
    for a, b in zip(efml.state_dicts(model), efml.state_dicts(again)):
        assert list(a) == list(b)
        for key in a:
            assert torch.equal(a[key], b[key]), key
    original = efml.state_dicts(efml.load(EFML / "with_words"))[0]
    reread = efml.load_state_dict(tmp_path / "out" / "token_embedder.pkl")
    for key in original:
        assert torch.equal(original[key], reread[key]), key
    assert efml.read_dic(tmp_path / "out" / "char.dic") == efml.read_dic(EFML / "with_words" / "char.dic")
    assert_parity(again.eval().embed_sentences(sentences), reference, "with_words")


def test_cli_export_writes_a_pipelines_model_in_its_own_layout(tmp_path, sentences, reference):
    from spacy_elmo.cli import app

    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"weights": str(EFML / "with_words")})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipeline")
    result = CliRunner().invoke(app, ["export", str(tmp_path / "pipeline"), str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "architecture.json", "char.dic", "config.json", "encoder.pkl", "token_embedder.pkl", "word.dic"
    ]
    assert json.loads((tmp_path / "out" / "config.json").read_text())["config_path"] == "architecture.json"
    assert_parity(
        BiLM.from_pretrained(str(tmp_path / "out")).eval().embed_sentences(sentences), reference, "with_words"
    )


def test_bilm_tf_export_is_refused_for_this_family(tmp_path):
    model = efml.load(EFML / "chars_only")
    with pytest.raises(ValueError, match="has no bilm-tf hdf5 form"):
        model.to_hdf5(tmp_path / "w.hdf5", tmp_path / "o.json")




def test_example_tagger_config_trains_on_an_efml_model():
    from spacy.training import Example
    from spacy.util import load_config

    config = load_config(EXAMPLES / "efml_tagger_de.cfg", overrides={"paths.elmo_weights": str(EFML / "with_words")})
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    assert nlp.lang == "de"
    words = [["Die", "Katze", "schläft", "."], ["Hallo", "Москва", "!"]]
    tags = [["DET", "NOUN", "VERB", "PUNCT"], ["INTJ", "PROPN", "PUNCT"]]
    examples = [
        Example.from_dict(spacy.tokens.Doc(nlp.vocab, words=w), {"tags": t}) for w, t in zip(words, tags)
    ]
    optimizer = nlp.initialize(lambda: examples)
    first = nlp.update(examples, sgd=optimizer)["tagger"]
    for _ in range(30):
        last = nlp.update(examples, sgd=optimizer)["tagger"]
    assert last < first / 2
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words=words[0]))
    assert [t.tag_ for t in doc] == tags[0]


def test_example_script_runs_offline_on_a_model_directory():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "efml_german.py"), str(EFML / "with_words")],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "Doc._.elmo: (3, 8, 16)" in result.stdout
    assert "context-free) is the same in both: True" in result.stdout
    assert "to float32 rounding): True" in result.stdout


def test_options_of_the_family_round_trip_and_count_parameters():
    from spacy_elmo.bilm.options import BiLMOptions, OptionsError, parameter_count

    model = efml.load(EFML / "with_words")
    assert parameter_count(model.options) == sum(p.numel() for p in model.parameters())
    again = BiLMOptions.from_dict(model.options.to_dict())
    assert (again.family, again.n_characters, again.word_embedding_dim, again.n_words) == (
        "elmoformanylangs",
        64,
        6,
        15,
    )
    assert again.forget_bias == 0.0 and again.has_projection and again.token_width == 51
    with pytest.raises(OptionsError, match="family must be one of"):
        BiLMOptions(family="other")
    with pytest.raises(OptionsError, match="word_embedding.n_words must be in"):
        BiLMOptions(family="elmoformanylangs", n_characters=64, word_embedding_dim=6, n_words=1)
    with pytest.raises(OptionsError, match="bilm-tf models have no word embedding"):
        BiLMOptions(word_embedding_dim=6, n_words=10)
