"""The ``llmevo`` command line. The only place that reads arguments and the environment.

Each area keeps its commands in its own module here and registers them on ``app``; the
import list below is explicit on purpose (no discovery by scanning). Command modules import
torch, Optuna, matplotlib and the model code inside their command functions, so that
``llmevo --help`` and usage errors answer at once (checked by a test).

Signals. SIGINT and SIGTERM are caught first thing, before anything else is imported, and
an interrupt is never ignored: the handlers replace an inherited SIG_IGN (a shell script's
background job starts with SIGINT ignored) and release the two signals if they arrive
blocked. Until ``main`` runs a command (while typer, rich and the command modules import,
about a quarter of a second) nothing has started, so a signal ends the process at once.
While a command runs, a signal unwinds it as Ctrl-C does (``KeyboardInterrupt``: every
``finally`` and ``except KeyboardInterrupt`` runs, worker processes are stopped). Either
way the command ends with one line on stderr and 128 + the signal number (130 for SIGINT,
143 for SIGTERM), what a shell reports for a process that signal killed; so does a
command that swallowed the interrupt and went on.
"""

from __future__ import annotations

import os
import signal
import sys

SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
_BEFORE = {number: signal.getsignal(number) for number in SIGNALS}  # restored when main ends


def _catch_signals(handler: object) -> None:
    for number in SIGNALS:
        signal.signal(number, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def _exit_at_once(number: int, _frame: object) -> None:
    """Before a command runs there is nothing to clean up (and ``os._exit``, unlike an
    exception, cannot be swallowed by the import it interrupts)."""
    os.write(2, f"{SIGNALS[number]}\n".encode())
    os._exit(128 + number)


def _in_a_worker() -> bool:
    """A spawned worker process (evolution's) starts by running the command's main module
    again as ``__mp_main__``, beside its own ``__main__``; the console script imports this
    module, and a worker keeps its own signal handling."""
    rerun = sys.modules.get("__mp_main__")
    return rerun is not None and rerun is not sys.modules.get("__main__")


if not _in_a_worker():
    _catch_signals(_exit_at_once)  # first thing: before typer, rich and the command modules

import importlib  # noqa: E402
import threading  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import typer  # noqa: E402

from llmevo import interrupts  # noqa: E402
from llmevo.cli import common  # noqa: E402
from llmevo.cli.common import console, err_console  # noqa: E402
from llmevo.errors import CodeChangedWarning, LlmevoError  # noqa: E402

__all__ = ["app", "commands", "console", "err_console", "main"]

# --- command modules (explicit list; each registers its commands on `common.app`) ---
# command (or command group) -> the module under llmevo.cli that registers it. A run imports
# only its command's module (``commands``): the others' imports (the data downloader's HTTP
# stack, say) are no part of a warm reproduction's fixed cost (docs/LOG.md, 2026-12-05,
# seventeenth session). tests/integration/test_cli_commands.py checks this table against
# what each module registers.
COMMAND_MODULES = {
    "show": "artifacts", "compare": "artifacts", "bench": "bench", "components": "components",
    "data": "data", "evolve": "evolve", "export": "export", "generate": "inference",
    "diagnose": "inference", "ladder": "ladder", "new": "new", "papers": "papers",
    "report": "reports", "leaderboard": "reports", "reproduce": "reproduce", "verdict": "verdict",
}
# --- end of command modules ---


def commands(argv: list[str] | None = None) -> typer.Typer:
    """The application with the commands ``argv`` can reach registered: only its command's
    module when ``argv`` starts with a command's name, every module otherwise (``--help``,
    no arguments, a misspelt command: typer lists or suggests the commands)."""
    first = argv[0] if argv else None
    wanted = [COMMAND_MODULES[first]] if first in COMMAND_MODULES else COMMAND_MODULES.values()
    for module in dict.fromkeys(wanted):
        importlib.import_module(f"llmevo.cli.{module}")
    return common.app


def __getattr__(name: str) -> object:
    """``llmevo.cli.app``: the application with every command registered."""
    if name == "app":
        return commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_received: list[int] = []  # the signals the running command received, in order


def _unwind(number: int, _frame: object) -> None:
    """While a command runs: stop it as Ctrl-C does, so that its cleanups run. From then on a
    background thread's failure is a consequence of the stop, not news: e.g. Optuna's heartbeat
    thread finding the SQLite study locked while the interrupted trial rolls back (seen under
    load), whose traceback would break the command's one closing line. An interrupt landing
    in a storage call waits for it to return (``llmevo.interrupts``)."""
    _received.append(number)
    threading.excepthook = _after_stop
    interrupts.interrupt()  # at once, or as the database call it lands in returns


def _after_stop(args: threading.ExceptHookArgs) -> None:
    """``threading.excepthook`` once a stop signal arrived: say nothing."""


def _quiet_after_stop(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """``sys.unraisablehook`` that says nothing of the stop's own interrupt landing in a
    finalizer (swallowed there, then raised by the next long loop's check:
    ``interrupts.stop_if_received``), whose "Exception ignored in ..." traceback would break the
    command's one closing line, and hands every other case to ``hook``."""
    def unraisablehook(args: Any) -> None:
        if not (_received and isinstance(args.exc_value, KeyboardInterrupt)):
            hook(args)
    return unraisablehook


def _is_usage_error(error: BaseException) -> bool:
    """A click exception (typer vendors click as ``typer._click`` since 0.2x, so match by
    class name rather than importing either module)."""
    return any(cls.__name__ == "ClickException" for cls in type(error).__mro__)


def _fail(message: str) -> int:
    """Print ``error: message`` as one line on stderr; the exit status of a user error."""
    err_console.print(f"[bold red]error:[/] {' '.join(message.split())}", highlight=False,
                      soft_wrap=True, markup=True)
    return 2


def _interrupted(said: bool = False) -> int:
    """128 + the first signal received (SIGINT when the interrupt was raised in code);
    ``said``: the command printed its own line already."""
    number = _received[0] if _received else signal.SIGINT
    if not said:
        err_console.print(SIGNALS[number], highlight=False)
    return 128 + number


def _shown_as_a_line(show: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` that prints the library's own warnings (``CodeChangedWarning``)
    as one ``warning:`` line on stderr, and hands every other warning to ``show``."""
    def showwarning(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
        if issubclass(category, CodeChangedWarning):
            text = " ".join(str(message).split()).replace("[", r"\[")
            err_console.print(f"[bold yellow]warning:[/] {text}", highlight=False, soft_wrap=True)
            return
        show(message, category, *args, **kwargs)
    return showwarning


def _run(argv: list[str] | None) -> int:
    """Run the command; its exit status. A user error prints its one line."""
    try:
        application = commands(sys.argv[1:] if argv is None else argv)
        code = application(args=argv, standalone_mode=False, prog_name="llmevo")
    except (KeyboardInterrupt, typer.Abort):
        return _interrupted()
    except SystemExit:  # a command that ended itself, having said why
        if _received:
            return _interrupted(said=True)
        raise
    except BaseException as error:
        if _received:  # whatever the unwinding raised on its way out, the command was stopped
            return _interrupted()
        if isinstance(error, typer.Exit):
            return error.exit_code
        if isinstance(error, LlmevoError):
            return _fail(str(error).replace("[", r"\["))
        if isinstance(error, OSError):  # e.g. the disk filled up while writing: no traceback
            where = f" ({error.filename})" if getattr(error, "filename", None) else ""
            return _fail(f"{error.strerror or error}{where}".replace("[", r"\["))
        if not _is_usage_error(error):  # a bug: keep its traceback
            raise
        context = getattr(error, "ctx", None)
        hint = f" (see '{context.command_path} --help')" if context is not None else ""
        return _fail(f"{error.format_message()}{hint}".replace("[", r"\["))
    if code == 130 or _received:  # typer returns 130 for a KeyboardInterrupt it caught
        return _interrupted()
    return code if isinstance(code, int) else 0


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one line on stderr and exit status 2;
    SIGINT and SIGTERM stop the command, which ends with one line and 130 or 143."""
    _received.clear()
    interrupts.reset()
    interrupts.defer_imports("torch")  # its C++ start-up cannot unwind an interrupt: it aborts
    _catch_signals(_unwind)
    excepthook, showwarning, unraisable = threading.excepthook, warnings.showwarning, sys.unraisablehook
    warnings.showwarning = _shown_as_a_line(showwarning)
    sys.unraisablehook = _quiet_after_stop(unraisable)
    try:
        status = _run(argv)
    finally:
        for number, handler in _BEFORE.items():
            signal.signal(number, handler)
        threading.excepthook, warnings.showwarning, sys.unraisablehook = excepthook, showwarning, unraisable
        interrupts.reset()  # the command is over: a caller in this process trains on unstopped
    if _received and any(not thread.daemon for thread in threading.enumerate()
                         if thread is not threading.main_thread()):
        # a library thread that the interrupt cut off before its owner could stop it (Optuna's
        # trial heartbeat, when the signal lands while it starts) would hold the exit forever
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    if status:
        sys.exit(status)
