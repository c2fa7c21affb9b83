"""Memory of the `elmo` component: bytes per token on Doc._.elmo for each
storage option, and peak RSS for N docs streamed through ``nlp.pipe``.

    python benchmarks/pipeline_memory.py bytes --text project/corpus/brown/test.txt
    python benchmarks/pipeline_memory.py rss --text project/corpus/brown/test.txt --docs 10000
    python benchmarks/pipeline_memory.py long-doc --text TEXT --tokens 100000 --shape small

The biLM has random weights of a published shape (``--shape``, default
``original``: dim 2*512, 3 layers); memory does not depend on the values.
``rss`` runs the default storage (all layers, float32), keeps no Doc, and
reads the process's peak resident set (VmHWM) and current RSS from /proc.
"""
import time
from pathlib import Path
from typing import Iterator, Optional

import typer

app = typer.Typer(add_completion=False)


def _texts(path: Path, n: int) -> Iterator[str]:
    count = 0
    while count < n:  # cycle through the file if it has fewer lines
        with path.open(encoding="utf-8") as fin:
            for line in fin:
                if line.strip():
                    yield line.strip()
                    count += 1
                    if count == n:
                        return


def _status(field: str) -> int:
    """A /proc/self/status field in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _nlp(shape: str, config: dict):
    import spacy

    import spacy_elmo
    from spacy_elmo.bilm.options import published_options

    nlp = spacy.blank("en")
    spacy_elmo.add_elmo(nlp, bilm=spacy_elmo.BiLM(published_options(shape)).eval(), config=config)
    return nlp


@app.command()
def bytes(text: Path = typer.Option(...), shape: str = "original", docs: int = 200) -> None:
    """Bytes per token on Doc._.elmo for each storage option."""
    typer.echo(f"{'store':>8} {'dtype':>8} {'bytes/token':>12}")
    for store in ("layers", "vectors"):
        for dtype in ("float32", "float16"):
            nlp = _nlp(shape, {"store": store, "dtype": dtype})
            n_bytes = n_tokens = 0
            for doc in nlp.pipe(_texts(text, docs), batch_size=64):
                n_bytes += doc._.elmo.nbytes
                n_tokens += len(doc)
            typer.echo(f"{store:>8} {dtype:>8} {n_bytes / n_tokens:12.0f}")


@app.command()
def rss(
    text: Path = typer.Option(...),
    shape: str = "original",
    docs: int = 10_000,
    batch_size: int = 64,
    product_cache_mib: Optional[int] = typer.Option(
        None, help="BiLM.type_product_cache budget (default: the library's)"
    ),
    packed_weights: Optional[bool] = typer.Option(
        None,
        "--packed-weights/--no-packed-weights",
        help="Force packed LSTM weights on or off (default: the engine's rule)",
    ),
) -> None:
    """Peak RSS while streaming ``docs`` docs through nlp.pipe (default storage)."""
    nlp = _nlp(shape, {})
    nlp.get_pipe("elmo").bilm.engine.packed_weights = packed_weights
    if product_cache_mib is not None:
        nlp.get_pipe("elmo").bilm.type_product_cache.max_bytes = product_cache_mib << 20
    before = _status("VmRSS")
    n_tokens = 0
    start = time.perf_counter()
    samples = []
    for i, doc in enumerate(nlp.pipe(_texts(text, docs), batch_size=batch_size)):
        n_tokens += len(doc)
        if i % 1000 == 0:
            samples.append(_status("VmRSS"))
    seconds = time.perf_counter() - start
    mib = 1024 * 1024
    typer.echo(f"docs: {docs}, tokens: {n_tokens}, {n_tokens / seconds:.0f} tokens/s")
    typer.echo(
        f"RSS after loading: {before / mib:.0f} MiB; every 1000 docs: {' '.join(f'{s / mib:.0f}' for s in samples)} MiB"
    )
    typer.echo(f"peak RSS (VmHWM): {_status('VmHWM') / mib:.0f} MiB")


@app.command("long-doc")
def long_doc(
    text: Path = typer.Option(...), shape: str = "small", tokens: int = 100_000, dtype: str = "float32"
) -> None:
    """Peak memory of one Doc of ``tokens`` tokens without sentence
    boundaries (the words of ``text``, whitespace-split, cycled), against
    the size of its result on Doc._.elmo. The extra peak is VmHWM after the
    call minus the RSS before it (the Doc itself is built first)."""
    from spacy.tokens import Doc

    nlp = _nlp(shape, {"dtype": dtype})
    words = []
    while len(words) < tokens:
        with text.open(encoding="utf-8") as fin:
            for line in fin:
                words.extend(line.split()[: tokens - len(words)])
                if len(words) >= tokens:
                    break
    doc = Doc(nlp.vocab, words=words)
    nlp("warm up the model .")
    before = _status("VmRSS")
    start = time.perf_counter()
    doc = nlp(doc)
    seconds = time.perf_counter() - start
    mib = 1024 * 1024
    result = doc._.elmo.nbytes
    extra = _status("VmHWM") - before
    typer.echo(f"tokens: {len(doc)}, shape: {shape}, {seconds:.0f} s")
    typer.echo(f"result on Doc._.elmo: {result / mib:.0f} MiB; peak RSS above the start: {extra / mib:.0f} MiB "
               f"({extra / result:.2f}x the result)")


if __name__ == "__main__":
    app()
