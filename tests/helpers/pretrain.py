"""Tiny corpora and configs for the pretraining tests."""
import json
import random
from pathlib import Path

from tests.helpers.models import small_options

SUBJECTS = ["the cat", "a dog", "my sister", "the old man", "our teacher", "the children", "a bird"]
VERBS = {"the children": ["eat", "see", "like"], "default": ["eats", "sees", "likes"]}
OBJECTS = ["the fish", "an apple", "the red ball", "some bread", "the garden", "a small house"]
ENDINGS = [".", "today .", "every morning .", "again ."]


def make_lines(n: int, seed: int = 0):
    """Repetitive but non-trivial sentences: agreement, fixed phrases, endings."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        subj = rng.choice(SUBJECTS)
        verb = rng.choice(VERBS.get(subj, VERBS["default"]))
        line = f"{subj} {verb} {rng.choice(OBJECTS)} {rng.choice(ENDINGS)}"
        if rng.random() < 0.3:
            line = line[:-2] + f" and {rng.choice(SUBJECTS)} {rng.choice(VERBS['default'])} {rng.choice(OBJECTS)} ."
        lines.append(line[0].upper() + line[1:])
    return lines


def write_corpus(directory: Path, n: int = 300, seed: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "train.txt"
    path.write_text("\n".join(make_lines(n, seed)) + "\n", encoding="utf-8")
    return path


def write_options(directory: Path, **changes) -> Path:
    path = directory / "options.json"
    text = json.dumps(small_options(**changes))
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def tiny_config(tmp: Path, corpus: Path, output: str = "out", **kw):
    from spacy_elmo.pretrain import PretrainConfig

    settings = dict(
        train=[str(corpus)], output=str(tmp / output), options=str(write_options(tmp)),
        batch_size=8, max_steps=6, dropout=0.1, dev_fraction=0.1, eval_every=1000,
        checkpoint_every=1000, log_every=1, lr=3e-3,
    )
    settings.update(kw)
    return PretrainConfig(**settings)


def distributed_worker(rank: int, world_size: int, port: int, tmp: str, corpus: str) -> None:
    """One process of a gloo run (torch.multiprocessing.spawn target)."""
    import os

    import torch

    torch.set_num_threads(1)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    from spacy_elmo.pretrain import trainer

    seen = []
    tmp_path = Path(tmp)
    config = tiny_config(tmp_path, Path(corpus), max_steps=4, eval_every=2, log_every=1, dropout=0.1)
    kept = {}

    def keep(step, info):
        seen.append(info["windows"])
        kept["params"] = {k: v.detach().clone() for k, v in info["model"].state_dict().items()}

    trainer.pretrain(config, progress=False, callback=keep)
    torch.save({"seen": seen, "params": kept["params"]}, tmp_path / f"rank{rank}.pt")


def resuming_worker(rank: int, world_size: int, port: int, tmp: str, corpus: str, settings: dict) -> None:
    """One process of a resumed gloo run (torch.multiprocessing.spawn
    target): the windows of each step saved to ``tmp/resumed-rank{rank}.pt``."""
    import os

    import torch

    torch.set_num_threads(1)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    from spacy_elmo.pretrain import trainer

    seen, kept = [], {}

    def keep(step, info):
        seen.append(info["windows"])
        kept["params"] = {k: v.detach().clone() for k, v in info["model"].state_dict().items()}

    trainer.pretrain(tiny_config(Path(tmp), Path(corpus), **settings), resume=True, progress=False, callback=keep)
    torch.save({"seen": seen, "params": kept["params"]}, Path(tmp) / f"resumed-rank{rank}.pt")


def backend_threads() -> list:
    """Names of this process's threads that belong to torch.distributed's
    gloo backend or its TCP store (Linux: /proc/self/task)."""
    import os

    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return sorted(n for n in names if n.startswith(("gloo", "pt_gloo", "pt_tcpstore")))


def backend_threads_after_teardown(wait_s: float = 5.0) -> list:
    """The backend's threads still there once a teardown has returned.

    ``pthread_join`` returns when the kernel clears the thread's id, which
    comes before the kernel removes the thread's ``/proc/self/task`` entry:
    on a busy machine a thread joined a moment ago can still be listed.
    Such a thread is gone within milliseconds; one that lives on (a group
    still held) is still there after ``wait_s``. So this waits until the
    list is empty, for ``wait_s`` at most, and returns what is left."""
    import time

    deadline = time.monotonic() + wait_s
    threads = backend_threads()
    while threads and time.monotonic() < deadline:
        time.sleep(0.01)
        threads = backend_threads()
    return threads


def teardown_worker(rank: int, world_size: int, port: int, tmp: str, corpus: str, resume: bool) -> None:
    """One rank of a gloo run that reports, after ``pretrain`` returns,
    whether anything still holds the process group or its threads.

    Automatic garbage collection is off: the group must then be freed by
    reference counting alone when the run ends, whatever the process
    imported or allocated before (with the collector on, a group held only
    by a reference cycle is freed or not depending on when the collector
    last ran)."""
    import gc
    import os
    import weakref

    import torch
    import torch.distributed as dist

    gc.disable()
    torch.set_num_threads(1)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    from spacy_elmo.pretrain import trainer

    seen = {}

    def watch(step, info):
        seen["group"] = weakref.ref(dist.group.WORLD)
        seen["threads"] = backend_threads()

    tmp_path = Path(tmp)
    config = tiny_config(tmp_path, Path(corpus), max_steps=5 if resume else 3, eval_every=2, log_every=1)
    trainer.pretrain(config, resume=resume, progress=False, callback=watch)
    report = {
        "threads_during": seen["threads"], "threads_after": backend_threads_after_teardown(),
        "group_alive_after": seen["group"]() is not None, "initialized_after": dist.is_initialized(),
    }
    tag = "resume" if resume else "fresh"
    (tmp_path / f"teardown-{tag}-{rank}.json").write_text(json.dumps(report), encoding="utf-8")


def held_group_worker(rank: int, ports: list, tmp: str) -> None:
    """A one-process gloo group torn down by ``distributed.teardown``, once
    with a reference held to it and once without; writes the warnings."""
    import logging

    import torch.distributed as dist

    from spacy_elmo.pretrain import distributed as D

    warnings = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger(D.__name__).addHandler(handler)
    for hold in (True, False):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[int(hold)]}", rank=0, world_size=1)
        held = dist.group.WORLD if hold else None
        D.teardown(D.DistInfo(rank=0, world_size=2))  # as a rank of a larger run would
        warnings.append(f"hold={hold}: {len(backend_threads_after_teardown())} threads")
        del held
    Path(tmp, "held.json").write_text(json.dumps(warnings), encoding="utf-8")
