"""The launcher (issue 36, item 5): submitit jobs as the workers of shared work, tested with
submitit's local executor (SQLite here; PostgreSQL where ``LLMEVO_TEST_POSTGRES_URL`` is set)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import run_cli

from llmevo.errors import ConfigError
from llmevo.eval.stats import check_margin
from llmevo.experiments.launcher import launch
from llmevo.experiments.sections import LaunchSection

TABLE = ["reproduce", "--all", "--only", "rope", "--preset", "smoke", "--steps", "3", "--seeds", "42,43,44",
         "--tune-grid", "1e-3,3e-3", "--threads", "1", "--device", "cpu"]


def _per_seed(folder) -> list:
    (artifact,) = sorted(folder.rglob("public-*.json"))
    return json.loads(artifact.read_text())["per_seed"]


def _table(tmp_path, monkeypatch, data_dir, storage: str, capsys) -> None:
    """The table launched as two local jobs on ``storage``, against the same table run here."""
    launched, plain = tmp_path / "launched", tmp_path / "plain"
    for folder in (launched, plain):
        folder.mkdir()
    monkeypatch.setenv("LLMEVO_CACHE", str(tmp_path / "cache-launched"))  # the jobs inherit it
    monkeypatch.chdir(launched)
    assert run_cli([*TABLE, "--data-dir", str(data_dir), "--out", str(launched / "table"), "--storage", storage,
                    "--launcher", "local", "--jobs", "2"]) == 0
    jobs = sorted((launched / "table" / "submitit").glob("*_log.out"))
    assert len(jobs) == 2  # two workers ran
    # the launching process, which runs nothing itself, says how far the table is (at least at the end)
    assert "comparisons: 1 of 1 finished; last finished: rope " in capsys.readouterr().out
    monkeypatch.setenv("LLMEVO_CACHE", str(tmp_path / "cache-plain"))  # nothing shared with the jobs
    monkeypatch.chdir(plain)
    assert run_cli([*TABLE, "--data-dir", str(data_dir), "--out", str(plain / "table")]) == 0
    # the comparison the jobs ran is the one this process runs: the same numbers, seed for seed
    assert _per_seed(launched / "runs") == _per_seed(plain / "runs")


@pytest.mark.slow
def test_launched_jobs_run_the_table_as_this_process_would(tmp_path, monkeypatch, data_dir, capsys):
    _table(tmp_path, monkeypatch, data_dir, f"sqlite:///{tmp_path}/queue.db", capsys)


@pytest.mark.postgres
@pytest.mark.slow
def test_launched_jobs_share_a_postgresql_queue(tmp_path, monkeypatch, data_dir, capsys):
    url = os.environ.get("LLMEVO_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("LLMEVO_TEST_POSTGRES_URL is not set")
    from llmevo.experiments.work_queue import open_work_queue  # noqa: F401 (the queue the jobs share)

    _table(tmp_path, monkeypatch, data_dir, url, capsys)


def test_a_job_that_fails_or_dies_is_one_line(tmp_path):
    local = LaunchSection(launcher="local", jobs=1)
    with pytest.raises(ConfigError, match=r"^job \d+: the non-inferiority margin must be a positive percentage"):
        launch(functools.partial(check_margin, -1.0), local, tmp_path / "failed", "failed")
    with pytest.raises(ConfigError, match=r"^job \d+ did not finish .*its log: "):
        launch(functools.partial(os._exit, 3), local, tmp_path / "died", "died")
    assert launch(functools.partial(check_margin, 2.0), local, tmp_path / "fine", "fine") == 2.0


def _sigint_ignored() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _sigint_blocked() -> Iterator[None]:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@pytest.mark.parametrize("state", [contextlib.nullcontext, contextlib.contextmanager(_sigint_ignored),
                                   contextlib.contextmanager(_sigint_blocked)],
                         ids=["plain", "sigint-ignored", "sigint-blocked"])
def test_an_interrupt_cancels_every_job(tmp_path, state):
    """Whatever the launching process does with SIGINT (a script's background job ignores it),
    the jobs take the cancel's SIGINT, and one that does not stop is killed: none outlives the
    launch. The jobs inherited an ignored or blocked SIGINT, and survived (a suite run)."""
    folder = tmp_path / "interrupted"

    def interrupt(line: str) -> None:
        if line.startswith("jobs:"):
            raise KeyboardInterrupt

    with state(), pytest.raises(KeyboardInterrupt):
        before = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, set())
        try:
            launch(functools.partial(time.sleep, 120), LaunchSection(launcher="local", jobs=2), folder,
                   "sleepers", on_status=interrupt)
        finally:  # the launching process's own handling is set back as it was
            assert (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, set())) == before
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # no job outlives the launch
        alive = subprocess.run(["pgrep", "-f", str(folder)], capture_output=True, text=True).stdout.split()
        if not alive:
            break
        time.sleep(0.5)
    assert alive == []


@pytest.mark.parametrize("args, message", [
    (["--launcher", "local"], "--launcher needs --storage"),
    (["--jobs", "3"], "--jobs applies to --launcher only"),
    (["--storage", "sqlite:///x.db", "--launcher", "local", "--slurm-partition", "gpu"],
     "--slurm-partition applies to --launcher slurm"),
    (["--storage", "sqlite:///x.db", "--launcher", "local", "--jobs", "0"], "--jobs"),
    (["--storage", "sqlite:///x.db", "--launcher", "pbs"], "--launcher"),
])
def test_launch_options_that_cannot_apply_are_refused(tmp_path, data_dir, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert run_cli([*TABLE, "--data-dir", str(data_dir), "--out", str(tmp_path / "t"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "t" / "submitit").exists() and not (tmp_path / "runs").exists()


def test_a_single_comparison_refuses_the_launcher(tmp_path, data_dir, capsys):
    assert run_cli(["reproduce", "rope", "--launcher", "local", "--data-dir", str(data_dir)]) == 2
    assert "--launcher applies to --all only" in capsys.readouterr().err


@pytest.mark.skipif(subprocess.run(["which", "sbatch"], capture_output=True).returncode == 0,
                    reason="Slurm is installed here")
def test_slurm_without_slurm_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="no Slurm on this machine"):
        launch(functools.partial(check_margin, 2.0), LaunchSection(launcher="slurm"), tmp_path, "x")


@pytest.mark.slow
def test_evolve_workers_as_launched_jobs(tmp_path, monkeypatch, data_dir):
    """An evolution whose workers are two local jobs on the study's SQLite storage: each job
    ran trials, the study reached its trials, and this process wrote the final comparison."""
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "report"
    assert run_cli(["evolve", "--preset", "smoke", "--trials", "3", "--trial-steps", "4", "--threads", "1",
                    "--eval-windows", "2", "--promotion", "manifest", "--storage", f"sqlite:///{tmp_path}/s.db",
                    "--study", "launched", "--out", str(report), "--seeds", "42,43,44", "--no-final-tune",
                    "--data-dir", str(data_dir), "--launcher", "local", "--jobs", "2"]) == 0
    logs = [path.read_text() for path in sorted((report / "submitit").glob("*_log.out"))]
    assert len(logs) == 2 and all("trial" in log for log in logs)  # both workers took trials
    summary = json.loads((report / "summary.json").read_text())
    assert summary["trial_counts"]["complete"] >= 3
    assert (report / "final-comparison.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--workers", "2", "--launcher", "local"], "give --jobs instead"),
    (["--jobs", "2"], "--jobs applies to --launcher only"),
    (["--explain", "--launcher", "local"], "--launcher applies to a search"),
])
def test_evolve_launch_options_that_cannot_apply_are_refused(tmp_path, monkeypatch, data_dir, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    code = run_cli(["evolve", "--preset", "smoke", "--trials", "2", "--storage", f"sqlite:///{tmp_path}/s.db",
                    "--data-dir", str(data_dir), *args])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "s.db").exists()


def test_a_local_job_that_ignores_its_cancel_is_killed_with_its_processes():
    """The last resort: a job whose controller and task both ignore SIGINT (whatever the cause)
    is killed, the task (its child) too, after the grace period."""
    import sys
    from types import SimpleNamespace

    from llmevo.experiments.launcher import _descendants, _end_local_jobs

    script = ("import signal, subprocess, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); time.sleep(120)")
    controller = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while not _descendants(controller.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    task = _descendants(controller.pid)
    assert task, "the controller never started its task"
    controller.send_signal(signal.SIGINT)  # what submitit's cancel does: ignored here
    _end_local_jobs([SimpleNamespace(_process=controller)], grace=0.5)
    assert controller.poll() is not None
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in task) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in task if _alive(pid)]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, or a process gone, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
