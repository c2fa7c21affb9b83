"""The pretraining's own error class."""


class PretrainError(ValueError):
    """Pretraining cannot start or go on: bad input, an unwritable output,
    or a checkpoint that does not match what it would resume. The message
    names the path and says what to do. A ValueError, so callers that catch
    those (the command line: exit status 2) keep working."""
