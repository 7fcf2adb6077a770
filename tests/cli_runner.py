"""Run the ``llmevo`` command in this process, as tests do: the exit status, never SystemExit."""

from __future__ import annotations

from pathlib import Path

from llmevo.cli import main


def run_cli(args: list[str]) -> int:
    """``llmevo ARGS``: 0 on success, else the exit status (1 for a message-only exit)."""
    try:
        main(args)
    except SystemExit as exit_:
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else 1
    return 0


def files_under(folder: Path) -> set[Path]:
    """Every file and folder below ``folder``, relative to it (what a command left behind)."""
    return {p.relative_to(folder) for p in folder.rglob("*")}


def assert_refused(args: list[str], message: str, capsys, workdir: Path) -> None:
    """``llmevo ARGS`` is refused as bad input: exit status 2, one line on stderr holding
    ``message``, no traceback, and nothing written under ``workdir``."""
    before = files_under(workdir)
    status = run_cli(args)
    err = capsys.readouterr().err
    assert status == 2, f"{args}: exit {status}, stderr {err!r}"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert message in err, err
    assert files_under(workdir) == before


def build_the_command_once(monkeypatch) -> None:
    """Typer builds the click command from the app's signatures on every ``run_cli`` (about
    0.18 s; two thirds of an option walk's time, profiled): built once for the rest of a test,
    as one process of the command builds it once."""
    import typer.main

    from llmevo.cli import commands

    commands()  # every command's module registered before the one build (the CLI imports lazily)
    built: dict = {}
    original = typer.main.get_command

    def get_command(typer_instance):
        if id(typer_instance) not in built:
            built[id(typer_instance)] = original(typer_instance)
        return built[id(typer_instance)]

    monkeypatch.setattr(typer.main, "get_command", get_command)
