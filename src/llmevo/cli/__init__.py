"""The ``llmevo`` command line. The only place that reads arguments and the environment.

Each area keeps its commands in its own module here and registers them on ``app``; the
import list below is explicit on purpose (no discovery by scanning). Command modules import
torch, Optuna, matplotlib and the model code inside their command functions, so that
``llmevo --help`` and usage errors answer at once (checked by a test).
"""

from __future__ import annotations

import sys

import typer

from llmevo.cli.common import app, console, err_console
from llmevo.errors import LlmevoError

__all__ = ["app", "console", "err_console", "main"]

# --- command modules (explicit import list; each registers its commands on `app`) ---
from llmevo.cli import artifacts as _artifacts  # noqa: E402,F401
from llmevo.cli import bench as _bench  # noqa: E402,F401
from llmevo.cli import components as _components  # noqa: E402,F401
from llmevo.cli import data as _data  # noqa: E402,F401
from llmevo.cli import evolve as _evolve  # noqa: E402,F401
from llmevo.cli import export as _export  # noqa: E402,F401
from llmevo.cli import inference as _inference  # noqa: E402,F401
from llmevo.cli import reports as _reports  # noqa: E402,F401
from llmevo.cli import reproduce as _reproduce  # noqa: E402,F401

# --- end of command modules ---


def _is_usage_error(error: BaseException) -> bool:
    """A click exception (typer vendors click as ``typer._click`` since 0.2x, so match by
    class name rather than importing either module)."""
    return any(cls.__name__ == "ClickException" for cls in type(error).__mro__)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` as one line on stderr and exit with ``code``."""
    err_console.print(f"[bold red]error:[/] {_one_line(message)}", highlight=False,
                      soft_wrap=True, markup=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one line on stderr and exit status 2."""
    try:
        code = app(args=argv, standalone_mode=False, prog_name="llmevo")
        if isinstance(code, int) and code:
            if code == 130:  # typer returns it on Ctrl-C in non-standalone mode
                err_console.print("interrupted")
            sys.exit(code)
    except LlmevoError as error:
        fail(str(error).replace("[", r"\["))
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except typer.Abort:
        err_console.print("interrupted")
        sys.exit(130)
    except OSError as error:  # e.g. the disk filled up while writing: no traceback
        where = f" ({error.filename})" if getattr(error, "filename", None) else ""
        fail(f"{error.strerror or error}{where}".replace("[", r"\["))
    except Exception as error:  # click usage errors arrive here in non-standalone mode
        if not _is_usage_error(error):
            raise
        context = getattr(error, "ctx", None)
        hint = f" (see '{context.command_path} --help')" if context is not None else ""
        fail(f"{error.format_message()}{hint}".replace("[", r"\["))
