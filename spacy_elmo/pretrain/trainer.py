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
states, the step, its place in the data, and every rank's RNG states (as
tensors, so it loads with ``torch.load(weights_only=True)``); resuming from
it gives the same weights as an uninterrupted run (same machine, same thread
count, same number of processes). A run may also resume on another number
of processes: the data goes on from the checkpoint's place (no batch read
twice; as in every run, the batches at an epoch's end that are fewer than
the processes are skipped), each step then reading one batch per process
(:func:`.batches.settle`); ranks new to the run start their dropout RNG from
the seed, their rank and the step. A run whose checkpoints are lost reads on
from an export at step N (``start_step`` with ``init``): the same data from
step N on, the same schedule, a new optimizer warmed up again.
"""
import json
import logging
import math
import signal
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy
import torch
from torch import nn

from ..bilm.options import BiLMOptions
from . import distributed as D
from .batches import epoch_batches, settle
from .checkpoint import (
    LAST,
    PREVIOUS,
    check_resume,
    check_resume_data,
    check_resume_options,
    load_resume_checkpoint,
    make_checkpoint,
    restore,
    rng_state,
    save_keeping_previous,
)
from .config import PretrainConfig
from .curve import plot_learning_curve
from .errors import PretrainError
from .export import export, init_from_export
from .lock import OutputLock
from .model import PretrainModel, load_options
from .optim import autocast, make_optimizer, make_scaler, make_scheduler
from .preflight import check_output
from .prepare import RunData, prepare_data
from .runlog import RunLog

logger = logging.getLogger(__name__)

Callback = Callable[[int, Dict[str, Any]], None]


def pretrain(
    config: PretrainConfig,
    resume: bool = False,
    progress: bool = True,
    callback: Optional[Callback] = None,
    time_limit: Optional[float] = None,
) -> Dict[str, Any]:
    """Train (or resume) a biLM; returns a summary dict. See the module doc.
    ``time_limit``: seconds of training after which the run stops as on
    SIGTERM (the step ends, a checkpoint is written, ``stopped`` is logged);
    ``resume=True`` continues it, so a long run goes in time-boxed pieces.
    ``callback(step, record)``, if given, runs on every rank after each
    optimizer step; ``record`` holds the step's ``loss``, the ``model``, its
    ``windows`` and the run's live ``config``: changing ``config.max_steps``
    there moves the run's end, the linear decay reaching 0 at the new end
    (on every rank alike, or the ranks part ways)."""
    config.validate()
    device = torch.device(config.device)
    info = D.setup(config.device)
    if info.enabled and device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
    try:
        with _locked_output(Path(config.output), info, device):
            return _pretrain(config, resume, progress, callback, info, device, time_limit)
    finally:
        D.teardown(info)


@contextmanager
def _locked_output(out: Path, info: D.DistInfo, device: torch.device):
    """Hold the output directory's lock for the run (:mod:`.lock`): rank 0
    takes it and every rank learns whether it did, so all stop together."""
    lock = OutputLock(out) if info.is_main else None
    error = None
    if lock is not None:
        try:
            lock.acquire()
        except PretrainError as err:
            error = err
    try:
        if D.any_flag(info, error is not None, device):
            raise error or PretrainError(f"rank 0 could not lock the output directory {out}: see its message")
        yield
    finally:
        if lock is not None:
            lock.release()


def _pretrain(config, resume, progress, callback, info: D.DistInfo, device: torch.device,
              time_limit: Optional[float]) -> Dict[str, Any]:
    out = Path(config.output)
    folder = out / "checkpoints"
    checkpoint, resumed_from = None, None
    if resume:
        checkpoint, resumed_from = load_resume_checkpoint(folder)
        check_resume(checkpoint, config, info)
        if info.is_main:
            logger.info("resuming from %s (step %d)", resumed_from, int(checkpoint["step"]))
    elif (folder / LAST).exists() or (folder / PREVIOUS).exists():
        raise ValueError(f"{out} already holds a checkpoint; use --resume to continue it or choose another output")
    options = load_options(config, checkpoint["options"] if checkpoint is not None else None)
    if checkpoint is not None:
        check_resume_options(checkpoint, options)
    check_output(out, info)
    resume_check = (
        (lambda vocab, fingerprint: check_resume_data(checkpoint, vocab, fingerprint)) if checkpoint else None
    )
    data = prepare_data(config, out, options.max_characters_per_token, info, check=resume_check,
                        resumed_vocab=checkpoint["vocab"] if checkpoint is not None else None)
    options.extra["n_tokens_vocab"] = len(data.vocab)
    run = _Run(config, options, data, info, device, checkpoint)
    run.resumed_from = resumed_from.name if resumed_from else None
    try:
        run.write_run_files()
        if run.loop(progress, callback, time_limit):
            run.save("signal")
            run.log.write(event="stopped", step=run.step)
            return {"step": run.step, "stopped": True, "output": str(out)}
        return run.finish()
    finally:
        run.release_process_group()


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


class _Run:
    """One process's training state, and the steps of the loop."""

    def __init__(
        self, config: PretrainConfig, options: BiLMOptions, data: RunData, info: D.DistInfo, device: torch.device,
        checkpoint: Optional[Dict[str, Any]],
    ) -> None:
        self.config, self.options, self.data, self.info, self.device = config, options, data, info, device
        self.out = Path(config.output)
        self.resumed = checkpoint is not None
        self.resumed_from: Optional[str] = None  # the checkpoint file's name, set by the caller
        torch.manual_seed(config.seed)
        self.model = PretrainModel(options, len(data.vocab), config.dropout, config.cutoffs).to(device)
        self.optimizer = make_optimizer(config, self.model.parameters())
        self.scheduler = make_scheduler(config, self.optimizer)
        self.scaler = make_scaler(config)
        self._epoch: Optional[int] = None
        self._epoch_batches: List[numpy.ndarray] = []
        if checkpoint is not None:
            self.step, self.tokens_seen, has_rank = restore(
                checkpoint, self.model, self.optimizer, self.scheduler, self.scaler, info.rank, device
            )
            if not has_rank:  # a resume on more processes than the checkpoint's run had
                torch.manual_seed((config.seed * 1000 + 1 + info.rank) * 1_000_003 + self.step)
            start = (int(checkpoint["epoch"]), int(checkpoint["batch_in_epoch"]))
        else:
            if config.init:
                init_from_export(self.model, Path(config.init), data.vocab, config.seed)
            # Different dropout masks on each rank; the weights are the same.
            torch.manual_seed(config.seed * 1000 + 1 + info.rank)
            self.step = config.start_step  # 0 unless the run reads on from an export at that step
            self.tokens_seen, start = self.skip_to(self.step)
        #: (epoch, first batch) of the next step's data.
        self.position = settle(*start, info.world_size, data.n_batches)
        self.log = RunLog(self.out / "log.jsonl", info.is_main)
        if checkpoint is not None:
            self.log.rollback(self.step)
        # The DDP wrapper is made last, so that a failure above leaves no
        # wrapper (and no reference to the process group) behind.
        self.train_model: nn.Module = self.model
        if info.enabled:
            # Width-1 char-CNN filters get gradients in a transposed layout; DDP
            # copies them into its buckets correctly but warns once per rank.
            warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
            # Every parameter takes part in every step (LMHead.forward touches
            # the clusters no target fell in), so DDP needs no search for
            # unused parameters (an extra autograd traversal per step).
            self.train_model = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[device.index] if device.type == "cuda" else None
            )

    def skip_to(self, step: int):
        """(tokens_seen, position) of a run of this many processes at
        ``step``: the data order walked without training, ``tokens_seen``
        counted as the run counts it (rank 0's tokens times the processes)."""
        n, world, tokens = self.data.n_batches, self.info.world_size, 0
        epoch, batch = settle(0, 0, world, n)
        for _ in range(step):
            first = self.batches_of(epoch)[batch]
            tokens += int(self.data.train_lengths[first].sum()) * world
            epoch, batch = settle(epoch, batch + world, world, n)
        return tokens, (epoch, batch)

    def release_process_group(self) -> None:
        """Drop the DDP wrapper, the one object of a run that holds the
        process group (as ``process_group`` and in its C++ reducer).

        Called before :func:`distributed.teardown`, so that
        ``destroy_process_group`` frees the gloo backend and joins its
        threads. Without it the wrapper lived as long as this object, and
        this object can outlive the run in a reference cycle: on rank 0,
        matplotlib's import and drawing under :meth:`finish` leave frames in
        cycles whose ``f_back`` chain reaches ``finish``'s frame and its
        ``self``; an exception's traceback does the same on any rank. The
        group then lived until the cyclic garbage collector ran, possibly
        not before interpreter shutdown, where a gloo thread that still
        holds tensors takes the GIL and the process aborts
        (docs/reliability.md, "Distributed runs")."""
        self.train_model = self.model

    # ------------------------------------------------------------ files
    def write_run_files(self) -> None:
        """config.json, vocab.txt, options.json and the start record (rank 0)."""
        if not self.info.is_main:
            return
        config, data, out = self.config, self.data, self.out
        out.mkdir(parents=True, exist_ok=True)
        (out / "checkpoints").mkdir(exist_ok=True)
        (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
        data.vocab.to_file(out / "vocab.txt")
        self.options.to_file(out / "options.json")
        self.log.write(
            event="resume" if self.resumed else "start",
            step=self.step,
            world_size=self.info.world_size,
            **({"checkpoint": self.resumed_from} if self.resumed else {}),
            **({"start_step": self.config.start_step} if self.config.start_step and not self.resumed else {}),
            corpus=data.corpus.stats.to_dict(),
            train_windows=int(len(data.train_idx)),
            dev_windows=int(len(data.dev_idx)),
            vocab_size=len(data.vocab),
            cutoffs=self.model.head.cutoffs,
            parameters=sum(p.numel() for p in self.model.parameters()),
            steps_per_epoch=data.steps_per_epoch,
            unigram_dev_ppl=data.unigram_ppl,
        )
        logger.info("corpus: %s", data.corpus.stats.summary())

    def save(self, reason: str) -> None:
        """Checkpoint (every rank sends its RNG state; rank 0 writes)."""
        rng = D.gather_to_main(self.info, rng_state(self.device))
        if self.info.is_main:
            state = make_checkpoint(
                step=self.step, position=self.position, tokens_seen=self.tokens_seen,
                world_size=self.info.world_size, config=self.config, options=self.options, vocab=self.data.vocab,
                corpus_sha256=self.data.fingerprint, model=self.model, optimizer=self.optimizer,
                scheduler=self.scheduler, scaler=self.scaler, rng=rng,
            )
            save_keeping_previous(state, self.out / "checkpoints")
            self.log.write(event="checkpoint", step=self.step, reason=reason)
        D.barrier(self.info)

    # ------------------------------------------------------------- steps
    def next_windows(self) -> numpy.ndarray:
        """This rank's windows for the next step (a fixed place in the epoch's
        order), the run's position moved on past the step's batches."""
        epoch, batch = self.position
        batches = self.batches_of(epoch)
        self.position = settle(epoch, batch + self.info.world_size, self.info.world_size, self.data.n_batches)
        return self.data.train_idx[batches[batch + self.info.rank]]

    def batches_of(self, epoch: int) -> List[numpy.ndarray]:
        """The epoch's batches (positions into the training windows), kept
        for the epoch in hand."""
        if epoch != self._epoch:
            self._epoch = epoch
            self._epoch_batches = epoch_batches(
                self.data.train_lengths, self.config.batch_size, self.config.seed, epoch
            )
        return self._epoch_batches

    def train_step(self, windows: numpy.ndarray):
        """One optimizer step; returns (loss, nll_f, nll_b, targets, tokens, grad norm)."""
        char_ids, targets, n_tokens = self.data.batcher(windows, self.device)
        self.model.train()
        with autocast(self.config, self.device):
            nll_f, nll_b, n = self.train_model(char_ids, targets)
            loss = (nll_f + nll_b) / (2 * max(n, 1))
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.step += 1
        self.tokens_seen += n_tokens * self.info.world_size  # exact total is logged below
        return loss, nll_f, nll_b, n, n_tokens, grad_norm

    def evaluate(self) -> Optional[Dict[str, float]]:
        """Held-out perplexity, summed over the ranks' shares. Always in
        float32, whatever the training precision: it measures the weights as
        they are used (inference is float32 by default) and stays comparable
        across a run resumed in another precision."""
        data = self.data
        if not len(data.dev_idx):
            return None
        self.model.eval()
        sums = [0.0, 0.0, 0.0]
        with torch.no_grad():
            for idx in data.dev_batches:
                char_ids, targets, _ = data.dev_batcher(idx, self.device)
                # The adaptive softmax's own log-probability of each target:
                # exact for the model's normalised distribution over the
                # whole vocabulary, without scoring every word (LMHead.nll).
                nll_f, nll_b, n = self.model.head(self.model.top_layer(char_ids), targets)
                sums[0] += float(nll_f)
                sums[1] += float(nll_b)
                sums[2] += n
        nll_f, nll_b, n = D.all_sum(self.info, sums, self.device)
        result = {
            "dev_ppl_forward": math.exp(nll_f / n), "dev_ppl_backward": math.exp(nll_b / n),
            "dev_ppl": math.exp((nll_f + nll_b) / (2 * n)), "dev_tokens": int(n),
        }
        self.log.write(event="eval", step=self.step, **result)
        return result

    def loop(self, progress: bool, callback: Optional[Callback], time_limit: Optional[float] = None) -> bool:
        """Train to ``max_steps``; True when stopped by a signal or at ``time_limit`` seconds."""
        config, info = self.config, self.info
        deadline = None if time_limit is None else time.monotonic() + time_limit
        bar = None
        if progress and info.is_main:
            from tqdm import tqdm

            bar = tqdm(total=config.max_steps, initial=self.step, unit="step", dynamic_ncols=True)
        meter = _Meter()
        try:
            with _StopFlag() as stop:
                while self.step < config.max_steps:
                    epoch = self.position[0]
                    windows = self.next_windows()
                    loss, nll_f, nll_b, n, n_tokens, grad_norm = self.train_step(windows)
                    meter.add(float(nll_f.detach()), float(nll_b.detach()), n, n_tokens)
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(loss=f"{float(loss.detach()):.3f}", refresh=False)
                    if self.step % config.log_every == 0 or self.step == config.max_steps:
                        self.log_train(meter, epoch, grad_norm, bar)
                    if self.step % config.eval_interval == 0 and self.step < config.max_steps:
                        self.evaluate()
                    if self.step % config.checkpoint_every == 0 and self.step < config.max_steps:
                        self.save("every")
                    if callback is not None:
                        callback(
                            self.step,
                            {
                                "loss": float(loss.detach()),
                                "model": self.model,
                                "windows": windows.tolist(),
                                "config": config,
                            },
                        )
                    late = deadline is not None and time.monotonic() >= deadline
                    if D.any_flag(info, stop.requested or late, self.device):
                        return True
            return False
        finally:
            if bar is not None:
                bar.close()

    def log_train(self, meter: "_Meter", epoch: int, grad_norm: float, bar) -> None:
        """The training record of the steps since the last one (all ranks)."""
        f, b, nt, tok = D.all_sum(self.info, meter.sums, self.device)
        now = time.perf_counter()
        rate = tok / max(now - meter.since, 1e-9)
        loss = (f + b) / (2 * nt)
        self.log.write(
            event="train", step=self.step, epoch=epoch, loss=loss, ppl_forward=math.exp(f / nt),
            ppl_backward=math.exp(b / nt), lr=self.scheduler.get_last_lr()[0], grad_norm=grad_norm,
            tokens_per_s=rate, elapsed_s=now - meter.start, tokens_seen=self.tokens_seen,
        )
        if bar is not None:
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:.0f}")
        meter.reset(now)

    def finish(self) -> Dict[str, Any]:
        """Final evaluation, checkpoint, export and learning curve."""
        last_eval = self.evaluate()
        self.save("end")
        out, unigram_ppl = self.out, self.data.unigram_ppl
        summary = {
            "step": self.step,
            "stopped": False,
            "output": str(out),
            "unigram_dev_ppl": unigram_ppl,
            "dev": last_eval,
        }
        if self.info.is_main:
            export(out, out / "export")
            self.log.write(event="end", step=self.step, dev=last_eval, unigram_dev_ppl=unigram_ppl)
            try:
                plot_learning_curve(out / "log.jsonl", out / "learning_curve.png")
            except Exception as err:  # a plot must never lose a finished run
                logger.warning("learning curve not written: %s", err)
        return summary


class _Meter:
    """Sums since the last training record: nll forward, nll backward,
    targets, tokens; and the times of the run's start and that record."""

    def __init__(self) -> None:
        self.start = self.since = time.perf_counter()
        self.sums = [0.0, 0.0, 0.0, 0.0]

    def add(self, nll_f: float, nll_b: float, targets: int, tokens: int) -> None:
        for i, value in enumerate((nll_f, nll_b, targets, tokens)):
            self.sums[i] += value

    def reset(self, now: float) -> None:
        self.sums = [0.0, 0.0, 0.0, 0.0]
        self.since = now
