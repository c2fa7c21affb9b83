"""Speed benchmark of the biLM on the published shapes.

    python benchmarks/inference_speed.py --shapes small --batch-size 32

In one run: measure this machine's fp32 (and bf16) matmul peak, make random
weights of each published shape, embed a fixed sentence set and print
tokens/s, achieved GFLOP/s and the ratio to the measured fp32 peak, for

* ``exact (cold)``: empty word-type cache (token types are still encoded
  once per call), after one warm-up pass over the set;
* ``exact (warm)``: the same sentences again, cache filled (steady state);
* ``bf16`` (where bf16 is native) and ``int8`` (on CPU): the opt-in fast
  paths, cold and warm, with their largest absolute deviation from the exact
  outputs and the rms of the deviation relative to the rms of the outputs.

FLOPs are the model's nominal cost per position (char-CNN over all 50 chars,
highway, projection, both LSTM directions; multiply-add = 2 FLOPs) times the
positions the biLM processes (tokens plus the two sentence boundaries). Work
that the exact shortcuts avoid (cache hits, padding windows, repeated types)
is counted as done, so GFLOP/s is "effective" for those rows.
"""
import json
import platform
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy
import torch
import typer

from spacy_elmo.bilm import BiLM, BiLMOptions
from spacy_elmo.bilm.fast import bf16_supported, int8_supported
from spacy_elmo.bilm.options import PUBLISHED_SHAPES, published_options  # noqa: F401 (used by the other benchmarks)

#: The reference implementation's tokens/s for each published shape on this
#: machine kind, as given in issue #5 (2 cores, torch 2.13 CPU, 256 sentences
#: of 5-40 tokens, batch 32): what "x reference" divides by.
REFERENCE_TOKENS_PER_S = {"small": 674, "medium": 482, "original": 216}
PUBLISHED: Dict[str, Dict] = {
    name: {**shape, "reference_tokens_per_s": REFERENCE_TOKENS_PER_S[name]} for name, shape in PUBLISHED_SHAPES.items()
}


def flops_per_position(options: BiLMOptions) -> int:
    """Nominal FLOPs the biLM spends on one position (token or boundary)."""
    o = options
    macs = sum((o.max_characters_per_token - w + 1) * w * o.char_embedding_dim * n for w, n in o.filters)
    macs += o.n_highway * o.n_filters * 2 * o.n_filters
    if o.has_projection:
        macs += o.n_filters * o.projection_dim
    per_direction_layer = o.projection_dim * 4 * o.lstm_dim * 2 + o.lstm_dim * o.projection_dim
    macs += 2 * o.n_layers * per_direction_layer
    return 2 * macs


def make_sentences(
    n: int = 256, min_len: int = 5, max_len: int = 40, seed: int = 0, vocab_size: int = 20_000
) -> List[List[str]]:
    """A fixed, reproducible sentence set: Zipf-distributed word types of
    2-14 random letters (capitalised sometimes, punctuation among them), so
    that type/token statistics resemble running text."""
    rng = numpy.random.default_rng(seed)
    letters = numpy.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    weights = 1.0 / numpy.arange(1, 27)
    weights /= weights.sum()
    vocab = [".", ",", "the", "of", "and", "to", "a", "in"]
    while len(vocab) < vocab_size:
        word = "".join(rng.choice(letters, size=int(rng.integers(2, 15)), p=weights))
        vocab.append(word.capitalize() if rng.random() < 0.1 else word)
    p = 1.0 / numpy.arange(1, vocab_size + 1)
    p /= p.sum()
    return [
        [vocab[i] for i in rng.choice(vocab_size, size=int(rng.integers(min_len, max_len + 1)), p=p)]
        for _ in range(n)
    ]


def sentences_from_text(path, n: int = 256, min_len: int = 5, max_len: int = 40) -> List[List[str]]:
    """The first ``n`` lines of a text file (whitespace-tokenised, one
    sentence a line) whose length lies in [min_len, max_len]."""
    out = []
    with open(path, encoding="utf-8") as fin:
        for line in fin:
            tokens = line.split()
            if min_len <= len(tokens) <= max_len:
                out.append(tokens)
                if len(out) == n:
                    break
    if not out:
        raise ValueError(f"{path}: no line of {min_len}-{max_len} tokens")
    return out


def matmul_peak(
    dtype: torch.dtype = torch.float32, size: int = 2048, repeats: int = 10, device: str = "cpu"
) -> float:
    """GFLOP/s of a square matrix product on ``device`` (on CUDA: synchronised,
    with PyTorch's default fp32 settings, i.e. no TF32)."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    with torch.inference_mode():
        a @ b
        sync()
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(repeats):
                a @ b
            sync()
            best = min(best, (time.perf_counter() - start) / repeats)
    return 2 * size ** 3 / best / 1e9


def _deviation(exact: List[numpy.ndarray], approx: List[numpy.ndarray]) -> Tuple[float, float]:
    """Max absolute difference, and the rms of the difference relative to the
    rms of the exact outputs."""
    diff = max(float(numpy.abs(a - b).max()) for a, b in zip(exact, approx) if a.size)
    num = sum(float(((a.astype("d") - b) ** 2).sum()) for a, b in zip(exact, approx))
    den = sum(float((a.astype("d") ** 2).sum()) for a in exact)
    return diff, (num / den) ** 0.5 if den else 0.0


def _timed(fn, repeats: int = 1):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def run(
    shapes: Sequence[str] = ("small", "medium", "original"),
    n_sentences: int = 256,
    batch_size: int = 64,
    fast: bool = True,
    device: str = "cpu",
    seed: int = 0,
    echo=print,
    text: Optional[str] = None,
) -> List[Dict]:
    torch.manual_seed(seed)
    sentences = sentences_from_text(text, n_sentences) if text else make_sentences(n_sentences, seed=seed)
    n_tokens = sum(len(s) for s in sentences)
    positions = n_tokens + 2 * len(sentences)
    types = len({t for s in sentences for t in s})
    peak32 = matmul_peak(torch.float32, device=device)
    fast_paths = []
    if fast:
        if bf16_supported(device):
            fast_paths.append("bf16")
        else:
            echo("bf16 fast path skipped: no native bf16 here (avx512_bf16/AMX); emulated bf16 is slower than fp32")
        if torch.device(device).type == "cpu" and int8_supported():
            fast_paths.append("int8")
    peak16 = matmul_peak(torch.bfloat16, device=device) if "bf16" in fast_paths else float("nan")
    echo(
        f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, device {device}, CPU capability {torch.backends.cpu.get_cpu_capability()}"
    )
    echo(f"matmul peak (2048^3): fp32 {peak32:.0f} GFLOP/s, bf16 {peak16:.0f} GFLOP/s")
    source = text or "synthetic Zipf text"
    echo(f"sentences: {len(sentences)} from {source} ({n_tokens} tokens, {types} types), batch_size {batch_size}")
    echo("")
    header = (
        f"{'shape':<9} {'path':<14} {'tokens/s':>9} {'x ref':>6} {'GFLOP/s':>8} {'% fp32 peak':>11} "
        f"{'max |diff|':>10} {'rel rms':>9}"
    )
    echo(header)
    echo("-" * len(header))
    rows = []
    for name in shapes:
        options = published_options(name)
        flops = flops_per_position(options)
        ref = PUBLISHED[name]["reference_tokens_per_s"]
        model = BiLM(options).eval().to(device)

        def report(path: str, seconds: float, diff: Optional[float] = None, rel: Optional[float] = None) -> None:
            tps = n_tokens / seconds
            gflops = positions * flops / seconds / 1e9
            row = {
                "shape": name,
                "path": path,
                "tokens_per_s": tps,
                "x_reference": tps / ref,
                "gflops": gflops,
                "fraction_of_fp32_peak": gflops / peak32,
                "max_abs_diff": diff,
                "relative_rms_diff": rel,
            }
            rows.append(row)
            d = "" if diff is None else f"{diff:.2e}"
            r = "" if rel is None else f"{rel:.2e}"
            echo(
                f"{name:<9} {path:<14} {tps:9.0f} {tps / ref:6.1f} {gflops:8.1f} {100 * gflops / peak32:10.0f}% "
                f"{d:>10} {r:>9}"
            )

        # Warm up allocator and kernels on the whole set, then empty the word
        # cache: "cold" means an empty cache, not the process's first call.
        model.embed_sentences(sentences, batch_size=batch_size)
        model.clear_caches()
        seconds, exact = _timed(lambda: model.embed_sentences(sentences, batch_size=batch_size))
        report("exact (cold)", seconds)
        seconds, warm = _timed(lambda: model.embed_sentences(sentences, batch_size=batch_size), repeats=2)
        report("exact (warm)", seconds, max(float(numpy.abs(a - b).max()) for a, b in zip(exact, warm)))
        for precision in fast_paths:
            model.precision = precision
            model.embed_sentences(sentences[:batch_size], batch_size=batch_size)  # pack int8 weights
            model.clear_caches()
            seconds, approx = _timed(lambda: model.embed_sentences(sentences, batch_size=batch_size))
            report(f"{precision} (cold)", seconds, *_deviation(exact, approx))
            seconds, _ = _timed(lambda: model.embed_sentences(sentences, batch_size=batch_size), repeats=2)
            report(f"{precision} (warm)", seconds)
            model.precision = "fp32"
        model = None  # free before the next shape is built
    return rows


def main(
    shapes: str = typer.Option("small,medium,original", help="Comma-separated published shapes"),
    sentences: int = typer.Option(256, help="Number of sentences (5-40 tokens each)"),
    batch_size: int = typer.Option(64, help="Sentences per batch"),
    fast: bool = typer.Option(True, help="Also time the bf16 and int8 fast paths"),
    device: str = typer.Option("cpu", help="cpu or cuda"),
    threads: Optional[int] = typer.Option(None, help="torch threads (default: torch's choice)"),
    output: Optional[Path] = typer.Option(None, help="Write the rows as JSON here"),
    text: Optional[Path] = typer.Option(
        None, help="Take the sentences from this file (one a line, 5-40 tokens) instead of synthetic text"
    ),
) -> None:
    """Embedding speed on random weights of the published shapes, with the matmul peak."""
    if threads:
        torch.set_num_threads(threads)
    rows = run(
        [s.strip() for s in shapes.split(",") if s.strip()],
        sentences,
        batch_size,
        fast,
        device,
        echo=typer.echo,
        text=str(text) if text else None,
    )
    if output:
        output.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    typer.run(main)
