"""What the opt-in first-layer product cache gains on text embedded once.

    python benchmarks/product_cache_stream.py project/corpus/brown/test.txt --sentences 10000

``BiLM.type_product_cache`` keeps the first LSTM layer's per-type input
products across calls. ``benchmarks/exact_ablation.py`` measures it when
the same sentences are embedded again; this script measures the case it is
not made for: a stream of real sentences, each embedded once. Two copies of
one random biLM (a published shape), one with the cache (``--mib``) and one
without, embed the same chunks of sentences in turn (which goes first
alternates), both with the word-type cache as usual; the script prints each
one's tokens/s over the whole stream and the cache's hit rate over word
types.
"""
import copy
import time
from pathlib import Path

import typer


def main(
    text: Path = typer.Argument(..., help="One sentence a line, whitespace-tokenized"),
    sentences: int = typer.Option(10_000, help="Sentences to stream (lines over 60 tokens are skipped)"),
    shape: str = typer.Option("small", help="small, medium or original"),
    mib: int = typer.Option(128, help="Product cache budget of the model that has it"),
    chunk: int = typer.Option(640, help="Sentences per embed_sentences call"),
    batch_size: int = typer.Option(32),
    seed: int = typer.Option(0),
) -> None:
    import torch

    from spacy_elmo.bilm import BiLM
    from spacy_elmo.bilm.options import published_options

    torch.manual_seed(seed)
    cached = BiLM(published_options(shape)).eval()
    plain = copy.deepcopy(cached)
    cached.type_product_cache.max_bytes = mib << 20
    with text.open(encoding="utf8") as f:
        lines = [line.split() for line in f]
    stream = [words for words in lines if 0 < len(words) <= 60][:sentences]
    seconds = {"with cache": 0.0, "without": 0.0}
    for i, start in enumerate(range(0, len(stream), chunk)):
        part = stream[start : start + chunk]
        order = [("with cache", cached), ("without", plain)]
        for name, model in order if i % 2 == 0 else order[::-1]:
            began = time.perf_counter()
            model.embed_sentences(part, batch_size=batch_size)
            seconds[name] += time.perf_counter() - began
    n_tokens = sum(len(words) for words in stream)
    cache = cached.type_product_cache
    typer.echo(
        f"{len(stream)} sentences, {n_tokens} tokens, {shape}, batch {batch_size}, {torch.get_num_threads()} threads"
    )
    for name, total in seconds.items():
        typer.echo(f"{name:<11} {n_tokens / total:8.0f} tokens/s")
    typer.echo(
        f"types found in the cache: {cache.hits} of {cache.hits + cache.misses} "
        f"({100 * cache.hits / max(1, cache.hits + cache.misses):.0f}%)"
    )


if __name__ == "__main__":
    typer.run(main)
