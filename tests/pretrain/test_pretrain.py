"""Pretraining: learning, resume, distributed, export, bad corpora (all tiny)."""
import json
import os
import signal
import socket
import sys
from collections import Counter
from pathlib import Path

import numpy
import pytest
import torch

from spacy_elmo import BiLM  # noqa: E402
from spacy_elmo.bilm.chars import batch_to_char_ids  # noqa: E402
from spacy_elmo.bilm.options import BiLMOptions  # noqa: E402
from spacy_elmo.pretrain import PretrainConfig, Vocab, export, load_checkpoint, pretrain, read_corpus  # noqa: E402
from spacy_elmo.pretrain.batches import epoch_batches, settle  # noqa: E402
from spacy_elmo.pretrain.lm_head import LMHead, default_cutoffs  # noqa: E402
from spacy_elmo.pretrain.model import PretrainModel  # noqa: E402
from spacy_elmo.pretrain.prepare import unigram_perplexity  # noqa: E402
from spacy_elmo.pretrain.runlog import read_log  # noqa: E402
from tests.helpers.models import small_options  # noqa: E402
from tests.helpers.pretrain import (  # noqa: E402
    distributed_worker,
    make_lines,
    resuming_worker,
    tiny_config,
    write_corpus,
    write_options,
)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- head/vocab
def test_lm_head_loss_is_exact_full_softmax_nll():
    torch.manual_seed(0)
    head = LMHead(8, 50, cutoffs=[10, 30])
    x, y = torch.randn(40, 8), torch.randint(0, 50, (40,))
    logp = head.log_prob(x)
    assert torch.allclose(logp.exp().sum(1), torch.ones(40), atol=1e-5)
    assert torch.allclose(head.nll(x, y).double(), head.exact_nll(x, y), atol=1e-4)


def test_lm_head_pairs_forward_with_next_and_backward_with_previous_word():
    top = torch.arange(2 * 4 * 2, dtype=torch.float).view(2, 4, 2)  # P = 1
    targets = torch.tensor([[0, 5, 6, 1], [0, 7, 1, -1]])
    (xf, yf), (xb, yb) = LMHead.split_directions(top, targets)
    assert yf.tolist() == [5, 6, 1, 7, 1] and yb.tolist() == [0, 5, 6, 0, 7]
    assert xf[:, 0].tolist() == [0, 2, 4, 8, 10]  # forward half at positions 0..n
    assert xb[:, 0].tolist() == [3, 5, 7, 11, 13]  # backward half at positions 1..n+1
    assert default_cutoffs(5) == [2] and default_cutoffs(50_000) == [2000, 20000]


def test_vocab_build_save_load(tmp_path):
    vocab = Vocab.build(Counter({"b": 3, "a": 3, "c": 1, "<S>": 9, "x y": 5}), max_size=5)
    assert vocab.words == ["<S>", "</S>", "<UNK>", "a", "b"]
    vocab.to_file(tmp_path / "v.txt")
    assert Vocab.from_file(tmp_path / "v.txt").words == vocab.words
    assert vocab.get("zzz") == vocab.unk_id
    (tmp_path / "bad.txt").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.txt"):
        Vocab.from_file(tmp_path / "bad.txt")


def test_data_order_is_a_function_of_seed_and_epoch():
    lengths = numpy.random.default_rng(0).integers(1, 30, 100)
    a = epoch_batches(lengths, 8, seed=1, epoch=2)
    assert [b.tolist() for b in a] == [b.tolist() for b in epoch_batches(lengths, 8, seed=1, epoch=2)]
    assert [b.tolist() for b in a] != [b.tolist() for b in epoch_batches(lengths, 8, seed=1, epoch=3)]
    assert sorted(numpy.concatenate(a).tolist()) == list(range(100))


def test_unigram_perplexity_of_uniform_counts():
    # 4 words seen equally, one boundary per window: uniform over 5 outcomes.
    counts = numpy.array([0, 0, 0, 10, 10, 10, 10])
    ppl = unigram_perplexity(counts - numpy.array([0, 0, 0, 0, 0, 0, 0]), 10, numpy.array([3, 4, 5, 6]), 1)
    assert 5.0 < ppl < 6.0  # add-one smoothing moves a little mass to the specials


# ------------------------------------------------------------------ learning
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("learn")
    corpus = write_corpus(tmp, 300)
    config = tiny_config(tmp, corpus, max_steps=300, lr=0.03, dropout=0.0, eval_every=100, log_every=20)
    summary = pretrain(config, progress=False)
    return tmp, config, summary


def test_tiny_model_learns_well_below_unigram_perplexity(trained):
    tmp, config, summary = trained
    dev, unigram = summary["dev"], summary["unigram_dev_ppl"]
    assert unigram > 20
    assert dev["dev_ppl"] < 0.3 * unigram, (dev, unigram)
    assert dev["dev_ppl"] == pytest.approx((dev["dev_ppl_forward"] * dev["dev_ppl_backward"]) ** 0.5)
    records = read_log(tmp / "out" / "log.jsonl")
    evals = [r for r in records if r["event"] == "eval"]
    assert [r["step"] for r in evals] == [100, 200, 300]
    assert evals[-1]["dev_ppl"] < evals[0]["dev_ppl"]
    assert any(r["event"] == "train" and r["tokens_per_s"] > 0 for r in records)
    assert (tmp / "out" / "learning_curve.png").stat().st_size > 1000
    words = (tmp / "out" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert words[:4] == ["<S>", "</S>", "<UNK>", "."]


def test_export_loads_with_from_hdf5_and_gives_the_same_activations(trained, tmp_path):
    tmp, config, _ = trained
    target = export(tmp / "out", tmp_path / "exported")
    state = load_checkpoint(tmp / "out" / "checkpoints" / "last.pt")
    options = BiLMOptions.from_dict(state["options"])
    model = PretrainModel(options, len(state["vocab"]), 0.0)
    model.load_state_dict(state["model"])
    loaded = BiLM.from_hdf5(target / "weights.hdf5", target / "options.json").eval()
    assert Vocab.from_file(target / "vocab.txt").words == state["vocab"]
    sentences = [line.split() for line in make_lines(5, seed=9)]
    ids = torch.from_numpy(batch_to_char_ids(sentences)[0])
    with torch.no_grad():
        ours = model.bilm.eval()(ids).layers
        theirs = loaded(ids).layers
    for a, b in zip(ours, theirs):
        assert torch.allclose(a, b, atol=1e-6)
    assert json.loads((target / "options.json").read_text())["n_tokens_vocab"] == len(state["vocab"])


# -------------------------------------------------------------------- resume
def _state(path):
    return load_checkpoint(path / "checkpoints" / "last.pt")


def test_kill_and_resume_equals_an_uninterrupted_run(tmp_path):
    corpus = write_corpus(tmp_path, 120)
    settings = dict(max_steps=8, dropout=0.2, batch_size=16, warmup_steps=2, eval_every=3)
    pretrain(tiny_config(tmp_path, corpus, "full", **settings), progress=False)

    def kill_at_3(step, info):
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    config = tiny_config(tmp_path, corpus, "split", **settings)
    summary = pretrain(config, progress=False, callback=kill_at_3)
    assert summary == {"step": 3, "stopped": True, "output": str(tmp_path / "split")}
    assert _state(tmp_path / "split")["step"] == 3
    # The run crosses an epoch boundary (120 windows -> 7 batches of 16).
    pretrain(config, resume=True, progress=False)
    full, split = _state(tmp_path / "full"), _state(tmp_path / "split")
    assert full["step"] == split["step"] == 8
    for name, value in full["model"].items():
        assert torch.allclose(value, split["model"][name], atol=1e-6, rtol=0), name
    assert full["optimizer"]["state"][0]["step"] == split["optimizer"]["state"][0]["step"]
    events = [r["event"] for r in read_log(tmp_path / "split" / "log.jsonl")]
    assert "stopped" in events and "resume" in events


def test_time_boxed_pieces_resume_to_the_uninterrupted_run(tmp_path):
    """--time-limit stops a run as SIGTERM does (a limit of 0 stops it after
    its next step); pieces continued with --resume end where one run ends."""
    corpus = write_corpus(tmp_path, 120)
    settings = dict(max_steps=6, dropout=0.2, batch_size=16, warmup_steps=2, eval_every=3)
    pretrain(tiny_config(tmp_path, corpus, "full", **settings), progress=False)
    config = tiny_config(tmp_path, corpus, "pieces", **settings)
    assert pretrain(config, progress=False, time_limit=0) == {"step": 1, "stopped": True,
                                                              "output": str(tmp_path / "pieces")}
    assert pretrain(config, resume=True, progress=False, time_limit=0)["step"] == 2
    assert not (tmp_path / "pieces" / "export").exists()
    summary = pretrain(config, resume=True, progress=False, time_limit=3600)
    assert summary["step"] == 6 and not summary["stopped"]
    full, pieces = _state(tmp_path / "full"), _state(tmp_path / "pieces")
    for name, value in full["model"].items():
        assert torch.allclose(value, pieces["model"][name], atol=1e-6, rtol=0), name
    events = [r["event"] for r in read_log(tmp_path / "pieces" / "log.jsonl")]
    assert events.count("stopped") == 2 and events.count("resume") == 2 and events[-1] == "end"


def test_resume_checks_settings_and_fresh_runs_refuse_an_old_checkpoint(tmp_path):
    corpus = write_corpus(tmp_path, 60)
    config = tiny_config(tmp_path, corpus, max_steps=2)
    pretrain(config, progress=False)
    with pytest.raises(ValueError, match="already holds a checkpoint"):
        pretrain(config, progress=False)
    changed = tiny_config(tmp_path, corpus, max_steps=2, seed=5)
    with pytest.raises(ValueError, match="seed"):
        pretrain(changed, resume=True, progress=False)
    with pytest.raises(ValueError, match="checkpoint not found"):
        pretrain(tiny_config(tmp_path, corpus, "other"), resume=True, progress=False)


def test_checkpoints_are_loaded_without_unpickling(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"format": "spacy_elmo.pretrain.checkpoint/1", "x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="weights_only"):
        load_checkpoint(tmp_path / "evil.pt")
    torch.save({"a": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a spacy_elmo pretraining checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


# --------------------------------------------------------------- distributed
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_gloo_run_shards_data_and_keeps_ranks_identical(tmp_path):
    import torch.multiprocessing as mp

    corpus = write_corpus(tmp_path, 120)
    mp.spawn(distributed_worker, args=(2, _free_port(), str(tmp_path), str(corpus)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    # Every step, the ranks trained on different windows...
    for a, b in zip(ranks[0]["seen"], ranks[1]["seen"]):
        assert not set(a) & set(b)
    assert len(ranks[0]["seen"]) == 4
    # ... and ended with the same weights (DDP averages the gradients).
    for name, value in ranks[0]["params"].items():
        assert torch.equal(value, ranks[1]["params"][name]), name
    saved = load_checkpoint(tmp_path / "out" / "checkpoints" / "last.pt")
    assert saved["world_size"] == 2 and len(saved["rng"]) == 2
    for name, value in saved["model"].items():
        assert torch.equal(value, ranks[0]["params"][name]), name
    records = read_log(tmp_path / "out" / "log.jsonl")
    assert records[0]["event"] == "start" and records[0]["world_size"] == 2
    assert [r["step"] for r in records if r["event"] == "train"] == [1, 2, 3, 4]
    assert sum(r["event"] == "start" for r in records) == 1  # rank 0 only


def test_a_step_reads_one_batch_per_process_and_an_epochs_short_tail_is_skipped():
    assert settle(0, 0, 1, 7) == (0, 0) and settle(0, 6, 1, 7) == (0, 6) and settle(0, 7, 1, 7) == (1, 0)
    assert settle(0, 4, 2, 7) == (0, 4) and settle(0, 5, 2, 7) == (0, 5) and settle(0, 6, 2, 7) == (1, 0)
    assert settle(3, 1, 4, 4) == (4, 0) and settle(3, 0, 4, 4) == (3, 0)


def test_a_run_resumes_on_two_processes_and_back_on_one_reading_on_from_its_place(tmp_path, caplog):
    """1 process for 3 steps, resumed on 2 for 3 steps, then on 1 again for
    2: the batches read, in order, are those of one uninterrupted process
    (7 batches an epoch: 0-2, then 3+4 and 5+6, then epoch 1's 0+1, then 2
    and 3); the two ranks end with the same weights; the checkpoints name
    their number of processes and the resumes say what changed."""
    import torch.multiprocessing as mp

    corpus = write_corpus(tmp_path, 120)
    settings = dict(batch_size=16, dropout=0.1, warmup_steps=2)
    seen = []
    pretrain(tiny_config(tmp_path, corpus, "whole", max_steps=11, **settings), progress=False,
             callback=lambda step, info: seen.append(info["windows"]))
    start = read_log(tmp_path / "whole" / "log.jsonl")[0]
    assert start["steps_per_epoch"] == 7
    read = []
    keep = lambda step, info: read.append(info["windows"])  # noqa: E731
    pretrain(tiny_config(tmp_path, corpus, max_steps=3, **settings), progress=False, callback=keep)
    mp.spawn(resuming_worker, args=(2, _free_port(), str(tmp_path), str(corpus), dict(max_steps=6, **settings)),
             nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"resumed-rank{r}.pt", weights_only=True) for r in range(2)]
    for a, b in zip(ranks[0]["seen"], ranks[1]["seen"]):
        read += [a, b]
    for name, value in ranks[0]["params"].items():
        assert torch.equal(value, ranks[1]["params"][name]), name
    assert _state(tmp_path / "out")["world_size"] == 2 and len(_state(tmp_path / "out")["rng"]) == 2
    with caplog.at_level("WARNING"):
        pretrain(tiny_config(tmp_path, corpus, max_steps=8, **settings), resume=True, progress=False, callback=keep)
    assert "processes: 2 -> 1 (each step now reads 1 batches of 16" in caplog.text
    assert read == seen
    state = _state(tmp_path / "out")
    assert state["step"] == 8 and state["world_size"] == 1 and (state["epoch"], state["batch_in_epoch"]) == (1, 4)
    records = read_log(tmp_path / "out" / "log.jsonl")
    assert [r["world_size"] for r in records if r["event"] in ("start", "resume")] == [1, 2, 1]
    assert [r["step"] for r in records if r["event"] == "train"] == list(range(1, 9))


# ---------------------------------------------------------------- bad input
def test_bad_corpus_files_are_skipped_and_counted(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "a_good.txt").write_text("Hello there , world .\nA second line of text .\n", encoding="utf-8")
    (d / "b_empty.txt").write_bytes(b"")
    (d / "c_binary.bin").write_bytes(bytes(range(256)) * 40)
    (d / "d_long.txt").write_bytes(b"x" * 1_000_000 + b"\nshort line here\n")
    (d / "e_mixed.txt").write_bytes("caf\u00e9 ok\n".encode("utf-8") + b"caf\xe9 latin\n" + b"fine again\n")
    (d / "f_bad.spacy").write_bytes(b"\x93not msgpack at all" * 10)
    (d / ".hidden").write_bytes(b"\x00\x01")
    corpus = read_corpus([d], max_tokens=3)
    stats = corpus.stats
    assert stats.files == 6
    assert stats.skipped_empty_files == [str(d / "b_empty.txt")]
    assert str(d / "c_binary.bin") in stats.skipped_binary_files
    assert str(d / "f_bad.spacy") in stats.skipped_binary_files
    assert stats.skipped_long_lines == 1 and stats.skipped_bad_encoding_lines == 1
    windows = [[corpus.types[i] for i in corpus.window(k)] for k in range(len(corpus))]
    assert ["Hello", "there", ","] in windows and ["world", "."] in windows  # cut at 3 tokens
    assert ["short", "line", "here"] in windows and ["café", "ok"] in windows and ["fine", "again"] in windows
    assert "skipped" in stats.summary()


def test_corpus_word_counts_all_and_some_windows():
    from spacy_elmo.pretrain.corpus import Corpus

    corpus = Corpus()
    for window in (["a", "b", "a"], ["b", "c"], ["a"]):
        corpus.add_window(window)
    corpus.finalize()
    assert corpus.word_counts() == {"a": 3, "b": 2, "c": 1}
    assert corpus.word_counts([0, 2]) == {"a": 3, "b": 1}
    assert corpus.word_counts([]) == {}


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("empty.txt", b"", "empty.txt: empty file"),
        ("binary.dat", b"\x00\xff" * 100, "binary.dat: binary file"),
        ("long.txt", b"y" * 1_000_000, "long.txt:1: line longer"),
        ("latin.txt", b"ok\nna\xefve\n", "latin.txt:2: not valid UTF-8"),
    ],
    ids=["empty", "binary", "1MB-line", "latin-1"],
)
def test_strict_mode_names_the_bad_file(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=message):
        read_corpus([tmp_path / name], strict=True)


def test_no_usable_text_or_missing_path_is_a_clear_error(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"\n\n  \n")
    with pytest.raises(ValueError, match="no usable text in .*empty.txt"):
        read_corpus([tmp_path / "empty.txt"])
    with pytest.raises(ValueError, match="corpus path not found: .*missing"):
        read_corpus([tmp_path / "missing"])


def test_training_runs_through_a_directory_with_bad_files(tmp_path):
    d = tmp_path / "corpus"
    write_corpus(d, 60)
    (d / "binary.bin").write_bytes(b"\x00" * 5000)
    (d / "mixed.txt").write_bytes(b"abc \xff\xfe def\n" + b"z" * 300_000 + b"\n")
    pretrain(tiny_config(tmp_path, d, max_steps=2), progress=False)
    start = read_log(tmp_path / "out" / "log.jsonl")[0]
    assert start["corpus"]["skipped_binary_files"] == [str(d / "binary.bin")]
    assert start["corpus"]["skipped_bad_encoding_lines"] == 1 and start["corpus"]["skipped_long_lines"] == 1


def test_spacy_docbin_input_uses_sentences(tmp_path):
    import spacy
    from spacy.tokens import DocBin

    nlp = spacy.blank("en")
    doc = nlp("One two three . Four five .")
    for i, token in enumerate(doc):
        token.is_sent_start = i in (0, 4)
    DocBin(docs=[doc, nlp("No sentences here")]).to_disk(tmp_path / "docs.spacy")
    corpus = read_corpus([tmp_path / "docs.spacy"])
    windows = [[corpus.types[i] for i in corpus.window(k)] for k in range(len(corpus))]
    assert windows == [["One", "two", "three", "."], ["Four", "five", "."], ["No", "sentences", "here"]]


def test_settings_are_validated(tmp_path):
    with pytest.raises(ValueError, match="fp16 needs a CUDA device"):
        tiny_config(tmp_path, tmp_path / "x.txt", precision="fp16").validate()
    with pytest.raises(ValueError, match="give options .* shape .* or init"):
        PretrainConfig(train=["x"], output="o").validate()
    with pytest.raises(ValueError, match="not both"):
        PretrainConfig(train=["x"], output="o", options="a.json", shape="small").validate()
    with pytest.raises(ValueError, match="do not give shape"):
        PretrainConfig(train=["x"], output="o", init="model", shape="small").validate()


def test_bf16_autocast_trains_on_cpu_evaluates_in_fp32_and_resumes_in_fp32(tmp_path, caplog):
    from spacy_elmo.pretrain.perplexity import perplexity

    corpus = write_corpus(tmp_path, 40)
    dev = write_corpus(tmp_path / "dev", 30, seed=5)
    summary = pretrain(tiny_config(tmp_path, corpus, max_steps=2, precision="bf16", dev=[str(dev)]), progress=False)
    # The held-out figure is the float32 perplexity of the weights (as `perplexity` measures
    # the export), not a bf16 one: comparable across precisions and with inference.
    exact = perplexity(tmp_path / "out" / "export", [dev])
    assert summary["dev"]["dev_ppl"] == pytest.approx(exact["ppl"], rel=1e-5)
    # A run moves to a machine without native bf16: resumed in fp32, with a warning.
    with caplog.at_level("WARNING"):
        resumed = pretrain(tiny_config(tmp_path, corpus, max_steps=3, precision="fp32", dev=[str(dev)]), resume=True,
                           progress=False)
    assert resumed["step"] == 3 and "precision: 'bf16' -> 'fp32'" in caplog.text


# ----------------------------------------------------------------------- CLI
def test_cli_pretrain_and_export(tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    corpus = write_corpus(tmp_path, 60)
    options = tmp_path / "options.json"
    options.write_text(json.dumps(small_options()), encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, [
        "pretrain", str(corpus), "--output", str(tmp_path / "run"), "--options", str(options),
        "--max-steps", "3", "--batch-size", "8", "--dev-fraction", "0.1", "--no-progress", "--threads", "1",
    ])
    assert result.exit_code == 0, result.output
    assert "held-out perplexity" in result.output
    result = runner.invoke(app, ["export", str(tmp_path / "run"), str(tmp_path / "exp")])
    assert result.exit_code == 0, result.output
    assert {p.name for p in (tmp_path / "exp").iterdir()} == {
        "weights.hdf5",
        "options.json",
        "vocab.txt",
        "softmax.hdf5",
    }
    result = runner.invoke(
        app, ["pretrain", str(tmp_path / "nothing.txt"), "--output", str(tmp_path / "r2"), "--shape", "small"]
    )
    assert result.exit_code == 2 and "corpus path not found" in result.output


def test_cli_time_limit_stops_cleanly_and_resume_finishes(tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    corpus = write_corpus(tmp_path, 60)
    options = tmp_path / "options.json"
    options.write_text(json.dumps(small_options()), encoding="utf-8")
    args = ["pretrain", str(corpus), "--output", str(tmp_path / "run"), "--options", str(options),
            "--max-steps", "3", "--batch-size", "8", "--dev-fraction", "0.1", "--no-progress", "--threads", "1"]
    runner = CliRunner()
    stopped = runner.invoke(app, [*args, "--time-limit", "0"])
    assert stopped.exit_code == 0, stopped.output
    assert "stopped at step 1" in stopped.output and "--resume" in stopped.output
    finished = runner.invoke(app, [*args, "--resume", "--time-limit", "60"])
    assert finished.exit_code == 0, finished.output
    assert "step 3: held-out perplexity" in finished.output
    refused = runner.invoke(app, [*args, "--resume", "--time-limit", "-1"])
    assert refused.exit_code == 2 and "--time-limit" in refused.output


def _stop_torchrun(proc):
    """SIGTERM to the agent, which stops its workers (they run in sessions
    of their own: SIGKILL to the agent, as subprocess's timeout sends,
    leaves them running and eating the CPU of the tests that follow)."""
    import subprocess

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _torchrun(command, env, timeout):
    import subprocess

    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop_torchrun(proc)
        out, err = proc.communicate()
        pytest.fail(f"torchrun ran over {timeout} s: {command}\n{err[-3000:]}")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def test_torchrun_two_processes_from_the_command_line(tmp_path):
    """The documented multi-process command: ``torchrun --standalone
    --nproc_per_node=2 -m spacy_elmo pretrain ...`` (gloo on CPU)."""
    import spacy_elmo

    corpus = write_corpus(tmp_path, 400)
    options = tmp_path / "options.json"
    options.write_text(json.dumps(small_options()), encoding="utf-8")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(spacy_elmo.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    env["OMP_NUM_THREADS"] = "1"
    result = _torchrun(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "spacy_elmo",
            "pretrain",
            str(corpus),
            "-o",
            str(tmp_path / "run"),
            "--options",
            str(options),
            "--max-steps",
            "60",
            "--batch-size",
            "8",
            "--dev-fraction",
            "0.1",
            "--eval-every",
            "30",
            "--log-every",
            "10",
            "--lr",
            "0.01",
            "--threads",
            "1",
            "--no-progress",
        ],
        env,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("held-out perplexity") == 1  # rank 0 only
    records = read_log(tmp_path / "run" / "log.jsonl")
    assert records[0]["world_size"] == 2
    end = [r for r in records if r["event"] == "end"][0]
    assert end["dev"]["dev_ppl"] < end["unigram_dev_ppl"]
    assert (tmp_path / "run" / "export" / "weights.hdf5").exists()
    assert _state(tmp_path / "run")["world_size"] == 2


# ------------------------------------------------------------- spaCy export
def _has_pipeline():
    """spacy_elmo.component.elmo exists in the package under test (not only in
    another checkout that an editable install's finder points at)."""
    import importlib.util

    import spacy_elmo

    spec = importlib.util.find_spec("spacy_elmo.component.elmo")
    return spec is not None and Path(spacy_elmo.__file__).parent in Path(spec.origin).parents


@pytest.mark.skipif(not _has_pipeline(), reason="needs the spaCy integration (spacy_elmo.component.elmo)")
def test_export_straight_into_a_spacy_pipeline(trained, tmp_path):
    import spacy

    from spacy_elmo.cli.export import export_pipeline

    tmp, config, _ = trained
    export_pipeline(tmp / "out", tmp_path / "nlp")
    nlp = spacy.load(tmp_path / "nlp")
    assert nlp.pipe_names == ["elmo"] and nlp.lang == config.lang
    doc = nlp("The cat likes the red ball .")
    state = load_checkpoint(tmp / "out" / "checkpoints" / "last.pt")
    model = PretrainModel(BiLMOptions.from_dict(state["options"]), len(state["vocab"]), 0.0)
    model.load_state_dict(state["model"])
    ids = torch.from_numpy(batch_to_char_ids([[t.text for t in doc]])[0])
    with torch.no_grad():
        layers = model.bilm.eval()(ids).layers
    assert doc._.elmo.layers.shape[0] == len(layers)
    for j, layer in enumerate(layers):
        numpy.testing.assert_allclose(doc._.elmo.layers[j], layer[0, 1 : len(doc) + 1].numpy(), atol=1e-5, rtol=0)


def test_pipeline_export_without_the_spacy_integration_is_a_clear_error(tmp_path, monkeypatch):
    from spacy_elmo.cli.export import export_pipeline

    monkeypatch.setitem(sys.modules, "spacy_elmo.component.elmo", None)  # import fails
    with pytest.raises(ValueError, match="spaCy integration"):
        export_pipeline(tmp_path, tmp_path / "nlp")


# --------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_cuda_mixed_precision_training_learns(tmp_path, precision):
    corpus = write_corpus(tmp_path, 300)
    config = tiny_config(
        tmp_path, corpus, device="cuda", precision=precision, max_steps=150, lr=0.01, dropout=0.0, checkpoint_every=50
    )
    summary = pretrain(config, progress=False)
    assert summary["dev"]["dev_ppl"] < 0.5 * summary["unigram_dev_ppl"], summary


@pytest.mark.slow
def test_torchrun_sigterm_then_resume_equals_an_uninterrupted_run(tmp_path):
    """SIGTERM to the torchrun agent (what a scheduler sends): the workers
    checkpoint and stop; ``--resume`` with 2 processes reaches the weights of
    an uninterrupted 2-process run exactly. Kept small (200 lines, 150
    steps) so that it can be repeated many times under load (the abort at
    exit of issue 26 was seen once in several runs)."""
    import subprocess
    import time

    import spacy_elmo

    corpus = write_corpus(tmp_path, 200)
    options = tmp_path / "options.json"
    options.write_text(json.dumps(small_options()), encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(spacy_elmo.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])

    def command(output, *extra):
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "spacy_elmo",
                "pretrain", str(corpus), "-o", str(tmp_path / output), "--options", str(options), "--max-steps", "150",
                "--batch-size", "8", "--dropout", "0.2", "--threads", "1", "--no-progress", "--log-every", "10",
                "--eval-every", "100000", "--checkpoint-every", "100000", *extra]

    full = _torchrun(command("full"), env, timeout=240)
    assert full.returncode == 0, full.stderr[-3000:]
    split_err = open(tmp_path / "split.stderr", "w")
    proc = subprocess.Popen(command("split"), env=env, stdout=subprocess.DEVNULL, stderr=split_err)
    log = tmp_path / "split" / "log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and any(r.get("event") == "train" and r["step"] >= 30 for r in read_log(log)):
            break
        time.sleep(0.2)
    _stop_torchrun(proc)
    split_err.close()
    stopped = [r for r in read_log(log) if r["event"] == "stopped"]
    assert stopped and 30 <= stopped[0]["step"] < 150, (tmp_path / "split.stderr").read_text()[-3000:]
    resumed = _torchrun(command("split", "--resume"), env, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    full, split = _state(tmp_path / "full"), _state(tmp_path / "split")
    assert full["step"] == split["step"] == 150
    for name, value in full["model"].items():
        assert torch.equal(value, split["model"][name]), name


def test_corpus_cache_round_trip_and_invalidation(tmp_path):
    from spacy_elmo.pretrain.reading import read_corpus

    text = tmp_path / "a.txt"
    text.write_text("The cat sat on the mat .\nA dog barked twice , loudly .\n", encoding="utf-8")
    cache = tmp_path / "cache"
    first = read_corpus([text], max_tokens=4, cache_dir=cache)
    assert len(list(cache.glob("corpus-*.npz"))) == 1
    again = read_corpus([text], max_tokens=4, cache_dir=cache)
    assert again.types == first.types and again.counts == first.counts
    assert [w.tolist() for w in (again.window(i) for i in range(len(again)))] == [
        w.tolist() for w in (first.window(i) for i in range(len(first)))
    ]
    assert again.stats.to_dict() == first.stats.to_dict()
    # Other settings: their own entry.
    read_corpus([text], max_tokens=5, cache_dir=cache)
    assert len(list(cache.glob("corpus-*.npz"))) == 2
    # Another file, same settings: its own entry and its own text.
    other = tmp_path / "b.txt"
    other.write_text("Birds sing .\n", encoding="utf-8")
    assert "Birds" in read_corpus([other], max_tokens=4, cache_dir=cache).types
    assert len(list(cache.glob("corpus-*.npz"))) == 3
    # A changed file: read again.
    text.write_text("Only one line now .\n", encoding="utf-8")
    changed = read_corpus([text], max_tokens=4, cache_dir=cache)
    assert "Only" in changed.types and "cat" not in changed.types
    # A damaged cache is ignored and rewritten.
    for f in cache.glob("corpus-*.npz"):
        f.write_bytes(b"not an npz")
    assert read_corpus([text], max_tokens=4, cache_dir=cache).types == changed.types


def test_a_source_given_twice_is_read_twice_and_cached_apart(tmp_path):
    """Repeating a path is how a source is upsampled (e.g. a directory and then its prose files)."""
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "prose.txt").write_text("The cat sat on the mat .\n", encoding="utf-8")
    (d / "glosses.txt").write_text("a domestic animal .\n", encoding="utf-8")
    cache = tmp_path / "cache"
    once = read_corpus([d], max_tokens=16, cache_dir=cache)
    twice = read_corpus([d, d / "prose.txt"], max_tokens=16, cache_dir=cache)
    assert len(list(cache.glob("corpus-*.npz"))) == 2
    assert len(once) == 2 and len(twice) == 3
    assert twice.word_counts()["cat"] == 2 * once.word_counts()["cat"] == 2
    assert twice.word_counts()["animal"] == once.word_counts()["animal"] == 1
    assert twice.stats.files == 3


def _cache_file(cache):
    files = list(cache.glob("corpus-*.npz"))
    assert len(files) == 1, files
    return files[0]


def _windows(corpus):
    return [corpus.window(i).tolist() for i in range(len(corpus))]


def test_an_inconsistent_corpus_cache_is_rebuilt_with_a_warning(tmp_path, caplog):
    """A cache that unzips but does not hold a whole corpus (a truncated
    write, another version's file) must not give wrong windows."""
    import logging

    from spacy_elmo.pretrain.reading import read_corpus

    text = write_corpus(tmp_path, 40)
    cache = tmp_path / "cache"
    fresh = read_corpus([text], max_tokens=4, cache_dir=cache)
    path = _cache_file(cache)
    with numpy.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["flat"] = arrays["flat"][: len(arrays["flat"]) // 2]  # half the tokens lost
    with open(path, "wb") as fout:
        numpy.savez(fout, **arrays)
    with caplog.at_level(logging.WARNING, logger="spacy_elmo.pretrain.reading"):
        again = read_corpus([text], max_tokens=4, cache_dir=cache)
    assert "ignoring the corpus cache" in caplog.text
    assert _windows(again) == _windows(fresh) and again.fingerprint() == fresh.fingerprint()
    assert _windows(read_corpus([text], max_tokens=4, cache_dir=cache)) == _windows(fresh)  # rewritten whole


def test_a_failed_corpus_cache_write_costs_a_warning_and_leaves_no_temporary_file(tmp_path, monkeypatch, caplog):
    import logging

    from spacy_elmo.pretrain import corpus_cache
    from spacy_elmo.pretrain.reading import read_corpus

    text = write_corpus(tmp_path, 40)
    cache = tmp_path / "cache"

    def savez(fout, **arrays):
        fout.write(b"PK\x03\x04 half a zip")
        raise RuntimeError("disk full half-way")

    monkeypatch.setattr(corpus_cache.numpy, "savez", savez)
    with caplog.at_level(logging.WARNING, logger="spacy_elmo.pretrain.reading"):
        read = read_corpus([text], max_tokens=4, cache_dir=cache)
    assert len(read) > 0 and "could not write the corpus cache" in caplog.text
    assert list(cache.iterdir()) == []


def test_only_the_writing_rank_writes_the_corpus_cache(tmp_path):
    from spacy_elmo.pretrain.reading import read_corpus

    text = write_corpus(tmp_path, 40)
    cache = tmp_path / "cache"
    read_corpus([text], max_tokens=4, cache_dir=cache, write_cache=False)  # torchrun rank > 0
    assert not cache.exists() or not list(cache.iterdir())
    first = read_corpus([text], max_tokens=4, cache_dir=cache)  # rank 0
    assert _windows(read_corpus([text], max_tokens=4, cache_dir=cache, write_cache=False)) == _windows(first)


def test_concurrent_corpus_cache_writes_never_expose_a_partial_file(tmp_path):
    """Writers of one cache file at once (threads share a pid, as processes
    on two machines sharing the output can): every read sees a whole file."""
    import threading

    from spacy_elmo.pretrain.corpus_cache import load_corpus, save_corpus
    from spacy_elmo.pretrain.reading import read_corpus

    text = write_corpus(tmp_path, 400)
    corpus = read_corpus([text], max_tokens=4)
    path = tmp_path / "cache" / "corpus.npz"
    save_corpus(corpus, path)
    errors = []

    def write():
        try:
            for _ in range(5):
                save_corpus(corpus, path)
        except Exception as err:  # noqa: BLE001 - any failure is the finding
            errors.append(err)

    def read():
        try:
            for _ in range(10):
                assert load_corpus(path).fingerprint() == corpus.fingerprint()
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=f) for f in (write, write, write, read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert [p.name for p in path.parent.iterdir()] == ["corpus.npz"]


def test_checkpoint_contents_are_stable(tmp_path):
    """Runs in progress are resumed by newer code: a checkpoint's keys and
    its config's fields are the format (a config field added later is read
    from an older checkpoint as its default:
    test_a_checkpoint_older_than_a_setting_resumes_with_its_default)."""
    corpus = write_corpus(tmp_path, 60)
    pretrain(tiny_config(tmp_path, corpus, max_steps=2), progress=False)
    state = _state(tmp_path / "out")
    assert state["format"] == "spacy_elmo.pretrain.checkpoint/2"
    assert set(state) == {
        "format", "step", "epoch", "batch_in_epoch", "tokens_seen", "world_size", "config", "options", "vocab",
        "corpus_sha256", "model", "optimizer", "scheduler", "scaler", "rng", "sha256",
    }
    assert list(state["config"]) == [
        "train", "output", "dev", "options", "shape", "init", "start_step", "lang", "max_tokens", "max_line_chars",
        "strict", "vocab", "vocab_size", "min_count", "cutoffs", "dev_fraction", "max_dev_windows", "batch_size",
        "max_steps", "optimizer", "lr", "warmup_steps", "schedule", "clip_norm", "dropout", "seed", "log_every",
        "eval_every", "checkpoint_every", "device", "precision",
    ]
    assert set(state["rng"][0]) == {"torch"} and state["step"] == 2 and state["world_size"] == 1


def test_a_run_whose_checkpoints_are_lost_reads_on_from_its_export_at_its_step(tmp_path):
    """--start-step N with --init (the export at step N): the steps after N
    read the very windows the uninterrupted run read, tokens_seen counts the
    N steps skipped as the run did, the schedule is the run's after a
    warm-up of its own; such a run resumes (its config keeps start_step)."""
    corpus = write_corpus(tmp_path, 120)
    settings = dict(max_steps=8, dropout=0.2, batch_size=16, warmup_steps=3, eval_every=1000)
    read = {}

    def record(name):
        def keep(step, info):
            read.setdefault(name, {})[step] = info["windows"]
        return keep

    pretrain(tiny_config(tmp_path, corpus, "full", **settings), progress=False, callback=record("full"))

    def stop_at(n, name):
        def stop(step, info):
            record(name)(step, info)
            if step == n:
                os.kill(os.getpid(), signal.SIGTERM)
        return stop

    assert pretrain(tiny_config(tmp_path, corpus, "lost", **settings), progress=False,
                    callback=stop_at(3, "lost"))["stopped"]
    exported = export(tmp_path / "lost", tmp_path / "lost" / "export")
    lost_tokens = _state(tmp_path / "lost")["tokens_seen"]

    config = tiny_config(tmp_path, corpus, "on", init=str(exported), options=None, start_step=3, **settings)
    assert pretrain(config, progress=False, callback=stop_at(5, "on"))["stopped"]
    assert _state(tmp_path / "on")["config"]["start_step"] == 3
    assert pretrain(config, resume=True, progress=False, callback=record("on"))["step"] == 8
    assert read["lost"] == {k: read["full"][k] for k in (1, 2, 3)}
    assert read["on"] == {k: read["full"][k] for k in range(4, 9)}  # no window twice, none left out
    assert _state(tmp_path / "on")["tokens_seen"] == _state(tmp_path / "full")["tokens_seen"]
    assert 0 < lost_tokens < _state(tmp_path / "full")["tokens_seen"]

    log = read_log(tmp_path / "on" / "log.jsonl")
    assert [r["step"] for r in log if r["event"] == "start"] == [3] and log[0]["start_step"] == 3
    lrs = {name: {r["step"]: r["lr"] for r in read_log(tmp_path / name / "log.jsonl") if r["event"] == "train"}
           for name in ("full", "on")}
    assert sorted(lrs["on"]) == list(range(4, 9))
    assert lrs["on"][4] == pytest.approx(lrs["full"][4] * 2 / 3)  # the warm-up's second of three steps
    for step in range(5, 9):
        assert lrs["on"][step] == pytest.approx(lrs["full"][step]), step


def test_start_step_needs_an_export_and_a_step_before_the_end(tmp_path):
    corpus = write_corpus(tmp_path, 60)
    with pytest.raises(ValueError, match="start_step continues an exported model: give init"):
        pretrain(tiny_config(tmp_path, corpus, start_step=2), progress=False)
    with pytest.raises(ValueError, match=r"start_step \(6\) must be below max_steps \(6\)"):
        pretrain(tiny_config(tmp_path, corpus, start_step=6, init=str(tmp_path), options=None), progress=False)


def test_a_checkpoint_older_than_a_setting_resumes_with_its_default(tmp_path):
    """A checkpoint written before start_step existed has no such field in its
    config: resume reads it as the default, not as a changed setting."""
    from spacy_elmo.pretrain.checkpoint import DIGEST, state_digest

    corpus = write_corpus(tmp_path, 60)
    pretrain(tiny_config(tmp_path, corpus, max_steps=2), progress=False)
    path = tmp_path / "out" / "checkpoints" / "last.pt"
    state = load_checkpoint(path)
    del state["config"]["start_step"]
    state[DIGEST] = state_digest(state)
    torch.save(state, path)
    assert pretrain(tiny_config(tmp_path, corpus, max_steps=3), resume=True, progress=False)["step"] == 3
    with pytest.raises(ValueError, match="start_step: 0 -> 1"):
        pretrain(tiny_config(tmp_path, corpus, max_steps=4, start_step=1, init=str(tmp_path / "out" / "export"),
                             options=None), resume=True, progress=False)


def test_resume_can_lengthen_a_run(tmp_path):
    corpus = write_corpus(tmp_path, 60)
    pretrain(tiny_config(tmp_path, corpus, max_steps=2), progress=False)
    summary = pretrain(tiny_config(tmp_path, corpus, max_steps=5), resume=True, progress=False)
    assert summary["step"] == 5 and not summary["stopped"]
    steps = [r["step"] for r in read_log(tmp_path / "out" / "log.jsonl") if r["event"] == "train"]
    assert steps[-3:] == [3, 4, 5]


def test_a_callback_can_end_a_run_sooner_with_the_decay_reaching_zero(tmp_path):
    """Lowering config.max_steps from the callback (a run boxed in time) ends
    the run at the new step, and the linear decay reaches 0 there."""
    corpus = write_corpus(tmp_path, 60)
    config = tiny_config(tmp_path, corpus, max_steps=10, warmup_steps=1, schedule="linear")

    def shorten(step, record):
        if step == 3:
            record["config"].max_steps = 6

    summary = pretrain(config, progress=False, callback=shorten)
    assert summary["step"] == 6 and not summary["stopped"]
    lrs = {r["step"]: r["lr"] for r in read_log(tmp_path / "out" / "log.jsonl") if r["event"] == "train"}
    assert max(lrs) == 6 and lrs[6] == 0.0
    assert lrs[3] == pytest.approx(3e-3 * (10 - 3) / 9) and lrs[4] == pytest.approx(3e-3 * (6 - 4) / 5)


def test_init_continues_an_exported_model_with_its_softmax(tmp_path):
    from spacy_elmo.pretrain.export import init_from_export
    from spacy_elmo.pretrain.vocab import Vocab

    corpus = write_corpus(tmp_path, 60)
    pretrain(tiny_config(tmp_path, corpus, "first", max_steps=3), progress=False)
    exported = tmp_path / "first" / "export"
    assert (exported / "softmax.hdf5").is_file()
    saved = load_checkpoint(tmp_path / "first" / "checkpoints" / "last.pt")

    # The weights and the softmax of the export, exactly.
    options = json.loads((exported / "options.json").read_text())
    vocab = Vocab.from_file(exported / "vocab.txt")
    from spacy_elmo.bilm.options import BiLMOptions

    model = PretrainModel(BiLMOptions.from_dict(options), len(vocab))
    init_from_export(model, exported, vocab)
    for name, value in model.state_dict().items():
        assert torch.allclose(value, saved["model"][name], atol=1e-7), name

    # A run with --init (no --options) trains on from there and keeps the vocabulary.
    config = tiny_config(tmp_path, corpus, "second", max_steps=2, init=str(exported), options=None)
    summary = pretrain(config, progress=False)
    assert summary["step"] == 2
    assert (tmp_path / "second" / "vocab.txt").read_text() == (exported / "vocab.txt").read_text()
    # Another vocabulary: the biLM carries over, the softmax starts afresh.
    other = tiny_config(tmp_path, corpus, "third", max_steps=1, init=str(exported), options=None, vocab_size=10)
    assert pretrain(other, progress=False)["step"] == 1
    # Options that differ from the model's (but for a wider projection: test_grow.py) are refused.
    bad = tiny_config(tmp_path, corpus, "fourth", max_steps=1, init=str(exported))
    write_options(tmp_path, **{"lstm.dim": 12})
    with pytest.raises(ValueError, match="--options .* and the model in --init .* differ in more than"):
        pretrain(bad, progress=False)


def test_default_eval_interval_gives_a_curve_for_short_runs(tmp_path):
    corpus = write_corpus(tmp_path, 60)
    config = tiny_config(tmp_path, corpus, max_steps=200, eval_every=None)
    assert config.eval_interval == 50
    assert tiny_config(tmp_path, corpus, max_steps=10**6, eval_every=None).eval_interval == 1000
    assert tiny_config(tmp_path, corpus, max_steps=4000, eval_every=None).eval_interval == 200


def test_busy_machine_warning(monkeypatch):
    from spacy_elmo.pretrain import preflight

    monkeypatch.setattr(preflight.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(preflight.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert "--threads 1" in preflight.busy_machine_warning(2)
    assert preflight.busy_machine_warning(1) is None
    monkeypatch.setattr(preflight.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert preflight.busy_machine_warning(2) is None
