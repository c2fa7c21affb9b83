"""The training-time cache of a frozen biLM's outputs (``spacy_elmo.training_cache.v1``)."""
import numpy
import pytest
import spacy
from spacy.training import Example
from spacy.util import fix_random_seed, registry

from spacy_elmo import add_elmo
from spacy_elmo.bilm.fast import InferenceEngine
from spacy_elmo.layers.output_cache import OutputCache
from tests.helpers.models import random_model

SENTENCES = [
    ("The dog barked at the old man near the river .", ["D", "N", "V", "P", "D", "J", "N", "P", "D", "N", "."]),
    ("It rained .", ["P", "V", "."]),
    ("A loan from the bank .", ["D", "N", "P", "D", "N", "."]),
    ("Green eggs and ham were served to everyone at the table today .",
     ["J", "N", "C", "N", "V", "V", "P", "N", "P", "D", "N", "N", "."]),
]


def tagger_pipeline(grad_factor=0.0):
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    tok2vec = {"@architectures": "spacy_elmo.ElmoListener.v1", "width": 16, "grad_factor": grad_factor}
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}})
    examples = [Example.from_dict(nlp.make_doc(text), {"tags": tags}) for text, tags in SENTENCES]
    return nlp, examples


def run_training(cache_mib, steps=4, grad_factor=0.0):
    """Train (batches of two, so that cached and new Docs share batches); return the
    layers the elmo component gave the listeners at every step, and the pipeline."""
    nlp, examples = tagger_pipeline(grad_factor)
    fix_random_seed(0)
    optimizer = nlp.initialize(get_examples=lambda: examples)
    if cache_mib is not None:
        registry.callbacks.get("spacy_elmo.training_cache.v1")(max_mib=cache_mib)(nlp)
    elmo = nlp.get_pipe("elmo")
    seen = []
    predict = elmo._predict_layers

    def recording(docs):
        layers = predict(docs)
        seen.append([numpy.array(x) for x in layers])
        return layers

    elmo._predict_layers = recording
    for step in range(steps):
        batch = [examples[(2 * step + i) % len(examples)] for i in range(2)] + [examples[step % 2]]
        nlp.update(batch, sgd=optimizer, losses={})
    return seen, nlp


def test_cached_training_gives_the_same_layers_and_runs_the_bilm_once_per_doc():
    plain, plain_nlp = run_training(None)
    cached, cached_nlp = run_training(64)
    assert len(plain) == len(cached) == 4
    for step_plain, step_cached in zip(plain, cached):
        for a, b in zip(step_plain, step_cached):
            assert a.dtype == b.dtype == numpy.float32
            numpy.testing.assert_array_equal(a, b)  # bit for bit
    cache = cached_nlp.get_pipe("elmo").output_cache
    # Batches (0,1,0) (2,3,1) (0,1,0) (2,3,1): misses only in the first epoch, where Doc 0
    # is new twice in its batch; every later Doc is a hit.
    assert (cache.misses, cache.hits) == (5, 7)
    assert len(cache._store) == 4 and cache.nbytes == sum(len(t.split()) for t, _ in SENTENCES) * 3 * 16 * 4
    # The tagger trained on the same inputs: same weights.
    for a, b in zip(plain_nlp.get_pipe("tagger").model.walk(), cached_nlp.get_pipe("tagger").model.walk()):
        for name in a.param_names:
            numpy.testing.assert_array_equal(a.get_param(name), b.get_param(name))


def test_a_full_cache_computes_and_stores_nothing_more():
    _, nlp = run_training(0)
    cache = nlp.get_pipe("elmo").output_cache
    assert cache.nbytes == 0 and cache.hits == 0 and cache.misses == 12


def test_the_cache_is_bypassed_while_the_bilm_is_fine_tuned():
    _, nlp = run_training(64, grad_factor=1.0)
    cache = nlp.get_pipe("elmo").output_cache
    assert nlp.get_pipe("elmo").fine_tunes
    assert cache.hits == cache.misses == 0


def test_a_new_bilm_empties_the_cache():
    _, nlp = run_training(64)
    elmo = nlp.get_pipe("elmo")
    docs = [nlp.make_doc(text) for text, _ in SENTENCES[:2]]
    elmo.set_bilm(random_model(1))
    fresh = elmo.predict(docs)
    expected = elmo.model.predict(docs)
    for a, b in zip(fresh, expected):
        numpy.testing.assert_array_equal(a, b)
    assert len(elmo.output_cache._store) == 2


@pytest.mark.parametrize("change", ["precision", "engine"])
def test_a_new_precision_or_engine_empties_the_cache(change):
    _, nlp = run_training(64)
    elmo = nlp.get_pipe("elmo")
    docs = [nlp.make_doc(text) for text, _ in SENTENCES[:2]]
    assert len(elmo.output_cache._store) == 4
    if change == "precision":
        elmo.bilm.precision = "int8"
    else:
        elmo.bilm.engine = InferenceEngine(packed_weights=False, type_products=False)
    misses = elmo.output_cache.misses
    fresh = elmo.predict(docs)
    for a, b in zip(fresh, elmo.model.predict(docs)):
        numpy.testing.assert_array_equal(a, b)
    assert len(elmo.output_cache._store) == 2 and elmo.output_cache.misses == misses + 2


def test_the_cache_is_not_saved(tmp_path):
    _, nlp = run_training(64)
    nlp.to_disk(tmp_path)
    assert spacy.load(tmp_path).get_pipe("elmo").output_cache is None


def test_bad_size_is_refused():
    with pytest.raises(ValueError, match="max_mib must be >= 0"):
        registry.callbacks.get("spacy_elmo.training_cache.v1")(max_mib=-1)
    with pytest.raises(ValueError, match="size must be >= 0"):
        OutputCache(-1)
