"""Save every inference path's and the training path's outputs on the test
fixtures, or compare two such snapshots bit for bit.

A refactor that claims "behaviour unchanged" runs this on the commit before
and after it::

    # before: a checkout of the old commit on PYTHONPATH
    PYTHONPATH=/path/to/old/checkout python benchmarks/parity_snapshot.py save before.npz
    python benchmarks/parity_snapshot.py save after.npz
    python benchmarks/parity_snapshot.py compare before.npz after.npz

It uses only the API that both sides share (``BiLM``, ``InferenceEngine``,
``BiLM.precision``, ``embed_sentences``, ``add_elmo``), so the same file runs
on both. Covered: fp32 (plain, packed weights on and off, per-type products
on and off, the product cache), bf16, int8, the fused kernel (a model
without clipping), stateful replay over the AllenNLP fixture, the spaCy
component's ``Doc._.elmo``, and a training step's outputs and parameter
gradients (the hand-written LSTM backward and autograd under dropout).
``compare`` exits 1 unless every array is equal (``numpy.array_equal``).
"""
import json
import sys
import warnings
from pathlib import Path

import numpy
import torch

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def _options(lstm_dim=16, proj=8, clip=3):
    return {
        "lstm": {"use_skip_connections": True, "projection_dim": proj, "cell_clip": clip, "proj_clip": clip,
                 "dim": lstm_dim, "n_layers": 2},
        "char_cnn": {"activation": "relu", "filters": [[1, 4], [2, 4], [3, 8]], "n_highway": 1,
                     "embedding": {"dim": 4}, "n_characters": 262, "max_characters_per_token": 50},
    }


def _random(seed, options, **kwargs):
    from spacy_elmo import BiLM

    torch.manual_seed(seed)
    model = BiLM(options, **kwargs).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
        model.token_encoder.char_embedding.weight[0].zero_()
    return model


def _stack(arrays):
    return numpy.concatenate([a.reshape(a.shape[0], -1) for a in arrays], axis=1)


def snapshot():
    from spacy_elmo import BiLM
    from spacy_elmo.bilm import InferenceEngine

    torch.set_num_threads(1)
    out = {}
    parity = FIXTURES / "elmo-parity"
    sentences = json.loads((parity / "sentences.json").read_text(encoding="utf-8"))
    bank = FIXTURES.parent.parent / "examples" / "bank.txt"
    text = [line.split() for line in bank.read_text(encoding="utf-8").splitlines() if line.strip()][:40]
    corpus = sentences + text
    engines = {
        "fp32": dict(),
        "fp32_unpacked": dict(packed_weights=False),
        "fp32_packed": dict(packed_weights=True),
        "fp32_packed_no_types": dict(packed_weights=True, type_products=False),
        "fp32_packed_product_cache": dict(packed_weights=True, type_product_cache_bytes=1 << 20),
        "fp32_no_token_cache": dict(token_cache_size=0),
        "bf16": dict(precision="bf16"),
        "int8": dict(precision="int8"),
        "int8_no_types": dict(precision="int8", type_products=False),
    }
    fixture = BiLM.from_hdf5(parity / "weights.hdf5", parity / "options.json").eval()
    big = _random(1, _options(lstm_dim=512, proj=128))  # packed by the default rule
    for name, kwargs in engines.items():
        for label, model in (("parity", fixture), ("big", big)):
            precision = kwargs.get("precision", "fp32")
            model.engine = InferenceEngine(**{k: v for k, v in kwargs.items() if k != "precision"})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.precision = precision
            for rep in range(2):  # the second pass reads the caches
                out[f"{label}/{name}/{rep}"] = _stack(model.embed_sentences(corpus, batch_size=5))
    fixture.engine = InferenceEngine()
    unclipped = _random(2, _options(clip=None))
    for fused in (True, False):
        unclipped.engine = InferenceEngine(fused_kernel=fused)
        out[f"unclipped/fused={fused}"] = _stack(unclipped.embed_sentences(corpus, batch_size=4))

    # Stateful replay over the AllenNLP fixture's batches.
    allen = FIXTURES / "allennlp_elmo"
    rows = json.loads((allen / "sentences.json").read_text(encoding="utf-8"))
    stateful = BiLM.from_hdf5(allen / "lm_weights.hdf5", allen / "options.json", stateful=True).eval()
    for i in range(len(rows[0])):
        batch = [rows[k][i].split() for k in range(len(rows))]
        out[f"stateful/{i}"] = _stack(stateful.embed_sentences(batch))

    # The spaCy component.
    import spacy

    from spacy_elmo import add_elmo

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    add_elmo(nlp, parity / "weights.hdf5", parity / "options.json")
    docs = list(nlp.pipe([" ".join(s) for s in corpus[:20]]))
    out["pipeline/layers"] = _stack([d._.elmo.layers for d in docs])

    # Training: outputs and gradients (hand-written backward; autograd with dropout).
    from spacy_elmo.bilm.chars import batch_to_char_ids

    char_ids = torch.from_numpy(batch_to_char_ids(corpus[:12], 50)[0])
    for dropout in (0.0, 0.3):
        model = _random(3, _options(), dropout=dropout).train()
        torch.manual_seed(7)
        result = model(char_ids)
        weights = torch.Generator().manual_seed(11)
        loss = sum((layer * torch.rand(layer.shape, generator=weights)).sum() for layer in result.layers)
        loss.backward()
        out[f"train/dropout={dropout}/outputs"] = _stack([layer.detach().numpy() for layer in result.layers])
        for pname, p in model.named_parameters():
            out[f"train/dropout={dropout}/grad/{pname}"] = p.grad.numpy().copy()
    return out


def main(argv):
    if len(argv) == 2 and argv[0] == "save":
        arrays = snapshot()
        numpy.savez_compressed(argv[1], **arrays)
        print(f"saved {len(arrays)} arrays to {argv[1]}")
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        a, b = dict(numpy.load(argv[1])), dict(numpy.load(argv[2]))
        problems = [f"only in {argv[1]}: {k}" for k in sorted(set(a) - set(b))]
        problems += [f"only in {argv[2]}: {k}" for k in sorted(set(b) - set(a))]
        for key in sorted(set(a) & set(b)):
            if not numpy.array_equal(a[key], b[key]):
                diff = (
                    numpy.abs(a[key].astype(numpy.float64) - b[key]).max() if a[key].shape == b[key].shape else "shape"
                )
                problems.append(f"differs: {key} (max abs difference {diff})")
        for line in problems:
            print(line)
        print(f"{len(set(a) & set(b))} arrays compared, {len(problems)} problems")
        return 1 if problems else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
