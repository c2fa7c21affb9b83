import json

import h5py
import numpy
import pytest

from tests.helpers.paths import ALLENNLP, PARITY


@pytest.fixture(autouse=True)
def _torch_threads_given_back():
    """Commands run in this process (``embed``, ``pretrain``) set torch's
    thread count, as a command should; each test gives it back, so that no
    test's numbers depend on which tests ran before it."""
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


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
