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
measures the seconds per token of every batch, and keeps the faster.

* It starts on one thread (the safe side of the cliff) and tries the
  caller's count after :attr:`AdaptiveThreads.first_probe` batches.
* Each setting's estimate is the median of its last 3 batches' seconds per
  token, so one slow batch does not flip the choice; a load that starts
  later raises the chosen setting's own estimate within a few batches.
* It re-tries the other setting now and then: after ``recheck`` batches,
  scaled by how much slower the other setting was (``recheck * ratio``), so
  re-checks cost at most about ``1 / recheck`` of the time even where the
  other setting is many times slower.
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
from typing import Deque, Dict, Iterator, Union

import torch

ThreadsSetting = Union[str, int]


def check_threads(threads: ThreadsSetting) -> ThreadsSetting:
    if threads == "auto" or (isinstance(threads, int) and not isinstance(threads, bool) and threads >= 0):
        return threads
    raise ValueError(
        "spacy_elmo.ElmoBiLM.v2's threads ([components.elmo.model] threads) must be \"auto\", 0 (torch's own "
        f"setting) or a number of threads >= 1, found {threads!r}"
    )


class AdaptiveThreads:
    """Chooses, per biLM batch, between the caller's thread count and one thread (see the module)."""

    #: Batches on one thread before the caller's count is first tried.
    first_probe = 2
    #: Batches between re-checks of the other setting, times how much slower it was.
    recheck = 16
    #: Batches a setting's estimate is the median of.
    window = 3

    def __init__(self) -> None:
        self.times: Dict[str, Deque[float]] = {"one": deque(maxlen=self.window), "caller": deque(maxlen=self.window)}
        self.choice = "one"
        self.batches = 0
        self.next_check = self.first_probe

    def estimate(self, key: str) -> float:
        return statistics.median(self.times[key]) if self.times[key] else float("inf")

    def _pick(self) -> str:
        """The setting for the next batch: the chosen one, or the other when a re-check is due."""
        if self.batches >= self.next_check:
            return "caller" if self.choice == "one" else "one"
        return self.choice

    def _record(self, key: str, seconds_per_token: float, probing: bool) -> None:
        self.times[key].append(seconds_per_token)
        self.batches += 1
        best = min(self.times, key=self.estimate)
        if probing:
            other = "caller" if key == "one" else "one"
            ratio = self.estimate(key) / max(self.estimate(other), 1e-12)
            self.next_check = self.batches + int(self.recheck * max(1.0, ratio, 1.0 / max(ratio, 1e-12)))
        self.choice = best

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
            self._record(key, seconds / info["n_tokens"], probing)


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
