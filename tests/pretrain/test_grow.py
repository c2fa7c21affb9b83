"""`pretrain --init MODEL --options WIDER`: a trained biLM grown to a wider
projection computes what it was grown from, then learns in the new
dimensions; a run from `--init` resumes without its init directory."""
import json

import numpy
import pytest

torch = pytest.importorskip("torch")

from spacy_elmo.bilm.options import BiLMOptions  # noqa: E402
from spacy_elmo.pretrain import pretrain  # noqa: E402
from spacy_elmo.pretrain.checkpoint import load_checkpoint  # noqa: E402
from spacy_elmo.pretrain.export import init_from_export, save_softmax  # noqa: E402
from spacy_elmo.pretrain.grow import grow_state  # noqa: E402
from spacy_elmo.pretrain.model import PretrainModel  # noqa: E402
from spacy_elmo.pretrain.perplexity import perplexity  # noqa: E402
from spacy_elmo.pretrain.vocab import Vocab  # noqa: E402
from tests.helpers.models import small_options  # noqa: E402
from tests.helpers.pretrain import make_lines, tiny_config, write_corpus  # noqa: E402

SENTENCES = [["The", "cat", "sees", "the", "red", "ball", "."], ["Our", "teacher", "likes", "some", "bread", "again"]]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model trained a few steps (projection 8), its export and a held-out file."""
    tmp = tmp_path_factory.mktemp("grow")
    corpus = write_corpus(tmp, 80)
    pretrain(tiny_config(tmp, corpus, "first", max_steps=4), progress=False)
    dev = tmp / "dev.txt"
    dev.write_text("\n".join(make_lines(30, seed=7)) + "\n", encoding="utf-8")
    return tmp, corpus, tmp / "first" / "export", dev


def wider(tmp, width, **changes):
    path = tmp / f"options_{width}.json"
    path.write_text(json.dumps(small_options(**{"lstm.projection_dim": width}, **changes)), encoding="utf-8")
    return path


def grown_model(exported, options_path, seed=0):
    vocab = Vocab.from_file(exported / "vocab.txt")
    model = PretrainModel(BiLMOptions.from_file(options_path), len(vocab))
    init_from_export(model, exported, vocab, seed)
    return model.eval(), vocab


def test_a_grown_model_computes_what_it_was_grown_from(trained):
    tmp, _, exported, dev = trained
    model, vocab = grown_model(exported, wider(tmp, 12))
    source, _ = grown_model(exported, exported / "options.json")
    with torch.no_grad():
        before = source.bilm.embed_sentences(SENTENCES)
        after = model.bilm.embed_sentences(SENTENCES)
    for old, new in zip(before, after):
        assert new.shape == old.shape[:2] + (24,)
        # Each direction: the old dimensions (up to float summation order), and new ones that carry something.
        numpy.testing.assert_allclose(numpy.concatenate([new[..., :8], new[..., 12:20]], -1), old, rtol=1e-5, atol=1e-6)
        assert numpy.abs(new[..., 8:12]).mean() > 1e-3 and numpy.abs(new[..., 20:]).mean() > 1e-3

    # The same distribution over the vocabulary: the same perplexity.
    out = tmp / "grown"
    out.mkdir()
    model.bilm.to_hdf5(out / "weights.hdf5", out / "options.json")
    vocab.to_file(out / "vocab.txt")
    head = {k[len("head."):]: v for k, v in model.state_dict().items() if k.startswith("head.")}
    save_softmax(out / "softmax.hdf5", head, model.head.cutoffs)
    grown_figures = perplexity(out, [dev], max_tokens=16, batch_size=5)
    source_figures = perplexity(exported, [dev], max_tokens=16, batch_size=5)
    assert grown_figures["tokens"] == source_figures["tokens"] > 100
    for key in ("ppl_forward", "ppl_backward"):
        assert grown_figures[key] == pytest.approx(source_figures[key], rel=1e-5)


def test_the_new_rows_are_drawn_from_the_seed(trained):
    tmp, _, exported, _ = trained
    first, _ = grown_model(exported, wider(tmp, 12), seed=3)
    again, _ = grown_model(exported, wider(tmp, 12), seed=3)
    other, _ = grown_model(exported, wider(tmp, 12), seed=4)
    state = first.state_dict()
    name = "bilm.layers.0.weight_proj"
    assert torch.equal(state[name], again.state_dict()[name])
    assert not torch.equal(state[name][:, 8:], other.state_dict()[name][:, 8:])
    # Writers of the new dimensions are random, their readers zero.
    for writer in (state[name][:, 8:], state["bilm.token_encoder.projection.weight"][8:],
                   state["head.softmax.tail.0.0.weight"][2:, :8]):
        assert writer.abs().min() > 0
    for reader in ("bilm.layers.0.weight_ih", "bilm.layers.1.weight_hh", "head.softmax.head.weight"):
        assert not state[reader][..., 8:].any(), reader


def test_a_run_from_a_grown_model_learns_in_the_new_dimensions(trained):
    tmp, corpus, exported, _ = trained
    config = tiny_config(tmp, corpus, "second", max_steps=2, init=str(exported), options=str(wider(tmp, 12)))
    assert pretrain(config, progress=False)["step"] == 2
    state = load_checkpoint(tmp / "second" / "checkpoints" / "last.pt")
    assert state["options"]["lstm"]["projection_dim"] == 12
    # The zero readers of the new dimensions have learned to read them.
    for name in ("bilm.layers.0.weight_hh", "bilm.layers.1.weight_ih", "bilm.layers.1.weight_hh",
                 "head.softmax.head.weight"):
        assert state["model"][name][..., 8:].abs().sum() > 0, name
    assert json.loads((tmp / "second" / "export" / "options.json").read_text())["lstm"]["projection_dim"] == 12


@pytest.mark.parametrize(
    "width, changes, message",
    [
        (6, {}, "narrower than the model's 8; a model can be grown, not cut"),
        (12, {"lstm.dim": 20}, "differ in more than lstm.projection_dim"),
        (16, {}, "removes the token projection"),
    ],
)
def test_options_that_cannot_grow_the_model_are_refused(trained, width, changes, message):
    tmp, corpus, exported, _ = trained
    options = wider(tmp, width, **changes)
    config = tiny_config(tmp, corpus, f"refused{width}", max_steps=1, init=str(exported), options=str(options))
    with pytest.raises(ValueError, match=message) as caught:
        pretrain(config, progress=False)
    assert str(options) in str(caught.value)
    assert not (tmp / f"refused{width}" / "checkpoints").exists()


def test_grow_state_refuses_shapes_it_cannot_grow():
    small = {"w": torch.ones(4, 3)}
    with pytest.raises(ValueError, match=r"cannot grow w from \(4, 3\) to \(2, 3\)"):
        grow_state(small, {"w": torch.zeros(2, 3)}, seed=0)
    with pytest.raises(ValueError, match="has no v"):
        grow_state(small, {"v": torch.zeros(4, 3)}, seed=0)


@pytest.mark.parametrize("grown", [False, True])
def test_a_run_from_init_resumes_when_the_init_directory_is_gone(trained, grown):
    """The checkpoint holds the weights, options and vocabulary: ``--init``
    matters only at the start."""
    import shutil

    tmp, corpus, exported, _ = trained
    init = tmp / f"init_copy_{grown}"
    shutil.copytree(exported, init)
    options = str(wider(tmp, 12)) if grown else None
    output = f"resumed_{grown}"
    first = tiny_config(tmp, corpus, output, max_steps=2, init=str(init), options=options, checkpoint_every=1)
    assert pretrain(first, progress=False)["step"] == 2
    shutil.rmtree(init)
    longer = tiny_config(tmp, corpus, output, max_steps=3, init=str(init), options=options, checkpoint_every=1)
    assert pretrain(longer, resume=True, progress=False)["step"] == 3
    state = load_checkpoint(tmp / output / "checkpoints" / "last.pt")
    assert state["options"]["lstm"]["projection_dim"] == (12 if grown else 8)
    assert state["vocab"] == Vocab.from_file(exported / "vocab.txt").words
