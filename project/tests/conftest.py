"""Fixtures shared by the tests of the project's scripts."""
import pytest

from tests.helpers.pretrain import tiny_config, write_corpus


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A finished pretraining run of 4 steps with held-out evaluations at
    steps 2 and 4: config, log, checkpoints, export and corpus cache. Tests
    read it or copy it, never change it."""
    from spacy_elmo.pretrain import pretrain

    tmp = tmp_path_factory.mktemp("tiny_run")
    corpus = write_corpus(tmp / "corpus" / "train", n=200)
    pretrain(tiny_config(tmp, corpus.parent, max_steps=4, eval_every=2))
    return tmp / "out"
