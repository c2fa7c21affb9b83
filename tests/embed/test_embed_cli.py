"""embed -o on the command line: torchrun's ranks (gloo) and --shard give
one run's vectors bit for bit, kill -9 at several points resumes to the same
files, and bad input or output ends in one error line that loses nothing
already written."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy
import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import app, read_embeddings
from tests.helpers.paths import PARITY, REPO

MODEL = ["--model", str(PARITY), "--whitespace", "--threads", "1"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))


def corpus(path: Path, n: int) -> Path:
    words = "the bank of a river , money ; a storm came over é東 🙂 and".split()
    path.write_text(
        "".join(
            " ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 23)) + "\n" + ("\n" if i % 17 == 0 else "")
            for i in range(n)
        ),
        encoding="utf-8",
    )
    return path


def invoke(*args, input=None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def ok(result):
    assert result.exit_code == 0, result.output
    return result


def bad_input(result, *needles):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def same_sentences(a: Path, b: Path) -> None:
    one, other = read_embeddings(a), read_embeddings(b)
    assert len(one) == len(other) > 0 and one.lines.tolist() == other.lines.tolist()
    for (t1, x1), (t2, x2) in zip(one, other):
        assert t1 == t2 and numpy.array_equal(x1, x2)


def test_torchrun_two_processes_give_one_process_vectors_bit_for_bit(tmp_path):
    text = corpus(tmp_path / "in.txt", 300)
    args = ["embed", *MODEL, "-i", str(text), "--chunk-kb", "2", "--batch-size", "8"]
    ok(invoke(*args, "-o", tmp_path / "one.h5"))
    for i in (1, 0):
        ok(invoke(*args, "-o", tmp_path / "sharded", "--shard", f"{i}/2"))
    launch = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "spacy_elmo",
        *args,
        "-o",
        str(tmp_path / "torchrun"),
    ]
    proc = subprocess.run(launch, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "all shards written" in proc.stdout
    same_sentences(tmp_path / "one.h5", tmp_path / "torchrun")
    manifest = json.loads((tmp_path / "torchrun" / "manifest.json").read_text())
    assert manifest == json.loads((tmp_path / "sharded" / "manifest.json").read_text())
    assert [s["file"] for s in manifest["shards"]] == ["shard-00000-of-00002.h5", "shard-00001-of-00002.h5"]
    for s in manifest["shards"]:
        assert digest(tmp_path / "torchrun" / s["file"]) == digest(tmp_path / "sharded" / s["file"]) == s["sha256"]


@pytest.mark.parametrize(
    "kill_after", [pytest.param(1, marks=pytest.mark.slow), 6, pytest.param(20, marks=pytest.mark.slow)]
)
def test_kill_9_at_any_point_resumes_to_the_same_files(tmp_path, kill_after):
    text = corpus(tmp_path / "in.txt", 1500)
    args = ["embed", *MODEL, "-i", str(text), "--chunk-kb", "1", "--layers", "mix"]
    ok(invoke(*args, "-o", f"{tmp_path / 'ref'}/"))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "spacy_elmo", *args, "-o", f"{out}/"],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while proc.poll() is None and len(list((out / ".work").glob("chunk-*.npz"))) < kill_after:
            time.sleep(0.005)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        proc.stderr.close()
    assert not (out / "manifest.json").exists()
    resumed = ok(invoke(*args, "-o", f"{out}/"))
    assert "chunks were finished by an earlier run" in resumed.stdout
    for name in ("shard-00000-of-00001.h5", "manifest.json"):
        assert digest(out / name) == digest(tmp_path / "ref" / name)
    assert not list((out / ".work").glob("chunk-*"))


# --------------------------------------------------------------- errors
def test_a_bad_line_stops_the_run_and_the_chunks_before_it_are_kept(tmp_path):
    text = corpus(tmp_path / "in.txt", 400)
    good = text.read_bytes()
    lines = good.split(b"\n")
    line = len(lines) - 5
    lines[line - 1] = "café".encode("latin-1")
    text.write_bytes(b"\n".join(lines))
    out = tmp_path / "out.h5"
    args = ["embed", *MODEL, "-i", text, "-o", out, "--chunk-kb", "1"]
    bad_input(invoke(*args), f"--input {text}, line {line}: not UTF-8", "iconv")
    finished = list((tmp_path / "out.h5.work").glob("chunk-*.npz"))
    assert len(finished) > 5 and not out.exists()
    lines[line - 1] = "café".encode("utf-8")  # fixed: the chunks before it are unchanged
    text.write_bytes(b"\n".join(lines))
    assert f"{len(finished)} chunks were finished by an earlier run" in ok(invoke(*args)).stdout


@pytest.mark.parametrize("case", ["binary", "10 MB line"])
def test_binary_input_and_a_huge_line_are_named(tmp_path, case):
    path = tmp_path / "in.txt"
    if case == "binary":
        path.write_bytes(b"fine\n" + bytes(range(256)) * 40)
        needles = (f"--input {path}, line 2: a NUL byte",)
    else:
        path.write_bytes(b"fine\n" + b"x" * (10 << 20) + b"\nfine\n")
        needles = (f"--input {path}, line 2: longer than 100,000 characters",)
    bad_input(invoke("embed", *MODEL, "-i", path, "-o", tmp_path / "out.h5"), *needles)


def test_output_paths_are_checked_before_any_work(tmp_path, monkeypatch):
    text = corpus(tmp_path / "in.txt", 5)
    bad_input(invoke("embed", *MODEL, "-i", text, "-o", text), f"--output {text} is the input file")
    assert text.read_text(encoding="utf-8").startswith("the bank")
    missing = tmp_path / "no" / "out.h5"
    bad_input(invoke("embed", *MODEL, "-i", text, "-o", missing), "does not exist", "mkdir -p")
    bad_input(invoke("embed", *MODEL, "-i", text, "-o", text / "x", "--shard", "0/2"), "does not exist")
    bad_input(invoke("embed", *MODEL, "-i", text, "-o", tmp_path / "d", "--shard", "2/2"), "--shard '2/2'")
    bad_input(invoke("embed", *MODEL, "-o", tmp_path / "d", "--shard", "0/2", input="a\n"), "need --input")
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **k: Path(path) != tmp_path and real(path, mode, **k))
    bad_input(
        invoke("embed", *MODEL, "-i", text, "-o", tmp_path / "out.h5"), f"the directory {tmp_path} is not writable"
    )


def test_a_full_disk_ends_in_one_line_and_a_rerun_finishes(tmp_path):
    """The file-size limit stands in for a full disk: writes fail with EFBIG."""
    text = corpus(tmp_path / "in.txt", 600)
    out = tmp_path / "out.h5"
    limited = (
        "import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000000, 1000000)); "
        "from spacy_elmo.__main__ import main; sys.argv[0] = 'spacy_elmo'; main()"
    )
    args = ["embed", *MODEL, "-i", str(text), "-o", str(out), "--chunk-kb", "1"]
    proc = subprocess.run([sys.executable, "-c", limited, *args], capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"error: --output {out}: cannot write (File too large" in proc.stderr
    assert "The chunks already finished are kept" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    kept = len(list((tmp_path / "out.h5.work").glob("chunk-*.npz")))
    assert kept > 0 and not out.exists()
    assert f"{kept} chunks were finished by an earlier run" in ok(invoke(*args)).stdout
    ok(invoke(*args[:-4], "-o", tmp_path / "ref.h5", "--chunk-kb", "1"))
    assert digest(out) == digest(tmp_path / "ref.h5")


def test_stdin_and_the_progress_bar(tmp_path):
    result = ok(invoke("embed", *MODEL, "-o", tmp_path / "out.h5", "--progress", input="a b\n\nc\n"))
    assert "tokens/s" in result.stderr and "wrote 3 sentences (3 tokens)" in result.stdout
    emb = read_embeddings(tmp_path / "out.h5")
    assert [t for t, _ in emb] == [["a", "b"], [], ["c"]] and emb.attrs["input"] == "<stdin>"
