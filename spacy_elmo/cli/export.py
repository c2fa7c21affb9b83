"""Write a biLM back in its own family's layout.

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
from typing import List, Union

from .bilm import BiLM
from .bilm.formats import efml
from .loading import load_bilm


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
                return component.bilm
        raise ValueError(f"the spaCy pipeline {source} has no elmo component")
    return load_bilm(str(source))


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
