"""Ctrl-C as a terminal sends it (SIGINT to the whole foreground process group), and SIGTERM,
stop ``llmevo evolve --workers 2`` at any moment (issue 37).

Each run is a subprocess in its own session (``python -m llmevo``), signalled through its
process group. It must end with exit status 130 (SIGINT) or 143 (SIGTERM), one line on
stderr and no traceback (none of a worker's either), leave no process of its group alive
(the workers, and multiprocessing's resource tracker, which ignores both signals), and
leave the study resumable: no trial RUNNING, each interrupted trial failed and its genome
enqueued again. Nothing waits a fixed time: each test polls for the state it needs under a
deadline that only bounds a failure.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import pytest
from test_bad_input_signals import (
    DEADLINE,
    EXIT_STATUS,
    _children,
    _group,
    _kill_all,
    _start,
    _training_trials,
    _wait_for,
    assert_one_line_exit,
    linux,
)

pytestmark = [linux, pytest.mark.slow]


def _evolve(database: Path, workers: int) -> list[str]:
    """Trials that never end by themselves (a million steps): a signal always lands mid-way."""
    return ["evolve", "--preset", "smoke", "--trials", "4", "--trial-steps", "1000000",
            "--workers", str(workers), "--threads", "1", "--device", "cpu", "--study", "s",
            "--storage", f"sqlite:///{database}", "--no-report",
            "--trial-lr-factors", "none", "--promotion", "manifest"]


def _stop(process, number: int) -> tuple[int, str, set[int]]:
    """Signal the process group as a terminal does; exit status, stderr, the group left."""
    try:
        os.killpg(process.pid, number)
        status = process.wait(timeout=DEADLINE)  # not its pipes: a process left holds them
        left = _group(process.pid)
    finally:
        _, err = _kill_all(process, set())
    return status, err, left


def _trials(database: Path) -> list[tuple[int, str, str | None, int | None]]:
    """(number, Optuna state, the objective's state, retry_of) per trial."""
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT trial_id, number, state FROM trials").fetchall()
        attrs = {(trial, key): value for trial, key, value in connection.execute(
            "SELECT trial_id, key, value_json FROM trial_user_attributes")}
    return [(number, state, attrs.get((trial, "state")), attrs.get((trial, "retry_of")))
            for trial, number, state in rows]


def assert_resumable(database: Path) -> None:
    trials = _trials(database)
    assert all(state != "RUNNING" for _, state, _, _ in trials), trials
    interrupted = [number for number, _, user_state, _ in trials if user_state == '"interrupted"']
    retried = sorted(int(retry) for *_, retry in trials if retry is not None)
    assert retried == sorted(interrupted), trials  # each interrupted genome is enqueued again


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_to_the_group_mid_trial_stops_two_workers(number, tmp_path, cache_dir, data_dir):
    database = tmp_path / "s.db"
    process = _start(_evolve(database, 2), tmp_path, cache_dir, data_dir)
    _wait_for(lambda: _training_trials(database) >= 2 or process.poll() is not None,
              "both workers training")
    status, err, left = _stop(process, number)
    assert_one_line_exit(status, err, EXIT_STATUS[number])
    assert "resumable" in err
    assert not left, f"processes of the group outlived the command: {left}"
    assert_resumable(database)
    assert any(user_state == '"interrupted"' for *_, user_state, _ in _trials(database))


def _spawned_workers(pid: int) -> int:
    """Children of ``pid`` that have exec'd multiprocessing's spawn entry point."""
    found = 0
    for child in _children(pid):
        try:
            found += b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            pass
    return found


def _ignores_sigint(pid: int) -> bool:
    """Whether the process has SIGINT set to SIG_IGN (``SigIgn`` in /proc/PID/status). The
    command ignores it only around each worker's fork and exec (so that the workers start
    ignoring it); a signal then is discarded, a window of about a millisecond per worker that
    a Ctrl-C "once the workers exist" used to hit by construction."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    ignored = next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(ignored, 16) & (1 << (signal.SIGINT - 1)))


def test_ctrl_c_while_the_workers_start_is_not_lost(tmp_path, cache_dir, data_dir):
    """A spawned worker ignores SIGINT while it imports and prepares its data: the group's
    signal reaches it then and is lost. The command passes it on until its workers are
    gone, so none goes on to train (before: both trained until killed, leaving their
    trials RUNNING)."""
    database = tmp_path / "s.db"
    process = _start(_evolve(database, 2), tmp_path, cache_dir, data_dir)
    _wait_for(lambda: (_spawned_workers(process.pid) >= 2 and not _ignores_sigint(process.pid))
              or process.poll() is not None, "the workers started (exec'd), the command handling SIGINT")
    status, err, left = _stop(process, signal.SIGINT)
    assert_one_line_exit(status, err, 130)
    assert not left, f"processes of the group outlived the command: {left}"
    if database.exists():
        assert_resumable(database)


def test_ctrl_c_with_one_worker_enqueues_the_interrupted_genome(tmp_path, cache_dir, data_dir):
    """The in-flight trial (here the baseline, trial 0) is failed and does not count; its
    genome is enqueued again, so the resumed study trains it rather than losing it."""
    database = tmp_path / "s.db"
    process = _start(_evolve(database, 1), tmp_path, cache_dir, data_dir)
    _wait_for(lambda: _training_trials(database) or process.poll() is not None, "a running trial")
    status, err, left = _stop(process, signal.SIGINT)
    assert_one_line_exit(status, err, 130)
    assert not left
    assert_resumable(database)
    with sqlite3.connect(database) as connection:
        waiting = connection.execute("SELECT number FROM trials WHERE state = 'WAITING'").fetchall()
    assert waiting == [(1,)], _trials(database)  # trial 0's genome, retried as trial 1
