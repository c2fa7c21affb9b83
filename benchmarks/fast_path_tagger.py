"""Effect of the fast paths (int8, bf16) on a downstream task: a Brown tagger.

    python benchmarks/fast_path_tagger.py project/corpus/brown/train.spacy project/corpus/brown/dev.spacy

Trains a tagger on an ELMo listener over a biLM of a published shape (random
weights with PyTorch's default initialisation: no pretrained ELMo can be had
here, so this measures how much the int8 path changes what a tagger trained
on exact vectors predicts, not ELMo's accuracy), then tags the dev set with
the exact path and with each ``--fast`` precision (``int8`` and ``bf16`` by
default) and reports each accuracy, the share of tokens whose tag differs
from the exact path's, and the tokens/s of each pass.

bf16 runs on any CPU: where the CPU has no native bf16 (no avx512_bf16 or
AMX) PyTorch emulates it, so the pass is slow (and the biLM warns) but its
tags are what a bf16-capable CPU gives, up to summation order.
"""
import random
import time
import warnings
from pathlib import Path
from typing import List

import typer


def main(
    train: Path = typer.Argument(..., help=".spacy file with tagged docs"),
    dev: Path = typer.Argument(..., help=".spacy file with tagged docs"),
    shape: str = typer.Option("small", help="small, medium or original"),
    train_docs: int = typer.Option(2000),
    dev_docs: int = typer.Option(1000),
    epochs: int = typer.Option(3),
    learn_rate: float = typer.Option(0.01),
    seed: int = typer.Option(0),
    fast: List[str] = typer.Option(["int8", "bf16"], help="Fast paths to compare with the exact one"),
) -> None:
    import spacy
    import torch
    from spacy.tokens import DocBin
    from spacy.training import Example
    from spacy.util import minibatch

    import spacy_elmo
    from spacy_elmo.bilm.options import published_options

    random.seed(seed)
    torch.manual_seed(seed)
    nlp = spacy.blank("en")
    spacy_elmo.add_elmo(nlp, bilm=spacy_elmo.BiLM(published_options(shape)).eval())
    tok2vec = {"@architectures": "spacy_elmo.ElmoListener.v1", "width": 128}
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}})

    def examples(path: Path, limit: int):
        docs = list(DocBin().from_disk(path).get_docs(nlp.vocab))[:limit]
        return [Example(nlp.make_doc(doc.text), doc) for doc in docs]

    train_examples, dev_examples = examples(train, train_docs), examples(dev, dev_docs)
    optimizer = nlp.initialize(lambda: train_examples)
    optimizer.learn_rate = learn_rate
    for epoch in range(epochs):
        random.shuffle(train_examples)
        losses: dict = {}
        start = time.perf_counter()
        for batch in minibatch(train_examples, size=32):
            nlp.update(batch, sgd=optimizer, losses=losses)
        typer.echo(f"epoch {epoch}: tagger loss {losses['tagger']:.1f} ({time.perf_counter() - start:.0f} s)")

    elmo = nlp.get_pipe("elmo")
    gold = [[t.tag_ for t in eg.reference] for eg in dev_examples]
    n_tokens = sum(len(tags) for tags in gold)
    predicted = {}
    for precision in ["fp32", *fast]:
        elmo.bilm.precision = precision
        elmo.bilm.clear_caches()
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # emulated bf16: the docstring says why it is measured anyway
            docs = list(nlp.pipe([eg.reference.text for eg in dev_examples], batch_size=64))
        seconds = time.perf_counter() - start
        predicted[precision] = [[t.tag_ for t in doc] for doc in docs]
        correct = sum(p == g for ps, gs in zip(predicted[precision], gold) for p, g in zip(ps, gs))
        typer.echo(
            f"{precision}: tag accuracy {correct / n_tokens:.4f} on {n_tokens} tokens, {n_tokens / seconds:.0f} "
            "tokens/s"
        )
    for precision in fast:
        changed = sum(a != b for xs, ys in zip(predicted["fp32"], predicted[precision]) for a, b in zip(xs, ys))
        typer.echo(f"tags changed by {precision}: {changed} of {n_tokens} ({100 * changed / n_tokens:.2f}%)")


if __name__ == "__main__":
    typer.run(main)
