"""The elmo biLM's thread policy: the faster setting wins, the caller's
thread count is restored after every batch, re-checks are rarer the slower
the other setting was."""
import os
import subprocess
import sys

import numpy
import pytest
import spacy
import torch
from spacy.tokens import DocBin

from spacy_elmo.layers.thread_policy import AdaptiveThreads, FixedThreads, check_threads
from spacy_elmo.loading import load_bilm
from tests.helpers.paths import FIXTURES, REPO


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


def _brown_sentences(n=48):
    vocab = spacy.blank("en").vocab
    docs = DocBin().from_disk(FIXTURES / "training_sample" / "brown_train.spacy").get_docs(vocab)
    return [[t.text for t in doc] for doc in docs][:n]


def test_outputs_agree_across_thread_counts(two_threads):
    """``threads = "auto"`` switches between one thread and the caller's count
    by timing. The shipped biLM on real sentences, one thread against two,
    agrees to float32 rounding; bit for bit only where the BLAS library's
    matrix products do not split their sums by thread count (MKL does on some
    Intel CPUs: up to 4e-6 here; see the next test and docs/speed.md)."""
    sentences = _brown_sentences()
    bilm = load_bilm()
    torch.set_num_threads(1)
    one = bilm.embed_sentences(sentences, batch_size=48)
    torch.set_num_threads(2)
    two = bilm.embed_sentences(sentences, batch_size=48)
    assert len(one) == len(sentences)
    for a, b in zip(one, two):
        numpy.testing.assert_allclose(a, b, rtol=0, atol=2e-5)


def test_a_fixed_thread_count_is_bit_for_bit(two_threads):
    """The same thread count gives the same bits, run after run."""
    sentences = _brown_sentences(16)
    bilm = load_bilm()
    first = bilm.embed_sentences(sentences, batch_size=16)
    again = bilm.embed_sentences(sentences, batch_size=16)
    for a, b in zip(first, again):
        numpy.testing.assert_array_equal(a, b)


def test_mkl_strict_mode_makes_thread_counts_bit_for_bit():
    """The documented remedy: with ``MKL_CBWR=AUTO,STRICT`` set before the
    process starts, one and two threads give the same bits."""
    script = (
        "import numpy, torch\n"
        "from spacy_elmo.loading import load_bilm\n"
        "from tests.layers.test_thread_policy import _brown_sentences\n"
        "s = _brown_sentences(16); bilm = load_bilm()\n"
        "torch.set_num_threads(1); one = bilm.embed_sentences(s, batch_size=16)\n"
        "torch.set_num_threads(2); two = bilm.embed_sentences(s, batch_size=16)\n"
        "print(max(float(numpy.abs(a - b).max()) for a, b in zip(one, two)))\n"
    )
    env = dict(os.environ, MKL_CBWR="AUTO,STRICT", OMP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) == 0.0
