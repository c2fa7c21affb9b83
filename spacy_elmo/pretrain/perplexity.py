"""Held-out perplexity of an exported biLM on any text.

An exported model directory (``pretrain``'s ``export/``, ``pretrain --init``'s
input, the shipped English biLM) holds the biLM (``weights.hdf5``,
``options.json``) and the language-model head it was trained with
(``vocab.txt``, ``softmax.hdf5``). With both, the perplexity of its forward and
backward language models on new text is exact and cheap: the adaptive
softmax's own log-probability of each target word, as pretraining's held-out
evaluation computes it. The text is read, tokenised and windowed as in
pretraining (``read_corpus``: spaCy's blank tokenizer, windows of at most
``max_tokens`` tokens, ``<S>``/``</S>`` around each), so with the same
settings the figure equals the one pretraining logged for the same file.

Words outside the model's vocabulary are scored as its ``<UNK>``, as in
training: a vocabulary that misses much of the text flatters the figure, so
the share of such targets is reported beside it.
"""
import math
from pathlib import Path
from typing import Dict, List, Sequence, Union

import numpy
import torch
from tqdm import tqdm

from ..bilm.options import BiLMOptions
from ..bilm.weights import load_datasets, read_datasets
from .batches import Batcher
from .errors import PretrainError
from .export import load_softmax
from .model import PretrainModel
from .reading import read_corpus
from .vocab import Vocab


def perplexity(
    model_dir: Union[str, Path],
    texts: Sequence[Union[str, Path]],
    lang: str = "en",
    max_tokens: int = 64,
    batch_size: int = 128,
    progress: bool = False,
) -> Dict[str, float]:
    """Forward, backward and mean (geometric) perplexity of the model in
    ``model_dir`` on ``texts`` (files or directories, as ``pretrain`` reads
    them). Returns ``ppl_forward``, ``ppl_backward``, ``ppl``, ``tokens`` and
    ``unk_fraction``. ``progress``: a tqdm bar (stderr) over the windows."""
    return perplexity_parts(model_dir, [texts], lang, max_tokens, batch_size, progress)[0]


def perplexity_parts(
    model_dir: Union[str, Path],
    parts: Sequence[Sequence[Union[str, Path]]],
    lang: str = "en",
    max_tokens: int = 64,
    batch_size: int = 128,
    progress: bool = False,
) -> List[Dict[str, float]]:
    """:func:`perplexity` of each part (a list of files or directories), the
    model loaded once, and then of all parts together: ``len(parts) + 1``
    results, the last for the whole. Windows never cross a line, so the whole's
    figures are exactly those of one :func:`perplexity` over every part (the
    token-weighted sums of the parts' log-probabilities; a file in two parts
    counts twice)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, found {batch_size}")
    if not parts:
        raise ValueError("perplexity_parts needs at least one part")
    model, vocab, options = _load(Path(model_dir))
    results, totals = [], numpy.zeros(4)
    for texts in parts:
        corpus = read_corpus(texts, lang, max_tokens)
        sums = _score(model, Batcher(corpus, vocab, options.max_characters_per_token), vocab.unk_id, batch_size,
                      progress)
        totals += sums
        results.append(_figures(sums))
    results.append(_figures(totals))
    return results


def _load(model_dir: Path):
    needed = ["weights.hdf5", "options.json", "vocab.txt", "softmax.hdf5"]
    missing = [name for name in needed if not (model_dir / name).is_file()]
    if missing:
        raise PretrainError(
            f"{model_dir} lacks {', '.join(missing)}: perplexity needs the biLM and the softmax and vocabulary "
            "it was trained with (a directory written by `pretrain` or `export`)"
        )
    options = BiLMOptions.from_file(model_dir / "options.json")
    vocab = Vocab.from_file(model_dir / "vocab.txt")
    model = PretrainModel(options, len(vocab), dropout=0.0)
    load_datasets(model.bilm, read_datasets(model_dir / "weights.hdf5", options))
    try:
        load_softmax(model_dir / "softmax.hdf5", model.head)
    except ValueError as err:
        raise PretrainError(str(err)) from None
    model.eval()
    return model, vocab, options


def _score(model: PretrainModel, batcher: Batcher, unk_id: int, batch_size: int, progress: bool) -> numpy.ndarray:
    """Summed forward and backward negative log-likelihood, targets, ``<UNK>`` targets."""
    order = numpy.argsort(batcher.corpus.lengths(), kind="stable")
    sums = numpy.zeros(4)
    device = torch.device("cpu")
    bar = tqdm(total=len(order), desc="perplexity", unit=" windows", disable=not progress)
    with torch.no_grad(), bar:
        for start in range(0, len(order), batch_size):
            char_ids, targets, _ = batcher(order[start : start + batch_size], device)
            nll_f, nll_b, n = model.head(model.top_layer(char_ids), targets)
            # Targets of one direction: every token and the closing boundary.
            unk = int((targets[:, 1:] == unk_id).sum())
            sums += (float(nll_f), float(nll_b), int(n), unk)
            bar.update(len(order[start : start + batch_size]))
    return sums


def _figures(sums: numpy.ndarray) -> Dict[str, float]:
    nll_f, nll_b, n, unk = sums
    return {
        "ppl_forward": math.exp(nll_f / n),
        "ppl_backward": math.exp(nll_b / n),
        "ppl": math.exp((nll_f + nll_b) / (2 * n)),
        "tokens": int(n),
        "unk_fraction": unk / n,
    }
