"""Ctrl-C that never lands inside a database call.

A SIGINT or SIGTERM handler that raises ``KeyboardInterrupt`` wherever the main thread is can
cut a storage call in half: a SQLAlchemy session left with its transaction open (the SQLite
file locked for every other worker until its 60 s timeout), a trial created RUNNING but never
handed back, an interrupt turned into a database error that Optuna's ``catch`` swallows, so
the search goes on. Under load this is what left trials RUNNING after a group Ctrl-C and
made one stop hang (docs/LOG.md, 2026-12-04).

So the handlers call ``interrupt()``: it raises at once, except while the main thread is
inside ``deferred()`` (every call of the shared RDB storage runs there,
``runner.storage.open_storage``), where the interrupt is held and raised as the outermost
block ends, the call complete. Other threads (Optuna's heartbeat) are never interrupted, so
``deferred()`` does nothing in them. ``received()`` says whether a stop arrived, for a loop
that must not go on after an interrupt something swallowed.

Public API: ``interrupt``, ``deferred``, ``received``, ``reset``.
"""

from __future__ import annotations

import threading
from types import TracebackType


class _State:
    depth = 0  # nesting of deferred() blocks in the main thread
    held = False  # an interrupt arrived inside one
    received = False  # an interrupt arrived (since the last reset)


def interrupt() -> None:
    """A signal handler's way to stop the main thread: raise ``KeyboardInterrupt`` now, or,
    inside ``deferred()``, when the outermost block ends."""
    _State.received = True
    if _State.depth:
        _State.held = True
        return
    raise KeyboardInterrupt


def received() -> bool:
    """Whether ``interrupt()`` was called since the last ``reset()``."""
    return _State.received


def reset() -> None:
    """Forget any interrupt (a command starting, a test)."""
    _State.held = _State.received = False


class deferred:  # noqa: N801 - used as a context manager, named as the state it sets
    """``with deferred():`` an interrupt of the main thread waits for the block to end."""

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._counted = True
            _State.depth += 1
        else:
            self._counted = False

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if not self._counted:
            return
        _State.depth -= 1
        if not _State.depth and _State.held:
            _State.held = False
            raise KeyboardInterrupt
