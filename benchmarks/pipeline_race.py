"""ELMo against spaCy's tok2vec and a small transformer, on the same docs, interleaved.

    python benchmarks/pipeline_race.py --text project/corpus/brown/test.txt --docs 400 \
        --threads 1 --threads 2 --rounds 3 --json race.json [--load 2] [--minilm DIR]

Paths timed (words/s over the same docs; each round runs every path once,
for each thread count, in turn, so that a drift of the machine's speed hits
them all alike):

* ``bilm``: ``BiLM.embed_sentences`` of the shipped English biLM, one call
  over all the spans the ``elmo`` component would read (its span getter:
  sentences, long ones cut into windows), batch 64: the biLM's own speed.
* ``elmo``: ``spacy.blank`` + sentencizer + the ``elmo`` component (shipped
  biLM, default settings), ``nlp.pipe(docs, batch_size=64)``.
* ``elmo_tagger``: ``configs/elmo_tagger.cfg`` (``elmo`` + a tagger whose
  tok2vec is ``ElmoTok2Vec``), untrained (initialised with 45 tags): the
  cost of a trained one is the same.
* ``tok2vec_tagger``: spaCy's own tagger with its default tok2vec
  (``HashEmbedCNN``, width 96, depth 4: the ``embed``/``encode`` widths of
  the ELMo tagger's own part).
* ``elmo_small``: the ``elmo`` component with random weights of the
  published ``small`` shape (AllenNLP's smallest).
* ``minilm_tagger``: spacy-transformers' transformer (MiniLM-L6, the model
  directory ``project/scripts/fetch_minilm.py`` makes, given as
  ``--minilm DIR``) + a tagger listening to it, built from
  ``project/configs/transformer_pos.cfg``; left out without ``--minilm``.
* ``elmo_ner`` and ``minilm_ner``: the same with an entity recognizer
  (``configs/elmo_ner.cfg``, ``project/configs/transformer_ner.cfg``),
  untrained, with WNUT-2016's 10 entity types; only when asked for
  (``--path``), as they are not in the default set.

``--model NAME|DIR|FILE`` (``--options`` for a bare weights file): the biLM
of the ``bilm``, ``elmo``, ``elmo_tagger`` and ``elmo_ner`` paths (default:
the shipped English biLM), e.g. a pretraining export to time a new shape.

Docs: the first ``--docs`` non-empty lines of ``--text`` (at most 100,000
characters a line), split by spaCy's English tokenizer and sentencizer,
made once; every run gets fresh copies (made outside the timed region).
``--threads N``: ``torch.set_num_threads(N)`` before the path runs (the
``elmo`` component's own thread policy then decides within that;
``--elmo-threads 0`` turns it off, ``--elmo-threads 1`` fixes one thread).
``--load N`` starts N busy processes (``while True: pass``) for the whole run
and stops them at the end: the loaded-machine case.
The table gives the median words/s over the rounds (min-max beside it);
``--json`` writes every figure, the machine and the settings (no paths).
``--profile PATH`` instead runs each path once under cProfile and writes
the top functions by cumulative time to PATH.
"""
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import typer

REPO = Path(__file__).resolve().parent.parent
MAX_LINE_CHARS = 100_000
ENTITY_TYPES = ("person", "geo-loc", "company", "facility", "product", "musicartist", "movie", "sportsteam",
                "tvshow", "other")
TAGS = ("NN NNS NNP JJ VB VBD VBG VBN VBP VBZ RB IN DT PRP PRP$ CC CD TO MD WDT WP WRB EX "
        "PDT POS RP UH FW SYM LS JJR JJS RBR RBS NNPS WP$ , . : `` '' -LRB- -RRB- # $ HYPH NFP").split()


def read_lines(path: Path, n: int) -> List[str]:
    if not path.is_file():
        raise typer.BadParameter(f"--text {path}: no such file")
    lines: List[str] = []
    with path.open(encoding="utf-8", errors="replace") as fin:
        for line in fin:
            line = line.strip()[:MAX_LINE_CHARS]
            if line:
                lines.append(line)
                if len(lines) == n:
                    break
    if not lines:
        raise typer.BadParameter(f"--text {path}: no non-empty line")
    return lines


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def with_tags(nlp) -> None:
    tagger = nlp.get_pipe("tagger")
    for tag in TAGS:
        tagger.add_label(tag)


def with_entities(nlp) -> None:
    ner = nlp.get_pipe("ner")
    for label in ENTITY_TYPES:
        ner.add_label(label)


def build_paths(minilm: Optional[Path], names: List[str], elmo_threads: Optional[str],
                model: Optional[str] = None, options: Optional[str] = None) -> Dict[str, Callable]:
    """name -> a function (docs -> None) that runs the path on the docs."""
    import spacy
    from thinc.api import Config

    import spacy_elmo
    from spacy_elmo.bilm.options import published_options
    from spacy_elmo.layers.span_plan import span_plan
    from spacy_elmo.loading import load_bilm

    paths: Dict[str, Callable] = {}
    # The component's thread policy (None: leave the component's default; a
    # checkout from before the policy has no such setting).
    model_cfg = (
        {}
        if elmo_threads is None
        else {"model": {"threads": int(elmo_threads) if elmo_threads.isdigit() else elmo_threads}}
    )
    if "bilm" in names:
        bilm = load_bilm(model, options).eval()
        getter = spacy_elmo.component.registrations.configure_sent_or_strided_spans()

        def run_bilm(docs):
            texts = span_plan(getter, docs)[0]
            bilm.embed_sentences(texts, batch_size=64)

        paths["bilm"] = run_bilm
    if "elmo" in names:
        nlp = spacy.blank("en")
        spacy_elmo.add_elmo(nlp, model, options, config=model_cfg)
        paths["elmo"] = lambda docs, nlp=nlp: [None for _ in nlp.pipe(docs, batch_size=64)]
    for name, cfg_name, labels in (
        ("elmo_tagger", "elmo_tagger.cfg", with_tags),
        ("elmo_ner", "elmo_ner.cfg", with_entities),
    ):
        if name not in names:
            continue
        config = Config().from_disk(REPO / "configs" / cfg_name,
                                    overrides={"paths.elmo_weights": model, "paths.elmo_options": options})
        if elmo_threads is not None:
            config["components"]["elmo"]["model"]["threads"] = model_cfg["model"]["threads"]
        nlp = spacy.util.load_model_from_config(config, auto_fill=True)
        labels(nlp)
        nlp.initialize()
        paths[name] = lambda docs, nlp=nlp: [None for _ in nlp.pipe(docs, batch_size=64)]
    if "tok2vec_tagger" in names:
        nlp = spacy.blank("en")
        nlp.add_pipe("tagger")
        with_tags(nlp)
        nlp.initialize()
        paths["tok2vec_tagger"] = lambda docs, nlp=nlp: [None for _ in nlp.pipe(docs, batch_size=64)]
    if "elmo_small" in names:
        nlp = spacy.blank("en")
        spacy_elmo.add_elmo(nlp, bilm=spacy_elmo.BiLM(published_options("small")).eval(), config=model_cfg)
        paths["elmo_small"] = lambda docs, nlp=nlp: [None for _ in nlp.pipe(docs, batch_size=64)]
    for name, cfg_name, labels in (("minilm_tagger", "transformer_pos.cfg", with_tags),
                                   ("minilm_ner", "transformer_ner.cfg", with_entities)):
        if name not in names or minilm is None:
            continue
        import spacy_transformers  # noqa: F401 (registers the transformer factory)

        config = Config().from_disk(REPO / "project" / "configs" / cfg_name,
                                    overrides={"paths.transformer": str(minilm)})
        nlp = spacy.util.load_model_from_config(config, auto_fill=True)
        labels(nlp)
        nlp.initialize()
        paths[name] = lambda docs, nlp=nlp: [None for _ in nlp.pipe(docs, batch_size=64)]
    return paths


def fresh(docs):
    from spacy.tokens import Doc

    return [Doc(doc.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc],
                sent_starts=[bool(t.is_sent_start) for t in doc]) for doc in docs]


def start_load(n: int) -> List[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_load(procs: List[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


def main(
    text: Path = typer.Option(..., help="one doc a line (e.g. project/corpus/brown/test.txt)"),
    docs: int = typer.Option(400, min=1, help="how many lines of --text"),
    threads: List[int] = typer.Option([1], help="torch threads (repeat: --threads 1 --threads 2)"),
    rounds: int = typer.Option(3, min=1),
    load: int = typer.Option(0, min=0, max=64, help="busy processes running beside the timing"),
    minilm: Optional[Path] = typer.Option(None, help="MiniLM-L6 model directory (project/scripts/fetch_minilm.py)"),
    paths: List[str] = typer.Option(
        ["bilm", "elmo", "elmo_tagger", "tok2vec_tagger", "elmo_small", "minilm_tagger"],
        "--path",
        help="which paths to time (repeat; also elmo_ner, minilm_ner)",
    ),
    elmo_threads: Optional[str] = typer.Option(
        None, help="the elmo component's threads setting (auto, 0, N; default: its own)"
    ),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write every figure here"),
    profile: Optional[Path] = typer.Option(
        None, help="run each path once under cProfile; write the top functions here"
    ),
    model: Optional[str] = typer.Option(
        None, help="the biLM of the ELMo paths: NAME|DIR|FILE (default: the shipped one)"
    ),
    options: Optional[str] = typer.Option(None, help="options.json, for a bare weights file as --model"),
) -> None:
    import spacy
    import torch

    lines = read_lines(text, docs)
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    base_docs = list(nlp.pipe(lines))
    n_words = sum(len(doc) for doc in base_docs)
    runners = build_paths(minilm, paths, elmo_threads, model, options)
    caller_threads = torch.get_num_threads()
    for run in runners.values():  # warm-up: word-type caches, packed weights, lazy loads
        run(fresh(base_docs[:50]))
    procs = start_load(load)
    figures: Dict[str, Dict[str, List[float]]] = {name: {} for name in runners}
    report = io.StringIO()
    try:
        for r in range(1 if profile else rounds):
            for n_threads in threads:
                for name, run in runners.items():
                    batch = fresh(base_docs)
                    torch.set_num_threads(n_threads)
                    profiler = cProfile.Profile() if profile else None
                    start = time.perf_counter()
                    if profiler:
                        profiler.runcall(run, batch)
                    else:
                        run(batch)
                    seconds = time.perf_counter() - start
                    torch.set_num_threads(caller_threads)
                    figures[name].setdefault(str(n_threads), []).append(n_words / seconds)
                    if profiler:
                        report.write(f"==== {name}, {n_threads} thread(s): {seconds:.2f} s\n")
                        stats = pstats.Stats(profiler, stream=report)
                        stats.sort_stats("cumulative").print_stats(45)
                        stats.sort_stats("tottime").print_stats(25)
    finally:
        stop_load(procs)
    if profile:
        profile.write_text(report.getvalue(), encoding="utf-8")
    header = f"{'path':<16}" + "".join(f"{f'{t} thread(s), words/s':>34}" for t in threads)
    typer.echo(f"{n_words} words in {len(base_docs)} docs from {text.name}; load {load}; elmo threads "
               f"{elmo_threads or 'default'}; {cpu_name()}, "
               f"{os.cpu_count()} cores, torch {torch.__version__}")
    typer.echo(header)
    for name, by_threads in figures.items():
        cells = []
        for t in threads:
            values = by_threads.get(str(t), [])
            cells.append(f"{statistics.median(values):>10,.0f} ({min(values):,.0f}-{max(values):,.0f})")
        typer.echo(f"{name:<16}" + "".join(f"{c:>34}" for c in cells))
    if json_out:
        json_out.write_text(
            json.dumps(
                {
                    "model": Path(model).name if model else "shipped",
                    "text": text.name,
                    "docs": len(base_docs),
                    "words": n_words,
                    "rounds": rounds,
                    "load": load,
                    "elmo_threads": elmo_threads,
                    "threads": threads,
                    "cpu": cpu_name(),
                    "cores": os.cpu_count(),
                    "torch": torch.__version__,
                    "words_per_second": figures,
                },
                indent=1,
            ),
            encoding="utf-8",
        )


if __name__ == "__main__":
    typer.run(main)
