"""From a checkpoint to files others load: the published hdf5 + options
format (with the vocabulary and the softmax, which ``--init`` continues
from). A spaCy pipeline from a checkpoint is the command line's
(:func:`spacy_elmo.cli.export.export_pipeline`): pretraining knows nothing
of the spaCy component."""
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy
import torch

from ..bilm.model import BiLM
from ..bilm.options import BiLMOptions
from .checkpoint import checkpoint_path, load_checkpoint
from .lm_head import LMHead, default_cutoffs
from .vocab import Vocab

logger = logging.getLogger(__name__)

SOFTMAX_FORMAT = "spacy_elmo.pretrain.softmax/1"


def export(output_dir: Path, export_dir: Path, checkpoint: Optional[Path] = None) -> Path:
    """Write the checkpoint's biLM in the published format: ``weights.hdf5``,
    ``options.json`` and the vocabulary ``vocab.txt``."""
    state = load_checkpoint(checkpoint_path(output_dir, checkpoint))
    bilm = bilm_from_state(state)
    export_dir = Path(export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    bilm.to_hdf5(export_dir / "weights.hdf5", export_dir / "options.json")
    Vocab(state["vocab"]).to_file(export_dir / "vocab.txt")
    head = {k[len("head."):]: v for k, v in state["model"].items() if k.startswith("head.")}
    cutoffs = state["config"].get("cutoffs") or default_cutoffs(len(state["vocab"]))
    save_softmax(export_dir / "softmax.hdf5", head, cutoffs)
    return export_dir


def save_softmax(path: Path, state: Dict[str, torch.Tensor], cutoffs: Sequence[int]) -> None:
    """The adaptive softmax's weights as hdf5 (one dataset per parameter,
    the format and cutoffs as attributes): plain arrays, nothing to unpickle."""
    import h5py

    with h5py.File(path, "w") as fout:
        fout.attrs["format"] = SOFTMAX_FORMAT
        fout.attrs["cutoffs"] = numpy.asarray(list(cutoffs), dtype=numpy.int64)
        for name, value in state.items():
            fout.create_dataset(name, data=value.detach().cpu().numpy())


def load_softmax(path: Path, head: LMHead) -> None:
    import h5py

    try:
        with h5py.File(path, "r") as fin:
            if fin.attrs.get("format") != SOFTMAX_FORMAT:
                raise ValueError("not a spacy_elmo softmax file")
            cutoffs = [int(c) for c in fin.attrs["cutoffs"]]
            state: Dict[str, torch.Tensor] = {}
            fin.visititems(
                lambda name, obj: (
                    state.__setitem__(name, torch.from_numpy(obj[()])) if isinstance(obj, h5py.Dataset) else None
                )
            )
    except (OSError, KeyError, ValueError) as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    if cutoffs != list(head.cutoffs):
        raise ValueError(f"{path} has cutoffs {cutoffs}, this run {head.cutoffs}; leave --cutoffs at the model's")
    try:
        head.load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"{path} does not fit this run's softmax: {err}") from None


def init_from_export(model: Any, init_dir: Path, vocab: Vocab, seed: int = 0) -> None:
    """Start a :class:`~.model.PretrainModel` from an exported model
    (``export`` or a published/shipped model directory): its biLM weights,
    and its softmax (``softmax.hdf5``) when it is there and was trained over
    the same vocabulary. Optimizer, schedule and step start afresh. A model
    whose options widen the exported one's projection starts from it grown
    (:mod:`.grow`; ``seed`` draws the new rows)."""
    from ..bilm.weights import load_datasets, read_datasets
    from .grow import grow_state
    from .model import PretrainModel

    weights = init_dir / "weights.hdf5"
    if not weights.is_file():
        raise ValueError(f"--init {init_dir}: no weights.hdf5 there (give a directory written by `export`)")
    init_options = BiLMOptions.from_file(init_dir / "options.json")
    width, init_width = model.bilm.options.projection_dim, init_options.projection_dim
    source = model
    if width != init_width:
        source = PretrainModel(init_options, model.head.vocab_size, cutoffs=model.head.cutoffs)
    load_datasets(source.bilm, read_datasets(weights, source.bilm.options))
    softmax = init_dir / "softmax.hdf5"
    same_vocab = (init_dir / "vocab.txt").is_file() and Vocab.from_file(init_dir / "vocab.txt").words == vocab.words
    with_softmax = softmax.is_file() and same_vocab
    if with_softmax:
        load_softmax(softmax, source.head)
    if source is not model:
        grown = grow_state(source.state_dict(), model.state_dict(), seed)
        if not with_softmax:  # the run's own fresh softmax
            grown = {k: v for k, v in grown.items() if k.startswith("bilm.")}
        model.load_state_dict(grown, strict=with_softmax)
        logger.info("grew the projection of %s from %d to %d dimensions", init_dir, init_width, width)
    if with_softmax:
        logger.info("initialised the biLM and the softmax from %s", init_dir)
    else:
        logger.info("initialised the biLM from %s (softmax trained afresh: %s)", init_dir,
                    "no softmax.hdf5" if not softmax.is_file() else "another vocabulary")


def bilm_from_state(state: Dict[str, Any]) -> BiLM:
    """The inference biLM of a checkpoint (the softmax is left out)."""
    bilm = BiLM(BiLMOptions.from_dict(state["options"]))
    prefix = "bilm."
    bilm.load_state_dict({k[len(prefix):]: v for k, v in state["model"].items() if k.startswith(prefix)})
    return bilm.eval()

