"""The biLM's one sentence-batching loop (inference and training share it)."""
import pytest

from spacy_elmo.bilm.batching import batch_rows, map_batches

SENTENCES = [["a", "b", "c"], [], ["d"], ["e", "f"], ["g"]]


def test_batches_by_length_leave_out_empty_sentences():
    assert batch_rows(SENTENCES, 2) == [[2, 4], [3, 0]]
    assert batch_rows(SENTENCES, 2, by_length=False) == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="batch_size"):
        batch_rows(SENTENCES, 0)


def test_map_batches_returns_results_in_the_given_order():
    seen = []

    def run_batch(batch):
        seen.append([len(s) for s in batch])
        return ["".join(s) for s in batch]

    assert map_batches(SENTENCES, 3, run_batch) == ["abc", None, "d", "ef", "g"]
    assert seen == [[1, 1, 2], [3]]
    with pytest.raises(ValueError, match="results"):
        map_batches(SENTENCES, 3, lambda batch: [])
