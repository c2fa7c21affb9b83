"""What ``python -m spacy_elmo export`` writes besides a checkpoint's
published files: a biLM in its own family's layout, and a checkpoint as a
spaCy pipeline (:func:`export_pipeline`, ``export --nlp``).

``python -m spacy_elmo export SOURCE TARGET`` with a SOURCE that is not a
pretraining output directory: a saved spaCy pipeline (its ``elmo``
component's biLM, which lives inside the pipeline) or any weights name,
path or URL (:func:`spacy_elmo.loading.load_bilm`). bilm-tf models are written as
``weights.hdf5`` + ``options.json``; ELMoForManyLangs models as their model
directory (``config.json``, the architecture JSON, ``char.dic``,
``word.dic``, ``token_embedder.pkl``, ``encoder.pkl``), which the reference
package and this one both read.
"""
from pathlib import Path
from typing import List, Optional, Union

from ..bilm import BiLM
from ..bilm.formats import efml
from ..loading import load_bilm
from ..pretrain.checkpoint import checkpoint_path, load_checkpoint
from ..pretrain.export import bilm_from_state
from ._app import InputError


def is_pipeline(path: Union[str, Path]) -> bool:
    return Path(path).is_dir() and (Path(path) / "config.cfg").is_file()


def source_bilm(source: Union[str, Path]) -> BiLM:
    """The biLM of a saved spaCy pipeline (its first ``elmo`` component),
    or of a weights name, path or URL."""
    if is_pipeline(source):
        import spacy

        nlp = spacy.load(source)
        for name, component in nlp.pipeline:
            if component.__class__.__name__ == "Elmo":
                bilm: BiLM = getattr(component, "bilm")
                return bilm
        raise ValueError(f"the spaCy pipeline {source} has no elmo component")
    return load_bilm(str(source))


#: The files ``export`` writes into its target directory.
WRITTEN = ("weights.hdf5", "options.json", "vocab.txt", "softmax.hdf5")


def check_outputs_apart(source: Union[str, Path], target: Path, nlp: Optional[Path]) -> None:
    """``export``'s outputs must not overwrite what it reads: the target and
    the ``--nlp`` directory are neither the source (a run's output, a
    pipeline, a model directory) nor each other, and the target does not
    hold the source's own file under a name export writes."""
    source = Path(source).expanduser()
    if not source.exists():
        return  # a model name or URL
    here = source.resolve()
    where = {"TARGET": Path(target).expanduser().resolve()}
    if nlp is not None:
        where["--nlp"] = Path(nlp).expanduser().resolve()
    for name, path in where.items():
        if path == here or (source.is_file() and path == here.parent and here.name in WRITTEN):
            raise InputError(
                f"export's {name} {path} would overwrite its input {source}: write the export to another directory"
            )
    if nlp is not None and where["--nlp"] == where["TARGET"]:
        raise InputError(f"export's TARGET and --nlp are one directory ({where['TARGET']}): give --nlp another one")


def export_bilm(bilm: BiLM, target: Union[str, Path]) -> List[Path]:
    """Write ``bilm`` into the directory ``target``; return the files written."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise ValueError(f"{target} exists and is not a directory")
    target.mkdir(parents=True, exist_ok=True)
    if bilm.vocabulary is not None:
        efml.save(bilm, target)
        return sorted(p for p in target.iterdir() if p.is_file())
    bilm.to_hdf5(target / "weights.hdf5", target / "options.json")
    return [target / "weights.hdf5", target / "options.json"]


def export_pipeline(
    output_dir: Path, target: Path, lang: Optional[str] = None, checkpoint: Optional[Path] = None
) -> Path:
    """Write a spaCy pipeline (``spacy.blank(lang)`` + an ``elmo`` component
    holding the checkpoint's biLM) to ``target``; load it with
    ``spacy.load(target)``. ``lang`` defaults to the language whose tokenizer
    split the training text. Needs the spaCy integration
    (``spacy_elmo.component.elmo``)."""
    try:
        from ..component.elmo import add_elmo
    except ImportError as err:
        raise ValueError(
            f"exporting a spaCy pipeline needs spacy_elmo's spaCy integration (spacy_elmo.component.elmo): {err}; "
            "export to hdf5 + options instead and load those with the elmo component"
        ) from None
    import spacy

    state = load_checkpoint(checkpoint_path(output_dir, checkpoint))
    lang = lang or state["config"].get("lang") or "en"
    nlp = spacy.blank(lang)
    add_elmo(nlp, bilm=bilm_from_state(state))
    nlp.meta["name"] = "elmo_pretrained"
    nlp.meta["description"] = f"biLM pretrained with spacy_elmo ({int(state['step'])} steps)"
    target = Path(target)
    nlp.to_disk(target)
    return target
