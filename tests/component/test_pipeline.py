"""The elmo component: Doc._.elmo, reference parity, batching, serialization."""
import numpy
import pytest
import spacy
import torch
from spacy.tokens import Doc, DocBin

from spacy_elmo import ElmoData, add_elmo
from spacy_elmo.layers.span_getters import configure_sent_or_strided_spans, token_sources
from tests.helpers.models import random_model
from tests.helpers.paths import FIXTURES


@pytest.fixture
def nlp():
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    return nlp


def test_parity_fixture_through_the_pipeline(parity_paths, parity_sentences, parity_reference):
    """Initialised from the published format via [initialize.components.elmo]."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    weights, options = parity_paths
    nlp.config["initialize"]["components"]["elmo"] = {"weights": str(weights), "options": str(options)}
    nlp.initialize()
    docs = [Doc(nlp.vocab, words=words) for words in parity_sentences]
    for i, doc in enumerate(nlp.pipe(docs)):
        n = len(doc)
        assert doc._.elmo.layers.shape == (3, n, 48)
        for j in range(3):
            expected = parity_reference[f"single{i}_layer{j}"][0, 1 : n + 1]
            numpy.testing.assert_allclose(doc._.elmo.layers[j], expected, atol=1e-4, rtol=0)


def test_parity_of_the_reference_mix(parity_paths, parity_sentences, parity_reference):
    """A component's mix with the reference's raw weights gives its elmo_mix."""
    from spacy_elmo.layers.scalar_mix import ScalarMix

    nlp = spacy.blank("en")
    add_elmo(nlp, *parity_paths)
    mix = ScalarMix(n_layers=3)
    mix.initialize()
    mix.set_param("weights", numpy.asarray([0.1, 0.5, -0.3], dtype="f"))
    docs = [nlp(Doc(nlp.vocab, words=words)) for words in parity_sentences]
    for i, (doc, mixed) in enumerate(zip(docs, mix.predict([d._.elmo.layers for d in docs]))):
        numpy.testing.assert_allclose(mixed, parity_reference["elmo_mix"][i, : len(doc)], atol=1e-4, rtol=0)


def test_add_elmo_takes_the_weights_from_config(parity_paths):
    """config={"weights": ...} loads those weights (it once loaded the shipped biLM
    silently); the biLM given both as an argument and in config is refused."""
    weights, options = (str(p) for p in parity_paths)
    nlp = spacy.blank("en")
    add_elmo(nlp, config={"weights": weights, "options": options})
    assert nlp("A bank .")._.elmo.layers.shape == (3, 3, 48)
    for args in ((weights, options), ()):
        other = spacy.blank("en")
        kwargs = {} if args else {"bilm": random_model(0)}
        with pytest.raises(ValueError, match="got the biLM twice"):
            add_elmo(other, *args, config={"weights": weights, "options": options}, **kwargs)
        assert other.pipe_names == []


def test_views_and_vectors(nlp):
    doc = nlp("ELMo reads words in context.")
    data = doc._.elmo
    assert isinstance(data, ElmoData) and len(data) == len(doc)
    numpy.testing.assert_array_equal(data.vectors, data.layers[-1])  # mix = None: the top layer
    span = doc[1:4]
    numpy.testing.assert_array_equal(span._.elmo.layers, data.layers[:, 1:4])
    numpy.testing.assert_array_equal(doc[2]._.elmo.vector, data.vectors[2])
    assert doc[2]._.elmo.vectors.shape == (1, 16)


@pytest.mark.parametrize(
    "store,dtype,shape,bytes_per_token",
    [("layers", "float32", (3, 6, 16), 3 * 16 * 4), ("layers", "float16", (3, 6, 16), 3 * 16 * 2),
     ("vectors", "float32", (6, 16), 16 * 4), ("vectors", "float16", (6, 16), 16 * 2)],
)
def test_storage_options(store, dtype, shape, bytes_per_token):
    nlp = spacy.blank("en")
    mix = [0.2, 0.3, 0.5]
    add_elmo(nlp, bilm=random_model(0), config={"store": store, "dtype": dtype, "mix": mix})
    reference = spacy.blank("en")
    add_elmo(reference, bilm=random_model(0))
    doc, full = nlp("ELMo reads words in context."), reference("ELMo reads words in context.")
    data = doc._.elmo
    stored = data.layers if store == "layers" else data.mixed
    assert stored.shape == shape and stored.dtype == numpy.dtype(dtype)
    assert data.nbytes == bytes_per_token * len(doc)
    expected = numpy.tensordot(numpy.asarray(mix, dtype="f"), full._.elmo.layers, axes=1)
    numpy.testing.assert_allclose(data.vectors, expected, atol=2e-3 if dtype == "float16" else 1e-6)


def test_bad_component_settings():
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="store"):
        nlp.add_pipe("elmo", config={"store": "everything"})
    with pytest.raises(ValueError, match="dtype"):
        nlp.add_pipe("elmo", name="e2", config={"dtype": "int8"})


def test_no_weights_gives_a_clear_error(tmp_path, monkeypatch):
    """Without the shipped English model (the default) the error says how to
    give weights and where to get them."""
    from spacy_elmo import hub

    monkeypatch.setattr(hub.names, "SHIPPED_MODEL_DIR", tmp_path / "missing")
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=r"initialize.components.elmo.*'small'"):
        nlp.add_pipe("elmo")
    nlp.add_pipe("elmo", config={"weights": str(FIXTURES / "elmo-parity")})
    with pytest.raises(ValueError, match=r"nlp\.initialize\(\)"):
        nlp.get_pipe("elmo").bilm


def test_to_bytes_docbin_and_disk_roundtrip(nlp, tmp_path):
    doc = nlp("Serialise the vectors, please.")
    restored = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    numpy.testing.assert_array_equal(restored._.elmo.layers, doc._.elmo.layers)
    doc_bin = DocBin(store_user_data=True, docs=[doc])
    (loaded,) = DocBin().from_bytes(doc_bin.to_bytes()).get_docs(nlp.vocab)
    numpy.testing.assert_array_equal(loaded._.elmo.layers, doc._.elmo.layers)

    nlp.to_disk(tmp_path / "pipeline")
    assert (tmp_path / "pipeline" / "elmo" / "model").exists()
    nlp2 = spacy.load(tmp_path / "pipeline")
    numpy.testing.assert_array_equal(nlp2("Serialise the vectors, please.")._.elmo.layers, doc._.elmo.layers)
    nlp4 = spacy.blank("en")
    nlp4.add_pipe("elmo")
    nlp4.from_bytes(nlp.to_bytes())
    numpy.testing.assert_array_equal(nlp4("Serialise the vectors, please.")._.elmo.layers, doc._.elmo.layers)


TEXTS = [
    "A short one.",
    "",
    "   \n\t ",
    "Tokens " + "x" * 60 + " and " + "ü" * 60 + " here.",
    "Emoji 🙂 and Ελληνικά και 中文 and control \x07 chars.",
    "Two sentences here. And the second one is a bit longer than the first.",
]


def test_pipe_batch_sizes_match_single_calls(nlp):
    texts = TEXTS + [" ".join(f"w{i % 97}" for i in range(10_000))]
    singles = [nlp(text)._.elmo.layers for text in texts]
    for batch_size in (1, 64):
        for doc, expected in zip(nlp.pipe(texts, batch_size=batch_size), singles):
            assert doc._.elmo.layers.shape == expected.shape
            numpy.testing.assert_allclose(doc._.elmo.layers, expected, atol=1e-5, rtol=0)
    assert singles[1].shape == (3, 0, 16)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_pipe_with_two_processes(nlp, start_method):
    """The 10k-token doc goes along in the same batches as the odd texts."""
    import multiprocessing

    texts = TEXTS + [" ".join(f"w{i % 97}" for i in range(10_000))]
    singles = [nlp(text)._.elmo.layers for text in texts]
    previous = multiprocessing.get_start_method()
    multiprocessing.set_start_method(start_method, force=True)
    try:
        docs = list(nlp.pipe(texts, batch_size=3, n_process=2))
    finally:
        multiprocessing.set_start_method(previous, force=True)
    assert len(docs) == len(texts)
    for doc, expected in zip(docs, singles):
        assert doc._.elmo.layers.shape == expected.shape
        numpy.testing.assert_allclose(doc._.elmo.layers, expected, atol=1e-5, rtol=0)


def test_long_document_in_windows(nlp):
    words = [f"w{i % 97}" for i in range(10_000)]
    doc = nlp(Doc(nlp.vocab, words=words))
    assert doc._.elmo.layers.shape == (3, 10_000, 16)
    assert numpy.isfinite(doc._.elmo.layers).all()
    # Each token takes the output of its most central window: the same as
    # running that window alone.
    window = Doc(nlp.vocab, words=words[96:224])
    alone = nlp(window)._.elmo.layers
    numpy.testing.assert_allclose(doc._.elmo.layers[:, 160:200], alone[:, 64:104], atol=1e-5, rtol=0)


def test_sentences_are_read_separately():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    add_elmo(nlp, bilm=random_model(0))
    doc = nlp("The first sentence. The second one.")
    second = nlp("The second one.")
    numpy.testing.assert_allclose(doc._.elmo.layers[:, 4:], second._.elmo.layers, atol=1e-5, rtol=0)


def test_most_central_window_rule():
    # Windows [0, 4) and [2, 6) (outputs 0-3 and 4-7): token 2 is one from an
    # edge of the first window and at the edge of the second -> first; token 3
    # is at the edge of the first and one from an edge of the second -> second.
    assert token_sources(6, [(0, 4), (2, 6)]).tolist() == [0, 1, 2, 5, 6, 7]
    # Windows [0, 4) and [1, 5): token 2 is one from an edge in both -> tie ->
    # the earlier window; token 3 -> the second.
    assert token_sources(5, [(0, 4), (1, 5)]).tolist() == [0, 1, 2, 6, 7]
    # A gap between windows gets -1 (zeros).
    assert token_sources(5, [(0, 2), (3, 5)]).tolist() == [0, 1, -1, 2, 3]
    assert token_sources(3, []).tolist() == [-1, -1, -1]
    getter = configure_sent_or_strided_spans(window=4, stride=2)
    doc = Doc(spacy.blank("en").vocab, words=list("abcdefg"))
    assert [(s.start, s.end) for s in getter([doc])[0]] == [(0, 4), (2, 6), (4, 7)]
    with pytest.raises(ValueError, match="stride"):
        configure_sent_or_strided_spans(window=4, stride=5)


def test_bf16_precision_is_a_config_option_and_is_saved(tmp_path):
    nlp = spacy.blank("en")
    with pytest.warns(RuntimeWarning) if not _bf16() else _nothing():
        add_elmo(nlp, bilm=random_model(0), config={"model": {"precision": "bf16"}})
    assert nlp.get_pipe("elmo").bilm.precision == "bf16"
    nlp.to_disk(tmp_path / "p")
    assert spacy.load(tmp_path / "p").get_pipe("elmo").bilm.precision == "bf16"


def _bf16():
    from spacy_elmo.bilm.fast import bf16_supported

    return bf16_supported("cpu")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


def test_doc_cleaner_drops_the_vectors(nlp):
    nlp.add_pipe("doc_cleaner", config={"attrs": {"_.elmo": None}})
    assert nlp("Nothing is kept.")._.elmo is None


def test_int8_precision_in_the_pipeline_is_saved_and_batch_independent(tmp_path):
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0), config={"model": {"precision": "int8"}})
    exact = spacy.blank("en")
    add_elmo(exact, bilm=random_model(0))
    texts = TEXTS + ["A third text, longer than the others, to batch with."]
    singles = [nlp(text)._.elmo.layers for text in texts]
    for doc, single, reference in zip(nlp.pipe(texts, batch_size=64), singles, exact.pipe(texts)):
        numpy.testing.assert_allclose(doc._.elmo.layers, single, atol=1e-6, rtol=0)
        assert doc._.elmo.layers.shape == reference._.elmo.layers.shape
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    assert loaded.get_pipe("elmo").bilm.precision == "int8"
    numpy.testing.assert_allclose(loaded(texts[0])._.elmo.layers, singles[0], atol=1e-6, rtol=0)


def test_every_weights_route_goes_through_load_weights(monkeypatch, parity_paths, parity_sentences):
    """add_elmo, the factory's weights (at initialize and on first use) and
    [initialize.components.elmo] all load through Elmo.load_weights, and
    give the same biLM."""
    from spacy_elmo import BiLM
    from spacy_elmo.component.elmo import Elmo

    real = Elmo.load_weights
    calls = []

    def spy(self, *args, **kwargs):
        calls.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Elmo, "load_weights", spy)
    weights, options = map(str, parity_paths)
    reference = BiLM.from_hdf5(*parity_paths).embed_sentences(parity_sentences[:2])
    pipelines = []
    nlp = spacy.blank("en")
    add_elmo(nlp, weights, options)
    pipelines.append(nlp)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": weights, "options": options})
    nlp("First use loads the factory's weights.")
    pipelines.append(nlp)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": weights, "options": options})
    nlp.initialize()
    pipelines.append(nlp)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.config["initialize"]["components"]["elmo"] = {"weights": weights, "options": options}
    nlp.initialize()
    pipelines.append(nlp)
    assert len(calls) == 4
    expected = BiLM.from_hdf5(*parity_paths).state_dict()
    for nlp in pipelines:
        bilm = nlp.get_pipe("elmo").bilm
        state = bilm.state_dict()
        assert state.keys() == expected.keys()
        for key, value in expected.items():
            assert torch.equal(state[key], value), key
        # Outputs agree to float32 rounding: the component may run at another thread
        # count than this process, and BLAS sums split by thread count (docs/speed.md).
        for a, b in zip(bilm.embed_sentences(parity_sentences[:2]), reference):
            numpy.testing.assert_allclose(a, b, rtol=0, atol=2e-5)
