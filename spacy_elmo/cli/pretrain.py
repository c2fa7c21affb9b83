"""``pretrain``, ``export``, ``plot`` and ``perplexity`` (see docs/pretraining.md)."""
import os
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from ._app import BatchSize, InputError, Lang, Progress, command, show_progress, warn

#: ``--model`` as everywhere, but only the models that ship their softmax.
LanguageModel = Annotated[
    Optional[str],
    typer.Option(
        "--model", "-m", metavar="MODEL", show_default=False,
        help="english (the model shipped with the package, the default) or a directory with vocab.txt and "
        "softmax.hdf5 beside the weights (pretrain's export/); AllenNLP's published models ship no softmax",
    ),
]


def _setting(name: str, *flags: str, argument: bool = False, **extra: Any) -> Any:
    """The option (or argument) for the PretrainConfig field ``name``, with
    the field's default and help: the dataclass is their one source."""
    from dataclasses import MISSING

    from ..pretrain.config import PretrainConfig

    setting = PretrainConfig.setting(name)
    if setting.default_factory is not MISSING:
        default = setting.default_factory()
    else:
        default = ... if setting.default is MISSING else setting.default
    make = typer.Argument if argument else typer.Option
    return make(default, *flags, help=setting.metadata["help"], **extra)


def _config_value(value: Any) -> Any:
    """Paths as the strings config.json holds."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return [_config_value(v) for v in value]
    return value


@command()
def pretrain(
    train: List[Path] = _setting("train", argument=True),
    output: Path = _setting("output", "--output", "-o"),
    options: Optional[Path] = _setting("options"),
    shape: Optional[str] = _setting("shape"),
    init: Optional[Path] = _setting("init"),
    start_step: int = _setting("start_step", min=0),
    dev: List[Path] = _setting("dev"),
    lang: str = _setting("lang"),
    max_tokens: int = _setting("max_tokens"),
    vocab: Optional[Path] = _setting("vocab"),
    vocab_size: int = _setting("vocab_size"),
    min_count: int = _setting("min_count"),
    cutoffs: Optional[str] = _setting("cutoffs"),
    dev_fraction: float = _setting("dev_fraction"),
    batch_size: int = _setting("batch_size", min=1),
    max_steps: int = _setting("max_steps"),
    optimizer: str = _setting("optimizer"),
    lr: Optional[float] = _setting("lr"),
    warmup_steps: int = _setting("warmup_steps"),
    schedule: str = _setting("schedule"),
    clip_norm: float = _setting("clip_norm"),
    dropout: float = _setting("dropout"),
    seed: int = _setting("seed"),
    log_every: int = _setting("log_every"),
    eval_every: Optional[int] = _setting("eval_every"),
    checkpoint_every: int = _setting("checkpoint_every"),
    device: str = _setting("device"),
    precision: str = _setting("precision"),
    strict: bool = _setting("strict"),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUTPUT/checkpoints/last.pt"),
    time_limit: Optional[float] = typer.Option(
        None, "--time-limit", min=0,
        help="Stop after this many minutes of training, as on SIGTERM (checkpoint; continue with --resume)"),
    threads: Optional[int] = typer.Option(
        None, min=1, help="torch threads per process (at most 256, or the machine's logical CPUs where more)"),
    progress: Progress = None,
) -> None:
    """Train a biLM on your own text (torchrun for several processes); see docs/pretraining.md."""
    given = dict(locals())
    import logging
    from dataclasses import fields

    import torch

    from ..bilm.threads import check_thread_count
    from ..pretrain import PretrainConfig
    from ..pretrain import pretrain as run_pretrain
    from ..pretrain.curve import plot_available
    from ..pretrain.preflight import busy_machine_warning

    settings = {f.name: _config_value(given[f.name]) for f in fields(PretrainConfig) if f.name in given}
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if threads:
        torch.set_num_threads(check_thread_count(threads, "--threads"))
    warning = busy_machine_warning(torch.get_num_threads())
    if warning:
        warn(warning)
    if not plot_available():
        typer.echo("note: no learning-curve plot without matplotlib (pip install 'spacy_elmo[pretrain]'); "
                   "log.jsonl has the figures, and `python -m spacy_elmo plot OUTPUT` draws it later", err=True)
    try:
        settings["cutoffs"] = [int(c) for c in cutoffs.split(",") if c.strip()] if cutoffs else None
    except ValueError:
        raise InputError(f"--cutoffs must be comma-separated integers, found {cutoffs!r}") from None
    summary = run_pretrain(PretrainConfig(**settings), resume=resume, progress=show_progress(progress),
                           time_limit=None if time_limit is None else 60 * time_limit)
    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 reports
        return
    if summary.get("stopped"):
        typer.echo(
            f"stopped at step {summary['step']}; checkpoint in {output}/checkpoints/last.pt (continue with --resume)"
        )
    elif summary.get("dev"):
        d = summary["dev"]
        typer.echo(
            f"step {summary['step']}: held-out perplexity forward {d['dev_ppl_forward']:.2f}, backward "
            f"{d['dev_ppl_backward']:.2f}, mean {d['dev_ppl']:.2f} (unigram {summary['unigram_dev_ppl']:.2f}); "
            f"exported to {output}/export"
        )
    else:
        typer.echo(
            f"step {summary['step']}: done, exported to {output}/export; no held-out perplexity: no held-out "
            "text (--dev-fraction 0, or too few windows to hold any out: give --dev FILE, or more text)"
        )


@command()
def tokenise(
    texts: List[Path] = typer.Argument(
        ..., help="Text files or directories (one sentence or paragraph a line), read as `pretrain` reads them"
    ),
    output: Path = typer.Option(..., "--output", "-o", help="The slice to write (.npz)"),
    lang: Lang = "en",
    max_tokens: int = typer.Option(64, min=1, help="Window length in tokens; `pretrain` must use the same"),
) -> None:
    """Tokenise text once into a compact slice (.npz) that `pretrain` reads in place of the text.

    A large corpus is tokenised slice by slice (each in its own process if you
    like); a training run then starts in seconds, and slices of a few tens of
    MiB are easy to copy to a GPU machine. The slice records LANG and
    --max-tokens, and `pretrain` refuses a slice cut with other settings."""
    from ..pretrain.reading import tokenise_slice

    if output.suffix != ".npz":
        raise InputError(f"--output {output}: a slice is an .npz file; name it e.g. {output.with_suffix('.npz').name}")
    corpus = tokenise_slice(texts, output, lang, max_tokens)
    typer.echo(f"wrote {output}: {corpus.stats.summary()}")


@command()
def plot(
    output: Path = typer.Argument(..., help="A pretraining output directory (holds log.jsonl)"),
) -> None:
    """Draw OUTPUT/learning_curve.png from OUTPUT/log.jsonl (needs matplotlib)."""
    from ..pretrain.curve import plot_available, plot_learning_curve

    log = output / "log.jsonl"
    if not log.is_file():
        raise InputError(f"{log} not found: give a pretraining output directory")
    if not plot_available():
        raise InputError("the plot needs matplotlib: pip install 'spacy_elmo[pretrain]'")
    plot_learning_curve(log, output / "learning_curve.png")
    typer.echo(f"wrote {output / 'learning_curve.png'}")


@command()
def export(
    output: Path = typer.Argument(
        ...,
        help="A pretraining output directory; or a saved spaCy pipeline, or a model name/path/URL, whose biLM is "
             "written back in its own layout",
    ),
    target: Path = typer.Argument(
        ...,
        help="Write weights.hdf5, options.json, vocab.txt and softmax.hdf5 here (an ELMoForManyLangs biLM: its model "
             "directory)",
    ),
    checkpoint: Optional[Path] = typer.Option(None, help="Checkpoint file (default: OUTPUT/checkpoints/last.pt)"),
    nlp: Optional[Path] = typer.Option(
        None, "--nlp", help="Also write a spaCy pipeline (blank LANG + an elmo component) here, for spacy.load"
    ),
    lang: Optional[str] = typer.Option(
        None, help="Language of the --nlp pipeline (default: the --lang the biLM was trained with)"
    ),
) -> None:
    """Export a pretrained biLM to the published format (hdf5 + options JSON), with its vocabulary and softmax.

    With --nlp, also as a spaCy pipeline with an elmo component."""
    from ..pretrain import export as run_export
    from .export import check_outputs_apart, export_bilm, export_pipeline, source_bilm

    check_outputs_apart(output, target, nlp)
    if checkpoint is None and nlp is None and not (Path(output) / "checkpoints").is_dir():
        written = export_bilm(source_bilm(str(output)), target)
        typer.echo(f"wrote {', '.join(p.name for p in written)} to {target}")
        return
    path = run_export(output, target, checkpoint)
    typer.echo(f"wrote {path}/weights.hdf5, options.json, vocab.txt")
    if nlp is not None:
        typer.echo(f"wrote the spaCy pipeline {export_pipeline(output, nlp, lang, checkpoint)}")


@command()
def perplexity(
    texts: List[Path] = typer.Argument(
        ...,
        help="Held-out text: files (one sentence or paragraph a line) or directories, read as `pretrain` reads them",
    ),
    model: LanguageModel = None,
    lang: Lang = "en",
    max_tokens: int = typer.Option(
        64, min=1, help="Window length in tokens, as in pretraining (the shipped model: 64)"
    ),
    batch_size: BatchSize = 128,
    each: bool = typer.Option(
        False, "--each", help="One line per TEXTS argument (a directory counts as one part), then all of them together"
    ),
    progress: Progress = None,
) -> None:
    """Held-out perplexity (forward, backward, geometric mean) of a biLM's language models on TEXTS.

    How well a model, or one adapted with `pretrain --init`, predicts text of
    your domain. --model is english (the shipped model, the default) or a
    directory with vocab.txt and softmax.hdf5 beside the weights (pretrain's
    export/): the published AllenNLP models ship no softmax. The text is
    tokenised as pretraining tokenises it (spaCy's tokenizer for LANG), so the
    figure compares with the training log's. --each gives each argument's
    figures (e.g. a held-out slice's sources, or its prose and reference
    parts) and then the whole's, the model loaded once."""
    from .. import hub
    from ..pretrain.perplexity import perplexity_parts

    if model is None or model.strip().lower() in hub.SHIPPED_NAMES:
        directory = hub.shipped_model()[0].parent
    elif Path(model).expanduser().is_dir():
        directory = Path(model).expanduser()
    else:
        raise InputError(
            f"--model {model}: perplexity needs a model directory with the softmax and vocabulary the biLM was "
            "trained with (english, or a directory written by `pretrain`/`export`)"
        )
    parts = [[text] for text in texts] if each else [texts]
    results = perplexity_parts(directory, parts, lang=lang, max_tokens=max_tokens, batch_size=batch_size,
                               progress=show_progress(progress))
    rows = zip([f"{text}: " for text in texts] + ["all: "], results) if each else [("", results[-1])]
    for label, result in rows:
        typer.echo(
            f"{label}perplexity forward {result['ppl_forward']:.2f}, backward {result['ppl_backward']:.2f}, "
            f"mean {result['ppl']:.2f} over {result['tokens']:,} tokens ({100 * result['unk_fraction']:.1f}% <UNK>)"
        )
