import json
from pathlib import Path

import h5py
import numpy
import pytest
import torch

FIXTURES = Path(__file__).parent / "fixtures"
PARITY = FIXTURES / "elmo-parity"
ALLENNLP = FIXTURES / "allennlp_elmo"


@pytest.fixture(scope="session")
def parity_paths():
    return PARITY / "weights.hdf5", PARITY / "options.json"


@pytest.fixture(scope="session")
def parity_reference():
    return dict(numpy.load(PARITY / "reference.npz"))


@pytest.fixture(scope="session")
def parity_sentences():
    return json.loads((PARITY / "sentences.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def allennlp_paths():
    return ALLENNLP / "lm_weights.hdf5", ALLENNLP / "options.json"


@pytest.fixture(scope="session")
def allennlp_batches():
    """Ten batches of three sentences and the expected top layer of each row."""
    rows = json.loads((ALLENNLP / "sentences.json").read_text(encoding="utf-8"))
    expected = []
    for k in range(len(rows)):
        with h5py.File(ALLENNLP / f"lm_embeddings_{k}.hdf5", "r") as fin:
            expected.append([numpy.concatenate([fin[str(i)][0], fin[str(i)][1]], -1) for i in range(10)])
    return [
        ([rows[k][i].split() for k in range(3)], [expected[k][i] for k in range(3)]) for i in range(10)
    ]


def small_options(**changes):
    """A tiny but complete options dict in the published format."""
    options = {
        "lstm": {"use_skip_connections": True, "projection_dim": 8, "cell_clip": 3, "proj_clip": 3, "dim": 16, "n_layers": 2},
        "char_cnn": {
            "activation": "relu",
            "filters": [[1, 4], [2, 4], [3, 8]],
            "n_highway": 1,
            "embedding": {"dim": 4},
            "n_characters": 262,
            "max_characters_per_token": 50,
        },
    }
    for path, value in changes.items():
        block, key = path.split(".", 1)
        if "." in key:
            sub, key = key.split(".")
            options[block][sub][key] = value
        else:
            options[block][key] = value
    return options


def random_model(seed=0, **changes):
    """A small biLM (see ``small_options``) with weights uniform in [-0.5, 0.5]."""
    from spacy_elmo import BiLM

    torch.manual_seed(seed)
    model = BiLM(small_options(**changes)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
        model.token_encoder.char_embedding.weight[0].zero_()
    return model


#: Toy training data of spaCy's overfitting tests (tagger, NER, textcat).
TAG_DATA = [
    ("I like green eggs", {"tags": ["N", "V", "J", "N"]}),
    ("Eat blue ham", {"tags": ["V", "J", "N"]}),
]
NER_DATA = [
    ("Who is Shaka Khan?", {"entities": [(7, 17, "PERSON")]}),
    ("I like London and Berlin.", {"entities": [(7, 13, "LOC"), (18, 24, "LOC")]}),
]
CAT_DATA = [
    ("I'm so happy.", {"cats": {"POSITIVE": 1.0, "NEGATIVE": 0.0}}),
    ("I'm so angry", {"cats": {"POSITIVE": 0.0, "NEGATIVE": 1.0}}),
]
