"""What the hub tells a user who gave no usable model, or who is offline."""
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Wording:
    """How an entry point names the two settings and what it advises: the
    Python API says ``weights``/``options``, the command line ``--model``/``--options``.
    The rules are the hub's; only the words in their messages change."""

    weights: str = "weights"
    options: str = "options"
    advice: str = HOW_TO_GIVE_WEIGHTS

    def options_without_weights(self) -> str:
        return (
            f"{self.options} given without {self.weights}: options belong to a weights file or URL, so give "
            f"{self.weights} too (names, directories and zips come with their options: leave {self.options} out)"
        )

    def comes_with_options(self, what: str) -> str:
        return f"{what} comes with its options: leave {self.options} out"


#: The Python API's words (``weights``, ``options``, :data:`HOW_TO_GIVE_WEIGHTS`).
PYTHON = Wording()


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
