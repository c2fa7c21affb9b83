"""Word senses in ELMo space (the paper's Tables 4 and 5, in miniature).

Two tools:

``nearest_uses``
    Contextual nearest neighbours: for a word in a query sentence, the uses of
    the same word in a corpus whose vectors are closest (cosine) to the
    query's. With a contextual layer, "bank" in "the bank of the river" finds
    river banks, and "bank" in "the bank raised its rates" finds money banks.

``sense_eval``
    A word sense evaluation on a hand-made set of ambiguous words
    (``senses_en.txt``: 32 words, two senses a word, 8 crossed
    frames a word; see :mod:`spacy_elmo.senses.frames`), per biLM layer and
    for the mean of the layers, leave-one-frame-out: by default each use
    takes the sense whose centroid (the mean vector of its uses in the
    other frames) is nearest, as in the paper's word sense experiment;
    ``method="1nn"`` takes the sense of the single nearest use of another
    frame.

Names and choices
-----------------
* A *use* of a word is a token whose text equals the word, ignoring case
  (``str.lower``); no lemmatisation, so "banks" is not a use of "bank".
* A *layer* is an int ``0..L`` (0: the context-free character encoder,
  1..L: the LSTM layers) or ``"mix"``: the plain mean of all L+1 layers
  (an ELMo mix with equal weights).
* Similarity is cosine similarity, computed in float64.
* Leave-one-frame-out: items with a ``frame`` are held out with their
  frame (both senses' sentences of it), so what a held-out pair shares
  says nothing about the sense; items without one, leave-one-out: an item
  is never its own neighbour nor part of its sense's centroid. Nearest
  centroid (default): the sense of the most similar centroid. 1-NN: the
  sense of the most similar item of the same word left in.
* **Ties.** Similarities within ``TIE_TOLERANCE`` of the best count as tied.
  When the tied neighbours carry several senses the prediction is a fair coin
  between those senses, and it is scored by its expectation: credit
  ``1/k`` if the item's sense is among the ``k`` tied senses, else 0. The
  rule looks at senses, not at how many tied items carry each sense, so it
  favours no sense. Layer 0 gives every use of a word the same vector (the
  dataset uses the word in one spelling, lower case), so every item is a
  two-sense tie and layer 0 scores exactly 50%: chance, by construction.
* Chance for two balanced senses is 50%. Held out by frame, each other
  frame offers one item of each sense, so vectors that carry no sense
  information expect 50% by either method. (Leave-one-out 1-NN on a set
  without frames expects slightly less: ``(n - 1) / (2n - 1)`` with ``n``
  items per sense, since the item's own sense has one fewer candidate.)
"""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

import numpy

Layer = Union[int, str]

DATA = Path(__file__).parent / "senses_en.txt"
# Cosines within this of the best tie. Uses of a word in one spelling get the
# same layer-0 vector (bitwise on one device; float32 batching noise elsewhere
# moves their cosines, all near 1, only at second order), while distinct
# contextual vectors differ far more: a 1e-5 tolerance already made false
# ties in the layer mean of the random-weights fixture.
TIE_TOLERANCE = 1e-7


@dataclass
class Neighbour:
    """One use of the word in the corpus: sentence number, its tokens, the
    token position of the use and its cosine similarity to the query use."""

    sentence: int
    tokens: List[str]
    position: int
    score: float


# ----------------------------------------------------------------- helpers
def parse_layer(value: Union[str, int]) -> Layer:
    """``"mix"``/``"mean"`` -> ``"mix"``; ``"2"`` or ``2`` -> ``2``."""
    if isinstance(value, int):
        return value
    text = str(value).strip().lower()
    if text in ("mix", "mean"):
        return "mix"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"layer must be an integer or 'mix', found {value!r}")


def layer_vectors(array: numpy.ndarray, layer: Layer) -> numpy.ndarray:
    """(L+1, n_tokens, dim) activations -> (n_tokens, dim) for ``layer``."""
    if layer == "mix":
        return array.mean(axis=0)
    if not isinstance(layer, int) or not 0 <= layer < array.shape[0]:
        raise ValueError(f"layer must be 'mix' or in 0..{array.shape[0] - 1}, found {layer!r}")
    return array[layer]


def _unit(vectors: numpy.ndarray) -> numpy.ndarray:
    vectors = numpy.asarray(vectors, dtype=numpy.float64)
    norms = numpy.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / numpy.where(norms > 0, norms, 1.0)


def uses(tokens: Sequence[str], word: str) -> List[int]:
    """Positions of ``word`` in ``tokens``, ignoring case."""
    word = word.lower()
    return [i for i, t in enumerate(tokens) if t.lower() == word]


# --------------------------------------------------------- nearest uses
def nearest_uses(
    bilm,
    query_tokens: Sequence[str],
    index: int,
    corpus_sentences: Sequence[Sequence[str]],
    layer: Layer = "mix",
    k: int = 5,
    batch_size: int = 64,
) -> List[Neighbour]:
    """The ``k`` uses of ``query_tokens[index]`` in ``corpus_sentences`` nearest
    (cosine) to the query use, best first (ties: earlier sentence, then earlier
    position). Only corpus sentences that contain the word are embedded; a
    sentence with several uses contributes each. ``bilm`` is anything with
    ``embed_sentences(sentences, batch_size=...)`` returning (L+1, n, dim)
    arrays, e.g. :class:`spacy_elmo.BiLM`."""
    query_tokens = list(query_tokens)
    if not 0 <= index < len(query_tokens):
        raise ValueError(f"index {index} is outside the query's {len(query_tokens)} tokens")
    if k < 1:
        raise ValueError(f"k must be >= 1, found {k}")
    word = query_tokens[index]
    found = [(i, list(s)) for i, s in enumerate(corpus_sentences) if uses(s, word)]
    if not found:
        return []
    arrays = bilm.embed_sentences([query_tokens] + [s for _, s in found], batch_size=batch_size)
    query = _unit(layer_vectors(arrays[0], layer)[index])
    candidates = []
    for (number, tokens), array in zip(found, arrays[1:]):
        vectors = _unit(layer_vectors(array, layer))
        for position in uses(tokens, word):
            score = float(vectors[position] @ query)
            candidates.append(Neighbour(number, tokens, position, score))
    candidates.sort(key=lambda n: (-n.score, n.sentence, n.position))
    return candidates[:k]


# ------------------------------------------------------------ sense eval
def load_senses(path: Union[str, Path, None] = None) -> List[Dict]:
    """Read a senses dataset (default: the packaged English set).

    A ``.jsonl`` file holds JSON lines with ``word``, ``sense``, ``tokens``
    (a list, or a whitespace-tokenised string), ``index`` (the target token)
    and optionally ``frame`` (items sharing a frame are held out together);
    any other file is read as crossed frames (:mod:`spacy_elmo.senses.frames`).
    Checks that every index points at the word (ignoring case)."""
    from .frames import SenseDataError, parse_frames, read_bounded

    path = Path(path) if path is not None else DATA
    text = read_bounded(path)
    if path.suffix != ".jsonl":
        return parse_frames(text, str(path))
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            item = None
        if not isinstance(item, dict):
            raise SenseDataError(f"{path}:{number}: not a JSON object (one item a line)")
        missing = [key for key in ("word", "sense", "tokens", "index") if key not in item]
        if missing:
            raise SenseDataError(
                f"{path}:{number}: the item lacks {', '.join(missing)}: each line needs word, sense, tokens and index"
            )
        if not isinstance(item["tokens"], (str, list)):
            raise SenseDataError(f"{path}:{number}: tokens must be a list of strings or a whitespace-tokenised string")
        tokens = item["tokens"].split() if isinstance(item["tokens"], str) else list(item["tokens"])
        index = item["index"]
        if (
            not isinstance(index, int)
            or not 0 <= index < len(tokens)
            or str(tokens[index]).lower() != str(item["word"]).lower()
        ):
            raise SenseDataError(f"{path}:{number}: index {index!r} does not point at {item['word']!r} in {tokens}")
        items.append({"word": item["word"], "sense": item["sense"], "tokens": tokens, "index": index})
        if "frame" in item:
            items[-1]["frame"] = str(item["frame"])
    return items


def _held_out(n: int, frames: Optional[Sequence]) -> List[numpy.ndarray]:
    """Per item, a mask of the items it may be compared with: all but itself,
    or, with ``frames``, all but the items of its own frame."""
    if frames is None:
        return [numpy.arange(n) != i for i in range(n)]
    frames = list(frames)
    return [numpy.array([f != frames[i] for f in frames]) for i in range(n)]


def one_nn(
    vectors: numpy.ndarray, senses: Sequence[str], tolerance: float = TIE_TOLERANCE, frames: Optional[Sequence] = None
):
    """Leave-one-out 1-NN over the uses of one word: per item, the expected
    credit (1, 0, or 1/k for a tie across k senses; see the module docstring)
    and whether its nearest neighbours tied across senses. With ``frames``
    (one label per item), leave-one-frame-out: an item's own frame is out."""
    unit = _unit(vectors)
    sims = unit @ unit.T
    for i, keep in enumerate(_held_out(len(senses), frames)):
        sims[i, ~keep] = -numpy.inf
    credits, tied = [], []
    for i, row in enumerate(sims):
        best = row.max()
        near = {senses[int(j)] for j in numpy.flatnonzero(row >= best - tolerance)}
        credits.append(1.0 / len(near) if senses[i] in near else 0.0)
        tied.append(len(near) > 1)
    return credits, tied


def nearest_centroid(
    vectors: numpy.ndarray, senses: Sequence[str], tolerance: float = TIE_TOLERANCE, frames: Optional[Sequence] = None
):
    """Leave-one-out nearest sense centroid over the uses of one word (the
    paper's word-sense method, section 5.3: each sense is represented by
    the mean vector of its uses, and a use takes the sense whose mean is
    most similar): per item, the mean of the *other* items of each sense,
    cosine to each, and the expected credit as in :func:`one_nn` (ties
    within ``tolerance`` score 1/k). With ``frames``, leave-one-frame-out:
    the items of an item's own frame are left out of every centroid."""
    labels = sorted(set(senses))
    index = {label: numpy.array([j for j, s in enumerate(senses) if s == label]) for label in labels}
    keeps = _held_out(len(senses), frames)
    credits, tied = [], []
    for i, vector in enumerate(vectors):
        scores = {}
        for label in labels:
            members = index[label][keeps[i][index[label]]]
            if len(members) == 0:
                continue
            centroid = vectors[members].mean(axis=0)
            scores[label] = float(_unit(vector[None])[0] @ _unit(centroid[None])[0])
        best = max(scores.values())
        near = {label for label, score in scores.items() if score >= best - tolerance}
        credits.append(1.0 / len(near) if senses[i] in near else 0.0)
        tied.append(len(near) > 1)
    return credits, tied


METHODS = {"centroid": nearest_centroid, "1nn": one_nn}


def sense_eval(
    bilm, dataset: Union[str, Path, Iterable[Dict], None] = None, batch_size: int = 64, method: str = "centroid"
) -> List[Dict]:
    """Word sense accuracy per layer (0..L, then ``"mix"``, the mean of
    the layers), leave-one-out within each word. ``dataset``: items as from
    :func:`load_senses`, or a path (default: the packaged English set).

    Returns one row per layer: ``layer``, ``accuracy`` (0..1), ``items``,
    ``tied`` (items whose nearest neighbours tied across senses) and
    ``per_word`` (word -> accuracy).

    ``method``: ``"centroid"`` (default; nearest sense centroid, the paper's
    method) or ``"1nn"`` (nearest single other use)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, found {method!r}")
    classify = METHODS[method]
    items = load_senses(dataset) if dataset is None or isinstance(dataset, (str, Path)) else list(dataset)
    if not items:
        raise ValueError("the senses dataset is empty")
    arrays = bilm.embed_sentences([it["tokens"] for it in items], batch_size=batch_size)
    groups: Dict[str, List[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault(it["word"].lower(), []).append(i)
    rows = []
    for layer in list(range(arrays[0].shape[0])) + ["mix"]:
        total, tied, per_word = 0.0, 0, {}
        for word, members in groups.items():
            vectors = numpy.stack([layer_vectors(arrays[i], layer)[items[i]["index"]] for i in members])
            frames = [items[i]["frame"] for i in members] if all("frame" in items[i] for i in members) else None
            credits, ties = classify(vectors, [items[i]["sense"] for i in members], frames=frames)
            total += sum(credits)
            tied += sum(ties)
            per_word[word] = sum(credits) / len(credits)
        rows.append(
            {"layer": layer, "accuracy": total / len(items), "items": len(items), "tied": tied, "per_word": per_word}
        )
    return rows


def random_like(bilm, seed: int = 0):
    """The baseline for sense figures: a biLM of ``bilm``'s shape (its
    options) with random weights, the package's own initialisation under
    ``torch.manual_seed(seed)``; in eval mode."""
    import torch

    from ..bilm import BiLM

    torch.manual_seed(seed)
    return BiLM(bilm.options).eval()
