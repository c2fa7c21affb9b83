"""spacy_elmo.ElmoTok2Vec.v1: [x_k; ELMo_k] into a trainable encoder."""
import numpy
import pytest
import spacy
from spacy.training import Example
from spacy.util import registry

from spacy_elmo import add_elmo, mix_weights
from tests.helpers.models import CAT_DATA, NER_DATA, TAG_DATA, ner_config, random_model, tagger_config
from tests.helpers.models import train as train_steps


def tok2vec(width=32, output_width=0, **kwargs):
    return {
        "@architectures": "spacy_elmo.ElmoTok2Vec.v1",
        "embed": {
            "@architectures": "spacy.MultiHashEmbed.v2",
            "width": width,
            "attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"],
            "rows": [500, 100, 250, 250],
            "include_static_vectors": False,
        },
        "encode": {
            "@architectures": "spacy.MaxoutWindowEncoder.v2",
            "width": width,
            "depth": 2,
            "window_size": 1,
            "maxout_pieces": 3,
        },
        "output_width": output_width,
        **kwargs,
    }


def component_config(name, t2v):
    if name == "tagger":
        return tagger_config(t2v)
    if name == "ner":
        return ner_config(t2v)
    return {
        "model": {
            "@architectures": "spacy.TextCatEnsemble.v2",
            "tok2vec": t2v,
            "linear_model": {
                "@architectures": "spacy.TextCatBOW.v3",
                "exclusive_classes": True,
                "ngram_size": 1,
                "no_output_layer": False,
            },
        }
    }


DATA = {"tagger": TAG_DATA, "ner": NER_DATA, "textcat": CAT_DATA}


def train(nlp, examples, steps, **update_kwargs):
    return train_steps(nlp, examples, steps, learn_rate=0.01, **update_kwargs)


def test_registered():
    assert registry.architectures.get("spacy_elmo.ElmoTok2Vec.v1") is not None


@pytest.mark.parametrize("output_width", [0, 8])
def test_builds_with_its_width(output_width):
    model = registry.resolve({"m": tok2vec(width=24, output_width=output_width)})["m"]
    assert model.get_dim("nO") == 24 + output_width
    listeners = [node for node in model.walk() if node.name == "elmo_listener"]
    assert len(listeners) == (2 if output_width else 1)


@pytest.mark.parametrize("name,output_width", [("tagger", 0), ("tagger", 8), ("ner", 0), ("textcat", 8)])
def test_trains_and_loss_decreases(name, output_width):
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    nlp.add_pipe(name, config=component_config(name, tok2vec(output_width=output_width)))
    examples = [Example.from_dict(nlp.make_doc(text), ann) for text, ann in DATA[name]]
    history = train(nlp, examples, steps=30)
    first, last = history[0][name], history[-1][name]
    assert last < 0.5 * first, (first, last)
    doc = nlp(DATA[name][0][0])
    if name == "tagger":
        assert [t.tag_ for t in doc] == TAG_DATA[0][1]["tags"]
    # Each ELMo mix of the component learned: weights moved off the equal mix.
    mixes = mix_weights(nlp)
    expected = {name} | ({f"{name}[1]"} if output_width else set())
    assert set(mixes) == expected
    for weights, gamma in mixes.values():
        assert weights.sum() == pytest.approx(1.0, abs=1e-5)
        assert not numpy.allclose(weights, 1 / 3, atol=1e-5) or gamma != pytest.approx(1.0, abs=1e-5)


def test_frozen_bilm_and_roundtrip(tmp_path):
    """The biLM does not move (grad_factor 0) and the pipeline reloads."""
    nlp = spacy.blank("en")
    elmo = add_elmo(nlp, bilm=random_model(0))
    nlp.add_pipe("tagger", config=component_config("tagger", tok2vec()))
    before = [p.detach().clone() for p in elmo.bilm.parameters()]
    examples = [Example.from_dict(nlp.make_doc(text), ann) for text, ann in TAG_DATA]
    train(nlp, examples, steps=5)
    for a, b in zip(before, elmo.bilm.parameters()):
        assert bool((a == b).all())
    nlp.to_disk(tmp_path)
    nlp2 = spacy.load(tmp_path)
    texts = [text for text, _ in TAG_DATA]
    assert [[t.tag_ for t in d] for d in nlp.pipe(texts)] == [[t.tag_ for t in d] for d in nlp2.pipe(texts)]
