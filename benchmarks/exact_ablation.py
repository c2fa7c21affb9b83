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
* ``packed+types, tanh cell``: the same with the cell as written (three
  activation calls, two of them tanh, directions one after the other),
  instead of the default packed path's sigmoid-only cell with the
  directions' elementwise work stacked
  (``BiProjectedLSTMLayer._recur_packed``);

whatever the size thresholds for packing
(``BiProjectedLSTMLayer.PACKED_MIN_WEIGHT_ELEMENTS``, and the measured choice
for cache-sized weights; the default path of the shape on this machine is
printed),

and one LSTM step's recurrent product (32 rows x the shape's 4 x cell_dim
columns) with a plain ``addmm`` and with the packed weight, in GFLOP/s, and
torch's tanh against its sigmoid on one step's cell state of both
directions (2 x 32 x cell_dim floats), in microseconds; with ``--profile``,
the self CPU time by op of one warm pass of the default path
(``torch.profiler``).
"""
import copy
import time
from unittest import mock

import typer

import spacy_elmo.bilm.lstm as lstm
from spacy_elmo.benchmark import make_sentences, published_options
from spacy_elmo.bilm import BiLM
from spacy_elmo.bilm.lstm import BiProjectedLSTMLayer
from spacy_elmo.bilm.model import BiLM as BiLMClass
from spacy_elmo.bilm.packed import PackedFP32Linear, packing_supported


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
        print(f"step product {tuple(h.shape)} x {tuple(weight.t().shape)} {name:>7}: {flops / seconds / 1e9:6.1f} GFLOP/s")


def _activations(model: BiLM, rows: int, repeats: int = 200) -> None:
    import torch

    x = torch.randn(2, rows, model.layers[0].cell_dim)
    for name, fn in (("tanh", torch.tanh), ("sigmoid", torch.sigmoid)):
        fn(x)
        start = time.perf_counter()
        for _ in range(repeats):
            fn(x)
        print(f"{name} of {tuple(x.shape)} floats: {1e6 * (time.perf_counter() - start) / repeats:6.0f} us")


def _unscaled_packs(layer: BiProjectedLSTMLayer):
    bias = (layer.bias + layer.forget_offset).detach()
    return {
        "ih": [PackedFP32Linear(layer.weight_ih[d], bias[d]) for d in range(2)],
        "hh": [PackedFP32Linear(layer.weight_hh[d]) for d in range(2)],
        "proj": [PackedFP32Linear(layer.weight_proj[d]) for d in range(2)],
    }


def _tanh_cell_recurrence(layer: BiProjectedLSTMLayer, inputs, lengths, state, input_products=None):
    """The packed recurrence with the cell as written: tanh activations,
    unscaled packed weights, one direction after the other."""
    packs = layer._packed.get(layer, lambda module: module._packed_weights())
    hh, proj = packs["hh"], packs["proj"]
    n_dir, n_steps, batch, _ = inputs.shape
    xw = input_products or [
        packs["ih"][d](inputs[d].reshape(-1, layer.input_dim)).view(n_steps, batch, -1) for d in range(n_dir)
    ]
    return layer._recur_per_direction(
        inputs, lengths, state, lambda d, h, x: hh[d](h, x), lambda d, a: proj[d](a), xw
    )


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
    with torch.inference_mode():
        default = "packed+types" if model.layers[0].use_packed_weights(torch.zeros(2, 1, 1, 1), None) else "plain"
    always_pack = mock.patch.object(BiProjectedLSTMLayer, "PACKED_MIN_WEIGHT_ELEMENTS", 0)
    configs = {
        "plain": [mock.patch.object(lstm, "packing_supported", lambda: False)],
        "packed": [always_pack, mock.patch.object(BiLMClass, "_first_input_products", lambda *args: None)],
        "packed+types": [always_pack],
        "packed+types+product cache": [always_pack],
        "packed+types, tanh cell": [
            always_pack,
            mock.patch.object(BiProjectedLSTMLayer, "_packed_weights", _unscaled_packs),
            mock.patch.object(BiProjectedLSTMLayer, "_recur_packed", _tanh_cell_recurrence),
        ],
    }
    # A copy of the model per configuration: packed weights differ between them.
    models = {name: model if i == 0 else copy.deepcopy(model) for i, name in enumerate(configs)}
    models["packed+types+product cache"].type_product_cache.max_bytes = 128 << 20
    best = {name: float("inf") for name in configs}
    for rnd in range(repeats + 1):  # round 0 fills the word caches, packs, warms up
        for name, patches in configs.items():
            for patch in patches:
                patch.start()
            try:
                start = time.perf_counter()
                models[name].embed_sentences(sentences, batch_size=batch_size)
                if rnd:
                    best[name] = min(best[name], time.perf_counter() - start)
            finally:
                for patch in patches:
                    patch.stop()
    print(f"{shape}, batch {batch_size}, {n_tokens} tokens, {torch.get_num_threads()} threads, torch {torch.__version__}")
    for name, seconds in best.items():
        gain = best["plain"] / seconds - 1
        mark = "  (default for this shape)" if name == default else ""
        print(f"{name:<32} {n_tokens / seconds:8.0f} tokens/s  {100 * gain:+5.0f}% vs plain{mark}")
    _step_products(model, rows=batch_size)
    _activations(model, rows=batch_size)
    if profile:
        _profile(models[default], sentences, batch_size, configs[default])


def _profile(model: BiLM, sentences, batch_size: int, patches) -> None:
    """Self CPU time by op of one warm ``embed_sentences`` pass."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for patch in patches:
        patch.start()
    try:
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            model.embed_sentences(sentences, batch_size=batch_size)
    finally:
        for patch in patches:
            patch.stop()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    typer.run(main)
