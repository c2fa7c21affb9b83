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
from typing import Dict, Sequence, Union

import numpy
import torch
from tqdm import tqdm

from ..bilm.options import BiLMOptions
from ..bilm.weights import load_datasets, read_datasets
from .batches import Batcher
from .reading import read_corpus
from .errors import PretrainError
from .export import load_softmax
from .model import PretrainModel
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
    model_dir = Path(model_dir)
    needed = ["weights.hdf5", "options.json", "vocab.txt", "softmax.hdf5"]
    missing = [name for name in needed if not (model_dir / name).is_file()]
    if missing:
        raise PretrainError(
            f"{model_dir} lacks {', '.join(missing)}: perplexity needs the biLM and the softmax and vocabulary "
            "it was trained with (a directory written by `pretrain` or `export`)"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, found {batch_size}")
    options = BiLMOptions.from_file(model_dir / "options.json")
    vocab = Vocab.from_file(model_dir / "vocab.txt")
    corpus = read_corpus(texts, lang, max_tokens)
    model = PretrainModel(options, len(vocab), dropout=0.0)
    load_datasets(model.bilm, read_datasets(model_dir / "weights.hdf5", options))
    try:
        load_softmax(model_dir / "softmax.hdf5", model.head)
    except ValueError as err:
        raise PretrainError(str(err)) from None
    model.eval()
    batcher = Batcher(corpus, vocab, options.max_characters_per_token)
    order = numpy.argsort([len(corpus.window(i)) for i in range(len(corpus))], kind="stable")
    sums = [0.0, 0.0, 0]
    unk = 0
    device = torch.device("cpu")
    bar = tqdm(total=len(order), desc="perplexity", unit=" windows", disable=not progress)
    with torch.no_grad(), bar:
        for start in range(0, len(order), batch_size):
            char_ids, targets, _ = batcher(order[start : start + batch_size], device)
            nll_f, nll_b, n = model.head(model.top_layer(char_ids), targets)
            sums[0] += float(nll_f)
            sums[1] += float(nll_b)
            sums[2] += int(n)
            # Targets of one direction: every token and the closing boundary.
            unk += int((targets[:, 1:] == vocab.unk_id).sum())
            bar.update(len(order[start : start + batch_size]))
    nll_f, nll_b, n = sums
    return {
        "ppl_forward": math.exp(nll_f / n),
        "ppl_backward": math.exp(nll_b / n),
        "ppl": math.exp((nll_f + nll_b) / (2 * n)),
        "tokens": int(n),
        "unk_fraction": unk / n,
    }
