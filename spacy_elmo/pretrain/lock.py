"""One run at a time per pretraining output directory.

A run takes an exclusive ``fcntl.flock`` on ``OUTPUT/.pretrain.lock``
before it reads a checkpoint or writes anything, and holds it until it
ends; the file holds the holder's process id. A second run on the same
directory (a fresh one or a ``--resume``) refuses at once, naming that pid,
instead of interleaving two runs' logs and checkpoints.

Choices:

* ``flock`` rather than a pid file checked for liveness: the kernel drops
  the lock when its holder dies (``kill -9``, a crash, a lost node), so a
  lock left by a dead process never blocks, and no pid can be reused to
  fool the check. The pid in the file is only for the message.
* Refuse rather than wait: a second run on the same output is a mistake
  (a resubmitted job, a typo), not a queue.
* Under ``torchrun`` rank 0 takes the lock (it writes the output) and tells
  the other ranks whether it got it, so every rank stops with the error.
* The file stays after the run (with the last holder's pid), so that it
  is never unlinked while another process may have it open; only when the
  run made the directory and left nothing else in it (it failed before
  writing) are both removed.

``flock`` locks are local to one machine on some network file systems
(older NFS): two machines writing one NFS directory are not kept apart.
"""
import fcntl
import os
from pathlib import Path
from typing import List, Optional

from .errors import PretrainError

LOCK_NAME = ".pretrain.lock"


class OutputLock:
    """The exclusive lock of one output directory (see the module doc)."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.path = self.out / LOCK_NAME
        self._fd: Optional[int] = None
        self._made: List[Path] = []

    def acquire(self) -> "OutputLock":
        self._made = [d for d in (self.out, *self.out.parents) if not d.exists()]
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            self._remove_made()
            raise PretrainError(
                f"cannot write to the output directory {self.out} ({err.strerror or err}: "
                f"{err.filename or self.path}); "
                "choose a writable --output"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_pid(fd)
            os.close(fd)
            raise PretrainError(
                f"{self.out} is in use by another pretraining run (process {holder or 'unknown'} holds "
                f"{self.path}); wait for it to end or stop it, or choose another --output"
            ) from None
        try:
            replaced = os.fstat(fd).st_ino != os.stat(self.path).st_ino
        except FileNotFoundError:
            replaced = True
        if replaced:  # unlinked by its last holder meanwhile
            os.close(fd)
            raise PretrainError(f"{self.path} was replaced while this run took it; start the run again")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            if self._made and [p.name for p in self.out.iterdir()] == [LOCK_NAME]:
                self.path.unlink()
                self._remove_made()
        finally:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def _remove_made(self) -> None:
        for directory in self._made:  # deepest first
            try:
                directory.rmdir()
            except OSError:
                break

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_pid(fd: int) -> Optional[int]:
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        return int(text) if text else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None
