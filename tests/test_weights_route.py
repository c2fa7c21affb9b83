"""Every form of weights the docs name (a name, a directory, a file, a zip,
a URL) through every entry point (``BiLM.from_pretrained``, the factory's
``weights`` on first use, ``[initialize.components.elmo]``, the command
line's ``--model``), downloads from a local HTTP server on 127.0.0.1; and
the one route of weights into the component."""
import shutil

import numpy
import pytest
import spacy
from typer.testing import CliRunner

from spacy_elmo import BiLM, hub
from spacy_elmo.bilm.formats import efml
from spacy_elmo.cli import app
from spacy_elmo.hub import families
from tests.helpers.models import nlpl_bilm_tf_dir, zip_dir
from tests.helpers.paths import FIXTURES, PARITY
from tests.helpers.server import Server

EFML = FIXTURES / "efml" / "with_words"
SMALL = hub.PUBLISHED_MODELS["small"]
WORDS = ["The", "bank", "of", "the", "river", "."]

#: form -> how to write it (``{url}``: the server, ``{local}``: local files).
FORMS = {
    "published name": "small",
    "efml name": "efml:de",
    "nlpl name": "nlpl:20/210",
    "bilm-tf directory": "{parity}",
    "efml directory": "{efml}",
    "nlpl directory": "{local}/nlpl_model",
    "weights file": "{parity}/weights.hdf5",
    "nlpl zip": "{local}/nlpl.zip",
    "efml zip": "{local}/efml.zip",
    "weights URL": "{url}/bucket/" + SMALL + f"/elmo_{SMALL}_weights.hdf5",
    "zip URL": "{url}/bucket/20/210.zip",
}
#: form -> the files its outputs must equal.
REFERENCE = {
    "published name": "parity", "efml name": "efml", "nlpl name": "nlpl", "bilm-tf directory": "parity",
    "efml directory": "efml", "nlpl directory": "nlpl", "weights file": "parity", "nlpl zip": "nlpl",
    "efml zip": "efml", "weights URL": "parity", "zip URL": "nlpl",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server laid out like AllenNLP's bucket and the NLPL repository, and
    the local files (an NLPL directory, zips); the reference biLMs."""
    root = tmp_path_factory.mktemp("served")
    local = tmp_path_factory.mktemp("local")
    folder = root / SMALL
    folder.mkdir()
    shutil.copy(PARITY / "weights.hdf5", folder / f"elmo_{SMALL}_weights.hdf5")
    shutil.copy(PARITY / "options.json", folder / f"elmo_{SMALL}_options.json")
    nlpl, nlpl_model = nlpl_bilm_tf_dir(local)
    zip_dir(nlpl, root / "20" / "210.zip")
    zip_dir(EFML, root / "11" / "142.zip")
    zip_dir(nlpl, local / "nlpl.zip")
    zip_dir(EFML, local / "efml.zip", prefix="de/")
    references = {
        "parity": BiLM.from_hdf5(PARITY / "weights.hdf5", PARITY / "options.json").eval(),
        "efml": efml.load(EFML).eval(),
        "nlpl": nlpl_model.eval(),
    }
    server = Server(root).start()
    yield server, local, references
    server.stop()


@pytest.fixture
def form_value(served, tmp_path, monkeypatch, request):
    """``(value, reference biLM)`` of the form ``request.param``, with an
    empty cache and the server as both mirrors."""
    server, local, references = served
    monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(hub.MIRROR_ENV, server.url + "/bucket")
    monkeypatch.setenv(families.NLPL_MIRROR_ENV, server.url + "/bucket")
    monkeypatch.delenv(hub.DEADLINE_ENV, raising=False)
    value = FORMS[request.param].format(url=server.url, local=local, parity=PARITY, efml=EFML)
    return value, references[REFERENCE[request.param]]


def expected_layers(reference):
    return reference.embed_sentences([WORDS])[0]


@pytest.mark.parametrize("form_value", list(FORMS), indirect=True)
def test_from_pretrained(form_value):
    value, reference = form_value
    numpy.testing.assert_array_equal(BiLM.from_pretrained(value, progress=False).eval().embed_sentences([WORDS])[0],
                                     expected_layers(reference))


@pytest.mark.parametrize("form_value", list(FORMS), indirect=True)
def test_factory_weights_on_first_use(form_value):
    value, reference = form_value
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": value})
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words=WORDS))
    numpy.testing.assert_array_equal(doc._.elmo.layers, expected_layers(reference))


@pytest.mark.parametrize("form_value", list(FORMS), indirect=True)
def test_initialize_block(form_value):
    value, reference = form_value
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.config["initialize"]["components"]["elmo"] = {"weights": value}
    nlp.initialize()
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words=WORDS))
    numpy.testing.assert_array_equal(doc._.elmo.layers, expected_layers(reference))


@pytest.mark.parametrize("form_value", list(FORMS), indirect=True)
def test_command_line_model(form_value):
    value, reference = form_value
    result = CliRunner().invoke(
        app, ["embed", "--model", value, "--whitespace", "--no-progress"], input=" ".join(WORDS) + "\n"
    )
    assert result.exit_code == 0, result.output
    n_layers, dim = reference.num_layers, reference.output_dim
    assert f"({n_layers}, {len(WORDS)}, {dim})" in result.stdout


def test_one_rule_one_message_at_every_entry_point(tmp_path):
    """Options without weights: the one rule (``hub.locate``) stops every
    entry point with one message, worded for it."""
    from spacy_elmo import add_elmo, load_bilm

    options = str(PARITY / "options.json")
    message = r"options given without weights: options belong to a weights file or URL"
    with pytest.raises(ValueError, match=message):
        BiLM.from_pretrained(None, options)
    with pytest.raises(ValueError, match=message):
        load_bilm(options=options)
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=message):
        nlp.add_pipe("elmo", config={"options": options})
    with pytest.raises(ValueError, match=message):
        add_elmo(nlp, options=options)
    assert nlp.pipe_names == []
    nlp.add_pipe("elmo")
    nlp.config["initialize"]["components"]["elmo"] = {"weights": None, "options": options}
    with pytest.raises(ValueError, match=message):
        nlp.initialize()
    result = CliRunner().invoke(app, ["embed", "--options", options], input="a b\n")
    assert result.exit_code == 2 and "error: --options given without --model: options belong" in result.stderr
    with pytest.raises(ValueError, match="the model name 'small' comes with its options: leave options out"):
        spacy.blank("en").add_pipe("elmo", config={"weights": "small", "options": options})
