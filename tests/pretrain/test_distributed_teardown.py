"""A distributed run frees its process group when it ends: nothing of the
run holds the group past ``destroy_process_group``, so gloo's threads are
joined there and not at interpreter shutdown (where one that still holds
tensors takes the GIL and aborts the process: "terminate called without an
active exception"). See docs/reliability.md, "Distributed runs"."""
import json
import socket
from pathlib import Path

import pytest

from tests.helpers.pretrain import held_group_worker, teardown_worker, write_corpus


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names from /proc (Linux)")
def test_no_rank_holds_the_process_group_or_its_threads_after_a_fresh_and_a_resumed_run(tmp_path):
    import torch.multiprocessing as mp

    corpus = write_corpus(tmp_path, 120)
    for resume in (False, True):
        mp.spawn(teardown_worker, args=(2, _free_port(), str(tmp_path), str(corpus), resume), nprocs=2, join=True)
        for rank in range(2):
            tag = "resume" if resume else "fresh"
            report = json.loads((tmp_path / f"teardown-{tag}-{rank}.json").read_text(encoding="utf-8"))
            # The check sees the backend's threads while the run goes on...
            assert "pt_gloo_runloop" in report["threads_during"], report
            # ... and none once the run has ended; no reference keeps the group.
            assert report["threads_after"] == [], (tag, rank, report)
            assert not report["group_alive_after"], (tag, rank, report)
            assert not report["initialized_after"]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names from /proc (Linux)")
def test_teardown_warns_when_something_still_holds_the_group(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(held_group_worker, args=([_free_port(), _free_port()], str(tmp_path)), nprocs=1, join=True)
    messages = json.loads((tmp_path / "held.json").read_text(encoding="utf-8"))
    assert len(messages) == 3, messages
    assert messages[0].startswith("the process group is still referenced after destroy_process_group")
    assert messages[1] != "hold=True: 0 threads"  # held: its threads live on
    assert messages[2] == "hold=False: 0 threads"  # not held: no warning, no thread
