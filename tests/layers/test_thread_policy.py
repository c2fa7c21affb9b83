"""The elmo biLM's thread policy: the faster setting wins, the caller's
thread count is restored after every batch, re-checks are rarer the slower
the other setting was."""
import numpy
import pytest
import spacy
import torch
from spacy.tokens import DocBin

from spacy_elmo.layers.thread_policy import AdaptiveThreads, FixedThreads, check_threads
from spacy_elmo.loading import load_bilm

from tests.helpers.paths import FIXTURES


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def run(policy, cost_one, cost_caller, n=1000):
    """One batch of ``n`` tokens under the policy, with a fake duration; returns the threads it ran on."""
    clock = {"t": 0.0}
    import spacy_elmo.layers.thread_policy as module

    real = module.time.perf_counter
    module.time.perf_counter = lambda: clock["t"]
    try:
        with policy.batch() as info:
            threads = torch.get_num_threads()
            clock["t"] += n * (cost_one if threads == 1 else cost_caller)
            info["n_tokens"] = n
    finally:
        module.time.perf_counter = real
    return threads


def test_adaptive_keeps_the_faster_and_restores_the_caller(two_threads):
    policy = AdaptiveThreads()
    used = [run(policy, 2.0, 1.0) for _ in range(6)]
    assert torch.get_num_threads() == 2
    assert used[:2] == [1, 1] and used[2:] == [2, 2, 2, 2]  # probe, then the faster
    # A load arrives: the caller's count becomes 30x slower than one thread.
    used = [run(policy, 2.0, 60.0) for _ in range(4)]
    assert used[-1] == 1 and used.count(2) <= 2
    # Re-checks of the slow setting: about recheck * ratio batches apart.
    used = [run(policy, 2.0, 60.0) for _ in range(300)]
    assert used.count(2) <= 1
    assert torch.get_num_threads() == 2


def test_adaptive_does_nothing_on_one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = AdaptiveThreads()
        assert [run(policy, 1.0, 1.0) for _ in range(5)] == [1] * 5
        assert policy.batches == 0
    finally:
        torch.set_num_threads(before)


def test_fixed_threads_and_the_setting_is_checked(two_threads):
    assert run(FixedThreads(1), 1.0, 1.0) == 1 and torch.get_num_threads() == 2
    assert run(FixedThreads(0), 1.0, 1.0) == 2
    for bad in ("fast", -1, 1.5, True):
        with pytest.raises(ValueError, match="threads"):
            check_threads(bad)


def test_outputs_do_not_depend_on_the_thread_count(two_threads):
    """``threads = "auto"`` switches between one thread and the caller's count
    by timing, so the outputs must not depend on the thread count: the shipped
    biLM on real sentences, one thread against two, bit for bit."""
    vocab = spacy.blank("en").vocab
    docs = DocBin().from_disk(FIXTURES / "training_sample" / "brown_train.spacy").get_docs(vocab)
    sentences = [[t.text for t in doc] for doc in docs][:48]
    bilm = load_bilm()
    torch.set_num_threads(1)
    one = bilm.embed_sentences(sentences, batch_size=48)
    torch.set_num_threads(2)
    two = bilm.embed_sentences(sentences, batch_size=48)
    assert len(one) == len(sentences)
    for a, b in zip(one, two):
        numpy.testing.assert_array_equal(a, b)
