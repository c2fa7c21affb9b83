"""Checkpoints: what one holds, writing it safely, loading it without
unpickling, and the checks that a resume continues the same run.

A checkpoint (``OUTPUT/checkpoints/last.pt``) is a dict of tensors and
plain values (format :data:`CHECKPOINT_FORMAT`), so it loads with
``torch.load(weights_only=True)``. It carries a SHA-256 of everything else
it holds (:func:`state_digest`), checked on every load: a checkpoint
changed in place (bytes flipped inside a tensor, which ``torch.load`` reads
without complaint) is refused instead of being trained on or exported. The one before it is kept beside it as
``prev.pt`` (:func:`save_keeping_previous`), so that a damaged ``last.pt``
costs one checkpoint interval, not the run; ``--resume`` falls back to it
and says so (:func:`load_resume_checkpoint`). The choice costs disk: two
checkpoints, and a third while one is written. Runs in progress are resumed with newer
code: what it holds and how it is read must not change without a new
format name.
"""
import hashlib
import logging
import os
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..bilm.options import BiLMOptions
from . import distributed as D
from .config import PretrainConfig
from .errors import PretrainError
from .vocab import Vocab

logger = logging.getLogger(__name__)

#: /2: /1 with the digest (:data:`DIGEST`). /1 checkpoints (of runs started
#: before digests) still load, with a warning that nothing checks them.
CHECKPOINT_FORMAT = "spacy_elmo.pretrain.checkpoint/2"
FORMAT_WITHOUT_DIGEST = "spacy_elmo.pretrain.checkpoint/1"
DIGEST = "sha256"


LAST, PREVIOUS = "last.pt", "prev.pt"


def checkpoint_path(output_dir: Path, checkpoint: Optional[Path] = None) -> Path:
    return Path(checkpoint) if checkpoint else Path(output_dir) / "checkpoints" / "last.pt"


def make_checkpoint(
    *, step: int, position: Tuple[int, int], tokens_seen: int, world_size: int, config: PretrainConfig,
    options: BiLMOptions, vocab: Vocab, corpus_sha256: str, model: torch.nn.Module,
    optimizer: torch.optim.Optimizer, scheduler: Any, scaler: Any, rng: List[Dict[str, Any]],
) -> Dict[str, Any]:
    """The checkpoint of ``step``; ``position``: the (epoch, batch) the next
    step reads from (:func:`.batches.settle`); ``rng``: every rank's
    :func:`rng_state`."""
    epoch, batch = position
    state = {
        "format": CHECKPOINT_FORMAT, "step": step, "epoch": epoch, "batch_in_epoch": batch,
        "tokens_seen": tokens_seen, "world_size": world_size, "config": config.to_dict(),
        "options": options.to_dict(), "vocab": list(vocab.words), "corpus_sha256": corpus_sha256,
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "rng": rng,
    }
    state[DIGEST] = state_digest(state)
    return state


def state_digest(state: Dict[str, Any]) -> str:
    """SHA-256 over a checkpoint's contents but its digest: every tensor's
    dtype, shape and bytes and every plain value, walked in a fixed order
    (map keys sorted), so the same contents give the same digest before
    ``torch.save`` and after ``torch.load``."""
    digest = hashlib.sha256()
    _feed(digest, {key: value for key, value in state.items() if key != DIGEST})
    return digest.hexdigest()


def _feed(digest: "hashlib._Hash", value: Any) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
    elif isinstance(value, dict):
        digest.update(f"D{len(value)};".encode())
        for key in sorted(value, key=lambda k: (type(k).__name__, str(k))):
            _feed(digest, key)
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"{'L' if isinstance(value, list) else 'U'}{len(value)};".encode())
        for item in value:
            _feed(digest, item)
    else:  # str, int, float, bool, None
        digest.update(f"{type(value).__name__}:{value!r};".encode())


def restore(
    checkpoint: Dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
    scaler: Any, rank: int, device: torch.device,
) -> Tuple[int, int, bool]:
    """Load a checkpoint's states (this rank's RNG too, if the checkpoint's
    run had this rank: True when it did); returns (step, tokens_seen, whether
    the RNG was restored)."""
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    if checkpoint.get("scaler"):
        scaler.load_state_dict(checkpoint["scaler"])
    has_rank = rank < len(checkpoint["rng"])
    if has_rank:
        set_rng_state(checkpoint["rng"][rank], device)
    return int(checkpoint["step"]), int(checkpoint["tokens_seen"]), has_rank


def rng_state(device: torch.device) -> Dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: Dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def atomic_save(obj: Any, path: Path, previous: Optional[Path] = None) -> None:
    """Write ``obj`` to ``path`` through a temporary file, so that a failed
    write (disk full, quota) leaves the previous checkpoint intact; the
    failure is a PretrainError that says so. With ``previous``, the file
    at ``path`` is renamed to it once the new one is written, just before
    the new one takes its place (:func:`save_keeping_previous`)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(obj, tmp)
        if previous is not None and path.exists():
            os.replace(path, previous)
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


def save_keeping_previous(obj: Any, folder: Path) -> None:
    """Write ``folder/last.pt``; the one it replaces becomes ``prev.pt``.
    A kill between the two renames leaves ``prev.pt`` (and the new
    checkpoint as ``last.pt.tmp``), which :func:`load_resume_checkpoint`
    resumes from."""
    atomic_save(obj, Path(folder) / LAST, previous=Path(folder) / PREVIOUS)


def load_resume_checkpoint(folder: Path) -> Tuple[Dict[str, Any], Path]:
    """The checkpoint a ``--resume`` continues, and its path: ``last.pt``,
    or ``prev.pt`` when ``last.pt`` is missing or damaged (with a warning
    that names both). Neither loadable: the error of ``last.pt``."""
    last, previous = Path(folder) / LAST, Path(folder) / PREVIOUS
    try:
        return load_checkpoint(last), last
    except PretrainError as err:
        if not previous.is_file():
            raise
        try:
            state = load_checkpoint(previous)
        except PretrainError as second:
            raise PretrainError(f"{err}\nThe previous checkpoint cannot be used either: {second}") from None
        logger.warning("%s cannot be used (%s); resuming from the previous checkpoint %s (step %d)",
                       last, str(err).split(". ")[0], previous, int(state["step"]))
        return state, previous


def load_checkpoint(path: Path) -> Dict[str, Any]:
    """Load a checkpoint without unpickling arbitrary objects."""
    path = Path(path)
    if not path.is_file():
        raise PretrainError(f"checkpoint not found: {path}")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; a cut-off one lacks its directory
        raise PretrainError(
            f"the checkpoint {path} is damaged (truncated or overwritten: not a complete torch.save archive). "
            f"{_earlier_checkpoints(path)}"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise PretrainError(
            f"cannot load the checkpoint {path} (loaded with weights_only=True, so no pickled code runs): {reason}. "
            f"{_earlier_checkpoints(path)}"
        ) from None
    if not isinstance(state, dict) or state.get("format") not in (CHECKPOINT_FORMAT, FORMAT_WITHOUT_DIGEST):
        raise PretrainError(f"{path} is not a spacy_elmo pretraining checkpoint")
    if state["format"] == FORMAT_WITHOUT_DIGEST:
        logger.warning("%s carries no digest (format %s): its contents are not checked", path, FORMAT_WITHOUT_DIGEST)
        return state
    saved = state.get(DIGEST)
    if not isinstance(saved, str) or saved != state_digest(state):
        found = "carry no digest" if not isinstance(saved, str) else "do not match the SHA-256 saved in it"
        raise PretrainError(
            f"the checkpoint {path} is damaged: its contents {found} (changed in place after it was written). "
            f"{_earlier_checkpoints(path)}"
        )
    return state


def _earlier_checkpoints(path: Path) -> str:
    """What to do instead of a damaged checkpoint: the other checkpoint
    files beside it, if any (a run keeps last.pt and prev.pt)."""
    others = sorted(p.name for p in path.parent.glob("*.pt") if p != path)
    if others:
        return (f"Use another checkpoint instead (export --checkpoint FILE; --resume takes {PREVIOUS} by itself "
                f"when {LAST} is damaged): {', '.join(others)} in {path.parent}")
    return (
        f"No other checkpoint is beside it (a run keeps {LAST} and {PREVIOUS}): restore {path.name} from a copy, "
        "or start the run again in a fresh --output"
    )


# ------------------------------------------------------------ resume checks
def _config_defaults() -> Dict[str, Any]:
    """Each PretrainConfig field's default (the fields without one left out)."""
    from dataclasses import MISSING, fields

    return {f.name: f.default for f in fields(PretrainConfig) if f.default is not MISSING}


def check_resume(checkpoint: Dict[str, Any], config: PretrainConfig, info: D.DistInfo) -> None:
    """Refuse a resume whose settings change the weights; report (log) the
    settings that may change (:attr:`PretrainConfig.RESUMABLE_CHANGES`, and
    the number of processes), so that a resume is never silent about a change. The options' contents and
    the corpus are checked by :func:`check_resume_options` and
    :func:`check_resume_data`."""
    saved = checkpoint["config"]
    current = config.to_dict()
    defaults = _config_defaults()
    diffs, allowed = [], []
    for k in current:
        before = saved.get(k, defaults.get(k))  # a field newer than the checkpoint: its default
        if before == current[k]:
            continue
        change = f"{k}: {before!r} -> {current[k]!r}"
        if k in PretrainConfig.RESUMABLE_CHANGES:
            if k == "max_steps" and config.schedule == "linear":
                change += f" (the linear decay now reaches zero at step {config.max_steps})"
            allowed.append(change)
        else:
            diffs.append(change)
    if int(checkpoint["world_size"]) != info.world_size:
        allowed.append(
            f"processes: {checkpoint['world_size']} -> {info.world_size} (each step now reads {info.world_size} "
            f"batches of {config.batch_size}, the data going on from the checkpoint's place in its epoch)"
        )
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
        return [
            d for k in sorted(set(old) | set(new), key=str) for d in _dict_diffs(old.get(k), new.get(k), f"{path}{k}.")
        ]
    return [] if old == new else [f"{path.rstrip('.')}: {old!r} -> {new!r}"]


def check_resume_options(checkpoint: Dict[str, Any], options: BiLMOptions) -> None:
    """Refuse a resume whose options (the file's contents, not its path)
    differ from the checkpoint's."""
    diffs = _dict_diffs(_comparable_options(checkpoint["options"]), _comparable_options(options.to_dict()))
    if diffs:
        raise PretrainError(
            "cannot resume: the biLM options differ from the checkpoint's (" + "; ".join(diffs) + "). "
            "Resume with the options the checkpoint was trained with (its copy is OUTPUT/options.json), "
            "or start a fresh run in another --output"
        )


def check_resume_data(checkpoint: Dict[str, Any], vocab: Vocab, fingerprint: str) -> None:
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
        first = (
            f"id {where}: {old[where] if where < len(old) else None!r} -> {new[where] if where < len(new) else None!r}"
        )
        raise PretrainError(
            f"cannot resume: the vocabulary differs from the checkpoint's ({len(old)} -> {len(new)} words; "
            f"first difference at {first}): the corpus or --vocab changed. Resume with the checkpoint's "
            "corpus and vocabulary (its copy is OUTPUT/vocab.txt), or start a fresh run in another --output"
        )
