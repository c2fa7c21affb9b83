"""Reliability (issue 16, docs/reliability.md): concurrent calls, options
validated before allocation, resumes that check what they resume, and the
package's own errors for bad input."""
import json
import pickle
import random
import threading
from pathlib import Path

import h5py
import numpy
import pytest
import spacy
import torch
from torch.overrides import TorchFunctionMode

from spacy_elmo import BiLM, BiLMOptions, OptionsError, WeightFileError, add_elmo  # noqa: E402
from tests.helpers.models import random_model, rewrite_saved_bilm, small_options

# ------------------------------------------------ 1. concurrent nlp() calls
N_THREADS = 4
DOCS_PER_THREAD = 25


def _thread_texts():
    """Each thread its own words, so that a row of the product cache given
    to another thread's word makes a visibly wrong vector."""
    rng = random.Random(0)
    texts = []
    for t in range(N_THREADS):
        words = [f"t{t}w{i}" for i in range(40)]
        texts.append([" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(DOCS_PER_THREAD)])
    return texts


@pytest.fixture
def one_torch_thread():
    """The Python threads are the parallelism here; torch's own thread pool
    on top of them only slows the test (int8 ~20x on 2 busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_concurrent_calls_with_the_product_cache_give_sequential_vectors(precision, one_torch_thread):
    """Several threads calling nlp() on one pipeline with the opt-in product
    cache on (packed fp32 or int8) get exactly the vectors of sequential
    calls (before the cache locks: ~99% of these Docs had wrong vectors)."""
    from spacy_elmo.bilm.fast import int8_supported, packing_supported

    if precision == "int8" and not int8_supported():
        pytest.skip("no fbgemm/x86 quantized kernels")
    if precision == "fp32" and not packing_supported():
        pytest.skip("no oneDNN packed weights")
    config = {"model": {"precision": precision}}
    sequential = spacy.blank("en")
    add_elmo(sequential, bilm=random_model(0), config=config)
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0), config=config)
    bilm = nlp.get_pipe("elmo").bilm
    # Pack the test model's small weights, as the published shapes are.
    for model in (bilm, sequential.get_pipe("elmo").bilm):
        model.engine.packed_weights = True
    # Sixteen types: every call evicts rows that other threads' calls use.
    bilm.type_product_cache.max_bytes = 16 * 2 * 4 * bilm.layers[0].cell_dim * 4
    texts = _thread_texts()
    expected = [[sequential(t)._.elmo.layers for t in thread] for thread in texts]
    got = [[None] * DOCS_PER_THREAD for _ in range(N_THREADS)]
    errors = []
    barrier = threading.Barrier(N_THREADS)

    def work(k):
        try:
            barrier.wait()
            for i, text in enumerate(texts[k]):
                got[k][i] = nlp(text)._.elmo.layers
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(N_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert bilm.type_product_cache.hits > 0 and bilm.token_cache.hits > 0
    wrong = sum(
        1
        for k in range(N_THREADS)
        for a, b in zip(got[k], expected[k])
        if not numpy.allclose(a, b, atol=1e-6, rtol=0)
    )
    assert wrong == 0, f"{wrong} of {N_THREADS * DOCS_PER_THREAD} Docs differ from a sequential run"


def test_models_with_locks_still_copy_and_pickle():
    import copy

    model = random_model(0)
    model.type_product_cache.max_bytes = 1 << 20
    model.embed_sentences([["a", "b"]])
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        with clone.token_cache.lock, clone.type_product_cache.lock:
            pass
        numpy.testing.assert_allclose(
            clone.embed_sentences([["a", "b"]])[0], model.embed_sentences([["a", "b"]])[0], atol=1e-6
        )


# --------------------------------------------- 2./3. options, before allocation
class _NoTensors(TorchFunctionMode):
    """Fails on the first torch call inside it (``torch.empty``, ``zeros``,
    ``nn.Parameter`` and every initialiser go through it): the options must
    be refused before the model makes any tensor, however small."""

    def __init__(self, refuse: bool = True) -> None:
        super().__init__()
        self.refuse = refuse
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", repr(func)))
        if self.refuse:
            raise AssertionError(f"torch.{self.calls[-1]} ran before the options were checked")
        return func(*args, **(kwargs or {}))


def test_the_tensor_spy_sees_a_model_being_made():
    """The check below can fail: building a valid model goes through it."""
    with _NoTensors(refuse=False) as spy:
        BiLM(small_options())
    assert "empty" in spy.calls or "zeros" in spy.calls


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"lstm.dim": 10**9}, "lstm.dim"),
        ({"lstm.dim": 10**30}, "lstm.dim"),
        ({"lstm.n_layers": 10**6}, "lstm.n_layers"),
        ({"char_cnn.n_highway": 10**6}, "char_cnn.n_highway"),
        ({"char_cnn.max_characters_per_token": 10**9}, "char_cnn.max_characters_per_token"),
        ({"lstm.projection_dim": 10**5}, "lstm.projection_dim"),
        ({"char_cnn.embedding.dim": 10**6}, "char_cnn.embedding.dim"),
        ({"char_cnn.filters": [[1, 10**6]]}, "char_cnn.filters"),
        ({"char_cnn.filters": [[1, 4]] * 1000}, "char_cnn.filters"),
        ({"char_cnn.filters": [[True, 4]]}, "char_cnn.filters"),
        ({"lstm.cell_clip": float("nan")}, "lstm.cell_clip"),
        ({"lstm.proj_clip": float("nan")}, "lstm.proj_clip"),
        ({"lstm.proj_clip": float("inf")}, "lstm.proj_clip"),
        # Each size within its bound, the whole too large (4.8 billion parameters).
        ({"lstm.dim": 65_536, "lstm.projection_dim": 16_384}, "lstm.dim"),
    ],
)
def test_options_are_validated_before_allocation(changes, field):
    with pytest.raises(OptionsError, match=field.replace(".", r"\.")) as info:
        with _NoTensors():
            BiLM(small_options(**changes))
    assert field in info.value.fields


def test_published_shapes_are_within_the_bounds():
    from spacy_elmo.bilm.options import MAX_PARAMETERS, PUBLISHED_SHAPES, parameter_count, published_options

    for name in PUBLISHED_SHAPES:
        options = published_options(name)
        assert parameter_count(options) * 10 < MAX_PARAMETERS
        assert parameter_count(options) == sum(p.numel() for p in BiLM(options).parameters())


def test_options_changed_after_construction_are_checked_again():
    options = BiLMOptions.from_dict(small_options())
    options.lstm_dim = 10**9
    with pytest.raises(OptionsError, match=r"lstm\.dim"):
        BiLM(options)
    options.lstm_dim = "16"
    with pytest.raises(OptionsError, match=r"lstm\.dim must be an integer"):
        BiLM(options)


def test_nan_clip_in_an_options_file_is_refused(tmp_path):
    text = json.dumps(small_options()).replace('"cell_clip": 3', '"cell_clip": NaN')
    assert "NaN" in text
    (tmp_path / "o.json").write_text(text)
    with pytest.raises(OptionsError, match=r"lstm\.cell_clip must be a finite number"):
        BiLMOptions.from_file(tmp_path / "o.json")


@pytest.fixture
def saved_pipeline(tmp_path):
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0))
    nlp.to_disk(tmp_path / "p")
    return tmp_path / "p"


@pytest.mark.parametrize(
    "edit,error,message",
    [
        (lambda s: s["options"]["lstm"].__setitem__("dim", 10**9), OptionsError, r"lstm\.dim must be in"),
        (lambda s: s["options"]["lstm"].__setitem__("n_layers", 10**6), OptionsError, r"lstm\.n_layers must be in"),
        (lambda s: s["options"]["lstm"].__setitem__("cell_clip", float("nan")), OptionsError, r"lstm\.cell_clip"),
        (lambda s: s.pop("options"), OptionsError, "holds no biLM options"),
        (lambda s: s.pop("weights"), WeightFileError, "holds no weights"),
    ],
)
def test_crafted_saved_pipelines_are_refused_by_spacy_load(saved_pipeline, monkeypatch, edit, error, message):
    import spacy_elmo.bilm.model as model_module

    def allocate(*args, **kwargs):
        raise AssertionError("the model was allocated before its saved fields were checked")

    rewrite_saved_bilm(saved_pipeline / "elmo" / "model", edit)
    monkeypatch.setattr(model_module, "CharCNNEncoder", allocate)
    with pytest.raises(error, match=message) as info:
        spacy.load(saved_pipeline)
    assert str(saved_pipeline / "elmo" / "model") in str(info.value)  # names the file
    assert "re-save" in str(info.value)  # and says what to do
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    with pytest.raises(error, match=message):  # from_bytes, the other load path
        nlp.from_disk(saved_pipeline)


def test_no_load_path_unpickles(saved_pipeline, monkeypatch, tmp_path):
    """spacy.load, from_bytes and BiLM.from_hdf5 read msgpack, JSON and
    hdf5 only (checkpoints: test_checkpoints_are_loaded_without_unpickling)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a load path unpickled")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    nlp = spacy.load(saved_pipeline)
    assert nlp("Loaded without pickle.")._.elmo.layers.shape[1] == 4
    other = spacy.blank("en")
    other.add_pipe("elmo")
    other.from_bytes(nlp.to_bytes())
    bilm = nlp.get_pipe("elmo").bilm
    bilm.to_hdf5(tmp_path / "w.hdf5", tmp_path / "o.json")
    BiLM.from_hdf5(tmp_path / "w.hdf5", tmp_path / "o.json")


# ------------------------------------------------------ 5. the package's errors
def test_string_dataset_is_a_weight_file_error(tmp_path):
    random_model(0).to_hdf5(tmp_path / "w.hdf5", tmp_path / "o.json")
    with h5py.File(tmp_path / "w.hdf5", "a") as f:
        shape = f["CNN/b_cnn_0"].shape
        del f["CNN/b_cnn_0"]
        f.create_dataset("CNN/b_cnn_0", data=numpy.array(["x"] * shape[0], dtype="S3"))
    with pytest.raises(WeightFileError, match=r"w\.hdf5: dataset 'CNN/b_cnn_0' holds \|S3 values"):
        BiLM.from_hdf5(tmp_path / "w.hdf5", tmp_path / "o.json")


def test_directory_paths_are_clear_errors(tmp_path):
    random_model(0).to_hdf5(tmp_path / "w.hdf5", tmp_path / "o.json")
    with pytest.raises(OptionsError, match="is a directory; give the options JSON file"):
        BiLM.from_hdf5(tmp_path / "w.hdf5", tmp_path)
    with pytest.raises(WeightFileError, match="is a directory; give the weights hdf5 file"):
        BiLM.from_hdf5(tmp_path, tmp_path / "o.json")
    with pytest.raises(OptionsError, match="not a regular file"):
        BiLMOptions.from_file("/dev/zero")


def test_bad_token_cache_size_fails_at_construction():
    for value in ("abc", -1, 10**12, 1.5, True):
        with pytest.raises(ValueError, match="token_cache_size must be an integer"):
            BiLM(small_options(), token_cache_size=value)


def test_inference_settings_come_from_the_config_and_survive_a_save(tmp_path):
    """precision and token_cache_size are config fields of ElmoBiLM.v2,
    checked when the model is made and applied to every biLM it gets (also
    the one a saved pipeline reads back, whose bytes hold only the weights)."""
    from spacy_elmo.layers import ElmoBiLM

    for value in ("abc", 10**12):
        with pytest.raises(ValueError, match="token_cache_size must be an integer"):
            ElmoBiLM(token_cache_size=value)
    with pytest.raises(ValueError, match="precision must be one of"):
        ElmoBiLM(precision="fp8")
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0), config={"model": {"token_cache_size": 7}})
    assert nlp.get_pipe("elmo").bilm.token_cache.max_size == 7
    nlp.to_disk(tmp_path / "p")
    assert spacy.load(tmp_path / "p").get_pipe("elmo").bilm.token_cache.max_size == 7


# ------------------------------------------------------- 4./5./6. pretraining
from spacy_elmo.pretrain import PretrainError, load_checkpoint, pretrain  # noqa: E402
from spacy_elmo.pretrain.checkpoint import state_digest  # noqa: E402
from spacy_elmo.pretrain.runlog import read_log  # noqa: E402
from tests.helpers.pretrain import tiny_config, write_corpus, write_options  # noqa: E402


def _checkpoint_of(tmp_path, corpus, **settings):
    config = tiny_config(tmp_path, corpus, max_steps=2, **settings)
    pretrain(config, progress=False)
    return config


def _resume_with_more_steps(tmp_path, corpus, **settings):
    # A constant schedule may be resumed with more steps.
    return tiny_config(tmp_path, corpus, max_steps=4, schedule="constant", **settings)


def test_resume_refuses_a_changed_corpus_with_the_same_vocabulary_size(tmp_path, one_torch_thread):
    corpus = write_corpus(tmp_path, 60)
    _checkpoint_of(tmp_path, corpus, schedule="constant")
    vocab_before = (tmp_path / "out" / "vocab.txt").read_text()
    # Rename one word everywhere: the same number of words, other ids.
    corpus.write_text(corpus.read_text().replace("apple", "pear"))
    with pytest.raises(PretrainError, match="the training corpus changed since the checkpoint"):
        pretrain(_resume_with_more_steps(tmp_path, corpus), resume=True, progress=False)
    assert (tmp_path / "out" / "vocab.txt").read_text() == vocab_before  # nothing overwritten
    # A checkpoint from before the fingerprint was stored: the vocabulary catches it.
    path = tmp_path / "out" / "checkpoints" / "last.pt"
    state = load_checkpoint(path)
    del state["corpus_sha256"]
    state["sha256"] = state_digest(state)
    torch.save(state, path)
    with pytest.raises(PretrainError, match=r"the vocabulary differs from the checkpoint's \((\d+) -> \1 words"):
        pretrain(_resume_with_more_steps(tmp_path, corpus), resume=True, progress=False)


def test_resume_refuses_changed_options_at_the_same_path(tmp_path, one_torch_thread):
    corpus = write_corpus(tmp_path, 60)
    _checkpoint_of(tmp_path, corpus, schedule="constant")
    config = _resume_with_more_steps(tmp_path, corpus)
    write_options(tmp_path, **{"lstm.dim": 32})  # same path, other contents
    with pytest.raises(PretrainError, match=r"biLM options differ from the checkpoint's \(lstm\.dim: 16 -> 32\)"):
        pretrain(config, resume=True, progress=False)


def test_resume_refuses_a_vocabulary_of_another_size(tmp_path, one_torch_thread):
    from spacy_elmo.pretrain import Vocab, read_corpus

    corpus = write_corpus(tmp_path, 60)
    vocab = Vocab.build(read_corpus([corpus]).word_counts())
    vocab.to_file(tmp_path / "vocab.txt")
    _checkpoint_of(tmp_path, corpus, schedule="constant", vocab=str(tmp_path / "vocab.txt"))
    Vocab(vocab.words[:-3]).to_file(tmp_path / "vocab.txt")  # same path, three words fewer
    n = len(vocab)
    with pytest.raises(PretrainError, match=rf"vocabulary differs from the checkpoint's \({n} -> {n - 3} words"):
        pretrain(
            _resume_with_more_steps(tmp_path, corpus, vocab=str(tmp_path / "vocab.txt")), resume=True, progress=False
        )


def test_resume_reports_the_changes_it_allows(tmp_path, one_torch_thread, caplog):
    import logging

    corpus = write_corpus(tmp_path, 60)
    _checkpoint_of(tmp_path, corpus, schedule="constant")
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "train.txt").write_text(corpus.read_text())  # the same text elsewhere
    with caplog.at_level(logging.WARNING, logger="spacy_elmo.pretrain.checkpoint"):
        summary = pretrain(
            _resume_with_more_steps(tmp_path, moved / "train.txt", log_every=2), resume=True, progress=False
        )
    assert summary["step"] == 4
    text = caplog.text
    assert "resuming with changed settings" in text and "max_steps: 2 -> 4" in text
    assert "train:" in text and "log_every: 1 -> 2" in text


def test_corpus_that_is_a_device_is_not_reported_as_missing(tmp_path, one_torch_thread):
    with pytest.raises(PretrainError, match=r"/dev/zero is not a regular file or directory \(a device"):
        pretrain(tiny_config(tmp_path, Path("/dev/zero")), progress=False)


def test_unwritable_output_is_found_before_the_corpus_is_read(tmp_path, monkeypatch, one_torch_thread):
    from spacy_elmo.pretrain import prepare

    def read_corpus(*args, **kwargs):
        raise AssertionError("the corpus was read before the output was checked")

    monkeypatch.setattr(prepare, "read_corpus", read_corpus)
    (tmp_path / "a_file").write_text("not a directory")
    corpus = write_corpus(tmp_path, 20)
    with pytest.raises(
        PretrainError, match=r"cannot write to the output directory .*a_file/out.*choose a writable --output"
    ):
        pretrain(tiny_config(tmp_path, corpus, "a_file/out"), progress=False)
    # A writable output is probed without leaving anything behind when the run fails.
    with pytest.raises(AssertionError, match="the corpus was read"):
        pretrain(tiny_config(tmp_path, corpus, "fresh/out"), progress=False)
    assert not (tmp_path / "fresh").exists()


def test_disk_full_while_checkpointing_is_a_clear_error_and_keeps_the_last_checkpoint(
    tmp_path, monkeypatch, one_torch_thread
):
    corpus = write_corpus(tmp_path, 60)
    real_save = torch.save
    calls = []

    def save(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:  # the second checkpoint: the disk fills up half-way
            Path(path).write_bytes(b"PK\x03\x04 partial")
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4096 vs 2048")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    config = tiny_config(tmp_path, corpus, max_steps=6, checkpoint_every=2)
    last = tmp_path / "out" / "checkpoints" / "last.pt"
    with pytest.raises(
        PretrainError,
        match=r"cannot write the checkpoint .*last\.pt \(RuntimeError: .*inline_container.*\); the previous "
              r"checkpoint .*last\.pt is intact\. Free disk space",
    ):
        pretrain(config, progress=False)
    assert load_checkpoint(last)["step"] == 2
    assert not (last.parent / "last.pt.tmp").exists()


def test_one_word_corpus_ends_with_a_final_message(tmp_path, one_torch_thread):
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    (tmp_path / "one.txt").write_text("hello\n")
    result = CliRunner().invoke(
        app,
        [
            "pretrain",
            str(tmp_path / "one.txt"),
            "--output",
            str(tmp_path / "run"),
            "--options",
            str(write_options(tmp_path)),
            "--max-steps",
            "2",
            "--no-progress",
            "--threads",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "step 2: done" in result.output and "no held-out perplexity" in result.output and "--dev" in result.output


def test_log_and_learning_curve_show_each_step_once_after_a_resume(tmp_path, one_torch_thread):
    corpus = write_corpus(tmp_path, 60)
    config = tiny_config(tmp_path, corpus, max_steps=8, checkpoint_every=3, eval_every=2)

    def crash_at_5(step, info):  # steps 4 and 5 are lost: the checkpoint is at 3
        if step == 5:
            raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        pretrain(config, progress=False, callback=crash_at_5)
    assert [r["step"] for r in read_log(tmp_path / "out" / "log.jsonl") if r["event"] == "train"] == [1, 2, 3, 4, 5]
    pretrain(config, resume=True, progress=False)
    records = read_log(tmp_path / "out" / "log.jsonl")
    assert [r["step"] for r in records if r["event"] == "train"] == list(range(1, 9))
    assert [r["step"] for r in records if r["event"] == "eval"] == [2, 4, 6, 8]
    assert [r["event"] for r in records].count("resume") == 1
    assert (tmp_path / "out" / "learning_curve.png").exists()


def test_embed_command_reports_bad_files_without_a_traceback(tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    random_model(0).to_hdf5(tmp_path / "w.hdf5", tmp_path / "o.json")
    result = CliRunner().invoke(
        app, ["embed", "--model", str(tmp_path / "w.hdf5"), "--options", str(tmp_path)], input="a b\n"
    )
    assert result.exit_code == 2 and "is a directory" in result.output
