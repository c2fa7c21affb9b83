"""Pretraining a biLM on one's own text.

What is trained is exactly the inference model, :class:`spacy_elmo.bilm.BiLM`
(char-CNN shared by both directions, separate forward and backward LSTM
stacks), plus one adaptive softmax shared by both directions
(:class:`spacy_elmo.pretrain.lm_head.LMHead`).

**Stateless training.** Every sentence (or window of at most ``max_tokens``
tokens) starts from a zero LSTM state, in both directions, and sentences are
independent. bilm-tf instead cut a continuous token stream into 20-step pieces
and carried the LSTM state from one batch to the next (truncated BPTT), so its
LSTMs saw "warm" states that run on from earlier text. Our inference is
deterministic and stateless (a sentence's vectors do not depend on what was
embedded before it), so we train in the same regime: the model never has to
cope at inference with a zero state it never saw in training, and gradients
flow through whole sentences (up to ``max_tokens``) rather than 20 steps.
The cost: no context across sentence boundaries, and padding/sorting work
since sentences vary in length (batches are bucketed by length).

**Optimisation.** Adam (default lr 1e-3) or Adagrad (bilm-tf's choice: lr 0.2,
initial accumulator 1.0); linear warm-up then linear decay to zero at
``max_steps`` (or constant after warm-up); gradients clipped to a global norm
of 10 (bilm-tf's value); dropout (default 0.1) on the input of every LSTM
layer and on the top layer before the softmax. The loss is the mean NLL per
target token, averaged over the two directions.

**Determinism and resume.** The data order is a function of ``seed`` and the
epoch only (a seeded permutation, then length buckets), and step ``s`` reads
the batch at a fixed position of that order, so a resumed run jumps straight to
its data. A checkpoint holds the model, optimizer, scheduler and GradScaler
states, the step, and every rank's RNG states (as tensors, so it loads with
``torch.load(weights_only=True)``); resuming from it gives the same weights
as an uninterrupted run (same machine, same thread count).
"""
import json
import logging
import math
import os
import signal
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy
import torch
from torch import nn

from ..bilm.chars import boundary_char_ids, token_char_ids
from .lm_head import LMHead, default_cutoffs
from ..bilm.model import BiLM
from ..bilm.options import BiLMOptions
from . import distributed as D
from .corpus import BOS_TYPE, EOS_TYPE, N_RESERVED_TYPES, Corpus, read_corpus
from .errors import PretrainError
from .vocab import Vocab

logger = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "spacy_elmo.pretrain.checkpoint/1"
PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = {"adam": 1e-3, "adagrad": 0.2}
SCHEDULES = ("linear", "constant")


@dataclass
class PretrainConfig:
    """Everything that defines a pretraining run (saved as config.json)."""

    train: List[str]
    output: str
    dev: List[str] = field(default_factory=list)
    options: Optional[str] = None
    shape: Optional[str] = None
    init: Optional[str] = None
    lang: str = "en"
    max_tokens: int = 100
    max_line_chars: int = 100_000
    strict: bool = False
    vocab: Optional[str] = None
    vocab_size: int = 50_000
    min_count: int = 1
    cutoffs: Optional[List[int]] = None
    dev_fraction: float = 0.01
    max_dev_windows: int = 2000
    batch_size: int = 32
    max_steps: int = 10_000
    optimizer: str = "adam"
    lr: Optional[float] = None
    warmup_steps: int = 0
    schedule: str = "linear"
    clip_norm: float = 10.0
    dropout: float = 0.1
    seed: int = 0
    log_every: int = 10
    eval_every: Optional[int] = None
    checkpoint_every: int = 1000
    device: str = "cpu"
    precision: str = "fp32"

    #: Fields that may change when resuming (they do not change the weights).
    #: ``max_steps`` may change too: a run can be lengthened (or shortened);
    #: with the linear schedule the decay is then stretched from that step on.
    RESUMABLE_CHANGES = ("output", "log_every", "eval_every", "checkpoint_every", "device", "train", "dev", "max_steps")

    def validate(self) -> None:
        problems = []
        if not self.train:
            problems.append("no training corpus given")
        if self.options is not None and self.shape is not None:
            problems.append("give one of options (a JSON file) and shape (small, medium, original), not both")
        if self.options is None and self.shape is None and self.init is None:
            problems.append("give options (a JSON file), shape (small, medium, original) or init (an exported model)")
        if self.init is not None and self.shape is not None:
            problems.append("init takes the model's options from the exported model; do not give shape")
        for name in ("max_tokens", "batch_size", "max_steps", "log_every", "eval_every", "checkpoint_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, found {getattr(self, name)}")
        if self.warmup_steps < 0:
            problems.append(f"warmup_steps must be >= 0, found {self.warmup_steps}")
        if self.optimizer not in OPTIMIZERS:
            problems.append(f"optimizer must be one of {sorted(OPTIMIZERS)}, found {self.optimizer!r}")
        if self.schedule not in SCHEDULES:
            problems.append(f"schedule must be one of {SCHEDULES}, found {self.schedule!r}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {PRECISIONS}, found {self.precision!r}")
        if self.precision == "fp16" and not self.device.startswith("cuda"):
            problems.append("precision fp16 needs a CUDA device (use bf16 or fp32 on CPU)")
        if not 0.0 <= self.dropout < 1.0:
            problems.append(f"dropout must be in [0, 1), found {self.dropout}")
        if not 0.0 <= self.dev_fraction < 1.0:
            problems.append(f"dev_fraction must be in [0, 1), found {self.dev_fraction}")
        if self.clip_norm <= 0:
            problems.append(f"clip_norm must be > 0, found {self.clip_norm}")
        if self.lr is not None and self.lr <= 0:
            problems.append(f"lr must be > 0, found {self.lr}")
        if problems:
            raise ValueError("invalid pretraining settings: " + "; ".join(problems))

    @property
    def eval_interval(self) -> int:
        """``eval_every``, or by default ~20 evaluations per run (at least
        every 50 steps, at most every 1,000), so a short run has a curve too."""
        if self.eval_every is not None:
            return self.eval_every
        return min(1000, max(50, self.max_steps // 20))

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else OPTIMIZERS[self.optimizer]

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "PretrainConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# ------------------------------------------------------------------- model
class PretrainModel(nn.Module):
    """BiLM + shared softmax; ``forward`` returns the summed NLL of each
    direction and the number of targets per direction."""

    def __init__(self, options: BiLMOptions, vocab_size: int, dropout: float = 0.1, cutoffs: Optional[Sequence[int]] = None) -> None:
        super().__init__()
        self.bilm = BiLM(options, dropout=dropout)
        self.head = LMHead(options.projection_dim, vocab_size, cutoffs)
        self.output_dropout = dropout

    def top_layer(self, char_ids: torch.Tensor) -> torch.Tensor:
        top = self.bilm(char_ids).layers[-1]
        return nn.functional.dropout(top, self.output_dropout, self.training)

    def forward(self, char_ids: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, int]:
        return self.head(self.top_layer(char_ids), targets)


# -------------------------------------------------------------------- data
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

    def __call__(self, windows: Sequence[int], device: torch.device) -> Tuple[torch.Tensor, torch.Tensor, int]:
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
    batches = []
    for start in range(0, len(perm), pool):
        chunk = perm[start : start + pool]
        chunk = chunk[numpy.argsort(lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def split_dev(n_windows: int, fraction: float, max_windows: int, seed: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Held-out windows chosen by a seeded permutation: (train, dev) indices."""
    if fraction <= 0 or n_windows < 2:
        return numpy.arange(n_windows), numpy.zeros(0, dtype=numpy.int64)
    n_dev = min(max_windows, max(1, int(round(n_windows * fraction))), n_windows - 1)
    perm = numpy.random.default_rng([seed, 7919]).permutation(n_windows)
    return numpy.sort(perm[n_dev:]), numpy.sort(perm[:n_dev])


def unigram_perplexity(train_counts: numpy.ndarray, n_train_windows: int, dev_targets: numpy.ndarray, n_dev_windows: int) -> float:
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


# ---------------------------------------------------------------- helpers
def busy_machine_warning(threads: int) -> Optional[str]:
    """A warning when torch's ``threads`` threads will compete with other
    work for the CPU: its threads wait for each other at every operation,
    so one that loses its core stalls the rest (measured on a 2-core
    machine with other work running: 2 threads trained 4-5x slower than 1).
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


def plot_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _load_options(config: PretrainConfig) -> BiLMOptions:
    if config.init is not None:
        init_options = BiLMOptions.from_file(Path(config.init) / "options.json")
        if config.options is not None and BiLMOptions.from_file(config.options).to_dict() != init_options.to_dict():
            raise ValueError(
                f"--options {config.options} differs from the options of the model in --init {config.init}; "
                "leave --options out to continue that model"
            )
        return init_options
    if config.shape is not None:
        from ..bilm.options import PUBLISHED_SHAPES, published_options

        if config.shape not in PUBLISHED_SHAPES:
            raise ValueError(f"shape must be one of {sorted(PUBLISHED_SHAPES)}, found {config.shape!r}")
        return published_options(config.shape)
    return BiLMOptions.from_file(config.options)  # type: ignore[arg-type]


def _make_optimizer(config: PretrainConfig, params) -> torch.optim.Optimizer:
    if config.optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=config.learning_rate, initial_accumulator_value=1.0)
    return torch.optim.Adam(params, lr=config.learning_rate)


def _lr_factor(config: PretrainConfig) -> Callable[[int], float]:
    warmup, total, linear = config.warmup_steps, config.max_steps, config.schedule == "linear"

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if linear:
            return max(0.0, (total - step) / max(1, total - warmup))
        return 1.0

    return factor


def _autocast(config: PretrainConfig, device: torch.device):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.precision)
    return torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)


def _rng_state(device: torch.device) -> Dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: Dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _atomic_save(obj: Any, path: Path) -> None:
    """Write ``obj`` to ``path`` through a temporary file, so that a failed
    write (disk full, quota) leaves the previous checkpoint intact; the
    failure is a PretrainError that says so."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:  # torch reports a full disk as RuntimeError
        try:
            tmp.unlink()
        except OSError:
            pass
        reason = (str(err).strip().splitlines() or [repr(err)])[0]
        kept = f"the previous checkpoint {path} is intact" if path.exists() else "no earlier checkpoint exists"
        raise PretrainError(
            f"cannot write the checkpoint {path} ({type(err).__name__}: {reason}); {kept}. "
            "Free disk space (or check the output's file system) and continue with --resume"
        ) from err


def load_checkpoint(path: Path) -> Dict[str, Any]:
    """Load a checkpoint without unpickling arbitrary objects."""
    path = Path(path)
    if not path.is_file():
        raise PretrainError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise PretrainError(f"cannot load checkpoint {path} (weights_only): {err}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise PretrainError(f"{path} is not a spacy_elmo pretraining checkpoint")
    return state


class _StopFlag:
    """SIGTERM/SIGINT -> finish the current step, checkpoint, stop."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Dict[int, Any] = {}

    def _handler(self, signum, frame) -> None:
        self.requested = True

    def __enter__(self) -> "_StopFlag":
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handler)
        except ValueError:  # not the main thread: no handlers
            pass
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# ------------------------------------------------------------------ train
def pretrain(
    config: PretrainConfig,
    resume: bool = False,
    progress: bool = True,
    callback: Optional[Callable[[int, Dict[str, Any]], None]] = None,
) -> Dict[str, Any]:
    """Train (or resume) a biLM; returns a summary dict. See the module doc."""
    config.validate()
    device = torch.device(config.device)
    info = D.setup(config.device)
    if info.enabled and device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
    try:
        return _pretrain(config, resume, progress, callback, info, device)
    finally:
        D.teardown(info)


def _pretrain(config, resume, progress, callback, info: D.DistInfo, device: torch.device) -> Dict[str, Any]:
    out = Path(config.output)
    ckpt_dir = out / "checkpoints"
    last = ckpt_dir / "last.pt"
    checkpoint = None
    if resume:
        checkpoint = load_checkpoint(last)
        _check_resume(checkpoint, config, info)
    elif last.exists():
        raise ValueError(f"{out} already holds a checkpoint; use --resume to continue it or choose another output")
    options = _load_options(config)
    if checkpoint is not None:
        _check_resume_options(checkpoint, options)
    _check_output(out, info)

    # Corpus, split, vocabulary (every rank computes the same).
    cache_dir = out / "corpus_cache"
    corpus = read_corpus(config.train, config.lang, config.max_tokens, config.max_line_chars, config.strict, cache_dir=cache_dir)
    if config.dev:
        dev_corpus = read_corpus(
            config.dev, config.lang, config.max_tokens, config.max_line_chars, config.strict, cache_dir=cache_dir
        )
        train_idx = numpy.arange(len(corpus))
        dev_idx = numpy.arange(len(dev_corpus))
    else:
        dev_corpus = corpus
        train_idx, dev_idx = split_dev(len(corpus), config.dev_fraction, config.max_dev_windows, config.seed)
    type_counts = numpy.array(corpus.counts, dtype=numpy.int64)
    if dev_corpus is corpus:
        for w in dev_idx:
            numpy.subtract.at(type_counts, corpus.window(int(w)), 1)
    init_vocab = Path(config.init) / "vocab.txt" if config.init else None
    if config.vocab:
        vocab = Vocab.from_file(config.vocab)
    elif init_vocab is not None and init_vocab.is_file():
        # Continuing a model: keep its vocabulary, so its softmax carries over.
        vocab = Vocab.from_file(init_vocab)
    else:
        from collections import Counter

        vocab = Vocab.build(
            Counter({corpus.types[i]: int(c) for i, c in enumerate(type_counts) if i >= N_RESERVED_TYPES and c > 0}),
            config.vocab_size,
            config.min_count,
        )
    fingerprint = corpus.fingerprint()
    if checkpoint is not None:
        _check_resume_data(checkpoint, vocab, fingerprint)
    options.extra["n_tokens_vocab"] = len(vocab)
    batcher = Batcher(corpus, vocab, options.max_characters_per_token)
    dev_batcher = batcher if dev_corpus is corpus else Batcher(dev_corpus, vocab, options.max_characters_per_token)

    # Vocab-id counts of the training targets, for the unigram baseline.
    vocab_counts = numpy.zeros(len(vocab), dtype=numpy.int64)
    numpy.add.at(vocab_counts, batcher.type_vocab[N_RESERVED_TYPES:], type_counts[N_RESERVED_TYPES:])
    dev_targets = numpy.concatenate([dev_batcher.type_vocab[dev_corpus.window(int(w))] for w in dev_idx]) if len(dev_idx) else numpy.zeros(0, numpy.int64)
    unigram_ppl = unigram_perplexity(vocab_counts, len(train_idx), dev_targets, len(dev_idx)) if len(dev_idx) else None

    train_lengths = numpy.array([len(corpus.window(int(i))) for i in train_idx], dtype=numpy.int64)
    n_batches = len(epoch_batches(train_lengths, config.batch_size, config.seed, 0))
    steps_per_epoch = n_batches // info.world_size
    if steps_per_epoch < 1:
        raise ValueError(
            f"the corpus gives {n_batches} batches of {config.batch_size}, fewer than the {info.world_size} processes; "
            "use a smaller batch size or more text"
        )
    dev_order = dev_idx[numpy.argsort([len(dev_corpus.window(int(i))) for i in dev_idx], kind="stable")] if len(dev_idx) else dev_idx
    dev_batches = [dev_order[i : i + config.batch_size] for i in range(0, len(dev_order), config.batch_size)]
    dev_batches = dev_batches[info.rank :: info.world_size]

    # Model, optimizer, schedule.
    torch.manual_seed(config.seed)
    model = PretrainModel(options, len(vocab), config.dropout, config.cutoffs).to(device)
    optimizer = _make_optimizer(config, model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor(config))
    scaler = torch.amp.GradScaler("cuda", enabled=config.precision == "fp16")
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        if checkpoint.get("scaler"):
            scaler.load_state_dict(checkpoint["scaler"])
        _set_rng_state(checkpoint["rng"][info.rank], device)
        step = int(checkpoint["step"])
        tokens_seen = int(checkpoint["tokens_seen"])
    else:
        if config.init:
            _init_from_export(model, Path(config.init), vocab)
        # Different dropout masks on each rank; the weights are the same.
        torch.manual_seed(config.seed * 1000 + 1 + info.rank)
        step, tokens_seen = 0, 0
    train_model: nn.Module = model
    if info.enabled:
        # Width-1 char-CNN filters get gradients in a transposed layout; DDP
        # copies them into its buckets correctly but warns once per rank.
        warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
        train_model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=True
        )
    n_params = sum(p.numel() for p in model.parameters())

    log = _Log(out / "log.jsonl", info.is_main)
    if checkpoint is not None:
        log.rollback(step)
    if info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        ckpt_dir.mkdir(exist_ok=True)
        (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
        vocab.to_file(out / "vocab.txt")
        options.to_file(out / "options.json")
        log.write(
            event="resume" if checkpoint else "start", step=step, world_size=info.world_size,
            corpus=corpus.stats.to_dict(), train_windows=int(len(train_idx)), dev_windows=int(len(dev_idx)),
            vocab_size=len(vocab), cutoffs=model.head.cutoffs, parameters=n_params,
            steps_per_epoch=steps_per_epoch, unigram_dev_ppl=unigram_ppl,
        )
        logger.info("corpus: %s", corpus.stats.summary())

    def save(reason: str) -> None:
        rng = D.gather_to_main(info, _rng_state(device))
        if info.is_main:
            epoch, k = divmod(step, steps_per_epoch)
            _atomic_save(
                {
                    "format": CHECKPOINT_FORMAT, "step": step, "epoch": epoch, "batch_in_epoch": k * info.world_size,
                    "tokens_seen": tokens_seen, "world_size": info.world_size, "config": config.to_dict(),
                    "options": options.to_dict(), "vocab": list(vocab.words), "corpus_sha256": fingerprint,
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "rng": rng,
                },
                last,
            )
            log.write(event="checkpoint", step=step, reason=reason)
        D.barrier(info)

    def evaluate() -> Optional[Dict[str, float]]:
        if not len(dev_idx):
            return None
        model.eval()
        sums = [0.0, 0.0, 0.0]
        with torch.no_grad(), _autocast(config, device):
            for idx in dev_batches:
                char_ids, targets, _ = dev_batcher(idx, device)
                # The adaptive softmax's own log-probability of each target:
                # exact for the model's normalised distribution over the
                # whole vocabulary, without scoring every word (LMHead.nll).
                nll_f, nll_b, n = model.head(model.top_layer(char_ids), targets)
                sums[0] += float(nll_f)
                sums[1] += float(nll_b)
                sums[2] += n
        nll_f, nll_b, n = D.all_sum(info, sums, device)
        result = {
            "dev_ppl_forward": math.exp(nll_f / n), "dev_ppl_backward": math.exp(nll_b / n),
            "dev_ppl": math.exp((nll_f + nll_b) / (2 * n)), "dev_tokens": int(n),
        }
        log.write(event="eval", step=step, **result)
        return result

    bar = None
    if progress and info.is_main:
        from tqdm import tqdm

        bar = tqdm(total=config.max_steps, initial=step, unit="step", dynamic_ncols=True)
    epoch_cache: Dict[int, List[numpy.ndarray]] = {}
    window_sums = [0.0, 0.0, 0.0, 0.0]  # nll_f, nll_b, targets, tokens since the last log
    last_log_time = time.perf_counter()
    start_time = last_log_time
    last_eval = None
    stopped = False
    with _StopFlag() as stop:
        while step < config.max_steps:
            epoch, k = divmod(step, steps_per_epoch)
            if epoch not in epoch_cache:
                epoch_cache = {epoch: epoch_batches(train_lengths, config.batch_size, config.seed, epoch)}
            windows = train_idx[epoch_cache[epoch][k * info.world_size + info.rank]]
            char_ids, targets, n_tokens = batcher(windows, device)
            model.train()
            with _autocast(config, device):
                nll_f, nll_b, n = train_model(char_ids, targets)
                loss = (nll_f + nll_b) / (2 * max(n, 1))
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm))
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            step += 1
            window_sums[0] += float(nll_f.detach())
            window_sums[1] += float(nll_b.detach())
            window_sums[2] += n
            window_sums[3] += n_tokens
            tokens_seen += n_tokens * info.world_size  # exact total is logged below
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{float(loss.detach()):.3f}", refresh=False)
            if step % config.log_every == 0 or step == config.max_steps:
                f, b, nt, tok = D.all_sum(info, window_sums, device)
                now = time.perf_counter()
                rate = tok / max(now - last_log_time, 1e-9)
                log.write(
                    event="train", step=step, epoch=epoch, loss=(f + b) / (2 * nt), ppl_forward=math.exp(f / nt),
                    ppl_backward=math.exp(b / nt), lr=scheduler.get_last_lr()[0], grad_norm=grad_norm,
                    tokens_per_s=rate, elapsed_s=now - start_time, tokens_seen=tokens_seen,
                )
                if bar is not None:
                    bar.set_postfix(loss=f"{(f + b) / (2 * nt):.3f}", tok_s=f"{rate:.0f}")
                window_sums = [0.0, 0.0, 0.0, 0.0]
                last_log_time = now
            if step % config.eval_interval == 0 and step < config.max_steps:
                last_eval = evaluate()
            if step % config.checkpoint_every == 0 and step < config.max_steps:
                save("every")
            if callback is not None:
                callback(step, {"loss": float(loss.detach()), "model": model, "windows": windows.tolist()})
            if D.any_flag(info, stop.requested, device):
                stopped = True
                break
    if bar is not None:
        bar.close()
    if stopped:
        save("signal")
        log.write(event="stopped", step=step)
        return {"step": step, "stopped": True, "output": str(out)}
    last_eval = evaluate()
    save("end")
    summary = {"step": step, "stopped": False, "output": str(out), "unigram_dev_ppl": unigram_ppl, "dev": last_eval}
    if info.is_main:
        export(out, out / "export")
        log.write(event="end", step=step, dev=last_eval, unigram_dev_ppl=unigram_ppl)
        try:
            plot_learning_curve(out / "log.jsonl", out / "learning_curve.png")
        except Exception as err:  # a plot must never lose a finished run
            logger.warning("learning curve not written: %s", err)
    return summary


def _check_resume(checkpoint: Dict[str, Any], config: PretrainConfig, info: D.DistInfo) -> None:
    """Refuse a resume whose settings change the weights; report (log) the
    settings that may change (:attr:`PretrainConfig.RESUMABLE_CHANGES`), so
    that a resume is never silent about a change. The options' contents and
    the corpus are checked by :func:`_check_resume_options` and
    :func:`_check_resume_data`."""
    saved = checkpoint["config"]
    current = config.to_dict()
    diffs, allowed = [], []
    for k in current:
        if saved.get(k) == current[k]:
            continue
        change = f"{k}: {saved.get(k)!r} -> {current[k]!r}"
        if k in PretrainConfig.RESUMABLE_CHANGES:
            if k == "max_steps" and config.schedule == "linear":
                change += f" (the linear decay now reaches zero at step {config.max_steps})"
            allowed.append(change)
        else:
            diffs.append(change)
    if int(checkpoint["world_size"]) != info.world_size:
        diffs.append(f"world size: {checkpoint['world_size']} -> {info.world_size}")
    if diffs:
        raise PretrainError("cannot resume: settings differ from the checkpoint's: " + "; ".join(diffs))
    if allowed and info.is_main:
        logger.warning("resuming with changed settings: %s", "; ".join(allowed))


def _comparable_options(data: Dict[str, Any]) -> Dict[str, Any]:
    """An options dict (``BiLMOptions.to_dict``) without ``n_tokens_vocab``,
    which the run sets itself."""
    return {k: v for k, v in data.items() if k != "n_tokens_vocab"}


def _dict_diffs(old: Any, new: Any, path: str = "") -> List[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new), key=str) for d in _dict_diffs(old.get(k), new.get(k), f"{path}{k}.")]
    return [] if old == new else [f"{path.rstrip('.')}: {old!r} -> {new!r}"]


def _check_resume_options(checkpoint: Dict[str, Any], options: BiLMOptions) -> None:
    """Refuse a resume whose options (the file's contents, not its path)
    differ from the checkpoint's."""
    diffs = _dict_diffs(_comparable_options(checkpoint["options"]), _comparable_options(options.to_dict()))
    if diffs:
        raise PretrainError(
            "cannot resume: the biLM options differ from the checkpoint's (" + "; ".join(diffs) + "). "
            "Resume with the options the checkpoint was trained with (its copy is OUTPUT/options.json), "
            "or start a fresh run in another --output"
        )


def _check_resume_data(checkpoint: Dict[str, Any], vocab: Vocab, fingerprint: str) -> None:
    """Refuse a resume whose corpus or vocabulary differ from the
    checkpoint's: a changed corpus would silently remap word ids (or, with
    another vocabulary size, fail inside torch). The corpus is compared by
    :meth:`Corpus.fingerprint` (checkpoints from before it was stored: by
    their vocabulary alone)."""
    saved = checkpoint.get("corpus_sha256")
    if saved is not None and saved != fingerprint:
        raise PretrainError(
            f"cannot resume: the training corpus changed since the checkpoint (its tokens' SHA-256 "
            f"{saved[:12]}... -> {fingerprint[:12]}...). Resume with the text the checkpoint was trained on, "
            "or start a fresh run in another --output"
        )
    old, new = list(checkpoint["vocab"]), list(vocab.words)
    if old != new:
        where = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        first = f"id {where}: {old[where] if where < len(old) else None!r} -> {new[where] if where < len(new) else None!r}"
        raise PretrainError(
            f"cannot resume: the vocabulary differs from the checkpoint's ({len(old)} -> {len(new)} words; "
            f"first difference at {first}): the corpus or --vocab changed. Resume with the checkpoint's "
            "corpus and vocabulary (its copy is OUTPUT/vocab.txt), or start a fresh run in another --output"
        )


def _check_output(out: Path, info: D.DistInfo) -> None:
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


class _Log:
    """``log.jsonl``: one JSON record a line, written by rank 0."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled

    def write(self, **record: Any) -> None:
        if not self.enabled:
            return
        record = {"time": time.time(), **record}
        try:
            with open(self.path, "a", encoding="utf-8") as fout:
                fout.write(json.dumps(record) + "\n")
        except OSError as err:
            raise PretrainError(
                f"cannot write the log {self.path} ({err.strerror or err}); free disk space and continue "
                "with --resume (the last checkpoint is intact)"
            ) from err

    def rollback(self, step: int) -> int:
        """On resume from the checkpoint of ``step``: drop the records of
        later steps (written after that checkpoint, by the run that went on
        and was lost), so that the log and the learning curve show each
        step once. Returns how many were dropped (also logged)."""
        if not self.enabled or not self.path.exists():
            return 0
        lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = []
        for line in lines:
            try:
                later = int(json.loads(line).get("step", 0)) > step
            except (ValueError, TypeError, AttributeError):
                later = False  # not ours to judge: keep it
            if not later:
                kept.append(line)
        dropped = len(lines) - len(kept)
        if dropped:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(kept), encoding="utf-8")
            os.replace(tmp, self.path)
            logger.warning("log.jsonl: dropped %d records after step %d (rolled back by the resume)", dropped, step)
        return dropped


# ------------------------------------------------------------- export/plot
def export(output_dir: Path, export_dir: Path, checkpoint: Optional[Path] = None) -> Path:
    """Write the checkpoint's biLM in the published format: ``weights.hdf5``,
    ``options.json`` and the vocabulary ``vocab.txt``."""
    state = load_checkpoint(_checkpoint_path(output_dir, checkpoint))
    bilm = _bilm_from_state(state)
    export_dir = Path(export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    bilm.to_hdf5(export_dir / "weights.hdf5", export_dir / "options.json")
    Vocab(state["vocab"]).to_file(export_dir / "vocab.txt")
    head = {k[len("head."):]: v for k, v in state["model"].items() if k.startswith("head.")}
    cutoffs = state["config"].get("cutoffs") or default_cutoffs(len(state["vocab"]))
    save_softmax(export_dir / "softmax.hdf5", head, cutoffs)
    return export_dir


SOFTMAX_FORMAT = "spacy_elmo.pretrain.softmax/1"


def save_softmax(path: Path, state: Dict[str, torch.Tensor], cutoffs: Sequence[int]) -> None:
    """The adaptive softmax's weights as hdf5 (one dataset per parameter,
    the format and cutoffs as attributes): plain arrays, nothing to unpickle."""
    import h5py

    with h5py.File(path, "w") as fout:
        fout.attrs["format"] = SOFTMAX_FORMAT
        fout.attrs["cutoffs"] = numpy.asarray(list(cutoffs), dtype=numpy.int64)
        for name, value in state.items():
            fout.create_dataset(name, data=value.detach().cpu().numpy())


def _load_softmax(path: Path, head: LMHead) -> None:
    import h5py

    try:
        with h5py.File(path, "r") as fin:
            if fin.attrs.get("format") != SOFTMAX_FORMAT:
                raise ValueError("not a spacy_elmo softmax file")
            cutoffs = [int(c) for c in fin.attrs["cutoffs"]]
            state = {}
            fin.visititems(lambda name, obj: state.__setitem__(name, torch.from_numpy(obj[()])) if isinstance(obj, h5py.Dataset) else None)
    except (OSError, KeyError, ValueError) as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    if cutoffs != list(head.cutoffs):
        raise ValueError(f"{path} has cutoffs {cutoffs}, this run {head.cutoffs}; leave --cutoffs at the model's")
    try:
        head.load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"{path} does not fit this run's softmax: {err}") from None


def _init_from_export(model: "PretrainModel", init_dir: Path, vocab: Vocab) -> None:
    """Start from an exported model (``export`` or a published/shipped
    model directory): its biLM weights, and its softmax (``softmax.hdf5``)
    when it is there and was trained over the same vocabulary. Optimizer,
    schedule and step start afresh."""
    from ..bilm.weights import load_hdf5

    weights = init_dir / "weights.hdf5"
    if not weights.is_file():
        raise ValueError(f"--init {init_dir}: no weights.hdf5 there (give a directory written by `export`)")
    load_hdf5(model.bilm, weights)
    softmax = init_dir / "softmax.hdf5"
    same_vocab = (init_dir / "vocab.txt").is_file() and Vocab.from_file(init_dir / "vocab.txt").words == vocab.words
    if softmax.is_file() and same_vocab:
        _load_softmax(softmax, model.head)
        logger.info("initialised the biLM and the softmax from %s", init_dir)
    else:
        logger.info("initialised the biLM from %s (softmax trained afresh: %s)", init_dir,
                    "no softmax.hdf5" if not softmax.is_file() else "another vocabulary")


def _checkpoint_path(output_dir: Path, checkpoint: Optional[Path]) -> Path:
    return Path(checkpoint) if checkpoint else Path(output_dir) / "checkpoints" / "last.pt"


def _bilm_from_state(state: Dict[str, Any]) -> BiLM:
    """The inference biLM of a checkpoint (the softmax is left out)."""
    bilm = BiLM(BiLMOptions.from_dict(state["options"]))
    prefix = "bilm."
    bilm.load_state_dict({k[len(prefix):]: v for k, v in state["model"].items() if k.startswith(prefix)})
    return bilm.eval()


def export_pipeline(output_dir: Path, target: Path, lang: Optional[str] = None, checkpoint: Optional[Path] = None) -> Path:
    """Write a spaCy pipeline (``spacy.blank(lang)`` + an ``elmo`` component
    holding the checkpoint's biLM) to ``target``; load it with
    ``spacy.load(target)``. ``lang`` defaults to the language whose tokenizer
    split the training text. Needs the spaCy integration
    (``spacy_elmo.pipeline``)."""
    try:
        from ..pipeline import add_elmo
    except ImportError as err:
        raise ValueError(
            f"exporting a spaCy pipeline needs spacy_elmo's spaCy integration (spacy_elmo.pipeline): {err}; "
            "export to hdf5 + options instead and load those with the elmo component"
        ) from None
    import spacy

    state = load_checkpoint(_checkpoint_path(output_dir, checkpoint))
    lang = lang or state["config"].get("lang") or "en"
    nlp = spacy.blank(lang)
    add_elmo(nlp, bilm=_bilm_from_state(state))
    nlp.meta["name"] = "elmo_pretrained"
    nlp.meta["description"] = f"biLM pretrained with spacy_elmo ({int(state['step'])} steps)"
    target = Path(target)
    nlp.to_disk(target)
    return target


def read_log(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def plot_learning_curve(log_path: Path, png_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_log(log_path)
    train = [r for r in records if r.get("event") == "train"]
    evals = [r for r in records if r.get("event") == "eval"]
    unigram = next((r.get("unigram_dev_ppl") for r in records if r.get("unigram_dev_ppl")), None)
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot([r["step"] for r in train], [math.exp(r["loss"]) for r in train], label="train (dropout on)", alpha=0.6)
    for key, label in (("dev_ppl", "held-out, geometric mean"), ("dev_ppl_forward", "held-out, forward"), ("dev_ppl_backward", "held-out, backward")):
        if evals:
            ax.plot([r["step"] for r in evals], [r[key] for r in evals], marker="o", label=label)
    if unigram:
        ax.axhline(unigram, color="grey", linestyle="--", label="held-out unigram")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("perplexity")
    ax.legend()
    ax.set_title("biLM pretraining")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
