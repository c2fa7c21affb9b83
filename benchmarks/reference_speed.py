"""Our biLM against the reference implementation, live, on this machine.

    bash benchmarks/reference_env.sh /tmp/refenv      # once: AllenNLP 2.10.1
    /tmp/refenv/bin/python benchmarks/reference_speed.py --batch-size 32

The speed ratios in ``python benchmarks/inference_speed.py`` divide by fixed
reference figures that were measured on one machine; on a slower or faster
machine they drift with it. This script measures the reference itself, in the
same process, on the same weights and sentences, so the ratio is the machine's
own. For each published shape it

1. makes random weights (seeded), exports them with ``BiLM.to_hdf5`` and loads
   that file into AllenNLP's ELMo biLM (``allennlp.modules.elmo._ElmoBiLm``,
   the module ``Elmo`` and ``ElmoEmbedder`` run);
2. checks that both give the same layer activations for the first batch (the
   reference starts from a zero state there); it stops if any differs by more
   than ``--tolerance`` (1e-4 by default);
3. times, interleaved over ``--rounds`` rounds (best of), the reference —
   ``batch_to_ids`` and ``_ElmoBiLm`` on batches of ``--batch-size`` sentences
   in the given order, states reset before each pass, ``torch.no_grad`` —
   and ours: ``embed_sentences`` exact with an empty word cache (cold) and
   a full one (warm), and the int8 fast path cold and warm, with int8's
   deviation from the exact outputs.

Both run with the same torch and thread count. The reference's first round
includes its first-call costs; the best of two or more rounds does not.

AllenNLP's package imports torchvision and fairscale at module level for
models that have nothing to do with ELMo; neither is installed (torchvision
would pull a CUDA torch), so empty stand-in modules are registered under
those names before the import. The ELMo code paths never touch them.
"""
import importlib.machinery
import json
import os
import sys
import tempfile
import time
import types
from typing import Dict, List, Optional

import numpy
import typer

_STUBBED = (
    "torchvision",
    "torchvision.io",
    "torchvision.ops",
    "torchvision.transforms",
    "fairscale",
    "fairscale.nn",
    "fairscale.nn.checkpoint",
    "fairscale.nn.data_parallel",
    "fairscale.nn.misc",
    "fairscale.nn.wrap",
    "fairscale.optim",
    "fairscale.optim.grad_scaler",
)


class _StandIn(types.ModuleType):
    """A module whose every public attribute is a fresh empty class, so that
    ``from torchvision.ops import box_iou`` and class statements that
    subclass a fairscale type succeed without running anything."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def import_reference():
    """``(_ElmoBiLm, batch_to_ids)`` from AllenNLP, with stand-ins for the
    unrelated optional imports."""
    for name in _STUBBED:
        if name in sys.modules:
            continue
        module = _StandIn(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__path__ = []
        sys.modules[name] = module
    try:
        from allennlp.modules.elmo import _ElmoBiLm, batch_to_ids
    except ImportError as err:
        raise SystemExit(
            f"cannot import AllenNLP's ELMo ({err}); make the environment with "
            "`bash benchmarks/reference_env.sh ENV_DIR` and run this script with ENV_DIR/bin/python"
        )
    return _ElmoBiLm, batch_to_ids


def _max_diff(reference_output: Dict, ours: List[numpy.ndarray], sentences) -> float:
    worst = 0.0
    for i, sentence in enumerate(sentences):
        n = len(sentence)
        theirs = numpy.stack([layer[i, 1 : n + 1].numpy() for layer in reference_output["activations"]])
        worst = max(worst, float(numpy.abs(theirs - ours[i]).max()))
    return worst


def run_shape(
    name: str,
    sentences,
    batch_size: int,
    rounds: int,
    tolerance: float,
    seed: int,
    echo=print,
    product_cache_mib: int = 0,
) -> List[Dict]:
    import torch
    from inference_speed import PUBLISHED, _deviation

    from spacy_elmo.bilm import BiLM
    from spacy_elmo.bilm.fast import int8_supported
    from spacy_elmo.bilm.options import published_options

    ElmoBiLm, batch_to_ids = import_reference()
    torch.manual_seed(seed)
    ours = BiLM(published_options(name)).eval()
    ours.type_product_cache.max_bytes = product_cache_mib << 20
    with tempfile.TemporaryDirectory() as tmp:
        weights, options = os.path.join(tmp, "weights.hdf5"), os.path.join(tmp, "options.json")
        ours.to_hdf5(weights, options)
        reference = ElmoBiLm(options, weights, requires_grad=False).eval()

    first = sentences[:batch_size]
    with torch.no_grad():
        diff = _max_diff(reference(batch_to_ids(first)), ours.embed_sentences(first), first)
    echo(f"{name}: largest difference from the reference on the first batch {diff:.1e}")
    if not diff <= tolerance:
        raise SystemExit(
            f"{name}: outputs differ from the reference by {diff:.2e} > {tolerance:g}; timings would compare "
            "different things"
        )

    def reference_pass():
        reference._elmo_lstm.reset_states()
        with torch.no_grad():
            for start in range(0, len(sentences), batch_size):
                reference(batch_to_ids(sentences[start : start + batch_size]))

    def ours_pass(precision: str, cold: bool):
        ours.precision = precision
        if cold:
            ours.clear_caches()
        try:
            return ours.embed_sentences(sentences, batch_size=batch_size)
        finally:
            ours.precision = "fp32"

    paths = {"reference": reference_pass}
    paths["exact (cold)"] = lambda: ours_pass("fp32", True)
    paths["exact (warm)"] = lambda: ours_pass("fp32", False)
    if int8_supported():
        paths["int8 (cold)"] = lambda: ours_pass("int8", True)
        paths["int8 (warm)"] = lambda: ours_pass("int8", False)
    # Warm up our paths (allocator, packed weights); the reference was run above.
    exact = ours_pass("fp32", True)
    int8_outputs = ours_pass("int8", True) if "int8 (cold)" in paths else None

    best = {path: float("inf") for path in paths}
    for _ in range(rounds):
        for path, fn in paths.items():
            start = time.perf_counter()
            fn()
            best[path] = min(best[path], time.perf_counter() - start)

    n_tokens = sum(len(s) for s in sentences)
    rows = []
    ref_tps = n_tokens / best["reference"]
    for path, seconds in best.items():
        tps = n_tokens / seconds
        row = {
            "shape": name,
            "path": path,
            "batch_size": batch_size,
            "tokens_per_s": tps,
            "x_live_reference": tps / ref_tps,
            "issue_reference_tokens_per_s": PUBLISHED[name]["reference_tokens_per_s"],
            "max_abs_diff_first_batch_vs_reference": diff if path == "reference" else None,
        }
        if path.startswith("int8") and int8_outputs is not None:
            row["max_abs_diff"], row["relative_rms_diff"] = _deviation(exact, int8_outputs)
        rows.append(row)
    return rows


def main(
    shapes: List[str] = typer.Option(
        ["small", "medium", "original"], "--shapes", help="Published shape to run; repeat the option for several"
    ),
    batch_size: int = typer.Option(32, help="Sentences per batch (both implementations)"),
    n_sentences: int = typer.Option(256, help="Sentences in the set (the benchmark's synthetic Zipf text)"),
    rounds: int = typer.Option(2, help="Timed rounds per path, best of"),
    tolerance: float = typer.Option(1e-4, help="Largest allowed difference from the reference"),
    seed: int = typer.Option(0),
    output: Optional[str] = typer.Option(None, help="Write the rows as JSON here"),
    product_cache_mib: int = typer.Option(0, help="Our BiLM.type_product_cache budget (opt-in; 0: off, the default)"),
) -> None:
    import platform

    import torch
    from inference_speed import make_sentences, matmul_peak

    sentences = make_sentences(n_sentences, seed=seed)
    n_tokens = sum(len(s) for s in sentences)
    peak = matmul_peak(torch.float32)
    print(
        f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch "
        f"{torch.__version__}, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}, fp32 matmul peak {peak:.0f} GFLOP/s"
    )
    print(f"{len(sentences)} sentences, {n_tokens} tokens, batch size {batch_size}, best of {rounds} rounds\n")
    rows = []
    for name in shapes:
        shape_rows = run_shape(
            name, sentences, batch_size, rounds, tolerance, seed, product_cache_mib=product_cache_mib
        )
        rows.extend(shape_rows)
        header = f"{'shape':<9} {'path':<13} {'tokens/s':>9} {'x live ref':>10} {'rel rms vs exact':>16}"
        print(header)
        print("-" * len(header))
        for row in shape_rows:
            rel = row.get("relative_rms_diff")
            print(
                f"{row['shape']:<9} {row['path']:<13} {row['tokens_per_s']:9.0f} {row['x_live_reference']:10.2f} "
                f"{'' if rel is None else f'{rel:.1e}':>16}"
            )
        ref = next(r for r in shape_rows if r["path"] == "reference")
        print(
            f"(issue #5's reference figure for {name}: {ref['issue_reference_tokens_per_s']} tokens/s; "
            f"the live reference here runs at {ref['tokens_per_s'] / ref['issue_reference_tokens_per_s']:.2f} of it)\n",
            flush=True,
        )
    if output:
        with open(output, "w", encoding="utf8") as file:
            json.dump(
                {"fp32_matmul_peak_gflops": peak, "threads": torch.get_num_threads(), "rows": rows}, file, indent=2
            )


if __name__ == "__main__":
    typer.run(main)
