"""The bound of every thread count the package takes (the elmo component's
``threads``, ``pretrain --threads``): more threads than a machine can run
make no model faster, and OpenMP aborts or crashes the process when asked
for thousands (libgomp: 1,000 threads abort, a million segfault)."""
import os
from typing import Any

#: The largest thread count accepted: 256, or the machine's logical CPUs
#: where it has more.
MAX_THREADS = max(256, os.cpu_count() or 1)


def check_thread_count(value: Any, setting: str, minimum: int = 1) -> int:
    """``value`` if it is an integer in [``minimum``, :data:`MAX_THREADS`],
    else a ValueError naming ``setting``."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_THREADS:
        raise ValueError(
            f"{setting} must be a whole number of threads from {minimum} to {MAX_THREADS} (this machine has "
            f"{os.cpu_count()} logical CPUs), found {value!r}"
        )
    return value
