"""Error types. Every user-facing failure is an ``LlmevoError`` with a one-line message.

The CLI turns any ``LlmevoError`` into that message on stderr and exit status 2; anything
else is a bug and keeps its traceback.
"""


class LlmevoError(Exception):
    """A problem with the user's input or environment, stated in one line."""


class ConfigError(LlmevoError):
    """An invalid configuration, genome, preset or hyperparameter."""


class DataError(LlmevoError):
    """A missing, altered or malformed data file."""


class ArtifactError(LlmevoError):
    """An unreadable or invalid artifact."""


class DivergedError(LlmevoError):
    """Training produced a non-finite loss."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step
