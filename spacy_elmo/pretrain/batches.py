"""Batches of a run: which windows train and which are held out, their
order (a function of seed and epoch, so a resume finds its place), and
their tensors."""
from typing import List, Sequence, Tuple, Union

import numpy
import torch

from ..bilm.chars import boundary_char_ids, token_char_ids
from .corpus import BOS_TYPE, EOS_TYPE, N_RESERVED_TYPES, Corpus
from .vocab import Vocab


class Batcher:
    """Turns windows of type ids into (char ids, target word ids) tensors."""

    def __init__(self, corpus: Corpus, vocab: Vocab, max_chars: int) -> None:
        self.corpus = corpus
        n = len(corpus.types)
        chars = numpy.zeros((n, max_chars), dtype=numpy.int16)
        bos, eos = boundary_char_ids(max_chars)
        chars[BOS_TYPE], chars[EOS_TYPE] = bos, eos
        to_vocab = numpy.full(n, -1, dtype=numpy.int64)
        to_vocab[BOS_TYPE], to_vocab[EOS_TYPE] = vocab.bos_id, vocab.eos_id
        for i in range(N_RESERVED_TYPES, n):
            chars[i] = token_char_ids(corpus.types[i], max_chars)
            to_vocab[i] = vocab.get(corpus.types[i])
        self.type_chars = chars
        self.type_vocab = to_vocab

    def __call__(
        self, windows: Union[Sequence[int], numpy.ndarray], device: torch.device
    ) -> Tuple[torch.Tensor, torch.Tensor, int]:
        rows = [self.corpus.window(int(i)) for i in windows]
        width = max(len(r) for r in rows) + 2
        types = numpy.zeros((len(rows), width), dtype=numpy.int64)
        for r, ids in enumerate(rows):
            types[r, 0] = BOS_TYPE
            types[r, 1 : len(ids) + 1] = ids
            types[r, len(ids) + 1] = EOS_TYPE
        char_ids = torch.from_numpy(self.type_chars[types].astype(numpy.int64)).to(device)
        targets = torch.from_numpy(self.type_vocab[types]).to(device)
        return char_ids, targets, sum(len(r) for r in rows)


def epoch_batches(lengths: numpy.ndarray, batch_size: int, seed: int, epoch: int) -> List[numpy.ndarray]:
    """The batches of one epoch (positions into ``lengths``): a permutation
    seeded by (seed, epoch), cut into pools of 50 batches, each pool sorted by
    length (less padding) and cut into batches, then the batches shuffled.
    A deterministic function of its arguments."""
    rng = numpy.random.default_rng([seed, epoch])
    perm = rng.permutation(len(lengths))
    pool = batch_size * 50
    batches: List[numpy.ndarray] = []
    for start in range(0, len(perm), pool):
        chunk = perm[start : start + pool]
        chunk = chunk[numpy.argsort(lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def settle(epoch: int, batch: int, world_size: int, n_batches: int) -> Tuple[int, int]:
    """Where a step of ``world_size`` processes reads, given the first batch
    it would read: ``(epoch, batch)``, rank ``r`` taking the epoch's batch
    ``batch + r``; the next epoch's start when the batches left in this
    one are fewer than the processes (those are skipped). A step's position
    is the last one's plus ``world_size`` batches, settled; a run resumed
    with another number of processes goes on from the checkpoint's position,
    so every batch of an epoch is read once whatever the processes were."""
    return (epoch + 1, 0) if batch + world_size > n_batches else (epoch, batch)


def split_dev(n_windows: int, fraction: float, max_windows: int, seed: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Held-out windows chosen by a seeded permutation: (train, dev) indices."""
    if fraction <= 0 or n_windows < 2:
        return numpy.arange(n_windows), numpy.zeros(0, dtype=numpy.int64)
    n_dev = min(max_windows, max(1, int(round(n_windows * fraction))), n_windows - 1)
    perm = numpy.random.default_rng([seed, 7919]).permutation(n_windows)
    return numpy.sort(perm[n_dev:]), numpy.sort(perm[:n_dev])


def dev_batches(
    corpus: Corpus, dev_idx: numpy.ndarray, batch_size: int, rank: int, world_size: int
) -> List[numpy.ndarray]:
    """This rank's share of the held-out windows, sorted by length."""
    order = (
        dev_idx[numpy.argsort([len(corpus.window(int(i))) for i in dev_idx], kind="stable")]
        if len(dev_idx)
        else dev_idx
    )
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return batches[rank::world_size]
