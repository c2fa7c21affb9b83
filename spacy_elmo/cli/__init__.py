"""Command line: ``python -m spacy_elmo COMMAND`` (or ``spacy-elmo COMMAND``), typer.

One dialect for every command (see docs/cli.md): the biLM is ``--model``
(``--options`` beside it), text is tokenised by spaCy's tokenizer for
``--lang`` unless ``--whitespace`` says it is already tokenised, long steps
show a progress bar on stderr (``--progress/--no-progress``), and bad input
ends in one ``error: ...`` line and exit code 2 (one handler, in ``_app``).
The modules: ``_app`` (the app, the handler, the shared options), ``inputs``
(text, tokens, the model, progress), ``embed_file`` (``embed -o``'s file),
and the commands by topic: ``embed``, ``senses``, ``pretrain``.
"""
from . import embed, pretrain, senses  # noqa: F401,E402  (register the commands, in help order)
from ._app import BAD_INPUT, InputError, app, main
from .embed_file import read_embeddings

__all__ = ["BAD_INPUT", "InputError", "app", "main", "read_embeddings"]
