"""What the CPU exact path's packed weights and per-type first-layer products
each bring, measured in one process on the benchmark's sentence set.

    python benchmarks/exact_ablation.py --shape original --batch-size 32

Times ``embed_sentences`` (word-type cache warm, best of ``--repeats``,
configurations interleaved so that drift in machine speed hits all alike) for

* ``plain``: plain PyTorch products (no oneDNN-packed weights), first-layer
  input products per position;
* ``packed``: packed weights, first-layer input products per position;
* ``packed+types``: packed weights, first-layer input products per word type;
* ``packed+types+product cache``: the same with those products kept across
  calls (``BiLM.type_product_cache``, opt-in, 128 MiB here);
* ``packed, tanh cell``: packed weights with the cell as written (three
  activation calls, two of them tanh, directions one after the other),
  instead of the default packed path's sigmoid-only cell with the
  directions' elementwise work stacked
  (``cell_variants.CellEngine("tanh")`` against the library's sigmoid-only cell);

each an :class:`~spacy_elmo.bilm.fast.InferenceEngine` with its switches
set, whatever the size rule for packing
(``spacy_elmo.bilm.fast.packed.PACK_MIN_ELEMENTS``; the default path of the
shape on this machine is printed),

and one LSTM step's recurrent product (32 rows x the shape's 4 x cell_dim
columns) with a plain ``addmm`` and with the packed weight, in GFLOP/s, and
torch's tanh against its sigmoid on one step's cell state of both
directions (2 x 32 x cell_dim floats), in microseconds; with ``--profile``,
the self CPU time by op of one warm pass of the default path
(``torch.profiler``).
"""
import copy
import time

import typer
from cell_variants import CellEngine
from inference_speed import make_sentences

from spacy_elmo.bilm import BiLM
from spacy_elmo.bilm.fast import InferenceEngine, packing_supported
from spacy_elmo.bilm.fast.packed import PackedFP32Linear
from spacy_elmo.bilm.options import published_options


def _step_products(model: BiLM, rows: int, repeats: int = 20) -> None:
    import torch

    layer = model.layers[0]
    weight = layer.weight_hh[0].detach()
    h = torch.randn(rows, weight.shape[1])
    add = torch.randn(rows, weight.shape[0])
    packed = PackedFP32Linear(weight)
    flops = 2 * rows * weight.shape[0] * weight.shape[1]
    for name, fn in (("addmm", lambda: torch.addmm(add, h, weight.t())), ("packed", lambda: packed(h, add))):
        fn()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        seconds = (time.perf_counter() - start) / repeats
        print(
            f"step product {tuple(h.shape)} x {tuple(weight.t().shape)} {name:>7}: {flops / seconds / 1e9:6.1f} GFLOP/s"
        )


def _activations(model: BiLM, rows: int, repeats: int = 200) -> None:
    import torch

    x = torch.randn(2, rows, model.layers[0].cell_dim)
    for name, fn in (("tanh", torch.tanh), ("sigmoid", torch.sigmoid)):
        fn(x)
        start = time.perf_counter()
        for _ in range(repeats):
            fn(x)
        print(f"{name} of {tuple(x.shape)} floats: {1e6 * (time.perf_counter() - start) / repeats:6.0f} us")


def main(
    shape: str = typer.Option("original", help="small, medium or original"),
    batch_size: int = typer.Option(32, help="Sentences per batch"),
    repeats: int = typer.Option(3, help="Timed passes per configuration"),
    seed: int = typer.Option(0),
    profile: bool = typer.Option(False, help="Also profile one warm pass of this shape's default path by op"),
) -> None:
    import torch

    if not packing_supported():
        raise SystemExit("this PyTorch build cannot pack fp32 weights with oneDNN: nothing to compare")
    torch.manual_seed(seed)
    model = BiLM(published_options(shape)).eval()
    sentences = make_sentences(seed=seed)
    n_tokens = sum(len(s) for s in sentences)
    default = "packed+types" if model.engine.packs_weights(model.layers[0], torch.zeros(1)) else "plain"
    engines = {
        "plain": InferenceEngine(packed_weights=False),
        "packed": InferenceEngine(packed_weights=True, type_products=False),
        "packed+types": InferenceEngine(packed_weights=True),
        "packed+types+product cache": InferenceEngine(packed_weights=True, type_product_cache_bytes=128 << 20),
        "packed, tanh cell": CellEngine("tanh"),
    }
    # A copy of the model per configuration, each with its own engine.
    models = {name: model if i == 0 else copy.deepcopy(model) for i, name in enumerate(engines)}
    for name, engine in engines.items():
        models[name].engine = engine
    best = {name: float("inf") for name in engines}
    for rnd in range(repeats + 1):  # round 0 fills the word caches, packs, warms up
        for name in engines:
            start = time.perf_counter()
            models[name].embed_sentences(sentences, batch_size=batch_size)
            if rnd:
                best[name] = min(best[name], time.perf_counter() - start)
    print(
        f"{shape}, batch {batch_size}, {n_tokens} tokens, {torch.get_num_threads()} threads, torch {torch.__version__}"
    )
    for name, seconds in best.items():
        gain = best["plain"] / seconds - 1
        mark = "  (default for this shape)" if name == default else ""
        print(f"{name:<32} {n_tokens / seconds:8.0f} tokens/s  {100 * gain:+5.0f}% vs plain{mark}")
    _step_products(model, rows=batch_size)
    _activations(model, rows=batch_size)
    if profile:
        _profile(models[default], sentences, batch_size)


def _profile(model: BiLM, sentences, batch_size: int) -> None:
    """Self CPU time by op of one warm ``embed_sentences`` pass."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        model.embed_sentences(sentences, batch_size=batch_size)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    typer.run(main)
