"""Optimizer, learning-rate schedule and mixed precision of a run."""
from typing import Callable

import torch

from .config import PretrainConfig


def make_optimizer(config: PretrainConfig, params) -> torch.optim.Optimizer:
    """Adam, or Adagrad as bilm-tf had it (initial accumulator 1.0)."""
    if config.optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=config.learning_rate, initial_accumulator_value=1.0)
    return torch.optim.Adam(params, lr=config.learning_rate)


def lr_factor(config: PretrainConfig) -> Callable[[int], float]:
    """Linear warm-up, then linear decay to zero at ``max_steps`` (or constant).
    ``max_steps`` is read at every step, as the training loop reads it, so a
    ``pretrain`` callback that changes ``config.max_steps`` mid-run (a run
    fitted to a time budget) moves the run's end
    there, the decay steepened or eased to reach zero at the new end.
    A run begun at ``start_step`` (a new optimizer on an export) has the
    schedule of a run from step 0, scaled by a warm-up of its own from
    ``start_step`` on."""
    warmup, linear, start = config.warmup_steps, config.schedule == "linear", config.start_step

    def schedule(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if linear:
            total = config.max_steps
            return max(0.0, (total - step) / max(1, total - warmup))
        return 1.0

    def factor(step: int) -> float:
        if start and warmup and step - start < warmup:
            return schedule(step) * (step - start + 1) / warmup
        return schedule(step)

    return factor


def make_scheduler(config: PretrainConfig, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
    """The scheduler counts the run's own steps; the factor takes the step
    of the schedule (``start_step`` more)."""
    factor, start = lr_factor(config), config.start_step
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: factor(k + start))


def make_scaler(config: PretrainConfig) -> torch.amp.GradScaler:
    """Loss scaling, which only fp16 needs (a no-op otherwise)."""
    return torch.amp.GradScaler("cuda", enabled=config.precision == "fp16")


def autocast(config: PretrainConfig, device: torch.device):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.precision)
    return torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)
