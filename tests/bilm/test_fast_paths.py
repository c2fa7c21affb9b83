"""The speed shortcuts are exact (or, for bf16, close) and safe."""
import numpy
import pytest
import torch
from torch.nn import functional as F

from spacy_elmo.bilm.chars import batch_to_char_ids
from tests.helpers.models import random_model

SENTENCES = [
    ["The", "bank", "of", "the", "river", "."],
    ["a"] * 9 + ["x" * 47, "y" * 48, "z" * 49, "w" * 70],
    ["Ünïcødé", "🙂", "\u200b", "東京", "\x07", ""],
]


def plain_encoder(enc, char_ids):
    """The textbook computation: Conv1d over all 50 chars, no shortcuts."""
    flat = char_ids.reshape(-1, char_ids.shape[-1])
    chars = enc.char_embedding(flat).transpose(1, 2)
    pooled = [F.conv1d(chars, conv.weight, conv.bias).amax(-1) for conv in enc.convs]
    x = enc.activation(torch.cat(pooled, -1))
    for hw in enc.highways:
        t, c = (
            x @ hw.linear.weight[: x.shape[1]].T + hw.linear.bias[: x.shape[1]],
            x @ hw.linear.weight[x.shape[1] :].T + hw.linear.bias[x.shape[1] :],
        )
        gate = torch.sigmoid(c)
        x = gate * torch.relu(t) + (1 - gate) * x
    if enc.projection is not None:
        x = enc.projection(x)
    return x.reshape(*char_ids.shape[:-1], -1)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_truncated_unfolded_encoder_equals_plain_convolution(activation):
    model = random_model(**{"char_cnn.activation": activation, "char_cnn.filters": [[1, 4], [3, 8], [7, 8]]})
    tokens = ["é" * (n // 2) + "q" * (n % 2) for n in range(0, 60)] + ["a" * n for n in range(60)]
    ids, _ = batch_to_char_ids([tokens])
    ids = torch.from_numpy(ids)
    model.token_encoder.chunk_size = 7  # many chunks of different widths
    with torch.no_grad():
        numpy.testing.assert_allclose(
            model.token_encoder(ids).numpy(), plain_encoder(model.token_encoder, ids).numpy(), atol=1e-5, rtol=0
        )


def test_autograd_and_inplace_recurrences_agree():
    model = random_model()
    ids, _ = batch_to_char_ids(SENTENCES)
    ids = torch.from_numpy(ids)
    with torch.no_grad():
        fast = model(ids).layers
    slow = model(ids).layers  # grad enabled: the differentiable path
    assert slow[-1].requires_grad
    for a, b in zip(fast, slow):
        numpy.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=1e-5, rtol=0)


def test_gradients_flow_to_every_parameter():
    model = random_model().train()
    ids, _ = batch_to_char_ids(SENTENCES)
    out = model(torch.from_numpy(ids))
    sum(layer.pow(2).sum() for layer in out.layers).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_token_cache_is_used_and_exact():
    model = random_model()
    first = model.embed_sentences(SENTENCES)
    assert len(model.token_cache) > 0 and model.token_cache.misses > 0
    hits = model.token_cache.hits
    second = model.embed_sentences(SENTENCES)
    assert model.token_cache.hits > hits
    for a, b in zip(first, second):
        numpy.testing.assert_array_equal(a, b)
    model.token_cache.max_size = 0
    for a, b in zip(first, model.embed_sentences(SENTENCES)):
        numpy.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def test_token_cache_empties_when_weights_change():
    model = random_model()
    before = model.embed_sentences(SENTENCES[:1])[0]
    with torch.no_grad():
        model.token_encoder.projection.bias.add_(1.0)  # an optimizer step does the same
    after = model.embed_sentences(SENTENCES[:1])[0]
    fresh = random_model()
    with torch.no_grad():
        fresh.token_encoder.projection.bias.add_(1.0)
    numpy.testing.assert_allclose(after, fresh.embed_sentences(SENTENCES[:1])[0], atol=1e-6)
    assert numpy.abs(after[0] - before[0]).max() > 0.5


def test_token_cache_is_bounded_and_unused_in_training():
    model = random_model()
    model.token_cache.max_size = 5
    model.embed_sentences([[f"w{i}" for i in range(40)]])
    assert len(model.token_cache) == 5
    model.token_cache.clear()
    model.train()
    ids, _ = batch_to_char_ids(SENTENCES)
    model(torch.from_numpy(ids))
    assert len(model.token_cache) == 0


def test_bf16_fast_path_is_close_and_opt_in():
    model = random_model()
    exact = model.embed_sentences(SENTENCES)
    model.precision = "bf16"
    approx = model.embed_sentences(SENTENCES)
    diff = max(float(numpy.abs(a - b).max()) for a, b in zip(exact, approx))
    assert 0 < diff < 0.1
    model.precision = "fp32"
    for a, b in zip(exact, model.embed_sentences(SENTENCES)):
        numpy.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="precision must be one of"):
        model.precision = "int4"


def test_fused_kernel_for_unclipped_models_equals_our_recurrence():
    model = random_model(**{"lstm.cell_clip": None, "lstm.proj_clip": None})
    ids, _ = batch_to_char_ids(SENTENCES)
    ids = torch.from_numpy(ids)
    x = torch.zeros(2, 1, 1, 4)
    with torch.no_grad():
        assert model.engine.path(model.layers[0], x, [3, 2]) == "fused"
        fused = model(ids).layers
        model.engine.fused_kernel = False
        assert model.engine.path(model.layers[0], x, [3, 2]) == "plain"
        ours = model(ids).layers
    for a, b in zip(fused, ours):
        numpy.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, rtol=0)
    # Clipped models (all published ones) never take it.
    clipped = random_model()
    assert clipped.engine.path(clipped.layers[0], x, [3, 2]) != "fused"


def test_packed_weights_equal_plain_products():
    from spacy_elmo.bilm.fast import packing_supported

    # The x86 CPU wheels of PyTorch have oneDNN: the fast path must be on there.
    assert packing_supported() == torch.backends.mkldnn.is_available()
    model = random_model()
    model.engine.packed_weights = True  # the test model's weights are below the rule's size
    ids = torch.from_numpy(batch_to_char_ids(SENTENCES)[0])
    x = torch.zeros(2, 1, 1, 4)
    with torch.no_grad():
        assert model.engine.path(model.layers[0], x, [1]) == "packed"
        assert not model.engine.packs_weights(model.layers[0], x.double())
        packed = model(ids).layers
        model.engine.packed_weights = False
        assert model.engine.path(model.layers[0], x, [1]) == "plain"
        plain = model(ids).layers
    for a, b in zip(packed, plain):
        numpy.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, rtol=0)


def test_first_layer_input_products_per_type_equal_per_position():
    model = _default_init_model(packed_weights=True)
    # Repeated words in one batch, at different positions and lengths.
    sentences = SENTENCES + [["the", "bank", "the", "bank", "."], ["bank", "."], ["."]]
    ids = torch.from_numpy(batch_to_char_ids(sentences)[0])
    with torch.no_grad():
        encoded, inverse, keys = model._encode_types(ids)
        rev = torch.zeros_like(inverse)
        assert keys is not None
        assert model.engine.first_layer_products(model.parts(), encoded, inverse, rev) is not None
        assert model.engine.first_layer_products(model.parts(), encoded, inverse, rev, keys) is not None
        per_type = model.embed_sentences(sentences)
        model.engine.type_products = False
        assert model.engine.first_layer_products(model.parts(), encoded, inverse, rev) is None
        per_position = model.embed_sentences(sentences)
    for a, b in zip(per_type, per_position):
        numpy.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_type_product_cache_is_opt_in_used_and_exact():
    model = _default_init_model(packed_weights=True)
    cache = model.type_product_cache
    model.embed_sentences(SENTENCES)
    assert cache.max_bytes == 0 and len(cache) == 0 and cache.hits == cache.misses == 0
    cache.max_bytes = 1 << 20
    first = model.embed_sentences(SENTENCES)
    assert len(cache) > 0 and cache.misses == len(cache) and cache.hits == 0
    second = model.embed_sentences(SENTENCES)
    assert cache.hits == len(cache)  # every type of the second call came from the cache
    for a, b in zip(first, second):
        numpy.testing.assert_array_equal(a, b)
    cache.max_bytes = 0
    hits = cache.hits
    for a, b in zip(first, model.embed_sentences(SENTENCES)):
        numpy.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    assert cache.hits == hits and len(cache) == 0


def test_type_product_cache_serves_the_int8_path():
    from spacy_elmo.bilm.fast import int8_supported

    if not int8_supported():
        pytest.skip("this PyTorch build has no fbgemm/x86 quantized kernels")
    model = _default_init_model(packed_weights=True)
    model.precision = "int8"
    uncached = model.embed_sentences(SENTENCES)
    model.type_product_cache.max_bytes = 1 << 20
    first = model.embed_sentences(SENTENCES)
    second = model.embed_sentences(SENTENCES)
    assert model.type_product_cache.hits > 0
    for a, b, c in zip(uncached, first, second):
        numpy.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
        numpy.testing.assert_array_equal(b, c)


def test_type_product_cache_evicts_least_recently_used_types():
    model = _default_init_model(packed_weights=True)
    reference = _default_init_model(packed_weights=True)
    reference.type_product_cache.max_bytes = 0
    cache = model.type_product_cache
    cache.max_bytes = 6 * 2 * 4 * model.layers[0].cell_dim * 4  # six types (<S> and </S> among them)
    calls = [
        [["a", "b"]],  # four types: rows 0-3
        [["c", "a"]],  # c into row 4; a and the boundaries from the cache
        [["a", "b", "c", "d"]],  # d into row 5: full
        [["e", "f", "a", "g"]],  # evicts b, c and d, the least recently used
        [["b", "a", "c", "d"]],  # evicts e, f and g
        [[f"w{i}" for i in range(9)]],  # more types than the cache holds: computed without it
        [["d", "c", "b", "a"], ["a", "b"]],
    ]
    for sentences in calls:
        got = model.embed_sentences(sentences)
        assert len(cache) <= 6
        for a, b in zip(got, reference.embed_sentences(sentences)):
            numpy.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    assert cache.hits > 0 and cache.misses > 6


def test_type_product_cache_empties_when_weights_change():
    import copy
    import pickle

    model = _default_init_model(packed_weights=True)
    model.type_product_cache.max_bytes = 1 << 20
    model.embed_sentences(SENTENCES[:1])
    assert len(model.type_product_cache) > 0
    assert len(copy.deepcopy(model).type_product_cache) == 0
    assert len(pickle.loads(pickle.dumps(model)).type_product_cache) == 0
    with torch.no_grad():
        model.layers[0].bias.add_(0.5)  # an optimizer step does the same
    after = model.embed_sentences(SENTENCES[:1])[0]
    fresh = _default_init_model(packed_weights=True)
    with torch.no_grad():
        fresh.layers[0].bias.add_(0.5)
    numpy.testing.assert_allclose(after, fresh.embed_sentences(SENTENCES[:1])[0], atol=1e-6, rtol=0)
    model.clear_caches()
    assert len(model.type_product_cache) == 0 and len(model.token_cache) == 0


def _relative_rms(exact, approx):
    num = sum(float(((a.astype("d") - b) ** 2).sum()) for a, b in zip(exact, approx))
    return (num / sum(float((a.astype("d") ** 2).sum()) for a in exact)) ** 0.5


def _default_init_model(seed=0, packed_weights=None):
    """The test model at PyTorch's default init; ``packed_weights=True`` packs
    its (small) weights as the published shapes' are."""
    from spacy_elmo import BiLM
    from tests.helpers.models import small_options

    torch.manual_seed(seed)
    model = BiLM(small_options()).eval()
    model.engine.packed_weights = packed_weights
    return model


def test_int8_fast_path_is_close_and_opt_in():
    from spacy_elmo.bilm.fast import int8_supported

    if not int8_supported():
        pytest.skip("this PyTorch build has no fbgemm/x86 quantized kernels")
    model = _default_init_model()
    sentences = SENTENCES + [["a", "much", "longer", "sentence", "with", "more", "words", "in", "it", "."]]
    exact = model.embed_sentences(sentences)
    model.precision = "int8"
    approx = model.embed_sentences(sentences)
    assert [a.shape for a in approx] == [a.shape for a in exact]
    assert 0 < _relative_rms(exact, approx) < 0.05
    # Same outputs alone and in a batch (no cross-row effects in int8 either).
    alone = model.embed_sentences(sentences[:1])[0]
    numpy.testing.assert_allclose(alone, approx[0], atol=1e-6)
    model.precision = "fp32"
    for a, b in zip(exact, model.embed_sentences(sentences)):
        numpy.testing.assert_array_equal(a, b)


def test_packing_follows_a_static_rule_and_the_engine_switch():
    """Published shapes' weights (the small one's 2^19 elements and up) are
    packed, the test models' are not, unless the engine says otherwise;
    training never packs (autograd runs the exact model)."""
    from spacy_elmo.bilm.fast import InferenceEngine
    from spacy_elmo.bilm.lstm import BiProjectedLSTMLayer

    x = torch.zeros(2, 1, 1, 4)
    tiny, small = random_model().layers[0], BiProjectedLSTMLayer(128, 1024, 128)
    supported = torch.backends.mkldnn.is_available()
    engine = InferenceEngine()
    assert not engine.packs_weights(tiny, x)
    assert engine.packs_weights(small, x) == supported
    assert engine.packs_weights(BiProjectedLSTMLayer(256, 2048, 256), x) == supported  # medium
    assert InferenceEngine(packed_weights=True).packs_weights(tiny, x) == supported
    assert not InferenceEngine(packed_weights=False).packs_weights(small, x)
    for precision in ("bf16", "int8"):
        assert not InferenceEngine(precision, packed_weights=True).packs_weights(small, x)
    with pytest.raises(ValueError, match="precision must be one of"):
        InferenceEngine("int4")


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_packed_weights_follow_weight_changes_and_copies(precision):
    """Packed fp32 (oneDNN) and int8 weights are remade when weights change
    and are not shared by copies."""
    import copy
    import pickle

    from spacy_elmo.bilm.fast import int8_supported

    if precision == "int8" and not int8_supported():
        pytest.skip("this PyTorch build has no fbgemm/x86 quantized kernels")
    model, other = _default_init_model(0, packed_weights=True), _default_init_model(1, packed_weights=True)
    model.precision = other.precision = precision
    if precision == "fp32":
        assert (
            model.engine.packs_weights(model.layers[0], torch.zeros(2, 1, 1, 4)) == torch.backends.mkldnn.is_available()
        )
    before = model.embed_sentences(SENTENCES)
    model.load_state_dict(other.state_dict())  # in-place copy into the same tensors
    after = model.embed_sentences(SENTENCES)
    expected = other.embed_sentences(SENTENCES)
    for a, b, c in zip(before, after, expected):
        assert not numpy.allclose(a, b)
        numpy.testing.assert_allclose(b, c, atol=1e-6)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert clone.precision == precision
        for a, b in zip(expected, clone.embed_sentences(SENTENCES)):
            numpy.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_int8_is_cpu_only():
    model = _default_init_model(packed_weights=True).cuda()
    with pytest.raises(ValueError, match="CPU only"):
        model.precision = "int8"
