"""Issue 26, points 3-5 and 7 (docs/reliability.md): damaged or foreign
saved-pipeline files, checksums, DocBin payload validation, token lists,
the pretraining output lock, and memory bounded by the result."""
import io
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy
import pytest
import spacy
import srsly
import torch
from spacy.tokens import DocBin

from spacy_elmo import WeightFileError, add_elmo
from spacy_elmo.component.doc_data import ElmoDataError
from spacy_elmo.component.saved_pipeline import MAX_MODEL_BYTES, SavedPipelineError
from tests.helpers.models import random_model, rewrite_saved_bilm


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved pipeline (copied per test by ``pipeline``)."""
    path = tmp_path_factory.mktemp("saved") / "p"
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    nlp.to_disk(path)
    return path


@pytest.fixture
def pipeline(saved, tmp_path):
    import shutil

    shutil.copytree(saved, tmp_path / "p")
    return tmp_path / "p"


# ------------------------------------------- 3. damaged or foreign files
def _torch_save_bytes():
    buffer = io.BytesIO()
    torch.save({"weight": torch.zeros(2)}, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("model", lambda b: b[: len(b) // 2], "not a readable elmo model file"),
        ("model", lambda b: b[:100] + bytes(range(256)) * 4, "not a readable elmo model file"),
        ("model", lambda b: b"", "is empty"),
        ("model", lambda b: pickle.dumps({"weights": [1.0]}, protocol=4), "is a Python pickle"),
        ("model", lambda b: _torch_save_bytes(), "is a zip archive"),
        # A bin header claiming 4 GB, and an array header claiming 2^32 - 1 entries.
        ("model", lambda b: b"\xc6\xff\xff\xff\xff" + b"x" * 100, "not a readable elmo model file"),
        ("model", lambda b: b"\xdd\xff\xff\xff\xff" + b"\xc0" * 100, "not a readable elmo model file"),
        ("cfg", lambda b: b[: len(b) // 2], "not readable JSON"),
        ("cfg", lambda b: b"\xff\xfe\x00garbage", "not readable JSON"),
        ("cfg", lambda b: pickle.dumps({"store": "layers"}, protocol=2), "is a Python pickle"),
        ("cfg", lambda b: _torch_save_bytes(), "is a zip archive"),
        ("cfg", lambda b: b'{"store": "everything"}', "'store' must be one of"),
        ("cfg", lambda b: b"[1, 2]", "holds a JSON list"),
    ],
)
def test_damaged_or_foreign_component_files_are_named(pipeline, monkeypatch, name, content, message):
    """Each ends in the package's own error naming the file and what to
    do; nothing is unpickled."""
    target = pipeline / "elmo" / name
    target.write_bytes(content(target.read_bytes()))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load"))
    with pytest.raises(SavedPipelineError, match=message) as info:
        spacy.load(pipeline)
    assert str(target) in str(info.value)
    assert "re-save the pipeline" in str(info.value)


def test_oversized_model_file_is_refused_unread(pipeline, monkeypatch):
    """A sparse file above the bound: refused from its size, never read."""
    target = pipeline / "elmo" / "model"
    with target.open("r+b") as f:
        f.truncate(MAX_MODEL_BYTES + 1)
    read = []
    real_open = Path.open
    monkeypatch.setattr(Path, "open", lambda self, *a, **k: read.append(self) or real_open(self, *a, **k))
    with pytest.raises(SavedPipelineError, match="more than the .* it was not read") as info:
        spacy.load(pipeline)
    assert str(target) in str(info.value) and target not in read


def test_missing_model_file_is_named(pipeline):
    (pipeline / "elmo" / "model").unlink()
    with pytest.raises(SavedPipelineError, match=r"elmo[/\\]model is missing"):
        spacy.load(pipeline)


def test_damaged_component_bytes_are_named(saved):
    nlp = spacy.load(saved)
    data = nlp.get_pipe("elmo").to_bytes()
    other = spacy.blank("en").add_pipe("elmo")
    with pytest.raises(SavedPipelineError, match="the elmo component's bytes: not readable msgpack"):
        other.from_bytes(data[: len(data) // 3])
    msg = srsly.msgpack_loads(data)
    msg["model"] = msg["model"][: len(msg["model"]) // 2]
    with pytest.raises(SavedPipelineError, match=r"the elmo component's bytes \(model\) is not a readable"):
        other.from_bytes(srsly.msgpack_dumps(msg))


# ------------------------------------------------ 4. checksums and payloads
def _flip_float_bytes(state):
    """Flip 200 bytes of the float data inside the saved hdf5 weights (the
    last dataset's data sit before hdf5's trailing metadata; flip in the
    middle of the file, which is float data for this model)."""
    weights = bytearray(state["weights"])
    middle = len(weights) // 2
    for i in range(middle, middle + 200):
        weights[i] ^= 0xFF
    state["weights"] = bytes(weights)


@pytest.mark.parametrize(
    "edit",
    [
        _flip_float_bytes,
        lambda s: s["options"]["lstm"].__setitem__(
            "use_skip_connections", not s["options"]["lstm"].get("use_skip_connections", False)
        ),
        lambda s: s["options"]["lstm"].__setitem__("cell_clip", 1.5),
        lambda s: s["options"]["lstm"].__setitem__("proj_clip", 0.25),
    ],
    ids=["flipped-floats", "use_skip_connections", "cell_clip", "proj_clip"],
)
def test_saved_biLM_changed_after_saving_is_refused(pipeline, edit):
    """Edits that keep every shape valid (so every other check passes)
    are caught by the SHA-256 saved with the weights and options."""
    rewrite_saved_bilm(pipeline / "elmo" / "model", edit)
    with pytest.raises(WeightFileError, match="do not match the SHA-256 checksum saved with them") as info:
        spacy.load(pipeline)
    assert str(pipeline / "elmo" / "model") in str(info.value)


def test_checksum_round_trip_and_a_saved_biLM_without_one_is_refused(pipeline):
    doc = spacy.load(pipeline)("A checksummed pipeline loads .")
    again = spacy.load(pipeline)("A checksummed pipeline loads .")
    numpy.testing.assert_array_equal(doc._.elmo.layers, again._.elmo.layers)
    rewrite_saved_bilm(pipeline / "elmo" / "model", lambda s: s.pop("sha256"))
    with pytest.raises(WeightFileError, match="carries no SHA-256 checksum") as info:
        spacy.load(pipeline)
    assert str(pipeline / "elmo" / "model") in str(info.value)


@pytest.fixture(scope="module")
def elmo_nlp(saved):
    return spacy.load(saved)


def _docbin_with(nlp, edit):
    """A DocBin of one 6-token Doc whose Doc._.elmo payload map is edited."""
    import spacy_elmo.component.doc_data as data_module

    doc = nlp("one two three four five six")
    original = data_module.ElmoData.to_dict

    def edited(self):
        return edit(original(self))

    data_module.ElmoData.to_dict = edited
    try:
        return DocBin(store_user_data=True, docs=[doc]).to_bytes()
    finally:
        data_module.ElmoData.to_dict = original


def _load_docbin(nlp, data):
    return list(DocBin().from_bytes(data).get_docs(nlp.vocab))


def test_docbin_payload_round_trip(elmo_nlp):
    doc = elmo_nlp("one two three four five six")
    (back,) = _load_docbin(elmo_nlp, DocBin(store_user_data=True, docs=[doc]).to_bytes())
    numpy.testing.assert_array_equal(back._.elmo.layers, doc._.elmo.layers)
    numpy.testing.assert_array_equal(back[1:3]._.elmo.vectors, doc[1:3]._.elmo.vectors)
    assert back._.elmo.space == doc._.elmo.space is not None


def test_docbin_payload_of_an_older_version_has_no_space(elmo_nlp):
    """Payloads written before ``space`` existed load; their vectors compare
    with any (the biLM that made them is unknown)."""
    (doc,) = _load_docbin(elmo_nlp, _docbin_with(elmo_nlp, lambda d: {k: v for k, v in d.items() if k != "space"}))
    assert doc._.elmo.space is None


@pytest.mark.parametrize("n_tokens", [2, 60])
def test_docbin_payload_of_another_length_is_refused(elmo_nlp, n_tokens):
    def resize(d):
        layers = d["layers"]
        return dict(d, layers=numpy.zeros((layers.shape[0], n_tokens, layers.shape[2]), dtype=layers.dtype))

    (doc,) = _load_docbin(elmo_nlp, _docbin_with(elmo_nlp, resize))
    with pytest.raises(ElmoDataError, match=f"vectors of {n_tokens} tokens for a Doc of 6 tokens"):
        doc._.elmo
    with pytest.raises(ElmoDataError):
        doc[0]._.elmo


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda d: dict(d, layers=d["layers"][0]), r"'layers' has shape \(6, \d+\), expected 3 dimensions"),
        (lambda d: dict(d, layers=d["layers"].astype("U3")), "'layers' holds <U3 values"),
        (lambda d: dict(d, layers=d["layers"].astype(numpy.int32)), "'layers' holds int32 values"),
        (lambda d: dict(d, layers=d["layers"].tolist()), r"'layers' is a (list|tuple), expected an array"),
        (lambda d: {k: v for k, v in d.items() if k != "mixed"}, r"lacks the key\(s\) \['mixed'\]"),
        (lambda d: dict(d, mixed=d["layers"][0]), "exactly one of 'layers' and 'mixed'"),
        (lambda d: dict(d, weights=numpy.ones(7, dtype=numpy.float32)), "'weights' must be null or one finite number"),
        (lambda d: [1, 2, 3], "is a (list|tuple), expected a map"),
        (lambda d: "layers", "is a str, expected a map"),
        (lambda d: dict(d, space="x" * 65), "'space' must be null or a hex digest"),
        (lambda d: dict(d, space=12), "'space' must be null or a hex digest"),
    ],
)
def test_docbin_payload_of_the_wrong_structure_is_refused_on_load(elmo_nlp, edit, message):
    data = _docbin_with(elmo_nlp, edit)
    with pytest.raises(ElmoDataError, match=message):
        _load_docbin(elmo_nlp, data)


def test_embed_sentences_refuses_strings_for_token_lists():
    bilm = random_model(0)
    with pytest.raises(TypeError, match=r"sentence 0 is a str \('the bank'\), not a list of tokens"):
        bilm.embed_sentences(["the bank"])
    with pytest.raises(TypeError, match="found one string"):
        bilm.embed_sentences("the bank")
    with pytest.raises(TypeError, match="holds a int token"):
        bilm.embed_sentences([["the", 3]])
    assert bilm.embed_sentences([("the", "bank")])[0].shape[1] == 2  # tuples are token lists


# ------------------------------------------------------- 7. long documents
def _long_doc(nlp, n_tokens):
    from spacy.tokens import Doc

    words = [f"w{i % 997}" for i in range(n_tokens)]
    return Doc(nlp.vocab, words=words)  # no sentence boundaries: strided windows


def test_long_doc_streams_into_its_result_with_the_same_vectors():
    """A Doc without sentence boundaries: the same vectors as embedding
    every window and giving each token its most central window's output,
    and numpy's peak memory during the call within 1.25x the result (before:
    per-window outputs, their concatenation and the result, ~3.7x). Wide
    outputs (512 per layer) so that the result, not the per-batch work,
    dominates, as with published models."""
    import tracemalloc

    from spacy_elmo.layers.span_getters import strided_bounds, token_sources

    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0, **{"lstm.projection_dim": 256}))
    doc = _long_doc(nlp, 10_000)
    bilm = nlp.get_pipe("elmo").bilm
    bounds = strided_bounds(0, len(doc), 128, 96)
    spans = bilm.embed_sentences([[t.text for t in doc[s:e]] for s, e in bounds], batch_size=4)
    expected = numpy.concatenate(spans, axis=1)[:, token_sources(len(doc), bounds)]
    del spans
    # Batches of 4 windows: the one batch held at a time stays small next to
    # this 10k-token result (with published models and Docs of 1M tokens
    # the default 64 are).
    nlp.get_pipe("elmo").model.attrs["batch_size"] = 4
    nlp("warm up .")
    tracemalloc.start()
    doc = nlp(doc)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    result = doc._.elmo.layers
    numpy.testing.assert_array_equal(result, expected)
    assert peak < 1.25 * result.nbytes, (peak, result.nbytes)


# ------------------------------------------------ 5. the output directory lock
HOLDER = textwrap.dedent(
    """
    import sys, time
    from spacy_elmo.pretrain.lock import OutputLock
    lock = OutputLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(120)
    """
)


def test_second_run_on_an_output_refuses_naming_the_holder(tmp_path):
    from spacy_elmo.pretrain import pretrain
    from spacy_elmo.pretrain.errors import PretrainError
    from tests.helpers.pretrain import tiny_config, write_corpus

    corpus = write_corpus(tmp_path, 40)
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(PretrainError, match=rf"is in use by another pretraining run \(process {holder.pid} holds"):
            pretrain(tiny_config(tmp_path, corpus), progress=False)
        assert not (out / "log.jsonl").exists()  # refused before writing anything
    finally:
        holder.kill()
        holder.wait()
    # The holder is dead: its lock file (with its pid) does not block.
    assert (out / ".pretrain.lock").read_text().strip() == str(holder.pid)
    summary = pretrain(tiny_config(tmp_path, corpus, max_steps=2), progress=False)
    assert summary["step"] == 2
    assert (out / ".pretrain.lock").read_text().strip() == str(os.getpid())


def test_every_head_parameter_gets_a_gradient_when_a_batch_misses_a_cluster():
    """DDP runs without find_unused_parameters: a batch whose targets all
    fall in the head still gives the tail clusters a (zero) gradient, and
    the loss is unchanged."""
    from spacy_elmo.pretrain.lm_head import LMHead

    torch.manual_seed(0)
    head = LMHead(8, 50, cutoffs=[10, 30])
    top = torch.randn(2, 5, 16, requires_grad=True)
    targets = torch.randint(0, 10, (2, 5))  # head words only
    nll_f, nll_b, n = head(top, targets)
    (nll_f + nll_b).backward()
    (xf, yf), _ = head.split_directions(top, targets)
    assert torch.equal(nll_f.detach(), head.nll(xf, yf).detach())
    for name, p in head.named_parameters():
        assert p.grad is not None, name
        if "tail" in name:
            assert torch.count_nonzero(p.grad) == 0, name
