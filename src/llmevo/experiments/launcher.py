"""A cluster launcher on an existing engine: submitit runs the workers of shared work.

Shared work is already a queue on an Optuna RDB storage (``experiments.work_queue``): the
comparisons of ``reproduce --all --storage URL``, the rungs of ``ladder --storage URL``, the
trials of an ``evolve`` study. Any
process that runs the same request becomes one more worker of that queue. ``launch`` submits
``jobs`` such workers through submitit (https://github.com/facebookincubator/submitit): as
``local`` processes on this machine (its ``LocalExecutor``) or as a Slurm job array. The
queue stays the single source of truth: which items are done, which are held by whom, what
each produced. The schedulable unit is the queue's item, one paired comparison (both arms
and all its seeds in one job) or one rung, so pairing and device parity survive; the arm
cache (on a shared filesystem) lets an arm shared by several comparisons train once
(``evidence.shared_arm_needs``).

A job that Slurm preempts or times out is checkpointed by submitit (``Checkpointable``) and
requeued: its held item's trial goes silent, the next worker to look fails it, and the item
is enqueued again (``work_queue``), so the requeued job, or another, runs it again (its
finished runs from the arm cache). A job that fails with an error stops with one line, and so
does the launch; Ctrl-C cancels every job. The launching process waits for the jobs and
returns the first job's result (each worker returns the whole work once every item is done).

Public API: ``launch``, ``job_folder``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from llmevo.errors import ConfigError, LlmevoError
from llmevo.experiments.sections import LaunchSection

T = TypeVar("T")
POLL_SECONDS = 2.0
DESCRIBE_SECONDS = 10.0  # how often the work's own progress line is read (a database query)
STOP_GRACE_SECONDS = 10.0  # a cancelled local job's time to stop before it is killed


def job_folder(section: LaunchSection, beside: Path) -> Path:
    """Where submitit keeps the jobs' files and logs: ``launcher_folder``, else
    ``<beside>/submitit``."""
    return section.launcher_folder if section.launcher_folder is not None else beside / "submitit"


class _Worker(Generic[T]):
    """One job: ``work()``, an error returned as its one line (so the launch reports it as
    one line, not a remote traceback). Requeued by Slurm on preemption or timeout
    (``checkpoint``: submitit's ``Checkpointable`` protocol, the same call again)."""

    def __init__(self, work: Callable[[], T]):
        self.work = work

    def __call__(self) -> tuple[str, Any]:
        try:
            return "done", self.work()
        except LlmevoError as error:
            return "error", str(error).splitlines()[0] if str(error) else type(error).__name__

    def checkpoint(self) -> Any:
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self)


def launch(work: Callable[[], T] | Sequence[Callable[[], T]], section: LaunchSection, folder: Path, name: str,
           on_status: Callable[[str], None] | None = None,
           describe: Callable[[], str | None] | None = None) -> T:
    """Submit ``section.jobs`` workers each running ``work()`` (a picklable callable; or one
    callable per job, e.g. each with its worker index), wait for every job, and return the
    first job's result. ``on_status`` receives a line whenever the jobs' states change, and
    ``describe()``'s line (how far the work is, e.g. ``work_queue.queue_progress``; None: nothing
    to say) whenever it changes, asked every ``DESCRIBE_SECONDS`` and once more at the end. A job
    that ends with an error, or dies, raises one ``ConfigError`` line naming it and its log;
    Ctrl-C cancels every job and is raised again."""
    import submitit

    if section.launcher is None:
        raise ConfigError("no launcher chosen (--launcher local or slurm)")
    if section.launcher == "slurm" and shutil.which("sbatch") is None:
        raise ConfigError("--launcher slurm: no Slurm on this machine (sbatch is not on PATH); "
                          "submit from a login node, or use --launcher local")
    executor = submitit.AutoExecutor(folder=folder, cluster=section.launcher)
    parameters: dict[str, Any] = {"name": name, "timeout_min": section.job_minutes}
    if section.launcher == "slurm":
        parameters.update(slurm_array_parallelism=section.jobs,
                          **({} if section.slurm_partition is None else
                             {"slurm_partition": section.slurm_partition}))
    executor.update_parameters(**parameters)
    works = [work] * section.jobs if callable(work) else list(work)
    if len(works) != section.jobs:
        raise ConfigError(f"{len(works)} pieces of work for {section.jobs} jobs")
    jobs = []
    try:
        with _children_take_sigint(), executor.batch():
            for one in works:
                jobs.append(executor.submit(_Worker(one)))
        if on_status is not None:
            on_status(f"submitted {len(jobs)} {section.launcher} job(s): "
                      f"{', '.join(str(job.job_id) for job in jobs)}; logs in {folder}")
        last, said, asked = "", None, 0.0

        def tell() -> None:
            nonlocal said, asked
            asked = time.monotonic()
            line = None if describe is None or on_status is None else describe()
            if line is not None and line != said:
                on_status(line)
                said = line

        while not all(job.done() for job in jobs):
            states = [job.state for job in jobs]
            line = ", ".join(f"{states.count(state)} {state.lower()}" for state in sorted(set(states)))
            if on_status is not None and line != last:
                on_status(f"jobs: {line}")
            last = line
            if time.monotonic() - asked >= DESCRIBE_SECONDS:
                tell()
            time.sleep(POLL_SECONDS)
        tell()
        results = [_result(job, folder) for job in jobs]
    except BaseException:  # Ctrl-C, SIGTERM or a failed job: no job outlives the launch
        for job in jobs:
            if not job.done():
                job.cancel(check=False)
        _end_local_jobs(jobs)
        raise
    return results[0]


@contextlib.contextmanager
def _children_take_sigint() -> Iterator[None]:
    """Start processes that act on SIGINT whatever this one does with it: submitit cancels a
    local job with SIGINT, and a child inherits an ignored SIGINT (a script's background job
    runs so) and a blocked one (a job cancelled so trained on). A Python handler is reset to
    the default across exec, so SIGINT is handled (``default_int_handler``) and unblocked here
    while the jobs start, then set back."""
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}) if hasattr(signal, "pthread_sigmask") else None
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _end_local_jobs(jobs: list[Any], grace: float = STOP_GRACE_SECONDS) -> None:
    """Local jobs that a cancel (SIGINT) did not end within ``grace`` seconds are killed with
    their processes (submitit's controller and the task it runs): no job outlives a launch.
    Slurm jobs are scancel's (submitit's ``cancel``)."""
    processes = [process for job in jobs if (process := getattr(job, "_process", None)) is not None]
    deadline = time.monotonic() + grace
    while any(process.poll() is None for process in processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    for process in processes:
        if process.poll() is None:
            for pid in [*_descendants(process.pid), process.pid]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            process.wait()


def _descendants(pid: int) -> list[int]:
    """The live descendants of ``pid``, from /proc (none where there is no /proc)."""
    parents: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                    parents.setdefault(parent, []).append(int(entry))
    found, frontier = [], [pid]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found.extend(children)
        frontier.extend(children)
    return found


def _result(job: Any, folder: Path) -> Any:
    """The job's result, or one line: its error, or how it died and where its log is."""
    try:
        outcome, value = job.result()
    except Exception as error:  # submitit's FailedJobError / UncompletedJobError: a job that died
        lines = [line for line in str(error).splitlines() if line.strip()]
        raise ConfigError(f"job {job.job_id} did not finish ({lines[-1].strip() if lines else type(error).__name__}); "
                          f"its log: {job.paths.stderr}") from None
    if outcome == "error":
        raise ConfigError(f"job {job.job_id}: {value}")
    return value
