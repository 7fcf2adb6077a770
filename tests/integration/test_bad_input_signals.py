"""Signals and options that cannot apply (issue 23, causes 4 and 6).

Signals: the command runs in a subprocess (``python -m llmevo``), as a user's shell runs it.
An interrupt is never ignored: SIGINT ends it with exit status 130, SIGTERM with 143 (128 +
the signal number, what a shell reports), one line on stderr, no traceback, no artifact,
and no worker process left behind. Nothing here waits a fixed time that assumes a speed:
each test polls for the state it needs (a worker process, a running trial) under a
deadline that only bounds a failure.

Options: an option that cannot apply to what was asked is an error (one line, exit 2,
nothing written), through the command line and, where there is one, the Python API.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import files_under, run_cli

REPO_ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 300.0  # seconds: bounds a failing test; a passing one polls and moves on at once
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
linux = pytest.mark.skipif(not sys.platform.startswith("linux"),
                           reason="reads /proc; workers die with their parent by PR_SET_PDEATHSIG")


# --- processes ------------------------------------------------------------------------------

def _start(args: list[str], cwd: Path, cache_dir: Path, data_dir: Path,
           preexec: Callable[[], None] | None = None) -> subprocess.Popen:
    """``python -m llmevo ARGS`` in its own session (a terminal's Ctrl-C reaches its group)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "LLMEVO_CACHE": str(cache_dir),
           "LLMEVO_DATA": str(data_dir), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "llmevo", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=preexec)


def _state(pid: int) -> str | None:
    """The process's state letter (``/proc/PID/stat``), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0]


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z", "X")  # a zombie has exited; only its entry is left


def _stat_fields(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def _children(pid: int) -> set[int]:
    """Live processes whose parent is ``pid``."""
    found = set()
    for entry in os.listdir("/proc"):
        fields = _stat_fields(entry) if entry.isdigit() else []
        if len(fields) > 1 and fields[1] == str(pid) and _alive(int(entry)):
            found.add(int(entry))
    return found


def _group(pgid: int) -> set[int]:
    """Live processes of the process group ``pgid``."""
    found = set()
    for entry in os.listdir("/proc"):
        fields = _stat_fields(entry) if entry.isdigit() else []
        if len(fields) > 2 and fields[2] == str(pgid) and _alive(int(entry)):
            found.add(int(entry))
    return found


def _wait_for(condition: Callable[[], object], what: str, timeout: float = DEADLINE) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"gave up after {timeout:.0f} s waiting for {what}")


def _finish(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=DEADLINE)
    return process.returncode, out, err


def _kill_all(process: subprocess.Popen, others: set[int]) -> tuple[str, str]:
    """Leave nothing running, whatever the test found; the command's stdout and stderr
    (read once every process that held them is gone)."""
    for pid in {process.pid, *others, *_group(process.pid)}:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return process.communicate()


def _gone(pids: set[int], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def assert_one_line_exit(status: int, err: str, code: int) -> None:
    assert status == code, f"exit {status}, expected {code}; stderr {err!r}"
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, f"expected one line on stderr, got {err!r}"


def _reproduce(out: Path, *extra: str) -> list[str]:
    return ["reproduce", "rope", "--preset", "smoke", "--threads", "1", "--device", "cpu",
            "--no-report", "--no-arm-cache", "--out", str(out), *extra]


# --- signals --------------------------------------------------------------------------------

def test_the_handlers_are_installed_before_the_command_line_is_imported():
    """``llmevo.cli`` catches SIGINT and SIGTERM before it imports typer, rich or any
    command (a quarter of a second in which Ctrl-C used to print a traceback)."""
    code = (
        "import signal, sys\n"
        "seen = {}\n"
        "class Spy:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name in ('typer', 'rich') and name not in seen:\n"
        "            seen[name] = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]\n"
        "sys.meta_path.insert(0, Spy())\n"
        "import llmevo.cli\n"
        "plain = (signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler)\n"
        "print(sorted(seen), all(h not in plain for hs in seen.values() for h in hs))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, timeout=DEADLINE).stdout
    assert out.split() == ["['rich',", "'typer']", "True"], out


def test_a_spawned_worker_keeps_its_own_signal_handling(tmp_path):
    """pip's console script imports ``llmevo.cli`` at its top, and a spawned worker process
    (evolution's) runs that script again as it starts: it must not take the command's
    handlers, which would print the command's one line from every worker."""
    script = tmp_path / "llmevo"  # what pip writes, and a spawned process asked what it handles
    script.write_text(
        "import sys\n"
        "from llmevo.cli import main\n"
        "if __name__ == '__main__':\n"
        "    import multiprocessing, signal\n"
        "    with multiprocessing.get_context('spawn').Pool(1) as pool:\n"
        "        print(pool.apply(signal.getsignal, (signal.SIGTERM,)) == signal.SIG_DFL)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         check=True, timeout=DEADLINE).stdout
    assert out.strip() == "True", out


def _blocked() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _ignored_and_blocked() -> None:  # a background job (`cmd &`) of a shell script ignores SIGINT
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _blocked()


@linux
@pytest.mark.parametrize("start", [_blocked, _ignored_and_blocked], ids=["blocked", "ignored"])
def test_a_sigint_sent_at_once_stops_the_command(start, tmp_path, cache_dir, data_dir):
    """SIGINT sent the moment the command starts, before it could install anything, and
    held pending (blocked) so that it arrives at the earliest instant the command runs:
    the command stops with one line and 130 and writes nothing. Started with SIGINT
    ignored, as a shell script's background job is, it is still not ignored."""
    out = tmp_path / "a.json"
    process = _start(_reproduce(out, "--steps", "2"), tmp_path, cache_dir, data_dir, start)
    try:
        process.send_signal(signal.SIGINT)
        status, _, err = _finish(process)
    finally:
        _kill_all(process, set())
    assert_one_line_exit(status, err, 130)
    assert "interrupted" in err
    assert not out.exists()


def test_a_thread_left_running_does_not_hold_an_interrupted_command(tmp_path):
    """A library thread that the interrupt cut off before its owner could stop it (Optuna's
    trial heartbeat, when Ctrl-C lands while that thread starts) would keep the process
    alive forever after the command ended: an interrupted command exits all the same."""
    code = (
        "import os, signal, threading, time\n"
        "from llmevo.cli import app, main\n"
        "@app.command('hang')\n"
        "def hang():\n"
        "    threading.Thread(target=threading.Event().wait).start()  # never stopped\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(60)\n"
        "main(['hang'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the interrupted command did not exit")
    assert_one_line_exit(done.returncode, done.stderr, 130)


def _parallel_run(tmp_path: Path, cache_dir: Path, data_dir: Path) -> tuple[subprocess.Popen, set[int], Path]:
    """A two-seed reproduction on the parallel path, polled until both workers train."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("the parallel path needs two CPU cores")
    out = tmp_path / "a.json"
    process = _start(_reproduce(out, "--steps", "1000000", "--path", "parallel", "--seeds", "42,43"),
                     tmp_path, cache_dir, data_dir)
    workers = _wait_for(lambda: (len(_children(process.pid)) >= 2 and _children(process.pid))
                        or process.poll() is not None, "two training workers")
    if workers is True:  # the command ended before its workers started
        _, err = process.communicate()
        pytest.fail(f"the command exited {process.returncode} before training: {err}")
    return process, set(workers), out


@linux
@pytest.mark.slow
@pytest.mark.parametrize(("number", "to_group"), [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["ctrl-c-to-the-process-group", "sigterm-to-the-command"])
def test_a_signal_during_parallel_training_stops_the_command_and_its_workers(
        number, to_group, tmp_path, cache_dir, data_dir):
    process, workers, out = _parallel_run(tmp_path, cache_dir, data_dir)
    try:
        if to_group:  # what a terminal does on Ctrl-C
            os.killpg(process.pid, number)
        else:
            os.kill(process.pid, number)
        status = process.wait(timeout=DEADLINE)  # not its pipes: a worker left behind holds them
        gone = _gone(workers)
    finally:
        _, err = _kill_all(process, workers)
    assert_one_line_exit(status, err, EXIT_STATUS[number])
    assert gone, "a worker outlived the command"
    assert not out.exists()


@linux
@pytest.mark.slow
def test_the_workers_die_with_a_killed_command(tmp_path, cache_dir, data_dir):
    """SIGKILL runs no handler: the workers go because the kernel signals them when their
    parent dies (PR_SET_PDEATHSIG), not because anyone cleans up."""
    process, workers, out = _parallel_run(tmp_path, cache_dir, data_dir)
    try:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=DEADLINE)
        gone = _gone(workers)
    finally:
        _kill_all(process, workers)
    assert gone, "a worker outlived the killed command"
    assert not out.exists()


def _training_trials(database: Path) -> int:
    """Trials whose objective is running (the state it records as it starts)."""
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute(
                "SELECT COUNT(*) FROM trial_user_attributes WHERE key = 'state' "
                "AND value_json = '\"running\"'").fetchone()[0]
    except sqlite3.Error:  # not created yet, or locked for a moment
        return 0


@linux
@pytest.mark.slow
def test_ctrl_c_during_evolve_is_one_line_and_leaves_the_study_resumable(tmp_path, cache_dir,
                                                                        data_dir):
    """Optuna reports an interrupted trial with a warning and its whole traceback (61
    lines); the command says it in one line, and the trial it was running is recorded as
    failed (one worker: it runs in the command's own process)."""
    database = tmp_path / "s.db"
    process = _start(["evolve", "--preset", "smoke", "--trials", "2", "--trial-steps", "1000000",
                      "--workers", "1", "--threads", "1", "--device", "cpu", "--study", "s",
                      "--storage", f"sqlite:///{database}", "--no-report",
                      "--trial-lr-factors", "none", "--promotion", "manifest"],
                     tmp_path, cache_dir, data_dir)
    try:
        _wait_for(lambda: _training_trials(database) or process.poll() is not None, "a running trial")
        os.killpg(process.pid, signal.SIGINT)
        status = process.wait(timeout=DEADLINE)
    finally:
        _, err = _kill_all(process, set())
    assert_one_line_exit(status, err, 130)
    assert "resumable" in err
    with sqlite3.connect(database) as connection:
        states = [row[0] for row in connection.execute("SELECT state FROM trials")]
    assert "RUNNING" not in states and "FAIL" in states, states


# --- options that cannot apply --------------------------------------------------------------



def assert_refused(args: list[str], capsys, work: Path, message: str) -> None:
    before = files_under(work)
    status = run_cli(args)
    err = capsys.readouterr().err
    assert status == 2, f"{args}: exit {status}, stderr {err!r}"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert message in err, err
    assert files_under(work) == before, f"{args}: wrote {files_under(work) - before}"


# tiny sizes, so that a case wrongly accepted finishes in seconds instead of measuring for real
TINY_BENCH = ["bench", "--threads", "1", "--batch-size", "2", "--seq-len", "8", "--steps", "2",
              "--warmup", "0"]

BENCH = [
    (["--path", "nosuch"], "--path applies to --replicas"),
    (["--path", "parallel"], "--path applies to --replicas"),
    (["--sequential"], "--sequential applies to --replicas"),
    (["--workers", "2"], "--workers applies to --replicas"),
    (["--replicas-max", "4"], "--replicas-max applies to --replicas"),
    (["--profile-top", "3"], "--profile-top applies to --profile"),
    (["--replicas", ""], "--replicas: no value given (expected e.g. 1,2,4)"),
    (["--replicas", "2", "--path", "nosuch"], "unknown training path 'nosuch'"),
    (["--replicas", "2", "--path", ""], "unknown training path ''"),
    (["--replicas", "2", "--path", "batched,batched"], "--path: batched is named twice"),
    (["--replicas", "2", "--path", "batched,sequential,batched"], "--path: batched is named twice"),
    (["--replicas", "2", "--sequential", "--path", "batched"], "--sequential is --path sequential"),
    (["--replicas", "2", "--path", "sequential,batched", "--workers", "2"],
     "--workers applies to the parallel paths"),
    (["--replicas", "2", "--precision", "bf16"], "--precision bf16 does not combine with --replicas"),
    (["--repetitions", "3"], "--repetitions applies to --fixed-costs"),
    (["--data-dir", "."], "--data-dir applies to --fixed-costs"),
    (["--no-bytecode-cache"], "--bytecode-cache applies to --fixed-costs"),
    (["--fixed-costs", "--repetitions", "0"], "--repetitions"),
    (["--fixed-costs", "--replicas", "2"], "--fixed-costs times whole commands"),
    (["--fixed-costs", "--profile"], "--fixed-costs times whole commands"),
]


@pytest.mark.parametrize(("args", "message"), BENCH, ids=[" ".join(a) or "''" for a, _ in BENCH])
def test_bench_options_that_cannot_apply_are_refused(args, message, capsys, workdir):
    assert_refused([*TINY_BENCH, *args], capsys, workdir, message)


def test_bench_library_refuses_a_path_named_twice():
    import torch

    from llmevo.bench import benchmark_replicas
    from llmevo.errors import ConfigError
    from llmevo.model.config import ModelConfig

    with pytest.raises(ConfigError, match="batched is named twice"):
        benchmark_replicas(ModelConfig(), torch.device("cpu"), [2], path=["batched", "batched"],
                           isolate=False)


GENES = [
    (["--explain", "--genes", ""], "--genes: expected gene names"),
    (["--explain", "--genes", "norm,,train.lr"], "--genes: expected gene names"),
    (["--explain", "--genes", "norm,norm"], "--genes: norm is named twice"),
    (["--genes", "norm"], "--genes applies to --explain"),
]


@pytest.mark.parametrize(("args", "message"), GENES, ids=[" ".join(a) for a, _ in GENES])
def test_evolve_genes_that_name_nothing_are_refused(args, message, capsys, workdir):
    # a missing data folder: a case wrongly accepted stops there instead of evolving
    assert_refused(["evolve", "--preset", "smoke", "--study", "none", "--data-dir",
                    str(workdir / "missing"), *args], capsys, workdir, message)


POST_TRAINING_OPTIONS = {
    "post_steps": ("--post-steps", 5), "post_batch_size": ("--post-batch-size", 4),
    "post_lr": ("--post-lr", 1e-4), "post_seed_offset": ("--post-seed-offset", 1),
    "method_config": ("--method-config", "beta=0.1"),
    "preference_file": ("--preference-file", "prefs.jsonl"),
    "arithmetic_max_operand": ("--arithmetic-max-operand", 9),
}


@pytest.mark.parametrize("field", list(POST_TRAINING_OPTIONS))
def test_a_post_training_option_for_another_component_is_refused_by_the_request(field, data_dir):
    from llmevo.errors import ConfigError
    from llmevo.experiments import ReproductionRequest

    option, value = POST_TRAINING_OPTIONS[field]
    request = ReproductionRequest(name="rope", data_dir=data_dir, **{field: value})
    # --method-config also configures a model-slot component now: a post-training key there
    # is refused by the component's own typed config, naming it
    expected = ("position component 'rope': beta: Extra inputs" if field == "method_config"
                else f"{option} .*post-training method.*'rope'")
    with pytest.raises(ConfigError, match=expected):
        request.plan()


def test_reproduce_refuses_a_post_training_option_for_another_component(capsys, workdir):
    assert_refused(["reproduce", "rope", "--steps", "2", "--threads", "1", "--device", "cpu",
                    "--post-steps", "5"], capsys, workdir, "--post-steps")


def test_a_post_training_method_still_takes_its_options(data_dir):
    from llmevo.experiments import ReproductionRequest

    plan = ReproductionRequest(name="sft", data_dir=data_dir, post_steps=5).plan()
    assert plan.post_training is not None and plan.post_training.settings.steps == 5
