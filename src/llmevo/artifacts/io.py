"""Every file llmevo writes goes through here: atomically where it can be, always guarded.

**The rule** (``guarded_write``): an I/O failure while writing a file becomes a ``WriteError``,
one line naming the file and the cause (``cannot write ckpt/model.safetensors: no space left on
device``), which the command line prints with exit status 2. An I/O failure is an ``OSError``
(ENOSPC, EROFS, EACCES, EDQUOT, …), a library error that reports one (safetensors writes in
Rust and says ``(os error 28)``), or text that cannot be encoded as UTF-8. Anything else (a
value that cannot be serialised) passes through unchanged.

**Atomic writes.** A file is written to a temporary file in the target's folder, flushed and
fsynced, then renamed over the target with ``os.replace`` (atomic on POSIX and Windows). If
anything fails on the way — including serialisation half-way through — the temporary file is
removed and an existing target is left exactly as it was. ``write_file_atomic`` does the same
for a library that writes a file by name (safetensors); ``staged_folder`` for a folder of
files (a checkpoint, an export), so a failure leaves neither the new folder nor a mix of old
and new files.

**Streams.** A file written as data arrives (a download that a later run resumes, TensorBoard
events) is a ``StreamFile``: each write guarded, fsynced when closed; a failed write removes
the file, since what it holds after a failed write is not trusted.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from llmevo.artifacts.replacement import Contents, check_replacement
from llmevo.artifacts.schema import (
    DiagnosticArtifact,
    ReproductionArtifact,
    dump_artifact,
    validate_artifact,
)
from llmevo.errors import ConfigError, WriteError, printable_path

_DEFAULT_MODE = 0o644
_FOLDER_MODE = 0o755
_REPORTED_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how Rust's std::io::Error ends


def _sentence_case(text: str) -> str:
    return text[:1].lower() + text[1:]


def describe_not_utf8(error: UnicodeEncodeError) -> str:
    """What UTF-8 could not encode, in words (``byte 0xff``). Python hands bytes that are not
    UTF-8 (in ``sys.argv``, in file names) over as lone surrogates U+DC80..U+DCFF, one per
    byte; other lone surrogates come from escapes such as JSON's ``\\ud800`` without its pair."""
    character = ord(error.object[error.start])
    if 0xDC80 <= character <= 0xDCFF:
        return f"byte 0x{character - 0xDC00:02x}"
    return f"a lone surrogate \\u{character:04x}"


def _write_failure(error: Exception) -> str | None:
    """Why a write failed, in words, if ``error`` is an I/O failure; else None."""
    if isinstance(error, OSError):
        return _sentence_case(error.strerror or str(error))
    if isinstance(error, UnicodeEncodeError):
        return f"{describe_not_utf8(error)} is not valid UTF-8"
    reported = _REPORTED_OS_ERROR.search(str(error))
    if reported is not None:
        return _sentence_case(os.strerror(int(reported.group(1))))
    return None


@contextlib.contextmanager
def guarded_write(path: Path | str) -> Iterator[None]:
    """Write ``path`` inside the block: an I/O failure there is a ``WriteError`` naming
    ``path`` and the cause; any other error passes through unchanged."""
    try:
        yield
    except Exception as error:
        _raise_write_error(error, path)
        raise


def _raise_write_error(error: Exception, path: Path | str) -> None:
    """Raise ``error`` as a ``WriteError`` on ``path`` if it is an I/O failure (else return)."""
    if isinstance(error, WriteError):
        return
    cause = _write_failure(error)
    if cause is not None:
        raise WriteError(path, cause) from error


@contextlib.contextmanager
def one_builder(path: Path | str) -> Iterator[None]:
    """Hold an exclusive lock on ``.<name>.lock`` beside ``path`` for the block: processes that
    would build the same cache entry at once (the jobs of a launched table, starting cold) take
    turns, so the second reads what the first wrote instead of building it again. The caller
    reads the entry again inside the block. Where no lock can be taken (no ``fcntl``, a folder
    that cannot be written) the block runs unlocked, and a write it makes fails as it would."""
    target = Path(path)
    lock = target.with_name(f".{target.name}.lock")
    try:
        import fcntl

        target.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        # Removed while held, so no lock file outlives the build (nor a failed one). A process
        # that opened it before and locks it after finds the entry built and reads it; one
        # that opens a new lock file then may build alongside: duplicate work, never a wrong
        # entry (each write is atomic).
        with contextlib.suppress(OSError):
            os.unlink(lock)
        handle.close()  # closing releases the lock


def make_folder(path: Path | str) -> Path:
    """``path`` as a folder (created with its parents if missing), guarded."""
    folder = Path(path)
    with guarded_write(folder):
        folder.mkdir(parents=True, exist_ok=True)
    return folder


class _GuardedHandle:
    """An open file whose writes are guarded under the name of the file they stand for."""

    def __init__(self, handle: IO[Any], name: Path):
        self._handle = handle
        self._name = name

    def write(self, data: Any) -> int:  # json.dump calls it per fragment: no context manager
        try:
            return self._handle.write(data)
        except Exception as error:
            _raise_write_error(error, self._name)
            raise


@contextlib.contextmanager
def _temporary_beside(target: Path) -> Iterator[Path]:
    """A new empty file beside ``target`` for the block to fill (and fsync); on clean exit it
    replaces ``target`` (keeping an existing target's permissions), on failure it is removed."""
    with guarded_write(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o777 if target.exists() else _DEFAULT_MODE
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        with guarded_write(target):
            os.chmod(temporary, mode)
            os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def _atomic_file(path: Path | str, binary: bool) -> Iterator[_GuardedHandle]:
    """Yield a guarded handle on a temporary file beside ``path``; on clean exit it replaces ``path``."""
    target = Path(path)
    with _temporary_beside(target) as temporary:
        with guarded_write(target):
            handle = open(temporary, "wb") if binary else open(temporary, "w", encoding="utf-8")
        try:
            yield _GuardedHandle(handle, target)
            with guarded_write(target):
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            with contextlib.suppress(OSError):  # after a failed write, closing fails the same way
                handle.close()


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


def write_file_atomic(path: Path | str, write_to: Callable[[Path], None]) -> None:
    """``write_to(temporary)`` writes the file under a temporary name beside ``path``, which it
    then replaces atomically: for libraries that write a file by name (safetensors). The library
    needs a UTF-8 name; one that is not is a ``WriteError`` too."""
    target = Path(path)
    with _temporary_beside(target) as temporary, guarded_write(target):
        str(temporary).encode("utf-8")  # raises (guarded) for a name the library cannot open
        write_to(temporary)
        fd = os.open(temporary, os.O_RDWR)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def staged_folder(path: Path | str) -> Iterator[Path]:
    """An empty folder beside ``path`` for the block to write files into; on clean exit they
    are in ``path``. An absent or empty ``path`` is replaced by the staged folder as a whole;
    into an existing one, each staged file replaces its namesake (files only). On failure the
    staged folder is removed and ``path`` is left as it was; a ``WriteError`` from the block
    names the file's place in ``path``, not in the staging folder."""
    target = Path(path)
    parent = target.absolute().parent
    with guarded_write(target):
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.absolute().name}.", suffix=".tmp", dir=parent))
    try:
        try:
            yield staging
        except WriteError as error:
            inside = Path(error.path)
            if not inside.is_relative_to(staging):
                raise
            raise WriteError(target / inside.relative_to(staging), error.cause) from error.__cause__
        with guarded_write(target):
            os.chmod(staging, _FOLDER_MODE)
            if target.is_dir() and not any(target.iterdir()):
                target.rmdir()
            if not target.exists():
                os.replace(staging, target)
                return
        for staged in sorted(staging.iterdir()):
            with guarded_write(target / staged.name):
                os.replace(staged, target / staged.name)
        staging.rmdir()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


class StreamFile:
    """A file written as data arrives (appended to, or started afresh): each write guarded,
    fsynced by ``close``. A failed write removes the file (what it holds after a failed write
    is not trusted) and raises the ``WriteError``; ``close`` after that does nothing."""

    def __init__(self, path: Path | str, *, append: bool = False):
        self.path = Path(path)
        self._handle: IO[bytes] | None = None
        with self._guarded():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "ab" if append else "wb")

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        try:
            with guarded_write(self.path):
                yield
        except WriteError:
            self._discard()
            raise

    def _discard(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def write(self, data: bytes) -> None:
        if self._handle is None:
            raise ValueError(f"{self.path} is closed")
        with self._guarded():
            self._handle.write(data)

    def flush(self) -> None:
        if self._handle is not None:
            with self._guarded():
                self._handle.flush()

    def close(self) -> None:
        if self._handle is None:
            return
        with self._guarded():
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
        self._handle = None

    def __enter__(self) -> StreamFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def save_artifact(
    artifact: ReproductionArtifact | DiagnosticArtifact | dict[str, Any], path: Path | str,
    *, replace: bool | None = None,
) -> ReproductionArtifact | DiagnosticArtifact:
    """Validate ``artifact`` (a model or a JSON-shaped dict) and write it atomically.

    An invalid artifact raises ``ArtifactError`` and nothing is written. Returns the
    validated model. A model is re-validated from its dump, so fields changed after
    construction are checked too. ``replace`` given: an artifact already at ``path`` that
    holds more than this one (a block, a seed) is not replaced unless it is True
    (``artifacts.replacement.check_replacement``, a ``ConfigError``), checked on the
    validated artifact before anything is written: validation, the guard and the write in
    one call, the record handed down once.
    """
    if isinstance(artifact, dict):
        data = artifact
    else:  # a mutated model may hold wrong types: re-validation reports them, not a warning
        data = artifact.model_dump(mode="python", exclude_unset=True, warnings=False)
    validated = validate_artifact(data, str(path))
    if replace is not None:
        check_replacement(Path(path), Contents.of(validated), replace=replace)
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


def _check_utf8_path(path: Path, option: str) -> None:
    """Artifacts record the paths they were written to as UTF-8 text (and safetensors opens
    files by UTF-8 name), so a path the file system would take but UTF-8 cannot hold is refused."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError as error:
        raise ConfigError(f"{option} {printable_path(path)}: {describe_not_utf8(error)} is not "
                          "valid UTF-8; name the output in UTF-8") from None


def check_output_file(path: Path | None, option: str = "--out") -> None:
    """A file to be written: a UTF-8 path, not an existing folder, its folder creatable and writable."""
    if path is None:
        return
    _check_utf8_path(path, option)
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a folder; expected a file path")
    _check_writable_folder(_first_existing(path.parent), option, path)


def check_output_dir(path: Path | None, option: str = "--out") -> None:
    """A folder to be written into: a UTF-8 path, not an existing file, creatable and writable."""
    if path is None:
        return
    _check_utf8_path(path, option)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path} is a file; expected a folder")
    _check_writable_folder(_first_existing(path), option, path)
