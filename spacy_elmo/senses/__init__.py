"""Word senses in ELMo space (the paper's Tables 4 and 5, in miniature).

- :mod:`.word_senses`: contextual nearest neighbours (:func:`nearest_uses`)
  and the word-sense evaluation on a crossed-frame set (:func:`sense_eval`:
  nearest centroid or 1-NN, leave-one-frame-out), with
  :func:`random_like`, the random-weights baseline;
- :mod:`.frames`: the crossed-frame set's format, read with bounds;
  ``senses_en.txt`` is the packaged English set;
- :mod:`.display`: how the ``neighbours`` and ``senses`` commands show
  their results;
- :mod:`.wsd`: the paper's all-words evaluation (section 5.3, Table 5) on
  the files of Raganato et al. (2017): SemCor sense centroids per layer,
  1-NN by cosine, WordNet's first sense as the fallback (the ``wsd``
  command).

Imports numpy only (torch when :func:`random_like` is called); nothing of
spaCy, the component or the command line.
"""
from .frames import SenseDataError
from .word_senses import DATA, Neighbour, load_senses, nearest_uses, parse_layer, random_like, sense_eval, uses

__all__ = [
    "DATA", "Neighbour", "SenseDataError", "load_senses", "nearest_uses", "parse_layer", "random_like", "sense_eval",
    "uses",
]
