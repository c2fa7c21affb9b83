"""Outputs against the reference implementation's fixtures."""
import numpy
import pytest
import torch

from spacy_elmo import BiLM
from spacy_elmo.bilm.chars import batch_to_char_ids

ATOL = 1e-4


@pytest.fixture(scope="module")
def parity_model(parity_paths):
    return BiLM.from_hdf5(*parity_paths).eval()


@pytest.fixture(params=["plain", "packed"])
def recurrence(request):
    """A function that sets a model to run the plain recurrence (what these
    small fixture models use by default) or the packed-weight CPU
    recurrence that the published shapes use (its sigmoid-only cell
    included), and returns the model."""
    packed = request.param == "packed"
    if packed:
        from spacy_elmo.bilm.fast import packing_supported

        if not packing_supported():
            pytest.skip("this PyTorch build cannot pack weights with oneDNN")

    def use(model):
        model.engine.packed_weights = packed
        path = model.engine.path(model.layers[0], torch.zeros(2, 1, 1, 1), [1])
        assert path == request.param, path
        return model

    return use


def test_every_layer_of_the_batch(parity_model, parity_sentences, parity_reference, recurrence):
    ids, _ = batch_to_char_ids(parity_sentences)
    with torch.no_grad():
        out = recurrence(parity_model)(torch.from_numpy(ids))
    mask = parity_reference["mask"]
    numpy.testing.assert_array_equal(out.mask.numpy(), mask)
    assert len(out.layers) == 3
    for j, layer in enumerate(out.layers):
        numpy.testing.assert_allclose(layer.numpy()[mask], parity_reference[f"layer{j}"][mask], atol=ATOL, rtol=0)


def test_each_sentence_alone(parity_model, parity_sentences, parity_reference, recurrence):
    recurrence(parity_model)
    for i, sentence in enumerate(parity_sentences):
        (layers,) = parity_model.embed_sentences([sentence])
        assert layers.shape == (3, len(sentence), 48) and layers.dtype == numpy.float32
        for j in range(3):
            expected = parity_reference[f"single{i}_layer{j}"][0, 1:-1]
            numpy.testing.assert_allclose(layers[j], expected, atol=ATOL, rtol=0)


def test_layer0_is_token_encoding_duplicated(parity_model, parity_sentences):
    for layers in parity_model.embed_sentences(parity_sentences):
        numpy.testing.assert_array_equal(layers[0, :, :24], layers[0, :, 24:])


def test_allennlp_first_batch_from_zero_state(allennlp_paths, allennlp_batches, recurrence):
    model = recurrence(BiLM.from_hdf5(*allennlp_paths).eval())
    sentences, expected = allennlp_batches[0]
    for got, want in zip(model.embed_sentences(sentences, batch_size=3), expected):
        numpy.testing.assert_allclose(got[2], want, atol=ATOL, rtol=0)


def test_allennlp_later_batches_need_the_carried_state(allennlp_paths, allennlp_batches):
    model = BiLM.from_hdf5(*allennlp_paths).eval()
    sentences, expected = allennlp_batches[1]
    got = model.embed_sentences(sentences, batch_size=3)
    assert numpy.abs(got[0][2] - expected[0]).max() > 0.1


def test_allennlp_all_batches_with_stateful_replay(allennlp_paths, allennlp_batches, recurrence):
    model = recurrence(BiLM.from_hdf5(*allennlp_paths, stateful=True).eval())
    for sentences, expected in allennlp_batches:
        for got, want in zip(model.embed_sentences(sentences, batch_size=3), expected):
            numpy.testing.assert_allclose(got[2], want, atol=ATOL, rtol=0)
    # After a reset, the first batch is reproduced again.
    model.reset_states()
    sentences, expected = allennlp_batches[0]
    numpy.testing.assert_allclose(model.embed_sentences(sentences)[0][2], expected[0], atol=ATOL, rtol=0)
