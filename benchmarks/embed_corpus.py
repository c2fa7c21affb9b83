"""``embed -o`` at corpus scale: memory, throughput, processes, reading back,
bytes per token, a two-"node" torchrun run and resume after kill -9.

Text: SemCor's sentences (../shared/wsd/semcor.data.xml.gz, real English,
already tokenised: ``--whitespace``), repeated where more lines are needed.
Model: the shipped English biLM, except for the 1M-line runs (memory and
random access), which use a tiny random-weight biLM so that a million lines
take minutes: what they measure is the streaming and the layout, not the
model.

    python benchmarks/embed_corpus.py [--parts rss,throughput,scaling,access,bytes,nodes,resume] [--out results.json]

Run it as the docs say (one thread a process); every figure is printed as
one JSON line and written to ``--out``.
"""

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEMCOR = REPO.parent / "shared" / "wsd" / "semcor.data.xml.gz"
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
TINY = {
    "lstm": {
        "use_skip_connections": True,
        "projection_dim": 16,
        "cell_clip": 3,
        "proj_clip": 3,
        "dim": 32,
        "n_layers": 2,
    },
    "char_cnn": {
        "activation": "relu",
        "filters": [[1, 8], [2, 8], [3, 16]],
        "n_highway": 1,
        "embedding": {"dim": 4},
        "n_characters": 262,
        "max_characters_per_token": 50,
    },
}
RESULTS = []


def report(**figure):
    RESULTS.append(figure)
    print(json.dumps(figure), flush=True)


def semcor_sentences():
    """SemCor's sentences as token lists (multiword instances split on ``_``)."""
    entity = {"&amp;": "&", "&quot;": '"', "&apos;": "'", "&lt;": "<", "&gt;": ">"}
    sentences, current = [], []
    with gzip.open(SEMCOR, "rt", encoding="utf-8") as fin:
        for line in fin:
            if line.startswith("<sentence"):
                current = []
            elif line.startswith("</sentence"):
                sentences.append(current)
            else:
                match = re.match(r"<(?:wf|instance)[^>]*>(.*)</", line)
                if match:
                    text = re.sub(r"&\w+;", lambda m: entity.get(m[0], m[0]), match[1])
                    current.extend(text.replace("_", " ").split())
    return sentences


def write_lines(path, token_lists, n):
    with open(path, "w", encoding="utf-8") as out:
        for i in range(n):
            out.write(" ".join(token_lists[i % len(token_lists)]) + "\n")
    return path


def cli(*args, wait=True, **kwargs):
    command = [sys.executable, "-m", "spacy_elmo", "embed", "--whitespace", "--no-progress", *map(str, args)]
    proc = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    if not wait:
        return proc
    return finish(proc)


def finish(proc):
    """Wait for ``proc``: (seconds since it was started is the caller's), its peak RSS in MiB."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.cpu_s = usage.ru_utime + usage.ru_stime
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{proc.args}: exit {proc.returncode}\n{err[-2000:]}")
    return usage.ru_maxrss / 1024, out


def tiny_model(folder):
    import torch

    from spacy_elmo import BiLM

    torch.manual_seed(0)
    model = BiLM(TINY).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
    folder.mkdir(exist_ok=True)
    model.to_hdf5(folder / "weights.hdf5", folder / "options.json")
    return folder


def fragments(sentences, size=3):
    """Short lines of real text: the sentences cut every ``size`` tokens."""
    return [s[i : i + size] for s in sentences for i in range(0, len(s), size)]


# ----------------------------------------------------------------- parts
def part_rss(tmp, sentences):
    """Peak RSS of whole runs at 100k and 1M lines (tiny biLM, 3-token lines)."""
    model = tiny_model(tmp / "tiny")
    lines = fragments(sentences)
    for n in (100_000, 1_000_000):
        text = write_lines(tmp / f"lines{n}.txt", lines, n)
        start = time.perf_counter()
        rss, _ = cli(
            "--model",
            model,
            "-i",
            text,
            "-o",
            tmp / f"rss{n}.h5",
            "--threads",
            "1",
            "--layers",
            "top",
            "--dtype",
            "float16",
        )
        report(
            part="rss",
            lines=n,
            peak_rss_mib=round(rss, 1),
            seconds=round(time.perf_counter() - start, 1),
            command=f"python -m spacy_elmo embed --whitespace --model TINY -i lines{n}.txt -o out.h5 --threads 1 "
                    "--layers top --dtype float16",
        )


def part_access(tmp, sentences):
    """Random access to sentence i of the 1M-sentence output of part_rss."""
    from spacy_elmo.embed import read_embeddings

    path = tmp / "rss1000000.h5"
    if not path.exists():
        part_rss(tmp, sentences)
    start = time.perf_counter()
    emb = read_embeddings(path)
    opened = time.perf_counter() - start
    rng = random.Random(0)
    picks = [rng.randrange(len(emb)) for _ in range(20_000)]
    times = []
    for i in picks:
        t = time.perf_counter()
        tokens, array = emb[i]
        float(array[0, 0, 0]) if array.size else None  # touch the vectors
        times.append(time.perf_counter() - t)
    times.sort()
    report(
        part="access",
        sentences=len(emb),
        open_ms=round(opened * 1000, 2),
        median_us=round(statistics.median(times) * 1e6, 1),
        p99_us=round(times[int(0.99 * len(times))] * 1e6, 1),
        max_us=round(times[-1] * 1e6, 1),
        reads=len(picks),
    )


def part_throughput(tmp, sentences, n=600, repeats=4):
    """One process of embed_corpus vs BiLM.embed_sentences, same sentences,
    same batch size, one thread, interleaved A B B A A B, medians. CPU time
    of this process (one thread), which other jobs on a shared machine
    disturb less than wall time; the writes' flushes to disk are not in it."""
    import torch

    from spacy_elmo import load_bilm
    from spacy_elmo.cli.inputs import model_identity
    from spacy_elmo.embed import EmbedSettings, embed_corpus

    torch.set_num_threads(1)
    bilm = load_bilm(None, progress=False).eval()
    text = write_lines(tmp / "tp.txt", sentences, n)
    tokens = [line.split() for line in text.read_text(encoding="utf-8").splitlines()]
    total = sum(map(len, tokens))
    identity = model_identity(None, None)
    ours, theirs = [], []

    def run_theirs(r):
        bilm.clear_caches()  # each run starts with a cold word-type cache
        start = time.process_time()
        bilm.embed_sentences(tokens, batch_size=64)
        theirs.append(time.process_time() - start)

    def run_ours(r):
        out = tmp / f"tp{r}.h5"
        bilm.clear_caches()
        start = time.process_time()
        embed_corpus(
            bilm,
            text,
            out,
            model=identity,
            tokenize=lambda lines: (x.split() for x in lines),
            tokenization="whitespace",
            settings=EmbedSettings(batch_size=64),
        )
        ours.append(time.process_time() - start)
        out.unlink()

    for r in range(repeats):  # A B, B A, A B, ...
        for step in (run_theirs, run_ours) if r % 2 == 0 else (run_ours, run_theirs):
            step(r)
    a, b = statistics.median(ours), statistics.median(theirs)
    report(
        part="throughput",
        sentences=n,
        tokens=total,
        embed_corpus_tokens_s=round(total / a),
        embed_sentences_tokens_s=round(total / b),
        ratio=round(b / a, 3),
        pairs=[round(y / x, 3) for x, y in zip(ours, theirs)],
    )


def part_scaling(tmp, sentences, n=4000, repeats=2):
    """Two processes (--shard 0/2, 1/2, one thread each) vs one, whole
    commands, interleaved, medians; and the same less the start-up of a
    process (imports, model loading: a run on a one-line input), which two
    processes pay side by side. Chunks of 16 KiB, so both shards have work."""
    text = write_lines(tmp / "sc.txt", sentences, n)
    common = ["--threads", "1", "--chunk-kb", "16"]
    start = time.perf_counter()
    cli(*common, "-i", write_lines(tmp / "one-line.txt", sentences, 1), "-o", tmp / "startup.h5")
    startup = time.perf_counter() - start
    ones, twos, cpu_one, cpu_two = [], [], [], []
    for r in range(repeats):
        start = time.perf_counter()
        proc = cli(*common, "-i", text, "-o", f"{tmp / f'one{r}'}/", wait=False)
        finish(proc)
        ones.append(time.perf_counter() - start)
        cpu_one.append(proc.cpu_s)
        start = time.perf_counter()
        procs = [cli(*common, "-i", text, "-o", tmp / f"two{r}", "--shard", f"{i}/2", wait=False) for i in range(2)]
        for proc in procs:
            finish(proc)
        twos.append(time.perf_counter() - start)
        cpu_two.append([round(p.cpu_s, 1) for p in procs])
    same = _manifest_sentences_equal(tmp / "one0", tmp / "two0")
    one, two = statistics.median(ones), statistics.median(twos)
    report(
        part="scaling",
        sentences=n,
        one_process_s=[round(x, 1) for x in ones],
        two_processes_s=[round(x, 1) for x in twos],
        speedup=round(one / two, 3),
        startup_s=round(startup, 1),
        speedup_after_startup=round((one - startup) / (two - startup), 3),
        cpu_one_process_s=[round(x, 1) for x in cpu_one],
        cpu_two_processes_s=cpu_two,
        same_vectors=same,
        load_average=[round(x, 2) for x in os.getloadavg()],
    )


def _manifest_sentences_equal(a, b):
    import numpy

    from spacy_elmo.embed import read_embeddings

    x, y = read_embeddings(a), read_embeddings(b)
    return len(x) == len(y) and all(t1 == t2 and numpy.array_equal(v1, v2) for (t1, v1), (t2, v2) in zip(x, y))


def part_bytes(tmp, sentences, n=100):
    """Output bytes per token of each layout (shipped biLM)."""
    text = write_lines(tmp / "bytes.txt", sentences, n)
    for layers in ("all", "top", "mix", "1,2"):
        for dtype in ("float32", "float16"):
            out = tmp / f"bytes-{layers}-{dtype}.h5"
            _, said = cli("-i", text, "-o", out, "--layers", layers, "--dtype", dtype, "--threads", "1")
            tokens = int(re.search(r"\((\d+) tokens\)", said)[1])
            report(
                part="bytes",
                layers=layers,
                dtype=dtype,
                tokens=tokens,
                file_bytes=out.stat().st_size,
                bytes_per_token=round(out.stat().st_size / tokens, 1),
            )


def part_nodes(tmp, sentences, n=300):
    """Two torchrun launchers (--nnodes 2, rendezvous on 127.0.0.1) vs one
    launcher of two processes: the same manifest."""
    text = write_lines(tmp / "nodes.txt", sentences, n)
    args = [
        "-m",
        "spacy_elmo",
        "embed",
        "--whitespace",
        "--no-progress",
        "-i",
        str(text),
        "--threads",
        "1",
        "--chunk-kb",
        "4",
    ]
    run = [sys.executable, "-m", "torch.distributed.run"]
    port = str(29500 + os.getpid() % 1000)
    nodes = [
        subprocess.Popen(
            [
                *run,
                "--nnodes",
                "2",
                "--nproc_per_node",
                "1",
                "--node_rank",
                str(r),
                "--master_addr",
                "127.0.0.1",
                "--master_port",
                port,
                *args,
                "-o",
                str(tmp / "nodes"),
            ],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for r in (0, 1)
    ]
    for proc in nodes:
        finish(proc)
    finish(
        subprocess.Popen(
            [*run, "--standalone", "--nproc_per_node", "2", *args, "-o", str(tmp / "single")],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    )
    a = json.loads((tmp / "nodes" / "manifest.json").read_text())
    b = json.loads((tmp / "single" / "manifest.json").read_text())
    report(
        part="nodes",
        sentences=n,
        manifests_equal=a == b,
        shards=[(s["file"], s["sentences"], s["sha256"][:12]) for s in a["shards"]],
        command=f"torchrun --nnodes 2 --nproc_per_node 1 --node_rank R --master_addr 127.0.0.1 --master_port {port} "
                "-m spacy_elmo embed ...",
    )


def part_resume(tmp, sentences, n=400, kills=5):
    """kill -9 at 5 random points (chunks finished), then the same command
    again: the same shard and manifest as an uninterrupted run."""
    text = write_lines(tmp / "resume.txt", sentences, n)
    common = ["-i", text, "--threads", "1", "--chunk-kb", "2"]
    cli(*common, "-o", f"{tmp / 'whole'}/")
    chunks = json.loads((tmp / "whole" / "manifest.json").read_text())["shards"][0]["chunks"]
    points = sorted(random.Random(1).sample(range(1, chunks), kills))
    out, work = tmp / "killed", tmp / "killed" / ".work"
    killed_at = []
    for point in points:
        proc = cli(*common, "-o", f"{out}/", wait=False)
        while proc.poll() is None and len(list(work.glob("chunk-*.npz"))) < point:
            time.sleep(0.005)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at.append(len(list(work.glob("chunk-*.npz"))))
    cli(*common, "-o", f"{out}/")
    same = all(_sha(out / f) == _sha(tmp / "whole" / f) for f in ("shard-00000-of-00001.h5", "manifest.json"))
    report(part="resume", chunks=chunks, killed_with_chunks_done=killed_at, identical=same)


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


PARTS = {
    "rss": part_rss,
    "access": part_access,
    "throughput": part_throughput,
    "scaling": part_scaling,
    "bytes": part_bytes,
    "nodes": part_nodes,
    "resume": part_resume,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sentences = semcor_sentences()
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"Model name:\s*(.*)", cpu)
    report(
        part="machine", cpu=model[1].strip() if model else "?", cores=os.cpu_count(), semcor_sentences=len(sentences)
    )
    with tempfile.TemporaryDirectory() as folder:
        for name in args.parts.split(","):
            PARTS[name](Path(folder), sentences)
    if args.out:
        args.out.write_text(json.dumps(RESULTS, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
