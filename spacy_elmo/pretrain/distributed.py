"""torch.distributed glue for pretraining (``torchrun``).

Launch with ``torchrun --nproc_per_node=N [--nnodes ... --rdzv_endpoint ...]
-m spacy_elmo pretrain ...``: torchrun sets ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``, and :func:`setup` joins the
process group (``gloo`` on CPU, ``nccl`` on CUDA). Without those variables
training runs in one process and nothing here does anything.

Semantics (see docs/pretraining.md): every rank reads the same corpus and
builds the same vocabulary and model (same seed; DDP also broadcasts rank 0's
weights); the batches of a step are dealt out by rank, so one step consumes
``world_size`` batches; DDP averages the gradients, so the weights stay
identical on every rank. Only rank 0 writes logs, checkpoints and exports.
"""
import logging
import os
import weakref
from dataclasses import dataclass
from typing import Any, List

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup(device: str) -> DistInfo:
    """Join the process group described by torchrun's environment variables."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        # Import torch._dynamo before the process group exists. DDP imports
        # it on construction, and importing it while a group exists keeps
        # references to that group alive for good: destroy_process_group
        # then no longer frees the gloo backend, whose worker and TCP-loop
        # threads live on into interpreter shutdown, where a worker releasing
        # the last collective's tensors takes the GIL and is ended by Python
        # inside a C++ destructor: "terminate called without an active
        # exception", SIGABRT (seen under CPU load in the rank that exits
        # first). See docs/reliability.md, "Distributed runs".
        import torch._dynamo  # noqa: F401

        backend = "nccl" if device.startswith("cuda") else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend)
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank)


def teardown(info: DistInfo) -> None:
    """Destroy the process group; this stops and joins the backend's
    threads while the interpreter is fully alive (see :func:`setup`)."""
    if info.enabled and dist.is_initialized():
        group = weakref.ref(dist.group.WORLD)
        dist.destroy_process_group()
        if group() is not None:
            # Something still holds the group (a DDP wrapper not released):
            # its backend threads run on into interpreter shutdown.
            logger.warning(
                "the process group is still referenced after destroy_process_group; its backend threads "
                "outlive it and can abort the process at exit (see docs/reliability.md, 'Distributed runs')"
            )


def any_flag(info: DistInfo, flag: bool, device: torch.device) -> bool:
    """True on every rank if ``flag`` is true on any rank (e.g. SIGTERM seen)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def all_sum(info: DistInfo, values: List[float], device: torch.device) -> List[float]:
    if not info.enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def gather_to_main(info: DistInfo, obj: Any) -> List[Any]:
    """Every rank's ``obj`` on rank 0 (``[obj]`` without distribution).
    Objects travel between our own processes only."""
    if not info.enabled:
        return [obj]
    out: List[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()
