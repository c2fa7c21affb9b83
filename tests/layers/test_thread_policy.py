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


def run(policy, cost_one, cost_caller, n=1000, fixed=0.0):
    """One batch of ``n`` tokens under the policy on a fake clock: ``fixed``
    seconds plus ``n`` times the cost per token of the threads it runs on;
    returns the threads it ran on."""
    clock = {"t": 0.0}
    import spacy_elmo.layers.thread_policy as module

    real = module.time.perf_counter
    module.time.perf_counter = lambda: clock["t"]
    try:
        with policy.batch() as info:
            threads = torch.get_num_threads()
            clock["t"] += fixed + n * (cost_one if threads == 1 else cost_caller)
            info["n_tokens"] = n
    finally:
        module.time.perf_counter = real
    return threads


def test_adaptive_keeps_the_faster_and_restores_the_caller(two_threads):
    policy = AdaptiveThreads()
    used = [run(policy, 2.0, 1.0) for _ in range(7)]
    assert torch.get_num_threads() == 2
    # the first batch is not counted, two samples on one thread, the probe, then the faster
    assert used[:3] == [1, 1, 1] and used[3:] == [2, 2, 2, 2]
    # A load arrives: the caller's count becomes 30x slower than one thread.
    used = [run(policy, 2.0, 60.0) for _ in range(4)]
    assert used[-1] == 1 and used.count(2) <= 2
    # Re-checks of the slow setting: about recheck * ratio samples apart.
    used = [run(policy, 2.0, 60.0) for _ in range(300)]
    assert used.count(2) <= 1
    assert torch.get_num_threads() == 2


def test_a_short_warm_up_call_decides_nothing(two_threads):
    """A busy machine: one thread costs 1 per token, two threads 5. A warm-up
    call of 3 tokens pays a one-time cost of 40 (3 is nothing against it),
    then long batches: the policy must stay on one thread but for its
    probes."""
    policy = AdaptiveThreads()
    assert run(policy, 1.0, 5.0, n=3, fixed=40.0) == 1
    used = [run(policy, 1.0, 5.0, n=4000) for _ in range(40)]
    assert used.count(2) <= 2, used


def test_tiny_batches_with_a_fixed_cost_cannot_decide(two_threads):
    """A fixed cost per batch of 20 (the same on both settings) over batches
    of 2 tokens dwarfs their per-token cost: two short probes of two threads
    at a moment when a batch of them took long must not win against long
    batches measured per token."""
    policy = AdaptiveThreads()
    run(policy, 1.0, 5.0, n=1000)  # the first batch, not counted
    # Short batches on one thread with a large fixed cost: 11 per token.
    used = [run(policy, 1.0, 5.0, n=2, fixed=20.0) for _ in range(10)]
    assert used == [1] * 10 and policy.batches == 0  # 20 tokens: no sample yet
    used = [run(policy, 1.0, 5.0, n=1000) for _ in range(40)]
    assert used.count(2) <= 2, used
    assert policy.choice == "one"


def test_a_stream_of_short_docs_is_still_measured(two_threads):
    """Only short batches (a loop of nlp(sentence)): they are summed into
    samples of min_tokens, so the faster setting (two threads, here) is found."""
    policy = AdaptiveThreads()
    used = [run(policy, 2.0, 1.0, n=20, fixed=1.0) for _ in range(200)]
    assert policy.choice == "caller" and used[-40:].count(2) >= 30
    assert policy.estimate("caller") == pytest.approx(21 / 20) and policy.estimate("one") == pytest.approx(41 / 20)


def test_a_stale_estimate_is_checked_again_when_the_choice_slows(two_threads):
    """One thread looks 30x slower on its first samples (a moment of load
    that has gone since), so two threads win; then two threads get 5x slower
    than one. The re-check comes ``recheck`` x the ratio now (30 / 5 = 6)
    samples after the last one, not 30 x ``recheck``, and measures one thread
    afresh (its old samples would outvote the new one)."""
    policy = AdaptiveThreads()
    for _ in range(3):
        run(policy, 30.0, 1.0)
    assert run(policy, 30.0, 1.0) == 2
    used = [run(policy, 1.0, 5.0) for _ in range(AdaptiveThreads.recheck * 6 + 3)]
    assert used[: AdaptiveThreads.recheck * 6 - 4] == [2] * (AdaptiveThreads.recheck * 6 - 4)
    assert used[-1] == 1 and policy.choice == "one"
    assert policy.estimate("one") == 1.0


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
