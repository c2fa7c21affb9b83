"""The elmo component's nlp.pipe: groups of docs by tokens (buffer_tokens),
outputs independent of spaCy's batch size, docs in order, errors handled."""
import numpy
import pytest
import spacy
from spacy.tokens import DocBin

from spacy_elmo import add_elmo
from spacy_elmo.layers.span_plan import token_buffers
from tests.helpers.models import random_model
from tests.helpers.paths import FIXTURES

BATCH_SIZES = (1, 7, 64, 1000)


def real_texts():
    """Real sentences (the Brown and sentiment samples, 48 texts), in docs
    of three sentences (with sentence boundaries from a sentencizer) and in
    long docs of 16 (without boundaries the span getter reads strided
    128-token windows, several per doc)."""
    vocab = spacy.blank("en").vocab
    sentences = []
    for name in ("brown_train", "sentiment_train"):
        path = FIXTURES / "training_sample" / f"{name}.spacy"
        sentences.extend(doc.text for doc in DocBin().from_disk(path).get_docs(vocab))
    with_sents = [" ".join(sentences[i : i + 3]) for i in range(0, len(sentences), 3)]
    long_docs = [" ".join(sentences[i : i + 16]) for i in range(0, len(sentences), 16)]
    return with_sents, long_docs


def make_nlp(buffer_tokens, sentencizer):
    nlp = spacy.blank("en")
    if sentencizer:
        nlp.add_pipe("sentencizer")
    add_elmo(nlp, bilm=random_model(0), config={"buffer_tokens": buffer_tokens})
    return nlp


@pytest.mark.parametrize("sentencizer", [True, False])
def test_outputs_do_not_depend_on_the_batch_size(sentencizer):
    nlp = make_nlp(300, sentencizer)
    with_sents, long_docs = real_texts()
    texts = with_sents if sentencizer else long_docs + with_sents
    if sentencizer:
        assert any(len(list(doc.sents)) > 1 for doc in nlp.pipe(texts[:5]))
    else:
        assert max(len(nlp.make_doc(t)) for t in texts) > 300  # several windows
    runs = {size: [doc._.elmo.layers for doc in nlp.pipe(texts, batch_size=size)] for size in BATCH_SIZES}
    reference = runs[1]
    assert [layers.shape[1] for layers in reference] == [len(nlp.make_doc(t)) for t in texts]
    for size in BATCH_SIZES[1:]:
        for got, expected in zip(runs[size], reference):
            numpy.testing.assert_array_equal(got, expected)  # exactly: the same groups reach the biLM
    # Buffer off: spaCy's batches reach the biLM; other batch compositions
    # move results by the BLAS kernels' rounding only (docs/speed.md).
    off = make_nlp(0, sentencizer)
    for size in BATCH_SIZES:
        for doc, expected in zip(off.pipe(texts, batch_size=size), reference):
            numpy.testing.assert_allclose(doc._.elmo.layers, expected, atol=2e-5, rtol=0)
    singles = [nlp(text)._.elmo.layers for text in texts[:4]]
    for got, expected in zip(singles, reference):
        numpy.testing.assert_allclose(got, expected, atol=2e-5, rtol=0)


def test_token_buffers_keep_order_and_bound_the_groups():
    nlp = spacy.blank("en")
    docs = [nlp.make_doc(" ".join(["w"] * n)) for n in (3, 5, 40, 1, 1, 2, 100, 7)]
    groups = list(token_buffers(docs, 10))
    assert [d for g in groups for d in g] == docs
    assert [[len(d) for d in g] for g in groups] == [[3, 5, 40], [1, 1, 2, 100], [7]]
    with pytest.raises(ValueError, match="max_tokens"):
        list(token_buffers(docs, 0))


def test_buffer_tokens_is_checked():
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="buffer_tokens"):
        nlp.add_pipe("elmo", config={"buffer_tokens": -1})


def test_pipe_errors_go_to_the_error_handler():
    nlp = make_nlp(50, False)
    seen = []
    component = nlp.get_pipe("elmo")
    component.set_error_handler(lambda name, proc, docs, e: seen.append((name, len(docs), type(e).__name__)))
    component.model.attrs["span_getter"] = lambda docs: []  # a broken span getter
    docs = list(nlp.pipe(["one two three"] * 30, batch_size=4))
    assert docs == [] and seen and all(name == "elmo" and err == "ValueError" for name, _, err in seen)


def test_one_failing_doc_loses_only_itself():
    """A Doc that makes the biLM fail, among 120 good ones in groups of about
    400 tokens: the handler sees that Doc alone, every good Doc comes out in
    order with its vectors (those of its group re-run one by one agree with
    a clean run to float32 rounding)."""
    texts = [f"the river bank number {i} was flooded by the rain ." for i in range(120)]
    bad = 57
    texts[bad] = "this doc breaks the model"
    clean = make_nlp(400, False)
    expected = {doc.text: doc._.elmo.layers for doc in clean.pipe([t for i, t in enumerate(texts) if i != bad])}

    nlp = make_nlp(400, False)
    component = nlp.get_pipe("elmo")
    real_predict = component.predict

    def predict(docs):
        if any(doc.text == texts[bad] for doc in docs):
            raise ValueError("a doc the model cannot read")
        return real_predict(docs)

    component.predict = predict
    seen = []
    component.set_error_handler(lambda name, proc, docs, e: seen.append(([d.text for d in docs], str(e))))
    docs = list(nlp.pipe(texts, batch_size=16))
    assert seen == [([texts[bad]], "a doc the model cannot read")]
    assert [doc.text for doc in docs] == [t for i, t in enumerate(texts) if i != bad]
    for doc in docs:
        assert doc.has_vector
        numpy.testing.assert_allclose(doc._.elmo.layers, expected[doc.text], rtol=0, atol=2e-5)


def test_without_a_handler_the_group_error_is_raised():
    nlp = make_nlp(400, False)
    component = nlp.get_pipe("elmo")
    component.model.attrs["span_getter"] = lambda docs: []
    with pytest.raises(ValueError, match="span getter returned 0 span lists"):
        list(nlp.pipe(["one two three"] * 30))
