"""What the hub tells a user who gave no usable model, or who is offline."""
from pathlib import Path
from typing import Iterable

HOW_TO_GIVE_WEIGHTS = (
    "Give the elmo component weights by name, path or URL: "
    "nlp.add_pipe('elmo', config={'weights': NAME}), or in a config "
    "[components.elmo] or [initialize.components.elmo] weights = NAME, or "
    "spacy_elmo.BiLM.from_pretrained(NAME). Names: 'english' (shipped with the "
    "package; the default), and AllenNLP's published English ELMo 'small', "
    "'medium', 'original', 'original-5.5b' (downloaded once into the cache; "
    "other languages: 'efml:<lang>' (ELMoForManyLangs, e.g. 'efml:de') or 'nlpl:<id>' (the NLPL repository); "
    "ahead of time: python -m spacy_elmo download NAME). A path: a directory with "
    "weights.hdf5 and options.json, or weights = 'path/weights.hdf5' with "
    "options = 'path/options.json' (bilm-tf/AllenNLP format). Or an http(s) URL "
    "of a weights file (with options = its options URL)."
)


def published_offline(
    key: str, weights: Path, options: Path, shape: str, base_url: str, cache_env: str, mirror_env: str
) -> str:
    """How to use the published model ``key`` without its download."""
    return (
        f"To use {key!r} offline, put {weights.name} and {options.name} in "
        f"{weights.parent} by hand (the cache; set {cache_env} to move it), or set "
        f"{mirror_env} to a base URL laid out like {base_url} "
        f"(<base>/{shape}/{weights.name} and .../{options.name}); "
        f"it then replaces the published base URL."
    )


def urls_offline(destinations: Iterable[Path]) -> str:
    """How to use files given by URL without their download."""
    return (
        "To work offline, download the files where you are online and give their "
        "local paths instead (weights = 'path/weights.hdf5', options = 'path/options.json'), "
        "or put them in the cache by hand: " + ", ".join(str(dest) for dest in destinations) + "."
    )
