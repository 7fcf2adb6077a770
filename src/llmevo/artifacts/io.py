"""Atomic file writes and validated artifact saving.

Every write goes to a temporary file in the target's directory, is flushed and fsynced,
then renamed over the target with ``os.replace`` (atomic on POSIX and Windows). If
anything fails on the way — including serialisation half-way through — the temporary
file is removed and an existing target is left exactly as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from llmevo.artifacts.schema import (
    DiagnosticArtifact,
    ReproductionArtifact,
    dump_artifact,
    validate_artifact,
)
from llmevo.errors import ConfigError

_DEFAULT_MODE = 0o644


@contextlib.contextmanager
def _atomic_file(path: Path | str, binary: bool) -> Iterator[IO[Any]]:
    """Yield a handle on a temp file beside ``path``; on clean exit it replaces ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o777 if target.exists() else _DEFAULT_MODE
    fd, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        handle = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, mode)
        os.replace(temp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (parent directories are created)."""
    with _atomic_file(path, binary=True) as handle:
        handle.write(data)


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    with _atomic_file(path, binary=False) as handle:
        handle.write(text)


def write_json_atomic(path: Path | str, data: Any, *, indent: int = 2) -> None:
    """Serialise ``data`` as JSON (UTF-8, non-ASCII kept, trailing newline) atomically.

    The JSON is streamed into the temporary file, so a value that cannot be serialised
    fails part-way; the target is then untouched and the temporary file removed.
    """
    with _atomic_file(path, binary=False) as handle:
        json.dump(data, handle, indent=indent, ensure_ascii=False)
        handle.write("\n")


def save_artifact(
    artifact: ReproductionArtifact | DiagnosticArtifact | dict[str, Any], path: Path | str
) -> ReproductionArtifact | DiagnosticArtifact:
    """Validate ``artifact`` (a model or a JSON-shaped dict) and write it atomically.

    An invalid artifact raises ``ArtifactError`` and nothing is written. Returns the
    validated model. A model is re-validated from its dump, so fields changed after
    construction are checked too.
    """
    if isinstance(artifact, dict):
        data = artifact
    else:  # a mutated model may hold wrong types: re-validation reports them, not a warning
        data = artifact.model_dump(mode="python", exclude_unset=True, warnings=False)
    validated = validate_artifact(data, str(path))
    write_json_atomic(path, dump_artifact(validated))
    return validated


# --- output paths, checked before any work -------------------------------------------


def _first_existing(path: Path) -> Path:
    current = path.absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def _check_writable_folder(folder: Path, option: str, target: Path) -> None:
    if not folder.is_dir():
        raise ConfigError(f"{option} {target}: {folder} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ConfigError(
            f"{option} {target}: cannot write in {folder} ({error.strerror or error})") from None


def check_output_file(path: Path | None, option: str = "--out") -> None:
    """A file to be written: not an existing folder, and its folder creatable and writable."""
    if path is None:
        return
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a folder; expected a file path")
    _check_writable_folder(_first_existing(path.parent), option, path)


def check_output_dir(path: Path | None, option: str = "--out") -> None:
    """A folder to be written into: not an existing file, creatable and writable."""
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path} is a file; expected a folder")
    _check_writable_folder(_first_existing(path), option, path)
