"""How many torch threads the ``elmo`` component's biLM batches run on.

PyTorch's intra-op threads help the biLM on an idle machine, but its
recurrence is thousands of small parallel regions per batch: when other
CPU-bound work holds the cores, each region waits for a descheduled thread
and a pipeline can run many times slower than on one thread, with no
warning. Neither fixed choice is right everywhere: one thread gives up the
second core on an idle machine, the process's thread count falls off that
cliff on a busy one (docs/speed.md has the measurements).

``threads = "auto"`` (the default of ``spacy_elmo.ElmoBiLM.v2``):
:class:`AdaptiveThreads` runs each biLM batch either on the caller's thread
count (``torch.get_num_threads()`` when the batch starts) or on one thread,
measures the seconds per token, and keeps the faster.

* What it compares are samples of at least :attr:`AdaptiveThreads.min_tokens`
  tokens: a larger batch is a sample of its own, smaller ones on the same
  setting are summed until they reach it. A batch's fixed cost (starting the
  recurrence, the span plan, a first call's allocations) spread over a few
  tokens would read as a huge cost per token; over 256 tokens or more it is
  a few per cent, and a stream of short Docs is still measured, on the
  batches it really runs.
* The first batch the policy sees is never counted: it pays one-time costs
  (allocations, the word-type cache filling), so a warm-up call such as
  ``nlp("warm up .")`` decides nothing.
* It starts on one thread (the safe side of the cliff) and tries the
  caller's count after :attr:`AdaptiveThreads.first_probe` samples.
* Each setting's estimate is the median of its last 3 samples' seconds per
  token, so one slow batch does not flip the choice; a load that starts
  later raises the chosen setting's own estimate within a few batches.
* It re-tries the other setting now and then: ``recheck`` samples after
  the last re-check, times how much slower the other setting's estimate is
  than the chosen one's (``recheck * ratio``), so re-checks cost at most
  about ``1 / recheck`` of the time even where the other setting is many
  times slower. The ratio is taken again after every sample: when the
  chosen setting gets slower (a load arrives), the re-check comes sooner.
  A re-check drops the other setting's old samples and measures it as it
  is now.
* ``torch.set_num_threads`` is process-wide: the caller's setting is put
  back after every batch.

``threads = 0`` leaves torch's setting alone (the behaviour before this
policy); ``threads = N`` runs every biLM batch on N threads.

Outputs on one thread and on several agree to float32 rounding, and bit for
bit where the BLAS library's matrix products do not split their sums by
thread count; MKL does on some Intel CPUs (the shipped biLM's layers then
differ by up to about 4e-6), so there ``"auto"``'s timing-driven choice can
change the last bits of a batch. For bit-exact outputs run after run, fix
the count (``threads = N``) or start the process with
``MKL_CBWR=AUTO,STRICT`` (MKL's strict reproducibility mode).
"""
import statistics
import time
from collections import deque
from contextlib import contextmanager
from typing import Deque, Dict, Iterator, List, Union

import torch

from ..bilm.threads import MAX_THREADS, check_thread_count

ThreadsSetting = Union[str, int]


SETTING = "spacy_elmo.ElmoBiLM.v2's threads ([components.elmo.model] threads)"


def check_threads(threads: ThreadsSetting) -> ThreadsSetting:
    """``"auto"``, 0 (torch's own setting) or a number of threads up to
    :data:`~spacy_elmo.bilm.threads.MAX_THREADS`; else a ValueError naming the setting."""
    if threads == "auto":
        return threads
    if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0:
        return check_thread_count(threads, SETTING)
    raise ValueError(
        f"{SETTING} must be \"auto\", 0 (torch's own setting) or a number of threads from 1 to {MAX_THREADS}, "
        f"found {threads!r}"
    )


class AdaptiveThreads:
    """Chooses, per biLM batch, between the caller's thread count and one thread (see the module)."""

    #: Samples on one thread before the caller's count is first tried.
    first_probe = 2
    #: Samples between re-checks of the other setting, times how much slower it was.
    recheck = 16
    #: Samples a setting's estimate is the median of.
    window = 3
    #: Tokens a sample holds at least (smaller batches are summed).
    min_tokens = 256

    def __init__(self) -> None:
        self.times: Dict[str, Deque[float]] = {"one": deque(maxlen=self.window), "caller": deque(maxlen=self.window)}
        #: Seconds and tokens of each setting's batches not yet in a sample.
        self.pending: Dict[str, List[float]] = {"one": [0.0, 0], "caller": [0.0, 0]}
        self.choice = "one"
        #: Samples recorded.
        self.batches = 0
        #: Batches timed (the first is not counted).
        self.seen = 0
        self.next_check = self.first_probe
        #: The sample count at the last re-check.
        self.last_check = 0

    def estimate(self, key: str) -> float:
        return statistics.median(self.times[key]) if self.times[key] else float("inf")

    def _other(self, key: str) -> str:
        return "caller" if key == "one" else "one"

    def _pick(self) -> str:
        """The setting for the next batch: the chosen one, or the other when a
        re-check is due (until it has a sample)."""
        return self._other(self.choice) if self.batches >= self.next_check else self.choice

    def _record(self, key: str, seconds: float, n_tokens: int, probing: bool) -> None:
        self.seen += 1
        if self.seen == 1:
            return  # one-time costs
        if probing and self.pending[key][1] == 0:
            self.times[key].clear()  # a re-check measures the setting as it is now
        pending = self.pending[key]
        pending[0] += seconds
        pending[1] += n_tokens
        if pending[1] < self.min_tokens:
            return
        self.times[key].append(pending[0] / pending[1])
        self.pending[key] = [0.0, 0]
        self.batches += 1
        if probing:
            self.last_check = self.batches
        self.choice = min(self.times, key=self.estimate)
        other = self.estimate(self._other(self.choice))
        if other != float("inf"):
            ratio = other / max(self.estimate(self.choice), 1e-12)
            self.next_check = self.last_check + int(self.recheck * max(1.0, ratio))

    @contextmanager
    def batch(self, n_tokens_hint: int = 0) -> Iterator[dict]:
        """Run one biLM batch inside: sets the threads, times it; the caller
        puts ``n_tokens`` into the yielded dict when the batch is done."""
        caller = torch.get_num_threads()
        if caller <= 1:
            yield {}
            return
        key = self._pick()
        probing = key != self.choice
        info = {"n_tokens": n_tokens_hint}
        if key == "one":
            torch.set_num_threads(1)
        start = time.perf_counter()
        try:
            yield info
        finally:
            seconds = time.perf_counter() - start
            torch.set_num_threads(caller)
        if info["n_tokens"] > 0:
            self._record(key, seconds, info["n_tokens"], probing)


class FixedThreads:
    """Every biLM batch on ``threads`` threads (0: torch's own setting)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    @contextmanager
    def batch(self, n_tokens_hint: int = 0) -> Iterator[dict]:
        caller = torch.get_num_threads()
        if self.threads == 0 or self.threads == caller:
            yield {}
            return
        torch.set_num_threads(self.threads)
        try:
            yield {}
        finally:
            torch.set_num_threads(caller)


def make_policy(threads: ThreadsSetting):
    threads = check_threads(threads)
    return AdaptiveThreads() if isinstance(threads, str) else FixedThreads(threads)
