"""The ``llmevo`` command line. The only place that reads arguments and the environment.

Each area keeps its commands in its own module here and registers them on ``app``; the
import list below is explicit on purpose (no discovery by scanning).
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


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one line on stderr and exit status 2."""
    try:
        code = app(args=argv, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)  # e.g. 130: typer returns it on Ctrl-C in non-standalone mode
    except LlmevoError as error:
        err_console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as error:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(error, click.ClickException):
            error.show()
            sys.exit(2)
        raise
