"""The command line: one dialect (model, tokens, progress), embed -o's file,
and bad input that ends in the package's own error (exit 2), never a
traceback."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import hub
from spacy_elmo.bilm import BiLM
from spacy_elmo.cli import app, read_embeddings
from spacy_elmo.cli.inputs import ProgressEmbedder
from spacy_elmo.pretrain.checkpoint import CHECKPOINT_FORMAT
from tests.helpers.paths import PARITY

MODEL = ["--model", str(PARITY)]
TEXT = "The storm came.\n\nShe opened a bank account!\n"
COMMANDS = ("embed", "download", "neighbours", "senses", "wsd", "pretrain", "tokenise", "plot", "export", "perplexity")


def plain(text):
    """Help text without rich's boxes, whitespace collapsed."""
    return " ".join(w for w in text.split() if w.strip("│╭╮╰╯─"))


def invoke(*args, input=None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def bad_input(result, *needles):
    """Exit 2, one 'error:' line on stderr holding every needle, no traceback."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


# ------------------------------------------------------------------- help
def test_help_lists_every_command_and_tells_the_truth():
    top = invoke("--help")
    assert top.exit_code == 0
    text = " ".join(top.stdout.split())
    assert f"Commands: {', '.join(COMMANDS)}." in text, text
    import typer

    assert sorted(typer.main.get_command(app).commands) == sorted(COMMANDS)  # every command, none more
    assert all(f"│ {name} " in top.stdout for name in COMMANDS)
    for name in ("embed", "neighbours", "senses"):
        text = plain(invoke(name, "--help").stdout)
        assert "--model" in text and "--weights" not in text and "if installed" not in text
        assert "shipped with the package, the default" in text
        assert "--progress" in text and "--no-progress" in text
    assert "Usage: root embed [OPTIONS] Embed sentences" in plain(
        invoke("embed", "--help").stdout
    )  # no old positionals
    neighbours = plain(invoke("neighbours", "--help").stdout)
    assert (
        "mix (the default: the plain mean of all layers" in neighbours
        and "top LSTM layer (L) separates word senses best" in neighbours
    )
    for name in ("embed", "neighbours"):
        text = invoke(name, "--help").stdout
        assert "--lang" in text and "--whitespace" in text


# ------------------------------------------------------------ the model
def test_every_spelling_of_the_model_gives_the_same_output(parity_paths):
    by_dir = invoke("embed", *MODEL, "--whitespace", input=TEXT)
    assert by_dir.exit_code == 0, by_dir.output
    assert "(3, 3, 48)" in by_dir.stdout and "(3, 0, 48)" in by_dir.stdout
    by_files = invoke("embed", "--model", parity_paths[0], "--options", parity_paths[1], "--whitespace", input=TEXT)
    assert by_files.stdout == by_dir.stdout and by_files.stderr == ""
    old = invoke("embed", str(PARITY), "--whitespace", input=TEXT)  # the pre-release positional spelling is gone
    assert old.exit_code == 2 and "unexpected extra argument" in plain(old.stderr) and old.stdout == ""
    bad_input(invoke("embed", "--options", parity_paths[1], input=TEXT), "--options given without --model")
    bad_input(invoke("embed", "--model", "smal", input=TEXT), "--model 'smal' is neither a model name")


@pytest.mark.parametrize(
    "command",
    [["embed"], ["senses"], ["neighbours", "a bank", "--word", "bank", "--corpus", str(PARITY / "README.md")]],
)
@pytest.mark.parametrize("model", ["{tmp}/nope", "smal", "{tmp}/text.txt", "{tmp}/dir"])
def test_model_errors_speak_the_command_line(tmp_path, command, model):
    """A --model that cannot be used is named as --model, with the command
    line's forms (NAME|DIR|FILE|URL), not the Python API's advice."""
    (tmp_path / "text.txt").write_text("not weights\n", encoding="utf-8")
    (tmp_path / "dir").mkdir()
    result = invoke(*command, "--model", model.replace("{tmp}", str(tmp_path)), input="a b\n")
    bad_input(result, "--model NAME|DIR|FILE|URL")
    assert "add_pipe" not in result.stderr and "config" not in result.stderr and "from_pretrained" not in result.stderr


def test_default_model_is_the_shipped_one():
    default = invoke("embed", input="a b\n")
    named = invoke("embed", "--model", "english", input="a b\n")
    shipped = invoke("embed", "--model", hub.SHIPPED_MODEL_DIR, input="a b\n")
    assert default.exit_code == 0, default.output
    assert default.stdout == named.stdout == shipped.stdout and "(3, 2, " in default.stdout


# ------------------------------------------------------------ tokenisation
def test_spacy_tokenizer_by_default_whitespace_when_asked():
    spacy_tokens = invoke("embed", *MODEL, input="The storm. It came!\n")
    assert spacy_tokens.exit_code == 0, spacy_tokens.output
    assert "(3, 6, 48)\tThe storm . It came !" in spacy_tokens.stdout
    for flag in ("--whitespace", "--pretokenized"):
        split = invoke("embed", *MODEL, flag, input="The storm. It came!\n")
        assert "(3, 4, 48)\tThe storm. It came!" in split.stdout
    bad_input(invoke("embed", *MODEL, "--lang", "xx-nonsense", input="a\n"), "--lang 'xx-nonsense'")


# -------------------------------------------------------------- embed -o
def test_embed_output_maps_rows_to_tokens_and_names_the_model(tmp_path, parity_paths):
    source = tmp_path / "in.txt"
    source.write_text("The storm came.\n\nA bank, a river bank and a bank account.\nOk\n", encoding="utf-8")
    out = tmp_path / "out.h5"
    result = invoke("embed", *MODEL, "-i", source, "-o", out, "--batch-size", "2")
    assert result.exit_code == 0, result.output
    assert f"wrote 4 sentences (16 tokens) to {out}" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.h5"]  # no work folder left
    sentences = read_embeddings(out)
    attrs = sentences.attrs
    assert [tokens for tokens, _ in sentences] == [
        ["The", "storm", "came", "."],
        [],
        ["A", "bank", ",", "a", "river", "bank", "and", "a", "bank", "account", "."],
        ["Ok"],
    ]
    bilm = BiLM.from_hdf5(*parity_paths).eval()
    expected = bilm.embed_sentences([tokens for tokens, _ in sentences], batch_size=2)
    for (tokens, array), reference in zip(sentences, expected):
        assert array.shape == (3, len(tokens), 48)
        assert numpy.array_equal(array, reference)
    # Each token's vector is its own: the three uses of "bank" differ in context.
    third = sentences[2][1]
    assert not numpy.allclose(third[2, 1], third[2, 5]) and numpy.array_equal(third[0, 1], third[0, 5])
    assert attrs["model"] == str(PARITY)
    assert attrs["weights_sha256"] == hashlib.sha256(parity_paths[0].read_bytes()).hexdigest()
    assert attrs["options_sha256"] == hashlib.sha256(parity_paths[1].read_bytes()).hexdigest()
    assert json.loads(attrs["options"]) == json.loads(parity_paths[1].read_text(encoding="utf-8"))
    assert attrs["tokenization"] == "spacy.blank('en').tokenizer" and attrs["input"] == str(source)
    assert (attrs["layers"], attrs["dim"], attrs["sentences"]) == ("all", 48, 4)
    assert sentences.lines.tolist() == [0, 1, 2, 3]


def test_progress_embedder_runs_the_same_batches(parity_paths):
    bilm = BiLM.from_hdf5(*parity_paths).eval()
    sentences = [["a"] * n for n in (5, 0, 3, 9, 1, 0, 3, 7)]
    wrapped = ProgressEmbedder(bilm, progress=False).embed_sentences(sentences, batch_size=3)
    plain = bilm.embed_sentences(sentences, batch_size=3)
    assert len(wrapped) == len(plain)
    assert all(numpy.array_equal(a, b) for a, b in zip(wrapped, plain))


# --------------------------------------------------------------- progress
def test_progress_goes_to_stderr_and_is_switched_off(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the bank of the river\nthe bank raised rates\n", encoding="utf-8")
    data = tmp_path / "senses.jsonl"
    data.write_text(
        "".join(
            json.dumps({"word": "bank", "sense": s, "tokens": f"the bank {w}", "index": 1}) + "\n"
            for s, w in [("river", "shore"), ("river", "water"), ("money", "loan"), ("money", "rates")]
        ),
        encoding="utf-8",
    )
    runs = [
        ("embedding", ["embed", *MODEL, "--whitespace"]),
        ("embedding", ["neighbours", "the bank", "--word", "bank", "--corpus", corpus, *MODEL, "--whitespace"]),
        ("embedding", ["senses", "--data", data, *MODEL]),
        ("perplexity", ["perplexity", corpus]),
    ]
    for needle, args in runs:
        shown = invoke(*args, "--progress", input=TEXT)
        assert shown.exit_code == 0, shown.output
        assert f"{needle}: 100%" in shown.stderr and "%|" not in shown.stdout
        quiet = invoke(*args, "--no-progress", input=TEXT)
        assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == shown.stdout
        default = invoke(*args, input=TEXT)  # stderr is no terminal here: no bar
        assert default.stderr == "" and default.stdout == shown.stdout


def test_progress_is_on_by_default_on_a_terminal(tmp_path):
    """The real entry point, its stderr a pseudo-terminal."""
    import fcntl
    import pty
    import struct
    import termios

    source = tmp_path / "in.txt"
    source.write_text("a b c\n", encoding="utf-8")
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a terminal 80 columns wide
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "spacy_elmo", "embed", *MODEL, "--whitespace", "-i", str(source)]
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=secondary, env=env, timeout=300)
        os.close(secondary)
        seen = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the terminal is closed once read to the end
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(primary)
    assert proc.returncode == 0
    assert b"embedding" in seen and b"100%" in seen
    assert b"(3, 3, 48)" in proc.stdout and b"embedding" not in proc.stdout
    quiet = subprocess.run(command + ["--no-progress"], capture_output=True, env=env, timeout=300)
    assert quiet.returncode == 0 and quiet.stderr == b""


# -------------------------------------------------------------- bad input
@pytest.mark.parametrize("case", ["missing", "binary", "latin-1", "directory"])
def test_embed_input_errors_name_the_file_and_the_problem(tmp_path, case):
    path = tmp_path / "in.txt"
    needles = {
        "missing": ["no such file"],
        "binary": ["line 1", "a NUL byte", "binary file"],
        "latin-1": ["line 2", "not UTF-8", "byte 0xe9 at column 4", "iconv -f latin1 -t utf-8"],
        "directory": ["is a directory"],
    }[case]
    if case == "binary":
        path.write_bytes(b"PK\x03\x04\x00\x00\xff\xfe")
    elif case == "latin-1":
        path.write_bytes("fine\ncafé au lait\n".encode("latin-1"))
    elif case == "directory":
        path.mkdir()
    bad_input(invoke("embed", *MODEL, "-i", path), f"--input {path}", *needles)


def test_embed_output_directory_is_checked_before_any_work(tmp_path, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr("spacy_elmo.cli.embed.load_model", no_work)
    missing = tmp_path / "no" / "such" / "out.h5"
    bad_input(invoke("embed", *MODEL, "-o", missing, input=TEXT), f"--output {missing}", "does not exist", "mkdir -p")
    source = tmp_path / "in.txt"
    source.write_text(TEXT, encoding="utf-8")
    bad_input(invoke("embed", *MODEL, "-i", source, "-o", source), f"--output {source} is the input file")


def test_embed_failure_leaves_no_output_file(tmp_path, monkeypatch):
    def broken(self):
        raise OSError(28, "No space left on device", "x")

    monkeypatch.setattr("spacy_elmo.embed.run.PieceWriter.finish", broken)
    out = tmp_path / "out.h5"
    bad_input(invoke("embed", *MODEL, "-o", out, input=TEXT), "No space left on device", "run the same command again")
    assert not out.exists() and not list((tmp_path / "out.h5.work").glob("chunk-*"))


def test_batch_size_zero_is_refused_by_name(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a bank\n", encoding="utf-8")
    for args in (
        ["embed", *MODEL],
        ["neighbours", "a bank", "--word", "bank", "--corpus", corpus, *MODEL],
        ["senses", *MODEL],
        ["perplexity", corpus],
    ):
        result = invoke(*args, "--batch-size", "0", input=TEXT)
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert "--batch-size" in result.stderr and "greater than or equal to 1" in result.stderr


def test_neighbours_corpus_errors(tmp_path):
    query = ["neighbours", "a bank", "--word", "bank", *MODEL, "--whitespace"]
    bad_input(invoke(*query, "--corpus", tmp_path / "nope.txt"), f"--corpus {tmp_path / 'nope.txt'}: no such file")
    bad_input(invoke(*query, "--corpus", tmp_path), f"--corpus {tmp_path} is a directory")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("the bank\nthe bank café\n".encode("latin-1"))
    bad_input(invoke(*query, "--corpus", latin), f"--corpus {latin}, line 2: not UTF-8")
    good = tmp_path / "good.txt"
    good.write_text("the bank\n", encoding="utf-8")
    bad_input(invoke(*query, "--corpus", good, "--layer", "7"), "--layer must be 'mix' or in 0..2, found 7")
    bad_input(invoke(*query, "--corpus", good, "--word", "river"), "--word 'river' is not a token of the query")
    bad_input(invoke(*query, "--corpus", good, "--weights", str(PARITY)), "No such option: --weights")


def test_senses_data_errors(tmp_path):
    bad_input(invoke("senses", "--data", tmp_path / "nope.jsonl", *MODEL), "--data", "no such file")
    data = tmp_path / "senses.jsonl"
    good = {"word": "bank", "sense": "river", "tokens": ["the", "bank"], "index": 1}
    data.write_text(
        json.dumps(good) + "\n" + json.dumps({"word": "bank", "sense": "money", "index": 1}) + "\n", encoding="utf-8"
    )
    bad_input(invoke("senses", "--data", data, *MODEL), f"{data}:2: the item lacks tokens")
    data.write_text(json.dumps(good) + "\nnot json\n", encoding="utf-8")
    bad_input(invoke("senses", "--data", data, *MODEL), f"{data}:2: not a JSON object")
    data.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    bad_input(invoke("senses", "--data", data, *MODEL), f"{data}: not UTF-8")


def test_senses_and_neighbours_have_one_spelling_of_the_model(tmp_path):
    data = tmp_path / "senses.jsonl"
    data.write_text(
        "".join(
            json.dumps({"word": "bank", "sense": s, "tokens": f"the bank {w}", "index": 1}) + "\n"
            for s, w in [("river", "shore"), ("river", "water"), ("money", "loan"), ("money", "rates")]
        ),
        encoding="utf-8",
    )
    assert invoke("senses", "--data", data, *MODEL).exit_code == 0
    bad_input(invoke("senses", "--data", data, "--weights", str(PARITY)), "No such option: --weights")


@pytest.mark.parametrize("damage", ["binary", "not json", "no loss"])
def test_plot_on_a_damaged_log(tmp_path, damage):
    pytest.importorskip("matplotlib")
    good = json.dumps({"event": "train", "step": 1, "loss": 3.0}) + "\n"
    log = tmp_path / "log.jsonl"
    if damage == "binary":
        log.write_bytes(good.encode() + b"\x00\x9c\xff\x01garbage")
        needles = ["log.jsonl", "not UTF-8"]
    elif damage == "not json":
        log.write_text(good + '{"event": "train", "st\n', encoding="utf-8")
        needles = ["log.jsonl, line 2: not a JSON record", "damaged"]
    else:
        log.write_text(good + json.dumps({"event": "train", "step": 2}) + "\n", encoding="utf-8")
        needles = ["log.jsonl: a train or eval record lacks a number", "'loss'"]
    bad_input(invoke("plot", tmp_path), *needles)
    assert not (tmp_path / "learning_curve.png").exists()


def _truncated_checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    last = folder / "last.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "model": {"w": torch.arange(5000.0)}}, last)
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])
    return last


def test_export_and_resume_from_a_truncated_checkpoint(tmp_path):
    last = _truncated_checkpoint(tmp_path / "run" / "checkpoints")
    result = invoke("export", tmp_path / "run", tmp_path / "exported")
    bad_input(result, f"the checkpoint {last} is damaged", "truncated", "No other checkpoint", "fresh --output")
    assert not (tmp_path / "exported").exists()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n" * 20, encoding="utf-8")
    resumed = invoke("pretrain", corpus, "--output", tmp_path / "run", "--shape", "small", "--resume", "--no-progress")
    bad_input(resumed, f"the checkpoint {last} is damaged")
    torch.save({"format": CHECKPOINT_FORMAT}, last.parent / "step-100.pt")
    result = invoke("export", tmp_path / "run", tmp_path / "exported")
    bad_input(result, "Use another checkpoint instead (export --checkpoint FILE", "step-100.pt")


def test_debug_switch_keeps_the_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_ELMO_DEBUG", "1")
    result = invoke("embed", *MODEL, "-i", tmp_path / "nope.txt")
    assert result.exit_code != 0 and "no such file" in str(result.exception)
