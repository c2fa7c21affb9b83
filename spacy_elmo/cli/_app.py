"""The typer app, the one error handler, and the options every command
shares (one spelling each: ``--model``, ``--options``, ``--lang``,
``--whitespace``, ``--batch-size``, ``--progress/--no-progress``).

Errors. A command registered with :func:`command` runs inside one handler:
the package's errors for bad input (every ``ValueError`` subclass it raises:
``OptionsError``, ``WeightFileError``, ``PretrainError``, ``ModelNotFoundError``,
:class:`InputError`, ...) and operating-system errors on the files the user
named (``OSError``, ``DownloadError``) end in one line ``error: ...`` on
stderr and exit code 2, never a traceback. Everything else is a bug and keeps
its traceback. ``SPACY_ELMO_DEBUG=1`` re-raises the handled errors too, for a
traceback while debugging.
"""
import functools
import os
import sys
from typing import Annotated, Any, Callable, Optional

import typer

from ..hub.help import Wording

#: Exit code for bad input (click uses 2 for bad usage; the same meaning).
BAD_INPUT = 2
DEBUG_ENV = "SPACY_ELMO_DEBUG"

COMMANDS = "embed, download, neighbours, senses, wsd, pretrain, tokenise, plot, export, perplexity"

app = typer.Typer(
    help=f"ELMo for spaCy. Commands: {COMMANDS}. Each takes --help.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """ELMo for spaCy: embed text with a biLM (embed, neighbours, senses,
    wsd, perplexity), get models (download), train your own (pretrain, export,
    plot)."""


class InputError(ValueError):
    """Bad input to a command: a file that cannot be read as asked, or a
    setting out of range. The message names the file or setting and what to
    do."""


def describe(err: BaseException) -> str:
    """One line for an error: an ``OSError`` names its file and reason."""
    if (
        isinstance(err, OSError)
        and err.strerror
        and err.filename is not None
        and str(err.filename) not in str(err.strerror)
    ):
        return f"{err.filename}: {err.strerror}"
    text = str(err).strip()
    return text or type(err).__name__


def command(*args: Any, **kwargs: Any) -> Callable[[Callable], Callable]:
    """``app.command`` with the one error handler (see the module docstring)."""
    register = app.command(*args, **kwargs)

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def run(*a: Any, **kw: Any) -> Any:
            try:
                return func(*a, **kw)
            except (ValueError, OSError) as err:
                if os.environ.get(DEBUG_ENV):
                    raise
                typer.echo(f"error: {describe(err)}", err=True)
                raise typer.Exit(BAD_INPUT)

        return register(run)

    return decorate


def warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)


# ------------------------------------------------------------ shared options
MODEL_HELP = (
    "The biLM, NAME|DIR|FILE|URL: a name (english: the model shipped with the package, the default; small, medium, "
    "original, original-5.5b: AllenNLP's published English ELMo, downloaded once into the cache; efml:<lang>, "
    "nlpl:<id>: the other languages), a directory holding weights.hdf5 and options.json (or an ELMoForManyLangs "
    "or NLPL model), a weights hdf5 file or a zip, or an http(s) URL of either"
)
#: How the command line names the biLM's settings in the loaders' errors.
MODEL_WORDING = Wording(
    weights="--model",
    options="--options",
    advice=(
        "Give --model NAME|DIR|FILE|URL: NAME english (shipped with the package, the default), small, medium, "
        "original, original-5.5b (AllenNLP's English ELMo, downloaded once into the cache; ahead of time: "
        "python -m spacy_elmo download NAME), efml:<lang> or nlpl:<id> (other languages); DIR a directory "
        "with weights.hdf5 and options.json, or an ELMoForManyLangs or NLPL model; FILE a weights .hdf5 "
        "(with --options FILE when its options JSON is not beside it) or a .zip; URL an http(s) URL of a "
        "weights file (with --options URL) or a zip."
    ),
)
Model = Annotated[Optional[str], typer.Option("--model", "-m", metavar="MODEL", help=MODEL_HELP, show_default=False)]
Options = Annotated[
    Optional[str],
    typer.Option(
        "--options", metavar="OPTIONS",
        help="The biLM's options JSON, for a weights file or URL without its options beside it "
        "(x_weights.hdf5 -> x_options.json, or options.json)",
    ),
]
Lang = Annotated[
    str,
    typer.Option("--lang", help="Language of spaCy's tokenizer (spacy.blank(LANG)) that splits the text into tokens"),
]
Whitespace = Annotated[
    bool,
    typer.Option(
        "--whitespace", "--pretokenized",
        help="The text is already tokenised: tokens are separated by whitespace (no spaCy tokenizer)",
    ),
]
BatchSize = Annotated[int, typer.Option("--batch-size", min=1, help="Sentences per batch")]
Progress = Annotated[
    Optional[bool],
    typer.Option(
        "--progress/--no-progress",
        help="Progress bars on stderr (default: on when stderr is a terminal)",
        show_default=False,
    ),
]


def show_progress(flag: Optional[bool]) -> bool:
    """``--progress``/``--no-progress`` as given; neither: on when stderr is
    a terminal, so that logs and pipes get no bar."""
    if flag is not None:
        return flag
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def main() -> None:
    app()
