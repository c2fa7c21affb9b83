"""The ``elmo`` component's ``buffer_tokens`` against the biLM's one call, interleaved.

    python benchmarks/buffer_sweep.py --text project/corpus/brown/test.txt --docs 400 \
        --buffer 0 --buffer 4096 --buffer 16384

One thread. Per round: ``BiLM.embed_sentences`` in one call over the spans
the component reads, then ``nlp.pipe(batch_size=64)`` with each
``buffer_tokens``, on fresh copies of the same docs (made as in
``pipeline_race.py``); prints the median words/s (min-max) of the rounds.
"""
import statistics
import sys
import time
from pathlib import Path
from typing import List

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_race import fresh, read_lines  # noqa: E402


def main(
    text: Path = typer.Option(...),
    docs: int = typer.Option(400, min=1),
    buffer: List[int] = typer.Option([0, 4096, 16384]),
    rounds: int = typer.Option(3, min=1),
) -> None:
    import spacy
    import torch

    import spacy_elmo
    from spacy_elmo.layers.span_plan import span_plan
    from spacy_elmo.loading import load_bilm

    torch.set_num_threads(1)
    splitter = spacy.blank("en")
    splitter.add_pipe("sentencizer")
    base = list(splitter.pipe(read_lines(text, docs)))
    n_words = sum(len(doc) for doc in base)
    bilm = load_bilm(None, None).eval()
    getter = spacy_elmo.component.registrations.configure_sent_or_strided_spans()
    runs = {"bilm (one call)": lambda ds: bilm.embed_sentences(span_plan(getter, ds)[0], batch_size=64)}
    for tokens in buffer:
        nlp = spacy.blank("en")
        spacy_elmo.add_elmo(nlp, config={"buffer_tokens": tokens})
        runs[f"elmo, buffer_tokens={tokens}"] = lambda ds, nlp=nlp: list(nlp.pipe(ds, batch_size=64))
    for run in runs.values():
        run(fresh(base[:50]))
    figures = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            batch = fresh(base)
            start = time.perf_counter()
            run(batch)
            figures[name].append(n_words / (time.perf_counter() - start))
    typer.echo(f"{n_words} words, {len(base)} docs, 1 thread")
    for name, values in figures.items():
        typer.echo(f"{name:<28} {statistics.median(values):>8,.0f} ({min(values):,.0f}-{max(values):,.0f})")


if __name__ == "__main__":
    typer.run(main)
