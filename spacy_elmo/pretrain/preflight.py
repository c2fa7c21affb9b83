"""Checks before a run spends time on the corpus: a writable output, and
a CPU not too busy for the thread count."""
import os
from pathlib import Path
from typing import Optional

from . import distributed as D
from .errors import PretrainError


def busy_machine_warning(threads: int) -> Optional[str]:
    """A warning when torch's ``threads`` threads will compete with other
    work for the CPU: its threads wait for each other at every operation,
    so one that loses its core stalls the rest (see docs/pretraining.md).
    None when the load leaves room, or on systems without a load average."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    cores = os.cpu_count() or 1
    if threads > 1 and load + threads > cores + 0.5:
        return (
            f"{threads} torch threads on {cores} cores with a load of {load:.1f}: busy cores stall threaded "
            f"training, often several times over; try --threads {max(1, int(cores - load)) if load < cores else 1}"
        )
    return None


def check_output(out: Path, info: D.DistInfo) -> None:
    """Make sure the output directory can be written before the corpus is
    read and the model built (rank 0, which writes it)."""
    if not info.is_main:
        return
    made = [d for d in (out / "checkpoints", *(out / "checkpoints").parents) if not d.exists()]
    probe = out / "checkpoints" / f".write-test-{os.getpid()}"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as err:
        raise PretrainError(
            f"cannot write to the output directory {out} ({err.strerror or err}: {err.filename or probe}); "
            "choose a writable --output"
        ) from None
    finally:
        for directory in made:  # deepest first: leave no trace if the run fails before writing
            try:
                directory.rmdir()
            except OSError:
                break
