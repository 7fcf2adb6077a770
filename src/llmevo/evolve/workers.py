"""Worker processes: each prepares its trial context once and runs trials until the study
has its finished trials.

Workers are processes (multiprocessing 'spawn'), each receiving the ``EvolutionPlan`` and
its share of CPU threads, each looping: fail stale trials, count finished trials, run one
more if the target is not met. One worker runs in the command's own process, on the
context the command prepared. Other machines join by running the same command against the
same storage and study. A worker dies with the command that spawned it (Linux ``prctl``),
and Ctrl-C (SIGINT or SIGTERM, to the command or its whole group) stops them all cleanly,
the command passing the signal on until they are gone: the in-flight trials are marked
failed, do not count and are enqueued again for the resumed study; multiprocessing's resource
tracker is stopped with them, so no process of the group outlives the command. An interrupt
never lands inside a storage call (``runner.storage.DeferringStorage``), and wherever else
it lands the worker fails the trial it last started on its way out; a worker that had to be
killed has its trial failed by the command (``fail_in_flight``).

Public API: ``build_space``, ``prepare_context``, ``run_workers``, ``worker_main``,
``worker_loop``, ``start_workers``, ``stop_workers``, ``fail_in_flight``, ``stop_resource_tracker``,
``check_workers_outcome``.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from multiprocessing import resource_tracker
from typing import Any

import optuna
import torch
from optuna.storages import fail_stale_trials
from optuna.trial import FrozenTrial, TrialState

from llmevo import interrupts
from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.evolve.objective import TrialContext, fail_interrupted, make_objective
from llmevo.evolve.plan import EvolutionPlan
from llmevo.evolve.proposer import Proposing
from llmevo.evolve.space import SearchSpace, build_search_space
from llmevo.evolve.study import finished_trials, is_finished, open_storage, open_study
from llmevo.runner.optuna_private import rdb_storage
from llmevo.runner.storage import DeferringStorage, fail_silent_trials, quiet_optuna
from llmevo.train.execution import WORKER_SIGNALS, die_with_parent

STOP_TIMEOUT = 60.0  # seconds interrupted workers get to record their trials (SQLite's lock timeout)
RESEND_INTERVAL = 0.5  # seconds between the SIGINTs passed on to workers still running
NO_TRIAL = -1  # a worker's in-flight slot between trials
MAX_ATTEMPTS_FACTOR = 3  # a worker stops after trials x this many attempts, finished or not


def build_space(plan: EvolutionPlan) -> SearchSpace:
    """The search space of the plan's promoted components around its trial preset."""
    return build_search_space(full_registry(), plan.trial_preset, base_model=plan.base_model,
                              promoted=plan.promoted)


def prepare_context(plan: EvolutionPlan, space: SearchSpace) -> TrialContext:
    """This process's trial context: the per-step logs (tensorboard installed?), the data
    (files verified, tokenized), the trial and final presets resolved on it, the device,
    and the post-training data when the space has a post-training gene (loaded by the first
    trial whose genome post-trains)."""
    from llmevo.data.lm import load_lm_corpus
    from llmevo.runner.views import prepare_bpe_data
    from llmevo.train.device import resolve_device

    logs = None
    if plan.tensorboard is not None:
        from llmevo.train.logging import TensorBoardLogs

        logs = TensorBoardLogs(plan.tensorboard)
    preset = plan.trial_preset
    corpus = load_lm_corpus(plan.data_dir, preset.variant, preset.budgets, plan.cache_dir)
    train_tokens = int(corpus.tokens["train"].numel())  # one-epoch presets -> steps
    trial_preset = preset.resolved(train_tokens)
    # the final preset differs from the trial preset in its validation budget only: same data
    data = prepare_bpe_data(corpus, trial_preset, plan.data_dir, trial_preset.train.seq_len, plan.cache_dir)
    post_data = None
    if set(space.components.get("post_training", ("none",))) != {"none"}:
        from llmevo.components.post_training.tasks import load_post_train_data

        stage = trial_preset.post_training  # the preset's stage, as a reproduction loads it

        @functools.cache
        def post_data() -> Any:  # loaded by the first trial whose genome post-trains
            return load_post_train_data(plan.data_dir, data.codec, trial_preset.train.seq_len,
                                        stage.arithmetic, None, stage.held_out_pairs)
    return TrialContext(
        plan=plan, space=space, data=data, trial_preset=trial_preset,
        final_preset=plan.final_preset.resolved(train_tokens), device=resolve_device(plan.device),
        logs=logs, post_data=post_data,
    )


def worker_loop(plan: EvolutionPlan, study: optuna.Study,
                objective: Callable[[optuna.Trial], float],
                log: Callable[[str], None] = lambda _: None,
                propose: Callable[[optuna.Study, int], bool] | None = None) -> int:
    """Run trials until the study has ``plan.trials`` finished ones; returns trials run.
    An interrupt stops a trial's objective (``interrupts.allowed``), never Optuna's
    recording of it, which runs deferred. The storage's ``started`` holds only the trial in
    flight (cleared after each); an interrupt that something swallowed (Optuna's ``catch``)
    still stops the loop. ``propose(study, finished)`` (an external proposer,
    ``proposer.Proposing.step``) fills the next trial before each one that no waiting trial
    fills: it enqueues a genome or records an invalid one (True), or ends the search (False)."""
    ran = 0
    storage = rdb_storage(study)
    limit = plan.trials * MAX_ATTEMPTS_FACTOR
    while ran < limit:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            fail_stale_trials(study)
            fail_silent_trials(study, plan.grace_period)
        trials = study.get_trials(deepcopy=False)
        done = sum(is_finished(t) for t in trials)
        running = sum(t.state == TrialState.RUNNING for t in trials)
        if done >= plan.trials:
            break
        if done + running >= plan.trials:
            time.sleep(min(2.0, plan.heartbeat))  # others hold the last trials
            continue
        if propose is not None and not any(t.state == TrialState.WAITING for t in trials):
            if not propose(study, done):
                break
            interrupts.stop_if_received()
            continue  # counted again: the answer may have been recorded as an invalid trial
        ended: list[FrozenTrial] = []
        with interrupts.deferred():  # Optuna's bookkeeping whole; the objective allows interrupts
            study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=False,
                           callbacks=[lambda _study, trial, into=ended: into.append(trial)])
        interrupts.stop_if_received()
        if isinstance(storage, DeferringStorage):
            storage.started.clear()  # that trial ended as Optuna records it
            if storage.on_start is not None:
                storage.on_start(NO_TRIAL)
        ran += 1
        for trial in ended:
            log(f"trial {trial.number}: {trial.user_attrs.get('state', trial.state.name.lower())}"
                f" value={trial.value}")
    return ran


def worker_main(plan: EvolutionPlan, index: int, context: TrialContext | None = None,
                in_flight: Any = None) -> int:
    """Entry point of one worker process; ``context``: the one the calling process prepared
    (one worker in the command's own process), else prepared here; ``in_flight``: a shared
    array whose slot ``index`` this worker keeps at the id of the trial it runs (``NO_TRIAL``
    between trials), for its parent to fail should it have to kill it. Interrupted: the
    trial it last started is failed and its genome enqueued again, wherever the interrupt
    landed (``fail_interrupted``); returns -1."""
    quiet_optuna()
    torch.set_num_threads(plan.threads_per_worker)
    if context is None:
        context = prepare_context(plan, build_space(plan))
    storage = open_storage(plan)
    if in_flight is not None:
        storage.on_start = functools.partial(in_flight.__setitem__, index)
    study = open_study(plan, context.space, storage)

    def log(line: str) -> None:
        print(f"[worker {index}] {line}", flush=True)

    propose = None
    if plan.proposer is not None:
        propose = Proposing(plan.proposer, context.space, plan.trials, log=log).step
    try:
        return worker_loop(plan, study, make_objective(context, worker=index), log=log,
                           propose=propose)
    except BaseException as error:
        if not isinstance(error, KeyboardInterrupt) and not interrupts.received():
            raise  # a bug, not a stop: keep its traceback
        # after a stop anything raised on the way out is its consequence
        with interrupts.deferred():  # a second Ctrl-C (one worker: the command's) waits for it
            for trial in storage.started[-1:]:
                fail_interrupted(study, trial, set(context.space.genes))
        return -1


def _stopping(_number: int, _frame: object) -> None:
    """A worker's handler once it is stopping: nothing. Not SIG_IGN: a signal that arrived
    with the first, and is handled after it, would find SIG_IGN and raise OSError ("signal
    ignored due to race condition") wherever the worker is."""


def _stop_once(number: int, _frame: object) -> None:
    """A worker's handler of SIGINT and SIGTERM: unwind as Ctrl-C does, once. The signal
    usually comes twice (a terminal's Ctrl-C reaches the whole group, and the command passes
    it on to its workers), so the second must not cut the first one's cleanup short (the
    interrupted trial being recorded); from then on a background thread's failure (Optuna's
    heartbeat finding SQLite locked while the trial rolls back) is a consequence, not news."""
    for each in WORKER_SIGNALS:
        signal.signal(each, _stopping)
    threading.excepthook = lambda _args: None
    interrupts.interrupt()  # not inside a database call: held until it returns


def _spawned(plan: EvolutionPlan, index: int, in_flight: Any = None) -> None:
    """A spawned worker. SIGINT and SIGTERM are ignored while it starts (a signal that
    reaches it then is lost: the command passes SIGINT on until its workers have gone), then
    stop it once, as Ctrl-C does; ignored (``_stopping``) once it is done, so that nothing is raised
    on its way out."""
    die_with_parent()
    try:
        for number in WORKER_SIGNALS:
            signal.signal(number, _stop_once)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WORKER_SIGNALS)
        worker_main(plan, index, in_flight=in_flight)
    except KeyboardInterrupt:
        pass
    finally:
        for number in WORKER_SIGNALS:
            signal.signal(number, _stopping)


def stop_workers(processes: list[Any], timeout: float = STOP_TIMEOUT) -> None:
    """Stop interrupted workers: pass SIGINT on, again every ``RESEND_INTERVAL`` (a worker
    still starting ignores it; one stopping ignores the repeats), give them ``timeout``
    seconds to record their trials, then kill what is left (``fail_in_flight`` fails the
    trials of those)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [process for process in processes if process.is_alive()]
        if not alive:
            break
        for process in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGINT)
        multiprocessing.connection.wait([p.sentinel for p in alive],
                                        timeout=min(RESEND_INTERVAL, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()  # SIGTERM is ignored once a worker is stopping
        process.join(timeout=5)


def fail_in_flight(plan: EvolutionPlan, context: TrialContext | None, trials: list[int]) -> None:
    """After the workers are gone: fail (``fail_interrupted``) a trial one still held, which
    a worker that had to be killed could not record (one that stopped by itself has)."""
    trials = [trial for trial in trials if trial != NO_TRIAL]
    if not trials:
        return
    space = context.space if context is not None else build_space(plan)
    study = optuna.load_study(study_name=plan.study_name,
                              storage=open_storage(plan, heartbeat=False))
    for trial in trials:
        fail_interrupted(study, trial, set(space.genes))


def stop_resource_tracker(timeout: float = 5.0) -> None:
    """End multiprocessing's resource tracker, which the first spawned worker started: it
    ignores SIGINT and SIGTERM and exits only when every holder of its pipe has, so it
    would outlive the command, a process of its group left running (private: the
    tracker's ``_fd`` and ``_pid``, as ``ResourceTracker._stop`` reads them; it restarts
    on demand)."""
    tracker = resource_tracker._resource_tracker
    fd, pid = getattr(tracker, "_fd", None), getattr(tracker, "_pid", None)
    if fd is None or pid is None:
        return
    tracker._fd = tracker._pid = None
    with contextlib.suppress(OSError):
        os.close(fd)  # its end of file: it cleans up and exits
    deadline = time.monotonic() + timeout
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:  # a holder of the pipe is still alive
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.01)


def check_workers_outcome(exit_codes: dict[str, int | None], finished: int, target: int) -> None:
    """After the workers end: a worker that died (killed, crashed) matters only when the
    study has not reached its target; otherwise the others finished its work, and the
    command goes on to the report."""
    failed = [name for name, code in exit_codes.items() if code not in (0, None)]
    if failed and finished < target:
        raise ConfigError(f"worker process(es) {', '.join(failed)} exited with an error and the "
                          f"study has {finished} of {target} trials; see their output above, then "
                          "rerun the same command to resume")


def start_workers(processes: list[Any]) -> None:
    """Start spawned workers with SIGINT and SIGTERM ignored in them until their handlers are
    in (a spawned child inherits an ignored signal, not a blocked mask), without this process
    ever throwing a Ctrl-C away. Both are ignored here only around the fork and exec of each
    child (multiprocessing's ``util.spawnv_passfds``, looked up at each call); the rest of the
    starts runs ``deferred``, so an interrupt is raised once every worker has started. Before:
    both were ignored (and blocked) for all the starts, and a Ctrl-C then was lost, the
    workers ignoring it too trained on (the stop that hung past 300 s): starting the resource
    tracker unblocks both signals in this process, and a blocked signal reaches the native
    threads (tokenizers, OpenMP) that do not block it, where SIG_IGN discards it."""
    spawnv = multiprocessing.util.spawnv_passfds

    def spawnv_ignoring(path: str, args: list[str], passfds: Any) -> int:
        previous = {number: signal.signal(number, signal.SIG_IGN) for number in WORKER_SIGNALS}
        try:
            return spawnv(path, args, passfds)
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    multiprocessing.util.spawnv_passfds = spawnv_ignoring
    try:
        with interrupts.deferred():
            for process in processes:
                process.start()
    finally:
        multiprocessing.util.spawnv_passfds = spawnv


def run_workers(plan: EvolutionPlan, context: TrialContext | None = None) -> None:
    """Run ``plan.workers`` worker processes to completion; one worker runs in this process
    (on ``context`` when given). Ctrl-C stops them cleanly (the in-flight trials are marked
    failed and do not count) and re-raises."""
    if plan.workers == 1:
        if worker_main(plan, 0, context) < 0:
            raise KeyboardInterrupt
        return
    spawn = multiprocessing.get_context("spawn")
    in_flight = spawn.Array("q", [NO_TRIAL] * plan.workers, lock=False)
    processes = [spawn.Process(target=_spawned, args=(plan, i, in_flight), name=f"llmevo-worker-{i}")
                 for i in range(plan.workers)]
    try:
        start_workers(processes)
        for process in processes:
            process.join()
    except KeyboardInterrupt:
        with interrupts.deferred():  # a second Ctrl-C cannot cut the stop short
            stop_workers([p for p in processes if p.pid is not None])
            fail_in_flight(plan, context, list(in_flight))
        raise
    finally:
        stop_resource_tracker()
    study = optuna.load_study(study_name=plan.study_name,
                              storage=open_storage(plan, heartbeat=False))
    check_workers_outcome({p.name: p.exitcode for p in processes},
                          finished=len(finished_trials(study)), target=plan.trials)
