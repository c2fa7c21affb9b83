"""ELMo listeners: tagger, ner and textcat learn on ELMo, each with its own mix."""
import subprocess
import sys

import numpy
import pytest
import spacy
import torch
from spacy.tokens import DocBin
from spacy.training import Example

from spacy_elmo import add_elmo, mix_weights
from spacy_elmo.layers.scalar_mix import ScalarMix
from tests.helpers.models import CAT_DATA, NER_DATA, TAG_DATA, ner_config, random_model, tagger_config
from tests.helpers.models import train as train_steps
from tests.helpers.paths import CONFIGS


def listener(width=32, **kwargs):
    return {"@architectures": "spacy_elmo.ElmoListener.v1", "width": width, **kwargs}


COMPONENTS = {
    "tagger": (
        tagger_config(listener()),
        TAG_DATA,
        lambda doc: [t.tag_ for t in doc],
    ),
    "ner": (
        ner_config(listener()),
        NER_DATA,
        lambda doc: [(e.start_char, e.end_char, e.label_) for e in doc.ents],
    ),
    "textcat": (
        {
            "model": {
                "@architectures": "spacy.TextCatReduce.v1",
                "exclusive_classes": True,
                "use_reduce_first": False,
                "use_reduce_last": False,
                "use_reduce_max": True,
                "use_reduce_mean": True,
                "tok2vec": listener(),
            }
        },
        CAT_DATA,
        lambda doc: max(doc.cats, key=doc.cats.get),
    ),
}


def make_examples(nlp, data):
    return [Example.from_dict(nlp.make_doc(text), annotations) for text, annotations in data]


def train(nlp, examples, steps, **update_kwargs):
    return train_steps(nlp, examples, steps, learn_rate=0.02, **update_kwargs)


@pytest.mark.parametrize("name", sorted(COMPONENTS))
def test_overfitting_io(name, tmp_path):
    """spaCy's overfitting pattern: the loss falls to near zero, the gold
    annotation comes back, and again after to_disk/load."""
    config, data, read = COMPONENTS[name]
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    nlp.add_pipe(name, config=config)
    examples = make_examples(nlp, data)
    history = train(nlp, examples, steps=100)
    first, last = history[0][name], history[-1][name]
    assert last < 0.05 * first and last < 0.1, (first, last)
    gold = [read(eg.reference) for eg in examples]
    texts = [text for text, _ in data]
    assert [read(doc) for doc in nlp.pipe(texts)] == gold
    nlp.to_disk(tmp_path)
    nlp2 = spacy.load(tmp_path)
    assert [read(doc) for doc in nlp2.pipe(texts)] == gold
    if name == "textcat":
        for a, b in zip(nlp.pipe(texts), nlp2.pipe(texts)):
            assert a.cats == pytest.approx(b.cats, abs=1e-6)


def test_two_components_learn_their_own_mix():
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    nlp.add_pipe("tagger", config=COMPONENTS["tagger"][0])
    nlp.add_pipe("ner", config=COMPONENTS["ner"][0])
    examples = make_examples(nlp, TAG_DATA) + make_examples(nlp, NER_DATA)
    train(nlp, examples, steps=15)
    mixes = mix_weights(nlp)
    assert set(mixes) == {"tagger", "ner"}
    for name, (weights, gamma) in mixes.items():
        assert weights.shape == (3,) and weights.sum() == pytest.approx(1.0, abs=1e-5)
        assert numpy.all(weights > 0) and gamma > 0
        # Initialised to the mean of the layers (w = 0) and gamma = 1: both moved.
        assert not numpy.allclose(weights, 1 / 3, atol=1e-4), name
        assert gamma != pytest.approx(1.0, abs=1e-4), name
    assert not numpy.allclose(mixes["tagger"][0], mixes["ner"][0], atol=1e-4)


def test_frozen_annotating_elmo_feeds_its_listeners():
    """[training] frozen_components = annotating_components = ["elmo"]."""
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    nlp.add_pipe("tagger", config=COMPONENTS["tagger"][0])
    examples = make_examples(nlp, TAG_DATA)
    history = train(nlp, examples, steps=100, exclude=["elmo"], annotates=["elmo"])
    assert history[-1]["tagger"] < 0.1 * history[0]["tagger"]
    assert [t.tag_ for t in nlp(TAG_DATA[0][0])] == TAG_DATA[0][1]["tags"]


def test_frozen_elmo_without_annotation_gives_zeros_and_does_not_learn():
    """Without doc._.elmo a listener reads zeros (the tagger can't learn from
    ELMo); this guards against silently training on stale vectors."""
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    nlp.add_pipe("tagger", config=COMPONENTS["tagger"][0])
    examples = make_examples(nlp, TAG_DATA)
    nlp.initialize(get_examples=lambda: examples)
    tagger = nlp.get_pipe("tagger")
    outputs = tagger.model.get_ref("tok2vec").predict([eg.predicted for eg in examples])
    assert all(numpy.all(o == outputs[0][0]) for o in outputs)  # every row the same: the bias


def test_grad_factor_fine_tunes_the_bilm():
    frozen, tuned = {}, {}
    for grad_factor, store in ((0.0, frozen), (1.0, tuned)):
        nlp = spacy.blank("en")
        elmo = add_elmo(nlp, bilm=random_model(0))
        config = {"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": listener(grad_factor=grad_factor)}}
        nlp.add_pipe("tagger", config=config)
        start = {k: v.detach().clone() for k, v in elmo.bilm.state_dict().items()}
        train(nlp, make_examples(nlp, TAG_DATA), steps=3)
        store.update({k: (v - start[k]).abs().max().item() for k, v in elmo.bilm.state_dict().items()})
    assert max(frozen.values()) == 0.0
    assert tuned["layers.0.weight_ih"] > 0 and tuned["layers.1.weight_proj"] > 0
    assert tuned["token_encoder.projection.weight"] > 0


def test_frozen_elmo_keeps_the_bilm_and_the_listeners_learn():
    """frozen = true: no biLM gradient even with grad_factor > 0; the mix still learns."""
    nlp = spacy.blank("en")
    elmo = add_elmo(nlp, bilm=random_model(0), config={"frozen": True})
    config = {"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": listener(grad_factor=1.0)}}
    nlp.add_pipe("tagger", config=config)
    assert not elmo.fine_tunes
    start = {k: v.detach().clone() for k, v in elmo.bilm.state_dict().items()}
    train(nlp, make_examples(nlp, TAG_DATA), steps=3)
    assert all(torch.equal(v, start[k]) for k, v in elmo.bilm.state_dict().items())
    assert all(p.grad is None or not p.grad.any() for p in elmo.bilm.parameters())
    weights, gamma = mix_weights(nlp)["tagger"]
    assert not numpy.allclose(weights, 1 / 3, atol=1e-5) and gamma != 1.0


def test_replace_listeners_keeps_grad_factor():
    """After nlp.replace_listeners the tagger's own biLM copy is fine-tuned
    with the listener's grad_factor (and not at all with 0)."""
    for grad_factor in (0.0, 1.0):
        nlp = spacy.blank("en")
        add_elmo(nlp, bilm=random_model(0))
        config = {"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": listener(grad_factor=grad_factor)}}
        nlp.add_pipe("tagger", config=config)
        examples = make_examples(nlp, TAG_DATA)
        optimizer = nlp.initialize(get_examples=lambda: examples)
        nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])
        nlp.remove_pipe("elmo")
        assert nlp.config["components"]["tagger"]["model"]["tok2vec"]["grad_factor"] == grad_factor
        (copy,) = [n for n in nlp.get_pipe("tagger").model.walk() if n.name == "elmo_bilm"]
        bilm = copy.shims[0]._model
        start = {k: v.detach().clone() for k, v in bilm.state_dict().items()}
        nlp.update(examples, sgd=optimizer)
        moved = max((v - start[k]).abs().max().item() for k, v in bilm.state_dict().items())
        assert (moved > 0) == (grad_factor > 0), (grad_factor, moved)


def test_replace_listeners(tmp_path):
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    nlp.add_pipe("tagger", config=COMPONENTS["tagger"][0])
    examples = make_examples(nlp, TAG_DATA)
    train(nlp, examples, steps=40)
    texts = [text for text, _ in TAG_DATA]
    expected = [[t.tag_ for t in doc] for doc in nlp.pipe(texts)]
    mix = mix_weights(nlp)["tagger"][0]
    nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])
    assert nlp.config["components"]["tagger"]["model"]["tok2vec"]["@architectures"] == "spacy_elmo.ElmoMix.v1"
    assert nlp.get_pipe("elmo").listening_components == []
    nlp.remove_pipe("elmo")
    assert [[t.tag_ for t in doc] for doc in nlp.pipe(texts)] == expected
    numpy.testing.assert_allclose(mix_weights(nlp)["tagger"][0], mix)
    nlp.to_disk(tmp_path)
    nlp2 = spacy.load(tmp_path)
    assert nlp2.pipe_names == ["tagger"]
    assert [[t.tag_ for t in doc] for doc in nlp2.pipe(texts)] == expected


def test_listener_needs_layers_not_only_vectors():
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0), config={"store": "vectors"})
    nlp.add_pipe("tagger", config=COMPONENTS["tagger"][0])
    examples = make_examples(nlp, TAG_DATA)
    nlp.initialize(get_examples=lambda: examples)
    with pytest.raises(ValueError, match='store = "layers"'):
        nlp("I like green eggs")


def test_listener_dims_must_match_the_bilm():
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    nlp.add_pipe("tagger", config=COMPONENTS["tagger"][0])
    nlp.initialize(get_examples=lambda: make_examples(nlp, TAG_DATA))
    bigger = random_model(0, **{"lstm.projection_dim": 12})
    with pytest.raises(ValueError, match="nO=16"):
        nlp.get_pipe("elmo").set_bilm(bigger)


def test_elmo_at_input_and_output():
    """Paper, Table 3: [encoder(ELMo_in); ELMo_out], two mixes in one component."""
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    tok2vec = {
        "@architectures": "spacy_elmo.ElmoInputOutput.v1",
        "input_elmo": listener(width=16),
        "encoder": {"@architectures": "spacy.TorchBiLSTMEncoder.v1", "width": 16, "depth": 1, "dropout": 0.0},
        "output_elmo": listener(width=None),
    }
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}})
    examples = make_examples(nlp, TAG_DATA)
    history = train(nlp, examples, steps=100)
    assert history[-1]["tagger"] < 0.1 * history[0]["tagger"]
    assert [t.tag_ for t in nlp(TAG_DATA[1][0])] == TAG_DATA[1][1]["tags"]
    mixes = mix_weights(nlp)
    assert set(mixes) == {"tagger", "tagger[1]"}
    assert not numpy.allclose(mixes["tagger"][0], mixes["tagger[1]"][0])


@pytest.mark.parametrize("layer_norm,l2", [(False, 0.0), (True, 0.1)])
def test_scalar_mix_gradient(layer_norm, l2):
    """The mix's backprop (autograd) against finite differences (float64)."""
    rng = numpy.random.default_rng(0)
    mix = ScalarMix(n_layers=3, layer_norm=layer_norm, l2=l2)
    mix.initialize()
    mix.set_param("weights", rng.normal(size=3).astype("f"))
    mix.set_param("gamma", numpy.asarray([1.3], dtype="f"))
    X = [rng.normal(size=(3, n, 5)).astype("f") for n in (4, 1, 0, 2)]
    dY = [rng.normal(size=(n, 5)).astype("f") for n in (4, 1, 0, 2)]

    def objective():
        Y = mix.predict(X)
        value = sum(float((y.astype("d") * d).sum()) for y, d in zip(Y, dY))
        return value + l2 * float((mix.get_param("weights").astype("d") ** 2).sum())

    Y, backprop = mix(X, is_train=True)
    dX = backprop(dY)
    analytic = {name: mix.get_grad(name).astype("d").copy() for name in ("weights", "gamma")}
    eps = 1e-2
    for name in ("weights", "gamma"):
        param = mix.get_param(name).copy()
        numeric = numpy.zeros_like(param, dtype="d")
        for i in range(param.size):
            for sign in (1, -1):
                shifted = param.copy()
                shifted[i] += sign * eps
                mix.set_param(name, shifted)
                numeric[i] += sign * objective() / (2 * eps)
            mix.set_param(name, param)
        numpy.testing.assert_allclose(analytic[name], numeric, rtol=2e-2, atol=2e-3)
    # Input gradient of one element per doc.
    for k, x in enumerate(X):
        if x.size == 0:
            assert dX[k].shape == x.shape
            continue
        original = x[1, 0, 2]
        values = []
        for sign in (1, -1):
            x[1, 0, 2] = original + sign * eps
            values.append(objective())
        x[1, 0, 2] = original
        numpy.testing.assert_allclose(dX[k][1, 0, 2], (values[0] - values[1]) / (2 * eps), rtol=2e-2, atol=2e-3)


def _hand_derived_mix_gradient(w, gamma, X, dY, layer_norm, l2):
    """The mix's gradient derived by hand (float64): the reference for the autograd one."""
    s = numpy.exp(w - w.max())
    s /= s.sum()
    d_s, d_gamma, dXs = numpy.zeros_like(s), 0.0, []
    for x, dy in zip(X, dY):
        inv_std = None
        if layer_norm:
            centred = x - x.mean(axis=-1, keepdims=True)
            inv_std = 1.0 / numpy.sqrt((centred**2).mean(axis=-1, keepdims=True) + 1e-6)
            x = centred * inv_std
        inner = (x * dy[None]).reshape(len(s), -1).sum(axis=1)
        d_s += gamma * inner
        d_gamma += float((s * inner).sum())
        dx = (gamma * s)[:, None, None] * dy[None]
        if layer_norm:
            dx = inv_std * (dx - dx.mean(axis=-1, keepdims=True) - x * (dx * x).mean(axis=-1, keepdims=True))
        dXs.append(dx)
    d_w = s * (d_s - (s * d_s).sum()) + 2.0 * l2 * w
    return d_w, d_gamma, dXs


@pytest.mark.parametrize("layer_norm,l2", [(False, 0.0), (True, 0.1)])
def test_scalar_mix_gradient_matches_the_hand_derived_one(layer_norm, l2):
    """The autograd gradient against the closed form the mix used to implement."""
    rng = numpy.random.default_rng(1)
    mix = ScalarMix(n_layers=3, layer_norm=layer_norm, l2=l2)
    mix.initialize()
    w = numpy.asarray([0.4, -0.7, 0.2], dtype="f")
    mix.set_param("weights", w)
    mix.set_param("gamma", numpy.asarray([0.8], dtype="f"))
    X = [rng.normal(size=(3, n, 6)).astype("f") for n in (5, 0, 2)]
    dY = [rng.normal(size=(n, 6)).astype("f") for n in (5, 0, 2)]
    Y, backprop = mix(X, is_train=True)
    dX = backprop(dY)
    d_w, d_gamma, expected_dX = _hand_derived_mix_gradient(
        w.astype("d"), 0.8, [x.astype("d") for x in X], [d.astype("d") for d in dY], layer_norm, l2
    )
    numpy.testing.assert_allclose(mix.get_grad("weights"), d_w, rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(mix.get_grad("gamma"), [d_gamma], rtol=1e-5, atol=1e-5)
    for got, want in zip(dX, expected_dX):
        assert got.shape == want.shape and got.dtype == numpy.float32
        numpy.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _write_docbin(nlp, data, path):
    db = DocBin()
    for text, annotations in data:
        db.add(Example.from_dict(nlp.make_doc(text), annotations).reference)
    db.to_disk(path)


def test_spacy_train_example_config(tmp_path):
    """``python -m spacy train configs/elmo_tagger_ner.cfg`` runs end to end."""
    weights, options = tmp_path / "weights.hdf5", tmp_path / "options.json"
    random_model(0).to_hdf5(weights, options)
    nlp = spacy.blank("en")
    data = [
        (
            "I like London and Berlin",
            {"tags": ["N", "V", "N", "C", "N"], "entities": [(7, 13, "LOC"), (18, 24, "LOC")]},
        ),
        ("Shaka Khan sings", {"tags": ["N", "N", "V"], "entities": [(0, 10, "PERSON")]}),
    ]
    _write_docbin(nlp, data, tmp_path / "train.spacy")
    _write_docbin(nlp, data, tmp_path / "dev.spacy")
    command = [
        sys.executable, "-m", "spacy", "train", str(CONFIGS / "elmo_tagger_ner.cfg"),
        "--output", str(tmp_path / "out"),
        "--paths.train", str(tmp_path / "train.spacy"), "--paths.dev", str(tmp_path / "dev.spacy"),
        "--paths.elmo_weights", str(weights), "--paths.elmo_options", str(options),
        "--training.max_steps", "4", "--training.eval_frequency", "2",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    trained = spacy.load(tmp_path / "out" / "model-last")
    assert trained.pipe_names == ["elmo", "tagger", "ner"]
    doc = trained("I like Berlin")
    assert doc._.elmo.layers.shape == (3, 3, 16)
    assert all(t.tag_ in {"N", "V", "C"} for t in doc)
    assert set(mix_weights(trained)) == {"tagger", "ner"}
    # The weights travelled inside the pipeline: same layers as the hdf5 file.
    from spacy_elmo import BiLM

    reference = BiLM.from_hdf5(weights, options).embed_sentences([["I", "like", "Berlin"]])[0]
    numpy.testing.assert_allclose(doc._.elmo.layers, reference, atol=1e-6)
