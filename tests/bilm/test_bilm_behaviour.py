"""Determinism, export round trips, odd input, any options shape."""
import numpy
import pytest
import torch

from spacy_elmo import BiLM
from tests.helpers.models import random_model

SENTENCES = [
    ["The", "bank", "of", "the", "river", "."],
    ["Hi", "!"],
    ["a"] * 17,
    ["Ünïcødé", "🙂", "\u200b", "x" * 60, "東京", "\x07"],
]


def test_same_vectors_alone_and_in_any_batch(parity_paths):
    model = BiLM.from_hdf5(*parity_paths).eval()
    alone = [model.embed_sentences([s])[0] for s in SENTENCES]
    batched = model.embed_sentences(SENTENCES)
    shuffled = model.embed_sentences(SENTENCES[::-1] + [["filler"] * 40])[: len(SENTENCES)][::-1]
    for bs in (1, 2, 3):
        by_size = model.embed_sentences(SENTENCES, batch_size=bs)
        for a, b in zip(alone, by_size):
            numpy.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    for a, b, c in zip(alone, batched, shuffled):
        numpy.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
        numpy.testing.assert_allclose(a, c, atol=1e-5, rtol=0)
    # Earlier calls leave no trace.
    again = model.embed_sentences(SENTENCES[:1])[0]
    numpy.testing.assert_array_equal(again, alone[0])


def test_padding_in_forward_does_not_change_results(parity_paths):
    from spacy_elmo.bilm.chars import batch_to_char_ids

    model = BiLM.from_hdf5(*parity_paths).eval()
    ids, lengths = batch_to_char_ids(SENTENCES[:2])
    padded = numpy.zeros((2, ids.shape[1] + 5, 50), dtype=ids.dtype)
    padded[:, : ids.shape[1]] = ids
    with torch.no_grad():
        a = model(torch.from_numpy(ids))
        b = model(torch.from_numpy(padded))
    for la, lb in zip(a.layers, b.layers):
        assert lb.shape[1] == padded.shape[1]
        numpy.testing.assert_allclose(la.numpy(), lb[:, : ids.shape[1]].numpy(), atol=1e-5, rtol=0)
        assert (lb[:, ids.shape[1]:] == 0).all()


def test_stateful_mode_carries_state_and_resets():
    model = random_model()
    model.stateful = True
    first = model.embed_sentences(SENTENCES[:2])
    second = model.embed_sentences(SENTENCES[:2])
    assert numpy.abs(first[0][1] - second[0][1]).max() > 1e-3
    numpy.testing.assert_array_equal(first[0][0], second[0][0])  # layer 0 is context-free
    model.reset_states()
    numpy.testing.assert_allclose(model.embed_sentences(SENTENCES[:2])[0], first[0], atol=1e-6)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"char_cnn.activation": "tanh"},
        {"char_cnn.n_highway": 0},
        {"char_cnn.n_highway": 3, "lstm.n_layers": 3},
        {"lstm.n_layers": 1},
        {"char_cnn.filters": [[2, 5], [4, 3]], "lstm.projection_dim": 8},  # width == projection: no CNN_proj
        {"lstm.cell_clip": None, "lstm.proj_clip": None},
        {"lstm.use_skip_connections": False},
    ],
)
def test_export_then_import_is_exact(tmp_path, changes):
    model = random_model(**changes)
    model.to_hdf5(tmp_path / "w.hdf5", tmp_path / "o.json")
    loaded = BiLM.from_hdf5(tmp_path / "w.hdf5", tmp_path / "o.json").eval()
    assert loaded.options.to_dict() == model.options.to_dict()
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    for a, b in zip(model.embed_sentences(SENTENCES), loaded.embed_sentences(SENTENCES)):
        numpy.testing.assert_array_equal(a, b)
    assert loaded.num_layers == model.options.n_layers + 1


def test_reexported_fixture_has_identical_datasets(tmp_path, parity_paths):
    import h5py

    model = BiLM.from_hdf5(*parity_paths)
    model.to_hdf5(tmp_path / "w.hdf5", tmp_path / "o.json")
    with h5py.File(parity_paths[0], "r") as a, h5py.File(tmp_path / "w.hdf5", "r") as b:
        names = []
        a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        assert names
        for name in names:
            numpy.testing.assert_array_equal(a[name][...], b[name][...], err_msg=name)


def test_without_skip_connections_no_residual_is_added(parity_paths, tmp_path):
    import json

    options = json.loads(parity_paths[1].read_text())
    options["lstm"]["use_skip_connections"] = False
    (tmp_path / "o.json").write_text(json.dumps(options))
    skip = BiLM.from_hdf5(*parity_paths).eval()
    plain = BiLM.from_hdf5(parity_paths[0], tmp_path / "o.json").eval()
    (a,) = skip.embed_sentences(SENTENCES[:1])
    (b,) = plain.embed_sentences(SENTENCES[:1])
    numpy.testing.assert_allclose(b[:2], a[:2], atol=1e-6)
    numpy.testing.assert_allclose(b[2], a[2] - a[1], atol=1e-5)


def test_empty_input():
    model = random_model()
    assert model.embed_sentences([]) == []
    out = model.embed_sentences([[], ["a"], []])
    assert [o.shape for o in out] == [(3, 0, 16), (3, 1, 16), (3, 0, 16)]
    assert all(o.dtype == numpy.float32 for o in out)


def test_long_sentence_and_odd_tokens():
    model = random_model()
    long = [f"w{i % 97}" for i in range(3000)]
    out = model.embed_sentences([long, SENTENCES[3]])
    assert out[0].shape == (3, 3000, 16) and numpy.isfinite(out[0]).all()
    assert out[1].shape == (3, 6, 16) and numpy.isfinite(out[1]).all()


def test_bad_batch_size():
    with pytest.raises(ValueError, match="batch_size"):
        random_model().embed_sentences([["a"]], batch_size=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.gpu
def test_cuda_matches_cpu(parity_paths):
    cpu = BiLM.from_hdf5(*parity_paths).eval()
    gpu = BiLM.from_hdf5(*parity_paths).eval().cuda()
    for a, b in zip(cpu.embed_sentences(SENTENCES), gpu.embed_sentences(SENTENCES)):
        numpy.testing.assert_allclose(a, b, atol=1e-4)
