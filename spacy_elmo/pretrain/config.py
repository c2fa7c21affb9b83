"""The settings of a pretraining run (saved as OUTPUT/config.json and in
every checkpoint, so its fields are part of the checkpoint format: a field
added later is read as its default from an older checkpoint on resume, so
its default must mean what older runs did).

Each field's ``help`` metadata is the command line's help text: the CLI
builds its options (defaults included) from these fields.
"""
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional

#: Training precisions (autocast): not the inference engine's INFERENCE_PRECISIONS.
TRAINING_PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = {"adam": 1e-3, "adagrad": 0.2}
SCHEDULES = ("linear", "constant")


def _setting(default: Any = MISSING, help: str = "", default_factory: Any = MISSING) -> Any:
    return field(default=default, default_factory=default_factory, metadata={"help": help})


@dataclass
class PretrainConfig:
    """Everything that defines a pretraining run (saved as config.json)."""

    train: List[str] = _setting(
        help="Training text: files (one sentence or paragraph a line, UTF-8), directories (read recursively) or "
             ".spacy files"
    )
    output: str = _setting(
        help="Output directory: config, vocab, options, log.jsonl, checkpoints/, export/, learning_curve.png"
    )
    dev: List[str] = _setting(
        default_factory=list, help="Held-out text (repeatable); default: --dev-fraction of the training windows"
    )
    options: Optional[str] = _setting(
        None, "biLM options JSON (model sizes); with --init, the model's own or a wider lstm.projection_dim (grown)"
    )
    shape: Optional[str] = _setting(None, "Published shape instead of --options: small, medium or original")
    init: Optional[str] = _setting(
        None,
        "Start from an exported model directory (weights.hdf5, options.json; vocab.txt and softmax.hdf5 are used when "
        "there): continue or adapt it",
    )
    start_step: int = _setting(
        0,
        "Begin at this step of the schedule and the data order, from --init's weights with a new optimizer: "
        "continues a run whose checkpoints are lost from its export at that step, reading on where it stopped "
        "(give its training files, --seed, --batch-size, --max-steps and number of processes); the warm-up "
        "starts again from there",
    )
    lang: str = _setting("en", "spaCy language whose tokenizer splits the text (spacy.blank(lang))")
    max_tokens: int = _setting(100, "Longer lines are cut into windows of at most this many tokens")
    max_line_chars: int = _setting(100_000, "Longer lines are skipped (read in bounded pieces)")
    strict: bool = _setting(
        False, "Fail on bad input (binary/empty files, bad UTF-8, huge lines) instead of skipping it"
    )
    vocab: Optional[str] = _setting(
        None, "Use this vocabulary file (one word a line, <S> </S> <UNK> first) instead of building one"
    )
    vocab_size: int = _setting(50_000, "Largest vocabulary built from the corpus (specials included)")
    min_count: int = _setting(1, "Words rarer than this become <UNK>")
    cutoffs: Optional[List[int]] = _setting(
        None, "Adaptive-softmax cluster boundaries, e.g. 2000,20000 (default by vocab size)"
    )
    dev_fraction: float = _setting(0.01, "Fraction of windows held out when no --dev is given (at most 2000)")
    max_dev_windows: int = _setting(2000, "Most windows held out by --dev-fraction")
    batch_size: int = _setting(32, "Windows per batch and process")
    max_steps: int = _setting(10_000, "Optimizer steps")
    optimizer: str = _setting("adam", "adam or adagrad")
    lr: Optional[float] = _setting(None, "Learning rate (default: adam 1e-3, adagrad 0.2)")
    warmup_steps: int = _setting(0, "Linear warm-up steps")
    schedule: str = _setting("linear", "After warm-up: linear (decay to 0 at max-steps) or constant")
    clip_norm: float = _setting(10.0, "Global gradient-norm clipping")
    dropout: float = _setting(0.1, "Dropout on LSTM inputs and the top layer")
    seed: int = _setting(0, "Seed of the weights, the data order and the held-out split")
    log_every: int = _setting(10, "Log training loss every N steps")
    eval_every: Optional[int] = _setting(None, "Held-out perplexity every N steps (default: max-steps/20, 50..1000)")
    checkpoint_every: int = _setting(1000, "Checkpoint every N steps (and on SIGTERM/SIGINT, and at the end)")
    device: str = _setting("cpu", "cpu, cuda or cuda:N")
    precision: str = _setting("fp32", "fp32, bf16 (autocast) or fp16 (autocast + GradScaler, CUDA only)")

    #: Fields that may change when resuming (they do not change the weights).
    #: ``max_steps`` may change too: a run can be lengthened (or shortened);
    #: with the linear schedule the decay is then stretched from that step on.
    #: Settings a resume may change (logged as a warning). ``precision`` among them: a
    #: long run moves between machines with and without native bf16; the weights,
    #: optimizer state and data order carry over, bit-exact continuation does not.
    RESUMABLE_CHANGES = ("output", "log_every", "eval_every", "checkpoint_every", "device", "train", "dev", "max_steps",
                         "precision")

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
        if self.start_step < 0:
            problems.append(f"start_step must be >= 0, found {self.start_step}")
        if self.start_step and self.init is None:
            problems.append("start_step continues an exported model: give init (the export at that step) too")
        if self.start_step and self.max_steps is not None and self.start_step >= self.max_steps:
            problems.append(f"start_step ({self.start_step}) must be below max_steps ({self.max_steps})")
        if self.warmup_steps < 0:
            problems.append(f"warmup_steps must be >= 0, found {self.warmup_steps}")
        if self.optimizer not in OPTIMIZERS:
            problems.append(f"optimizer must be one of {sorted(OPTIMIZERS)}, found {self.optimizer!r}")
        if self.schedule not in SCHEDULES:
            problems.append(f"schedule must be one of {SCHEDULES}, found {self.schedule!r}")
        if self.precision not in TRAINING_PRECISIONS:
            problems.append(f"precision must be one of {TRAINING_PRECISIONS}, found {self.precision!r}")
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

    @classmethod
    def setting(cls, name: str) -> Any:
        """The dataclass field ``name`` (its default and ``help``)."""
        return next(f for f in fields(cls) if f.name == name)
