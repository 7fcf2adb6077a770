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

``defer_imports("torch")`` does the same for a module's import: torch's runs C++ that calls
back into Python, and a KeyboardInterrupt raised there crosses C++ frames and aborts the
process (SIGABRT and a 100-line stack, seen for a Ctrl-C 2 s into ``evolve`` under load).
The command line asks for it; the library never installs an import hook by itself.

``allowed()`` opens an interruptible stretch inside a deferred one: a worker defers the
whole of Optuna's ``optimize`` and allows only the objective, so an interrupt stops the
training, never Optuna's recording of the trial.

A library that calls back into Python may wrap the interrupt in an error of its own: pydantic's
serializer turns a ``KeyboardInterrupt`` raised inside a wrap serializer into a
``PydanticSerializationError`` (the interrupt is its ``__cause__``), which a trial would record
as a failure with its traceback. ``wraps_interrupt(error)`` finds the interrupt in an error's
chain, so the caller can raise it as what it was.

An interrupt can also be *swallowed*: the handler runs wherever the main thread is, inside an
object's finalizer too (``__del__``, a weakref callback: multiprocessing's connections and
finalizers while worker processes start), and Python prints an exception raised there
("Exception ignored in ...") and goes on. A Ctrl-C to ``reproduce --path parallel`` as its
workers started was lost so, the command training on past the test's 300 s (1 of 22 tries
under load; docs/LOG.md, 2026-12-06). No hook can raise it again from there (anything it
raises is swallowed the same way), so the loops that run long ask ``stop_if_received()``: each
training step, and the wait for training workers.

Public API: ``interrupt``, ``deferred``, ``allowed``, ``received``, ``stop_if_received``,
``reset``, ``wraps_interrupt``, ``defer_imports``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType, TracebackType
from typing import Any


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


def stop_if_received() -> None:
    """Raise ``KeyboardInterrupt`` if an interrupt arrived (outside a ``deferred()`` block, whose
    end raises a held one): a long loop's check, so that an interrupt swallowed where it landed
    (a finalizer) still stops it at its next turn. Free when none arrived."""
    if _State.received and not _State.depth:
        raise KeyboardInterrupt


def wraps_interrupt(error: BaseException) -> bool:
    """Whether ``error`` was caused by a ``KeyboardInterrupt`` (its ``__cause__`` or
    ``__context__`` chain holds one): an interrupt some library wrapped in an error of its own."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


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


class allowed:  # noqa: N801
    """``with allowed():`` inside ``deferred()``, an interrupt is raised at once again (one
    held already is raised on entry): the work a deferred stretch encloses, e.g. a trial's
    objective inside Optuna's bookkeeping, which must not be cut (Optuna 5.1 answers an
    interrupt while it records a trial with an ``UnboundLocalError`` and leaves it RUNNING)."""

    def __enter__(self) -> None:
        self._saved = None
        if threading.current_thread() is threading.main_thread():
            if _State.held:  # __exit__ does not run when __enter__ raises: nothing to undo
                _State.held = False
                raise KeyboardInterrupt
            self._saved, _State.depth = _State.depth, 0

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._saved is not None:
            _State.depth = self._saved


class _DeferredLoader(importlib.abc.Loader):
    """A module's own loader, its execution inside ``deferred()``."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with deferred():
            self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:  # resources, get_source, ...
        return getattr(self._loader, name)


class _DeferredImports(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def find_spec(self, name: str, path: Any, target: ModuleType | None = None) -> Any:
        if name not in self.names:
            return None
        for finder in sys.meta_path:  # the spec the import would have found without this
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _DeferredLoader(spec.loader)
                return spec
        return None


def defer_imports(*names: str) -> None:
    """An interrupt during the import of one of these modules is raised once the module has
    run to its end (as an interrupted import: the import fails, torch's C++ never sees the
    exception); a module already imported is not affected."""
    finder = next((f for f in sys.meta_path if isinstance(f, _DeferredImports)), None)
    if finder is None:
        finder = _DeferredImports()
        sys.meta_path.insert(0, finder)
    finder.names.update(names)
