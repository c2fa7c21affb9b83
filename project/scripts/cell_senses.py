"""Word senses in the LSTM cells' outputs, before the projection.

Each LSTM layer of the biLM computes ``m = sigmoid(o) * tanh(c)`` (the
cells' output, 1,024 a direction in the English shapes) and projects it to
the layer's output (128 or 192 a direction); ELMo's vectors are the
projections. This script runs the paper's all-words protocol
(:mod:`spacy_elmo.senses.wsd`: sense centroids from ``--train``, 1-NN by
cosine, WordNet's first sense for a lemma+POS never seen) on ``[m_fwd;
m_bwd]`` of every LSTM layer instead, to tell whether the senses the
projections show are all that the cells hold: a projection wider than the
shipped one can at most expose what the cells' outputs carry.

``python scripts/cell_senses.py EXPORT [EXPORT ...] --label NAME ...``
prints, per model, F1 per layer of the cells' outputs and records it in
``--out`` (one entry per label). The recurrence steps the exact layer's
cell (:class:`spacy_elmo.bilm.lstm.BiProjectedLSTMLayer`) one position at a
time to keep ``m``; every batch's projected outputs are checked against
the biLM's own before its cells are used.
"""
import json
from functools import partial
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy
import torch
import typer

from spacy_elmo.bilm.chars import batch_to_char_ids
from spacy_elmo.bilm.lstm import BiProjectedLSTMLayer
from spacy_elmo.bilm.model import BiLM
from spacy_elmo.bilm.options import BiLMOptions
from spacy_elmo.senses import wsd

app = typer.Typer(add_completion=False)

#: Largest difference allowed between the written-out recurrence's projected
#: outputs and the biLM's (float32, both on CPU).
TOLERANCE = 1e-4


def run_layers(bilm: BiLM, char_ids: torch.Tensor):
    """For a batch of equal-length rows (boundaries included, no padding):
    per LSTM layer, the layer's output ``(B, T, 2 x projection)`` (residual
    included, as :meth:`BiLM.forward` gives it) and the cells' output
    ``(B, T, 2 x cell)``, the backward direction in reading order."""
    tokens = bilm.token_encoder(char_ids)  # (B, T, P)
    x = torch.stack([tokens, tokens.flip(1)]).transpose(1, 2)  # (2, T, B, P), backward reversed
    outputs: List[torch.Tensor] = []
    cells: List[torch.Tensor] = []
    for index, module in enumerate(bilm.layers):
        layer = cast(BiProjectedLSTMLayer, module)
        xw = layer.input_products(x)  # (2, T, B, 4C)
        h = x.new_zeros(2, x.shape[2], layer.projection_dim)
        c = x.new_zeros(2, x.shape[2], layer.cell_dim)
        w_hh = layer.weight_hh.transpose(1, 2)
        hs, ms = [], []
        for t in range(x.shape[1]):
            gates = torch.baddbmm(xw[:, t], h, w_hh)
            h, c = layer._cell(gates, c)  # the layer's own cell: clipped c, projected and clipped h
            hs.append(h)
            ms.append(torch.sigmoid(gates.chunk(4, dim=-1)[3]) * torch.tanh(c))  # what the projection reads
        out = torch.stack(hs, dim=1)  # (2, T, B, P)
        if index > 0 and bilm.options.use_skip_connections:
            out = out + x
        x = out
        for store, value in ((outputs, out), (cells, torch.stack(ms, dim=1))):
            by_row = value.transpose(1, 2)  # (2, B, T, dim)
            store.append(torch.cat([by_row[0], by_row[1].flip(1)], dim=-1))
    return outputs, cells


class CellOutputs:
    """A stand-in biLM for :mod:`spacy_elmo.senses.wsd`: ``embed_sentences``
    gives, per sentence, ``(L, n_tokens, 2 x cell)``, the cells' outputs of
    the L LSTM layers (boundaries removed). Sentences are batched by equal
    length, so no row is padded."""

    def __init__(self, bilm: BiLM) -> None:
        self.bilm = bilm.eval()

    def embed_sentences(self, sentences: Sequence[Sequence[str]], batch_size: int = 64) -> List[numpy.ndarray]:
        result: List[numpy.ndarray] = [numpy.zeros(0)] * len(sentences)
        by_length: Dict[int, List[int]] = {}
        for i, sentence in enumerate(sentences):
            by_length.setdefault(len(sentence), []).append(i)
        max_chars = self.bilm.options.max_characters_per_token
        with torch.no_grad():
            for length, rows in sorted(by_length.items()):
                for begin in range(0, len(rows), batch_size):
                    batch = rows[begin : begin + batch_size]
                    texts = [sentences[i] for i in batch]
                    char_ids, _ = batch_to_char_ids(texts, max_chars)
                    outputs, cells = run_layers(self.bilm, torch.from_numpy(char_ids))
                    reference = self.bilm.embed_sentences(texts, batch_size=len(texts))
                    for row, i in enumerate(batch):
                        mine = numpy.stack([o[row, 1 : length + 1].numpy() for o in outputs])
                        gap = float(numpy.abs(mine - reference[row][1:]).max()) if length else 0.0
                        if gap > TOLERANCE:
                            raise RuntimeError(f"the written-out recurrence differs from the biLM by {gap:.2e}")
                        result[i] = numpy.stack([m[row, 1 : length + 1].numpy() for m in cells])
        return result


def exported(export: Path) -> BiLM:
    return BiLM.from_hdf5(export / "weights.hdf5", export / "options.json")


def random_weights(shape: Path, seed: int) -> BiLM:
    """A biLM of the export ``shape``'s options with the package's initialisation under ``seed``."""
    return wsd.random_twin(BiLM(BiLMOptions.from_file(shape / "options.json")), seed)


@app.command()
def main(
    exports: List[Path] = typer.Argument(None, help="Exported biLM directories (weights.hdf5, options.json)"),
    label: List[str] = typer.Option([], help="A name per export, in order"),
    train: Path = typer.Option(Path("assets/semcor_split/semcor_train.data.xml")),
    test: Path = typer.Option(Path("assets/semcor_split/semcor_heldout.data.xml")),
    sense_index: Path = typer.Option(Path("assets/wordnet/index.sense")),
    out: Path = typer.Option(Path("metrics/wsd/cells.json"), help="Where the F1s are recorded, one entry per label"),
    random_shape: Optional[Path] = typer.Option(None, help="An export whose shape --random-seed's biLMs take"),
    random_seed: List[int] = typer.Option(
        [], help="Also measure a biLM of --random-shape's shape with random weights (the package's initialisation "
        "under this seed; repeatable), recorded as 'random weights, seed N'"
    ),
) -> None:
    exports = exports or []
    if len(label) != len(exports):
        raise typer.BadParameter(f"{len(exports)} exports but {len(label)} --label")
    if random_seed and random_shape is None:
        raise typer.BadParameter("--random-seed needs --random-shape (an export whose shape the random biLMs take)")
    train_set, test_set = wsd.read_set(train), wsd.read_set(test)
    index = wsd.read_sense_index(sense_index)
    recorded = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    models: List[Tuple[str, Callable[[], BiLM]]] = [(name, partial(exported, export))
                                                    for name, export in zip(label, exports)]
    if random_shape is not None:
        models += [(f"random weights, seed {seed}", partial(random_weights, random_shape, seed))
                   for seed in random_seed]
    for name, load in models:
        bilm = load()
        model = CellOutputs(bilm)
        centroids = wsd.compute_centroids(model, [train_set])
        answers = wsd.predict_nearest(centroids, index, test_set, wsd.instance_vectors(model, test_set))
        # The stand-in's layer k is the LSTM layer k + 1 (the biLM's numbering, layer 0 being the token encoder).
        scores = {layer: wsd.score(test_set.instances, answer)["f1"] for layer, answer in answers.items()}
        f1 = {(str(layer + 1) if isinstance(layer, int) else layer): round(v, 1) for layer, v in scores.items()}
        recorded[name] = {"cells_f1": f1, "cell_dim": bilm.options.lstm_dim, "train": train.name, "test": test.name}
        typer.echo(f"{name}: F1 of the cells' outputs per LSTM layer {f1}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    app()
