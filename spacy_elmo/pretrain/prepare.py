"""A run's data, as every rank computes it alike: the corpus (tokenised
once, then read from OUTPUT/corpus_cache), the held-out split, the
vocabulary, the batchers and the unigram baseline."""
import logging
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import numpy

from . import distributed as D
from .batches import Batcher, dev_batches, epoch_batches, split_dev
from .config import PretrainConfig
from .corpus import N_RESERVED_TYPES, Corpus
from .reading import read_corpus
from .vocab import Vocab

logger = logging.getLogger(__name__)


@dataclass
class RunData:
    corpus: Corpus
    dev_corpus: Corpus
    train_idx: numpy.ndarray
    dev_idx: numpy.ndarray
    train_lengths: numpy.ndarray
    vocab: Vocab
    fingerprint: str
    batcher: Batcher
    dev_batcher: Batcher
    dev_batches: List[numpy.ndarray]
    steps_per_epoch: int
    n_batches: int
    unigram_ppl: Optional[float]


def read_corpora(config: PretrainConfig, cache_dir: Path, info: D.DistInfo) -> Tuple[Corpus, Corpus]:
    """The training corpus and the held-out one (the same object when the
    held-out windows are split off the training text). Every rank reads the
    cache or tokenises; only rank 0 writes the cache, so ranks never write
    one file at once (and no rank waits at a barrier while another
    tokenises for longer than the process group's timeout)."""
    def read(paths: List[str]) -> Corpus:
        return read_corpus(
            paths, config.lang, config.max_tokens, config.max_line_chars, config.strict,
            cache_dir=cache_dir, write_cache=info.is_main,
        )

    corpus = read(config.train)
    return corpus, (read(config.dev) if config.dev else corpus)


def build_vocab(
    config: PretrainConfig, corpus: Corpus, type_counts: numpy.ndarray, resumed: Optional[Sequence[str]] = None
) -> Vocab:
    """``--vocab``, else the vocabulary of ``--init``'s model (so its softmax
    carries over; a resumed run whose ``--init`` directory is gone takes it
    from its checkpoint, ``resumed``), else the most frequent training words."""
    init_vocab = Path(config.init) / "vocab.txt" if config.init else None
    if config.vocab:
        return Vocab.from_file(config.vocab)
    if init_vocab is not None and init_vocab.is_file():
        return Vocab.from_file(init_vocab)
    if init_vocab is not None and resumed is not None:
        return Vocab(list(resumed))
    return Vocab.build(
        Counter({corpus.types[i]: int(c) for i, c in enumerate(type_counts) if i >= N_RESERVED_TYPES and c > 0}),
        config.vocab_size,
        config.min_count,
    )


def unigram_perplexity(
    train_counts: numpy.ndarray, n_train_windows: int, dev_targets: numpy.ndarray, n_dev_windows: int
) -> float:
    """Perplexity of an add-one unigram model of the training targets on the dev
    targets (one direction: the tokens plus one sentence boundary per window;
    both directions give the same value). ``train_counts``: per vocab id."""
    counts = train_counts.astype(numpy.float64).copy()
    counts[0] = counts[1] = 0.0
    counts[1] = n_train_windows  # the boundary predicted once per window
    counts += 1.0
    logp = numpy.log(counts / counts.sum())
    total = -(logp[dev_targets].sum() + n_dev_windows * logp[1])
    return float(math.exp(total / (len(dev_targets) + n_dev_windows)))


def prepare_data(
    config: PretrainConfig, out: Path, max_chars: int, info: D.DistInfo,
    check: Optional[Callable[[Vocab, str], None]] = None, resumed_vocab: Optional[Sequence[str]] = None,
) -> RunData:
    """``check(vocab, fingerprint)`` runs as soon as those are known (the
    resume checks), before the slower work. ``resumed_vocab``: the
    checkpoint's vocabulary (:func:`build_vocab`)."""
    corpus, dev_corpus = read_corpora(config, out / "corpus_cache", info)
    if dev_corpus is corpus:
        train_idx, dev_idx = split_dev(len(corpus), config.dev_fraction, config.max_dev_windows, config.seed)
    else:
        train_idx, dev_idx = numpy.arange(len(corpus)), numpy.arange(len(dev_corpus))
    # Type counts of the training windows alone (held-out ones taken out).
    type_counts = numpy.array(corpus.counts, dtype=numpy.int64)
    if dev_corpus is corpus:
        for w in dev_idx:
            numpy.subtract.at(type_counts, corpus.window(int(w)), 1)
    vocab = build_vocab(config, corpus, type_counts, resumed_vocab)
    fingerprint = corpus.fingerprint()
    if check is not None:
        check(vocab, fingerprint)
    batcher = Batcher(corpus, vocab, max_chars)
    dev_batcher = batcher if dev_corpus is corpus else Batcher(dev_corpus, vocab, max_chars)

    # Vocab-id counts of the training targets, for the unigram baseline.
    vocab_counts = numpy.zeros(len(vocab), dtype=numpy.int64)
    numpy.add.at(vocab_counts, batcher.type_vocab[N_RESERVED_TYPES:], type_counts[N_RESERVED_TYPES:])
    dev_targets = (
        numpy.concatenate([dev_batcher.type_vocab[dev_corpus.window(int(w))] for w in dev_idx])
        if len(dev_idx)
        else numpy.zeros(0, numpy.int64)
    )
    unigram_ppl = unigram_perplexity(vocab_counts, len(train_idx), dev_targets, len(dev_idx)) if len(dev_idx) else None

    train_lengths = numpy.array([len(corpus.window(int(i))) for i in train_idx], dtype=numpy.int64)
    n_batches = len(epoch_batches(train_lengths, config.batch_size, config.seed, 0))
    steps_per_epoch = n_batches // info.world_size
    if steps_per_epoch < 1:
        raise ValueError(
            f"the corpus gives {n_batches} batches of {config.batch_size}, fewer than the {info.world_size} processes; "
            "use a smaller batch size or more text"
        )
    return RunData(
        corpus=corpus, dev_corpus=dev_corpus, train_idx=train_idx, dev_idx=dev_idx, train_lengths=train_lengths,
        vocab=vocab, fingerprint=fingerprint, batcher=batcher, dev_batcher=dev_batcher,
        dev_batches=dev_batches(dev_corpus, dev_idx, config.batch_size, info.rank, info.world_size),
        steps_per_epoch=steps_per_epoch, n_batches=n_batches, unigram_ppl=unigram_ppl,
    )
