"""Error types. Every user-facing failure is an ``LlmevoError`` with a one-line message.

The CLI turns any ``LlmevoError`` into that message on stderr and exit status 2; anything
else is a bug and keeps its traceback.
"""

import os
from pathlib import Path


class LlmevoError(Exception):
    """A problem with the user's input or environment, stated in one line."""


class ConfigError(LlmevoError):
    """An invalid configuration, genome, preset or hyperparameter."""


class CodeChangedError(ConfigError):
    """A run's code changed between its start and the write of a published artifact."""


class CodeChangedWarning(UserWarning):
    """A run's code changed between its start and the write of an unpublished artifact
    (recorded in its provenance as ``code_changed``)."""


class DataError(LlmevoError):
    """A missing, altered or malformed data file."""


class ArtifactError(LlmevoError):
    """An unreadable or invalid artifact."""


class DivergedError(LlmevoError):
    """Training produced a non-finite loss."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


class WriteError(LlmevoError):
    """A file could not be written (a full disk, a read-only folder, no permission, …).

    The message names the file and the cause: ``cannot write PATH: CAUSE``.
    """

    def __init__(self, path: Path | str, cause: str):
        super().__init__(f"cannot write {printable_path(path)}: {cause}")
        self.path = path
        self.cause = cause


def printable_path(path: Path | str) -> str:
    """``path`` as text any stream can print: bytes of a file name that are not UTF-8 (which
    Python holds as lone surrogates) as ``\\xNN`` escapes."""
    try:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that no file name decoded to
        return str(path).encode("utf-8", "backslashreplace").decode("utf-8")
