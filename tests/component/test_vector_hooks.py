"""ELMo behind token/span/doc ``.vector`` and ``.similarity`` (spaCy user hooks)."""
import pickle
import re

import numpy
import pytest
import spacy
from spacy.tokens import Doc, DocBin

from spacy_elmo.component import vector_hooks
from tests.helpers.paths import EXAMPLES, REPO

BANK = EXAMPLES / "bank.txt"


@pytest.fixture(scope="module")
def nlp():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo")  # the shipped English biLM
    return nlp


@pytest.fixture(scope="module")
def bank_docs(nlp):
    return list(nlp.pipe(BANK.read_text(encoding="utf-8").splitlines()))


def _cosine(a, b):
    return float(numpy.dot(a, b) / (numpy.linalg.norm(a) * numpy.linalg.norm(b)))


def test_vectors_come_from_doc_elmo(nlp):
    doc = nlp("The boat drifted toward the muddy bank of the river.")
    vectors = doc._.elmo.vectors
    assert doc[6].has_vector and doc[2:5].has_vector and doc.has_vector
    numpy.testing.assert_allclose(doc[6].vector, vectors[6], rtol=1e-6)
    numpy.testing.assert_allclose(doc[2:5].vector, vectors[2:5].mean(axis=0), rtol=1e-5)
    numpy.testing.assert_allclose(doc.vector, vectors.mean(axis=0), rtol=1e-5)
    assert doc[6].vector_norm == pytest.approx(float(numpy.linalg.norm(vectors[6])), rel=1e-5)
    other = nlp("He borrowed money from the bank to buy a house.")
    assert doc[6].similarity(other[5]) == pytest.approx(_cosine(vectors[6], other._.elmo.vectors[5]), rel=1e-5)
    assert doc.similarity(other) == pytest.approx(_cosine(doc.vector, other.vector), rel=1e-5)
    assert doc[2:5].similarity(other[0:3]) == pytest.approx(_cosine(doc[2:5].vector, other[0:3].vector), rel=1e-5)
    # Contextual: the same word in two sentences gets two vectors.
    assert doc[6].similarity(other[5]) < 0.999


def test_bank_senses(bank_docs):
    """examples/bank.txt: lines 1-8 a river bank, 9-16 a money bank. With the
    shipped model, uses of the same sense are more alike than across senses."""
    banks = [next(t for t in doc if t.lower_ == "bank") for doc in bank_docs]
    assert len(banks) == 16
    sim = numpy.array([[a.similarity(b) for b in banks] for a in banks])
    off_diagonal = ~numpy.eye(8, dtype=bool)
    river = sim[:8, :8][off_diagonal].mean()
    money = sim[8:, 8:][off_diagonal].mean()
    cross = sim[:8, 8:].mean()
    assert river > cross and money > cross, (river, money, cross)
    # Two river banks against a river bank and a money bank.
    assert banks[5].similarity(banks[6]) > banks[5].similarity(banks[8])


def test_the_default_vector_is_the_top_layer_and_tells_senses_apart(bank_docs):
    """mix = None: .vector is the top layer, not the mean of all layers (whose
    context-free layer 0 is the same for every use of "bank"). On
    examples/bank.txt the gap between uses of one sense and uses across
    senses is larger with it than with the mean of the layers."""
    banks = [(doc, next(t.i for t in doc if t.lower_ == "bank")) for doc in bank_docs]
    for doc, i in banks:
        numpy.testing.assert_array_equal(doc[i].vector, doc._.elmo.layers[-1, i])

    def gap(vectors):
        sim = numpy.array([[_cosine(a, b) for b in vectors] for a in vectors])
        off_diagonal = ~numpy.eye(8, dtype=bool)
        within = (sim[:8, :8][off_diagonal].mean() + sim[8:, 8:][off_diagonal].mean()) / 2
        return within - sim[:8, 8:].mean()

    default = gap([doc[i].vector for doc, i in banks])
    mean_of_layers = gap([doc._.elmo.layers[:, i].mean(axis=0) for doc, i in banks])
    assert default > 2 * mean_of_layers, (default, mean_of_layers)


def test_docbin_and_bytes_round_trips_then_install(nlp, bank_docs):
    docs = bank_docs[:3]
    docbin = DocBin(store_user_data=True, docs=docs)
    loaded = list(DocBin().from_bytes(docbin.to_bytes()).get_docs(nlp.vocab))
    from_bytes = Doc(nlp.vocab).from_bytes(docs[0].to_bytes())
    # spaCy serializes no hooks: _.elmo survives, the vectors need install().
    assert not loaded[0][0].has_vector and not from_bytes.has_vector
    vector_hooks.install(loaded)
    vector_hooks.install(from_bytes)
    for before, after in zip(docs, loaded):
        numpy.testing.assert_array_equal(before.vector, after.vector)
        assert before[1].similarity(before[3]) == after[1].similarity(after[3])
    numpy.testing.assert_array_equal(from_bytes[2].vector, docs[0][2].vector)
    # Pickle keeps the hooks (module-level functions).
    unpickled = pickle.loads(pickle.dumps(docs[1]))
    numpy.testing.assert_array_equal(unpickled[4].vector, docs[1][4].vector)


def test_saved_pipeline_installs_hooks(nlp, tmp_path):
    text = "They pulled the canoe up on the bank."
    nlp.to_disk(tmp_path / "nlp")
    loaded = spacy.load(tmp_path / "nlp")
    assert loaded.get_pipe("elmo").vector_hooks
    numpy.testing.assert_allclose(loaded(text)[7].vector, nlp(text)[7].vector, atol=1e-5)


def test_switched_off_and_cleaned():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"vector_hooks": False})
    doc = nlp("a river bank")
    assert doc._.elmo is not None
    assert not doc[2].has_vector and doc[2].vector.size == 0 and not doc.user_token_hooks
    vector_hooks.install(doc)
    assert doc[2].has_vector and doc[2].vector.shape == (doc._.elmo.vectors.shape[1],)
    # Hooks on a Doc whose _.elmo was removed (doc_cleaner): no vector, as
    # spaCy without vectors.
    doc._.elmo = None
    assert not doc.has_vector and doc[0].vector.size == 0 and doc[0].similarity(doc[1]) == 0.0
    vector_hooks.uninstall(doc)
    assert not doc.user_hooks and not doc.user_span_hooks and not doc.user_token_hooks


def test_store_vectors_float16(nlp):
    nlp16 = spacy.blank("en")
    nlp16.add_pipe("elmo", config={"store": "vectors", "dtype": "float16"})
    text = "The bank raised its rates."
    doc16, doc32 = nlp16(text), nlp(text)
    assert doc16[1].vector.dtype == numpy.float32
    numpy.testing.assert_allclose(doc16[1].vector, doc32[1].vector, rtol=2e-3, atol=2e-3)


def test_empty_docs_and_spans_follow_spacy(nlp):
    """spaCy's conventions: an empty Doc or Span has no vector, and its
    similarity is 0.0 with the warning W008."""
    empty, doc = nlp(""), nlp("a river bank")
    assert empty._.elmo is not None and len(empty) == 0
    assert not empty.has_vector and not doc[1:1].has_vector
    assert doc.has_vector and doc[1:2].has_vector
    for a, b in ((empty, doc), (doc, empty), (doc[1:1], doc), (doc[2], doc[1:1]), (empty, empty)):
        with pytest.warns(UserWarning, match="W008"):
            assert a.similarity(b) == 0.0


def test_the_readme_usage_prints_what_it_says(capsys):
    """The README's usage snippet, run as it is, prints the figures its
    comment gives."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    usage = next(block for block in blocks if 'nlp.add_pipe("elmo")' in block and ".similarity(" in block)
    printed = re.search(r"^print\(.*\)\s+# ([\d.]+) ([\d.]+):", usage, flags=re.M)
    assert printed, "the usage snippet prints no similarity with its figures in a comment"
    exec(compile(usage, "README.md", "exec"), {})
    assert capsys.readouterr().out.split() == [printed.group(1), printed.group(2)]


def _small_nlp(seed=0, **config):
    from spacy_elmo import add_elmo
    from tests.helpers.models import random_model

    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(seed), config=config)
    return nlp


def test_a_doc_read_back_without_hooks_compares_by_its_elmo_vectors():
    """A Doc from a DocBin has Doc._.elmo and no hooks: a hooked Doc compares
    with it by its ELMo vectors (the same Doc read back: 1.0, as the other
    way round), not by its static (empty) vector."""
    nlp = _small_nlp()
    doc, other = nlp("the river bank"), nlp("a money bank")
    docbin = DocBin(store_user_data=True, docs=[doc, other])
    back, other_back = DocBin().from_bytes(docbin.to_bytes()).get_docs(nlp.vocab)
    assert not back.user_hooks and back._.elmo is not None
    assert doc.similarity(back) == pytest.approx(1.0, abs=1e-6)
    assert back.similarity(doc) == pytest.approx(1.0)
    expected = _cosine(doc._.elmo.vectors[2], other._.elmo.vectors[2])
    assert doc[2].similarity(other_back[2]) == pytest.approx(expected, rel=1e-6) and expected < 1 - 1e-5
    assert doc[0:2].similarity(other_back) == pytest.approx(doc[0:2].similarity(other), abs=1e-7)


def test_vectors_of_two_biLMs_or_mixes_are_not_compared():
    """Two biLMs of one width (random weights, seeds 0 and 1), or one biLM
    with two mixes: a clear error, not a number. The same biLM in two
    pipelines, and a Doc read back from a DocBin, compare."""
    first, second = _small_nlp(0), _small_nlp(1)
    a, b = first("the river bank"), second("the river bank")
    assert a.vector.shape == b.vector.shape
    with pytest.raises(ValueError, match="different biLMs or layer mixes"):
        a[2].similarity(b[2])
    with pytest.raises(ValueError, match="different biLMs or layer mixes"):
        a.similarity(_small_nlp(0, mix=[0.0, 1.0, 0.0])("the river bank"))
    same = _small_nlp(0)("a money bank")
    assert a[2].similarity(same[2]) == pytest.approx(_cosine(a[2].vector, same[2].vector), rel=1e-5)
    back = next(DocBin(store_user_data=True, docs=[b]).get_docs(second.vocab))
    assert back._.elmo.space == b._.elmo.space != a._.elmo.space
    with pytest.raises(ValueError, match="different biLMs or layer mixes"):
        a.similarity(back)


def test_a_lexeme_or_a_static_vector_is_refused_clearly():
    """A Lexeme has no context, so no ELMo vector; a Doc of a pipeline without
    ELMo carries the vocabulary's static vectors: each named, not spaCy's
    E010 from inside the hook nor a silent 0.0."""
    nlp = _small_nlp()
    doc = nlp("the river bank")
    with pytest.raises(ValueError, match=r"Lexeme.*has none.*nlp\('bank'\)\[0\]"):
        doc[2].similarity(nlp.vocab["bank"])
    static = spacy.blank("en")
    static.vocab.set_vector("bank", numpy.ones(16, dtype="f"))
    with pytest.raises(ValueError, match="not an ELMo vector"):
        doc[2].similarity(static("bank")[0])
    plain = spacy.blank("en")("bank")  # no vectors at all: spaCy's W008 and 0.0
    with pytest.warns(UserWarning, match="W008"):
        assert doc[2].similarity(plain[0]) == 0.0
