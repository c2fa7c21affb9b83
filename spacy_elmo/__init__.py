"""ELMo (Peters et al. 2018) for spaCy v3, on a pure-PyTorch biLM.

``spacy_elmo.bilm`` is pure PyTorch; ``spacy_elmo.hub`` finds models by
name, path or URL, and :func:`load_bilm` joins the two. The spaCy side (the ``elmo`` component,
listeners, ``Doc._.elmo``) is imported on first use of its names, or by spaCy
through the package's entry points.
"""
__version__ = "0.1.0"

from .bilm import BiLM, BiLMOptions, OptionsError, WeightFileError  # noqa: E402
from .loading import load_bilm  # noqa: E402

# Names and URLs are resolved outside ``bilm`` (which imports nothing above it).
BiLM.pretrained_loader = load_bilm

_SPACY_NAMES = {
    "add_elmo": "component.elmo",
    "mix_weights": "layers.scalar_mix",
    "Elmo": "component.elmo",
    "ElmoData": "component.doc_data",
    "SavedPipelineError": "component.saved_pipeline",
}

__all__ = ["BiLM", "BiLMOptions", "OptionsError", "WeightFileError", "__version__", "load_bilm", *_SPACY_NAMES]


def __getattr__(name):
    if name in _SPACY_NAMES:
        import importlib

        module = importlib.import_module(f".{_SPACY_NAMES[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'spacy_elmo' has no attribute {name!r}")
