"""Worker processes: each prepares its trial context once and runs trials until the study
has its finished trials.

Workers are processes (multiprocessing 'spawn'), each receiving the ``EvolutionPlan`` and
its share of CPU threads, each looping: fail stale trials, count finished trials, run one
more if the target is not met. One worker runs in the command's own process, on the
context the command prepared. Other machines join by running the same command against the
same storage and study. A worker dies with the command that spawned it (Linux ``prctl``),
and Ctrl-C stops them all cleanly: the in-flight trials are marked failed and do not count.

Public API: ``build_space``, ``prepare_context``, ``run_workers``, ``worker_main``,
``worker_loop``, ``check_workers_outcome``.
"""

from __future__ import annotations

import functools
import multiprocessing
import signal
import time
import warnings
from collections.abc import Callable
from typing import Any

import optuna
import torch
from optuna.storages import fail_stale_trials
from optuna.trial import FrozenTrial, TrialState

from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.evolve.objective import TrialContext, make_objective
from llmevo.evolve.plan import EvolutionPlan
from llmevo.evolve.space import SearchSpace, build_search_space
from llmevo.evolve.study import finished_trials, is_finished, open_storage, open_study
from llmevo.runner.storage import fail_silent_trials, quiet_optuna
from llmevo.train.execution import WORKER_SIGNALS, die_with_parent

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
    from llmevo.runner.data import prepare_bpe_data
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
    data = prepare_bpe_data(corpus, trial_preset, plan.data_dir, trial_preset.train.seq_len)
    post_data = None
    if set(space.components.get("post_training", ("none",))) != {"none"}:
        from llmevo.components.post_training.tasks import ArithmeticConfig, load_post_train_data

        @functools.cache
        def post_data() -> Any:  # loaded by the first trial whose genome post-trains
            return load_post_train_data(plan.data_dir, data.codec, trial_preset.train.seq_len,
                                        ArithmeticConfig())
    return TrialContext(
        plan=plan, space=space, data=data, trial_preset=trial_preset,
        final_preset=plan.final_preset.resolved(train_tokens), device=resolve_device(plan.device),
        logs=logs, post_data=post_data,
    )


def worker_loop(plan: EvolutionPlan, study: optuna.Study,
                objective: Callable[[optuna.Trial], float],
                log: Callable[[str], None] = lambda _: None) -> int:
    """Run trials until the study has ``plan.trials`` finished ones; returns trials run."""
    ran = 0
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
            time.sleep(min(2.0, plan.heartbeat_interval))  # others hold the last trials
            continue
        ended: list[FrozenTrial] = []
        study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=False,
                       callbacks=[lambda _study, trial, into=ended: into.append(trial)])
        ran += 1
        for trial in ended:
            log(f"trial {trial.number}: {trial.user_attrs.get('state', trial.state.name.lower())}"
                f" value={trial.value}")
    return ran


def worker_main(plan: EvolutionPlan, index: int, context: TrialContext | None = None) -> int:
    """Entry point of one worker process; ``context``: the one the calling process prepared
    (one worker in the command's own process), else prepared here."""
    quiet_optuna()
    torch.set_num_threads(plan.threads_per_worker)
    if context is None:
        context = prepare_context(plan, build_space(plan))
    study = open_study(plan, context.space, open_storage(plan))
    try:
        return worker_loop(plan, study, make_objective(context, worker=index),
                           log=lambda line: print(f"[worker {index}] {line}", flush=True))
    except KeyboardInterrupt:
        return -1


def _spawned(plan: EvolutionPlan, index: int) -> None:
    die_with_parent()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # ignored while importing
    try:
        worker_main(plan, index)
    except KeyboardInterrupt:
        pass


def check_workers_outcome(exit_codes: dict[str, int | None], finished: int, target: int) -> None:
    """After the workers end: a worker that died (killed, crashed) matters only when the
    study has not reached its target; otherwise the others finished its work, and the
    command goes on to the report."""
    failed = [name for name, code in exit_codes.items() if code not in (0, None)]
    if failed and finished < target:
        raise ConfigError(f"worker process(es) {', '.join(failed)} exited with an error and the "
                          f"study has {finished} of {target} trials; see their output above, then "
                          "rerun the same command to resume")


def run_workers(plan: EvolutionPlan, context: TrialContext | None = None) -> None:
    """Run ``plan.workers`` worker processes to completion; one worker runs in this process
    (on ``context`` when given). Ctrl-C stops them cleanly (the in-flight trials are marked
    failed and do not count) and re-raises."""
    if plan.workers == 1:
        if worker_main(plan, 0, context) < 0:
            raise KeyboardInterrupt
        return
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=_spawned, args=(plan, i), name=f"llmevo-worker-{i}")
                 for i in range(plan.workers)]
    # the children start with SIGINT ignored (a spawned child inherits that, not a blocked
    # mask); here it is held meanwhile, so one that arrives is received afterwards, not lost
    held = signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_SIGNALS)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for process in processes:
            process.start()
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    try:
        for process in processes:
            process.join()
    except KeyboardInterrupt:
        for process in processes:  # they received SIGINT too; give them time to record it
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        raise
    study = optuna.load_study(study_name=plan.study_name,
                              storage=open_storage(plan, heartbeat=False))
    check_workers_outcome({p.name: p.exitcode for p in processes},
                          finished=len(finished_trials(study)), target=plan.trials)
