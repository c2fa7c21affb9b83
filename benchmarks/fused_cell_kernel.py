"""Would a fused C++ LSTM cell speed up the CPU exact path? (It was tried and left out.)

    python benchmarks/fused_cell_kernel.py --shape small --repeats 5

On the packed CPU path (``spacy_elmo.bilm.fast.packed.recur_packed``) each
step's elementwise work — sigmoid of all four gates, the cell update and
clip, and ``o (sigmoid(c2) - 1/2)`` — is a handful of PyTorch calls
(``spacy_elmo.bilm.fast.packed.sigmoid_cell``). This script compiles the same
computation as one C++ loop over rows (``at::vec`` vectors, ``at::parallel_for``
threads, built at run time with ``torch.utils.cpp_extension.load_inline``: it
needs a C++ compiler and ninja, and takes about a minute the first time), in
two variants: ``exp`` (the vectorised exp PyTorch's own sigmoid uses) and
``exp_u20`` (a faster, slightly less accurate one), then times

* one step's cell on both directions (2 x 32 rows x cell_dim), in
  microseconds;
* ``embed_sentences`` on the benchmark's 256 sentences, batch 32, word-type
  cache warm, best of ``--repeats`` interleaved rounds, with PyTorch's cell
  and with each kernel as the cell of ``cell_variants.CellEngine``, and the largest difference from the
  PyTorch cell's outputs.

On a 2-core AVX2 VM (torch 2.13.0+cpu, `--shape small --repeats 5`) the
kernel took one step's cell from 535 us to 478 us (exp) and 336 us
(exp_u20), but end to end on small (warm) it gave 3,623 (exp, +2%) and
3,660 (exp_u20, +3%, outputs within 2.2e-7) against 3,555 tokens/s: the
step's matrix products take ~70% of the time, and the VM's speed drifts
more than that between runs. A gain of that size did not justify a compiler
at run time, so the package keeps PyTorch's cell.
"""
import time

import typer

KERNEL = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <algorithm>
#include <cmath>
#include <limits>

using Vec = at::vec::Vectorized<float>;

template <bool FAST>
static inline Vec sigmoid_vec(Vec x) {
  const Vec one(1.0f);
  const Vec e = FAST ? x.neg().exp_u20() : x.neg().exp();
  return one / (one + e);
}

static inline float sigmoid_scalar(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// gates: (2, n, 4C) contiguous pre-activations, i f g o, g doubled.
// c2: (2, n, C) doubled cell state, rows contiguous, updated in place.
// Returns o * (sigmoid(c2) - 1/2), (2, n, C).
template <bool FAST>
static torch::Tensor cell_impl(const torch::Tensor& gates, torch::Tensor& c2, double clip) {
  TORCH_CHECK(gates.is_contiguous() && gates.scalar_type() == torch::kFloat, "gates: contiguous float32");
  TORCH_CHECK(c2.stride(2) == 1 && c2.stride(1) == c2.size(2), "c2: rows must be contiguous");
  const int64_t n = c2.size(1), C = c2.size(2), dir_stride = c2.stride(0);
  auto out = torch::empty({c2.size(0), n, C}, c2.options());
  const float* g = gates.data_ptr<float>();
  float* c = c2.data_ptr<float>();
  float* a = out.data_ptr<float>();
  const float bound = static_cast<float>(clip);
  at::parallel_for(0, c2.size(0) * n, 1, [&](int64_t begin, int64_t end) {
    const Vec four(4.0f), two(2.0f), half(0.5f), lo(-bound), hi(bound);
    for (int64_t r = begin; r < end; ++r) {
      const float* gr = g + r * 4 * C;
      float* cr = c + (r / n) * dir_stride + (r % n) * C;
      float* ar = a + r * C;
      int64_t k = 0;
      for (; k + Vec::size() <= C; k += Vec::size()) {
        const Vec i = sigmoid_vec<FAST>(Vec::loadu(gr + k));
        const Vec f = sigmoid_vec<FAST>(Vec::loadu(gr + C + k));
        const Vec s = sigmoid_vec<FAST>(Vec::loadu(gr + 2 * C + k));
        const Vec o = sigmoid_vec<FAST>(Vec::loadu(gr + 3 * C + k));
        Vec cell = Vec::loadu(cr + k) * f + four * i * s - two * i;
        cell = at::vec::minimum(at::vec::maximum(cell, lo), hi);
        cell.store(cr + k);
        ((sigmoid_vec<FAST>(cell) - half) * o).store(ar + k);
      }
      for (; k < C; ++k) {
        const float i = sigmoid_scalar(gr[k]), f = sigmoid_scalar(gr[C + k]);
        const float s = sigmoid_scalar(gr[2 * C + k]), o = sigmoid_scalar(gr[3 * C + k]);
        const float cell = std::min(std::max(cr[k] * f + 4.0f * i * s - 2.0f * i, -bound), bound);
        cr[k] = cell;
        ar[k] = (sigmoid_scalar(cell) - 0.5f) * o;
      }
    }
  });
  return out;
}

torch::Tensor cell(torch::Tensor gates, torch::Tensor c2, double clip, bool fast_exp) {
  return fast_exp ? cell_impl<true>(gates, c2, clip) : cell_impl<false>(gates, c2, clip);
}
"""

CAPABILITY_FLAGS = {
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2", "-DCPU_CAPABILITY=AVX2"],
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma",
               "-DCPU_CAPABILITY_AVX512", "-DCPU_CAPABILITY=AVX512"],
}


def build_kernel():
    import torch
    from torch.utils.cpp_extension import load_inline

    capability = torch.backends.cpu.get_cpu_capability()
    flags = ["-O3", "-fopenmp", *CAPABILITY_FLAGS.get(capability, [])]
    return load_inline(
        f"spacy_elmo_cell_{capability.lower()}",
        cpp_sources=KERNEL,
        functions=["cell"],
        extra_cflags=flags,
        extra_ldflags=["-fopenmp"],
    )


def _best_seconds(fn, repeats: int, calls: int = 1) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main(
    shape: str = typer.Option("small", help="small, medium or original"),
    repeats: int = typer.Option(5, help="Interleaved rounds; the best of each is kept"),
    batch_size: int = typer.Option(32),
) -> None:
    import torch
    from cell_variants import CellEngine
    from inference_speed import make_sentences

    from spacy_elmo.bilm import BiLM
    from spacy_elmo.bilm.fast.packed import sigmoid_cell
    from spacy_elmo.bilm.options import published_options

    start = time.perf_counter()
    kernel = build_kernel()
    typer.echo(
        f"kernel built/loaded in {time.perf_counter() - start:.0f} s ({torch.backends.cpu.get_cpu_capability()})"
    )

    def kernel_cell(fast_exp: bool):
        def cell(gates, c2, clip):
            return kernel.cell(gates.contiguous(), c2, float("inf") if clip is None else clip, fast_exp)
        return cell

    variants = {"torch": sigmoid_cell, "kernel exp": kernel_cell(False), "kernel exp_u20": kernel_cell(True)}

    options = published_options(shape)
    cell_dim = options.lstm_dim
    gen = torch.Generator().manual_seed(0)
    gates = torch.randn(2, batch_size, 4 * cell_dim, generator=gen) * 3
    c2 = torch.randn(2, batch_size, cell_dim, generator=gen) * 3
    with torch.inference_mode():
        for name, variant in variants.items():
            fn = variant
            seconds = _best_seconds(lambda: fn(gates.clone(), c2.clone(), 6.0), repeats, calls=200)
            typer.echo(
                f"one step's cell (2 x {batch_size} x {cell_dim}), {name:>14}: {seconds * 1e6:7.1f} us (with two "
                "copies)"
            )

    model = BiLM(options).eval()
    sentences = make_sentences()
    n_tokens = sum(len(s) for s in sentences)
    engines = {name: CellEngine(variant) for name, variant in variants.items()}
    with torch.inference_mode():
        outputs = {}
        for name, engine in engines.items():
            model.engine = engine
            outputs[name] = model.embed_sentences(sentences, batch_size=batch_size)  # also warms the cache
        best = {name: float("inf") for name in variants}
        for _ in range(repeats):
            for name, engine in engines.items():
                model.engine = engine
                best[name] = min(
                    best[name], _best_seconds(lambda: model.embed_sentences(sentences, batch_size=batch_size), 1)
                )
    for name in variants:
        diff = max(float(abs(a - b).max()) for a, b in zip(outputs["torch"], outputs[name]))
        typer.echo(
            f"embed_sentences, {shape}, warm, {name:>14}: {n_tokens / best[name]:7,.0f} tokens/s, largest difference "
            f"{diff:.1e}"
        )


if __name__ == "__main__":
    typer.run(main)
