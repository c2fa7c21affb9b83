"""cell_senses.py: the cells' outputs come from the biLM's own recurrence."""
import cell_senses
import numpy
import pytest
import torch

from tests.helpers.models import random_model

SENTENCES = [["the", "bank", "of", "the", "river"], ["money"], ["a", "loan", "from", "the", "bank"], ["river", "banks"]]


def test_cells_project_to_the_bilms_layers():
    bilm = random_model()
    cells = cell_senses.CellOutputs(bilm).embed_sentences(SENTENCES, batch_size=2)
    reference = bilm.embed_sentences(SENTENCES)
    first = bilm.layers[0]
    for sentence, got, ref in zip(SENTENCES, cells, reference):
        assert got.shape == (2, len(sentence), 2 * first.cell_dim)
        # Layer 1 has no residual: its output is the clipped projection of its cells, per direction.
        for direction in range(2):
            m = torch.from_numpy(got[0, :, direction * first.cell_dim : (direction + 1) * first.cell_dim])
            projected = (m @ first.weight_proj[direction].detach().T).clamp(-first.proj_clip, first.proj_clip)
            half = first.projection_dim
            numpy.testing.assert_allclose(projected.numpy(), ref[1, :, direction * half : (direction + 1) * half],
                                          atol=1e-5)


def test_a_recurrence_that_differs_from_the_bilm_is_refused(monkeypatch):
    bilm = random_model()
    exact = cell_senses.run_layers

    def shifted(model, char_ids):
        outputs, cells = exact(model, char_ids)
        return [o + 1e-3 for o in outputs], cells

    monkeypatch.setattr(cell_senses, "run_layers", shifted)
    with pytest.raises(RuntimeError, match="differs from the biLM"):
        cell_senses.CellOutputs(bilm).embed_sentences(SENTENCES)
