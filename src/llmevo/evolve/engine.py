"""Study storage, validation and workers.

The study lives in an Optuna RDB storage (a SQLite file by default, any SQLAlchemy URL
such as PostgreSQL). A new study stores its search space, preset and sampler as study user
attributes; reopening it with different ones is refused. Trial 0 of a new study is the
baseline genome (``llama_modern`` with the preset's training settings), enqueued so that
the population starts from it.

Workers are processes (multiprocessing 'spawn'), each with its share of CPU threads, each
looping: fail stale trials, count finished trials, run one more if the target is not met.
Other machines join by running the same command against the same storage and study.
Heartbeats (``heartbeat_interval``/``grace_period``) detect a worker killed mid-trial; its
trial is marked failed and retried once (``RetryFailedTrialCallback``). Finished trials
are those in a final state (complete, pruned, diverged, failed, invalid, duplicate); a
trial lost to a kill or Ctrl-C does not count, so re-running the command resumes.

Public API: ``EvolveSettings``, ``open_storage``, ``open_study``, ``finished_trials``,
``run_workers``, ``worker_main``, ``SAMPLERS``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import multiprocessing
import signal
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.samplers import BaseSampler, NSGAIISampler, RandomSampler, TPESampler
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback, fail_stale_trials
from optuna.trial import FrozenTrial, TrialState

from llmevo.catalog import ensure_registered
from llmevo.errors import ConfigError
from llmevo.evolve.objective import FINAL_STATES, TrialContext, make_objective
from llmevo.evolve.optuna_private import has_heartbeat, rdb_storage, study_storage, trial_id
from llmevo.evolve.pruner import HurdlePruner
from llmevo.evolve.sampler import RegularizedEvolutionSampler
from llmevo.evolve.space import SearchSpace, build_search_space
from llmevo.runner.presets import Preset

SPACE_ATTR = "llmevo:search_space"
PRESET_ATTR = "llmevo:preset"
SAMPLER_ATTR = "llmevo:sampler"
LR_FACTORS_ATTR = "llmevo:trial_lr_factors"


@dataclass(frozen=True)
class EvolveSettings:
    """Everything a worker needs (picklable: sent to spawned processes)."""

    study_name: str
    storage_url: str
    preset: Preset  # the trial preset (steps / validation budget for search trials)
    sampler: str = "regularized"
    trials: int = 24
    workers: int = 1
    population: int = 8
    tournament: int = 3
    rescore_seeds: int = 2
    score_k: float = 1.0
    search_seed: int = 1000
    sampler_seed: int | None = None
    data_dir: Path = Path(".")
    cache_dir: Path = Path(".cache/llmevo")
    device: str = "cpu"
    threads_per_worker: int = 1
    heartbeat_interval: int = 5
    grace_period: int = 20
    max_retry: int = 1
    hurdle_fractions: tuple[float, ...] = (0.5,)
    hurdle_windows: int = 16
    hurdle_margin: float = 0.05
    max_attempts_factor: int = 3
    extra: dict[str, Any] = field(default_factory=dict)
    promoted: tuple[str, ...] | None = None  # components in the space; None: manifest flags
    execution_path: str = "auto"  # how multi-seed training runs (llmevo.train.many paths)
    replicas_max: int | None = None
    lr_factors: tuple[float, ...] = ()  # fair trials (evolve.fair): each trial at lr x factor, best counts
    tensorboard_dir: Path | None = None  # TensorBoard runs: one per trial and seed, plus "trials"


SAMPLERS: dict[str, Callable[[EvolveSettings, SearchSpace], BaseSampler]] = {
    "regularized": lambda s, space: RegularizedEvolutionSampler(
        space, population=s.population, tournament=s.tournament, seed=s.sampler_seed),
    "nsga2": lambda s, space: NSGAIISampler(population_size=s.population, seed=s.sampler_seed),
    "tpe": lambda s, space: TPESampler(seed=s.sampler_seed, n_startup_trials=s.population),
    "random": lambda s, space: RandomSampler(seed=s.sampler_seed),
}


def check_sampler(name: str) -> None:
    if name not in SAMPLERS:
        raise ConfigError(f"unknown sampler '{name}'; known: {', '.join(SAMPLERS)}")


def sqlite_path(url: str) -> Path | None:
    prefix = "sqlite:///"
    return Path(url[len(prefix):]) if url.startswith(prefix) else None


def check_storage_url(url: str) -> None:
    """Refuse, before anything is created, a SQLite study file that cannot be one: a folder,
    a file under a file, or an unwritable folder. Other URLs are checked on connection."""
    path = sqlite_path(url)
    if path is None:
        if "://" not in url:
            raise ConfigError(f"--storage '{url[:80]}' is not a SQLAlchemy URL "
                              "(expected e.g. sqlite:///runs/evolve/study.db)")
        return
    if path.is_dir():
        raise ConfigError(f"study storage {path} is a folder; expected a SQLite file path")
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"study storage {path}: {folder} is a file, not a folder")
    if path.exists():
        with open(path, "rb") as handle:
            header = handle.read(16)
        if header and header != b"SQLite format 3\x00":
            raise ConfigError(f"study storage {path} exists and is not a SQLite database")
        return
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ConfigError(f"study storage {path}: cannot write in {folder} "
                          f"({error.strerror or error})") from None


def open_storage(settings: EvolveSettings, heartbeat: bool = True) -> RDBStorage:
    """The RDB storage, with heartbeats and retry of stale trials; unreachable: ConfigError."""
    url = settings.storage_url
    engine_kwargs: dict[str, Any] = {}
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs["connect_args"] = {"timeout": 60}
    else:
        engine_kwargs["pool_pre_ping"] = True
        if url.startswith("postgresql"):
            engine_kwargs["connect_args"] = {"connect_timeout": 10}
    options: dict[str, Any] = {}
    if heartbeat:
        options = {
            "heartbeat_interval": settings.heartbeat_interval,
            "grace_period": settings.grace_period,
            # set below: Optuna >= 4.9's name for RetryFailedTrialCallback
        }
    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if options:
                options["heartbeat_stale_trial_callback"] = RetryHeartbeatStaleTrialCallback(
                    max_retry=settings.max_retry)
            for attempt in range(10):
                try:
                    return RDBStorage(url, engine_kwargs=engine_kwargs, **options)
                except Exception as error:  # two commands creating the tables at once
                    racing = ("already exists", "UNIQUE constraint", "duplicate key", "locked")
                    if not any(text in str(error) for text in racing) or attempt == 9:
                        raise
                    time.sleep(0.2 * (attempt + 1))  # the other one finishes creating them
    except Exception as error:  # sqlalchemy errors: bad URL, unreachable server, no driver
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        shown = url.split("@")[-1] if "@" in url else url
        raise ConfigError(
            f"cannot open study storage '{shown}': {reason[:200]}; expected a reachable "
            "SQLAlchemy URL such as sqlite:///runs/evolve/study.db or postgresql+psycopg2://..."
        ) from None


def preset_description(preset: Preset) -> dict[str, Any]:
    # without the post-training stage settings, as stored before they joined the preset, so
    # that earlier studies still resume (the stage settings are not checked on resume)
    return preset.model_dump(mode="json", exclude={"post_training"})


def _mismatch(stored: Any, current: Any) -> str:
    if isinstance(stored, dict) and isinstance(current, dict):
        for key in sorted(set(stored) | set(current)):
            if stored.get(key) != current.get(key):
                return f"{key}: {_mismatch(stored.get(key), current.get(key))}"
    return f"stored {stored!r}, now {current!r}"


def open_study(settings: EvolveSettings, space: SearchSpace, storage: RDBStorage,
               sampler: BaseSampler | None = None) -> optuna.Study:
    """Create the study (baseline enqueued as trial 0) or load and validate it."""
    check_sampler(settings.sampler)
    sampler = sampler or SAMPLERS[settings.sampler](settings, space)
    pruner = HurdlePruner(population=settings.population, margin=settings.hurdle_margin)
    study = optuna.create_study(study_name=settings.study_name, storage=storage,
                                sampler=sampler, pruner=pruner, direction="maximize",
                                load_if_exists=True)
    attrs = study.user_attrs
    expected = {SPACE_ATTR: space.describe(), PRESET_ATTR: preset_description(settings.preset),
                LR_FACTORS_ATTR: list(settings.lr_factors)}
    if any(key not in attrs for key in (SPACE_ATTR, PRESET_ATTR)):  # new (or being created by another command)
        for key, value in expected.items():
            if key in attrs and attrs[key] != value:
                break  # the other command stored different settings: refused below
            study.set_user_attr(key, value)
        else:
            study.set_user_attr(SAMPLER_ATTR, settings.sampler)
            if not study.get_trials(deepcopy=False):
                study.enqueue_trial(space.to_params(space.baseline),
                                    user_attrs={"parent": None, "role": "baseline"})
            keep_one_baseline(study)
            return study
        attrs = study.user_attrs
    what = {SPACE_ATTR: "search space", PRESET_ATTR: "preset",
            LR_FACTORS_ATTR: "trial learning-rate grid"}
    for key, value in expected.items():
        if attrs.get(key, [] if key == LR_FACTORS_ATTR else None) != value:
            raise ConfigError(
                f"study '{settings.study_name}' was created with a different {what[key]} "
                f"({_mismatch(attrs.get(key), value)[:160]}); use another --study or the original settings"
            )
    return study


def keep_one_baseline(study: optuna.Study) -> None:
    """Two commands creating the same study at once may both enqueue the baseline; the
    lowest-numbered one stays, later waiting copies are failed (they never count)."""
    baselines = [t for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
                 if t.user_attrs.get("role") == "baseline"]
    for duplicate in sorted(baselines, key=lambda t: t.number)[1:]:
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError, RuntimeError):
            study_storage(study).set_trial_state_values(trial_id(duplicate), state=TrialState.FAIL)


def check_workers_outcome(exit_codes: dict[str, int | None], finished: int, target: int) -> None:
    """After the workers end: a worker that died (killed, crashed) matters only when the
    study has not reached its target; otherwise the others finished its work, and the
    command goes on to the report."""
    failed = [name for name, code in exit_codes.items() if code not in (0, None)]
    if failed and finished < target:
        raise ConfigError(f"worker process(es) {', '.join(failed)} exited with an error and the "
                          f"study has {finished} of {target} trials; see their output above, then "
                          "rerun the same command to resume")


def is_finished(trial: FrozenTrial) -> bool:
    """A trial that counts toward --trials: it reached a final state."""
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return trial.state == TrialState.FAIL and trial.user_attrs.get("state") in FINAL_STATES


def finished_trials(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if is_finished(t)]


def quiet_optuna() -> None:
    """Optuna's INFO lines and experimental-feature warnings (heartbeats) off."""
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module="optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)


def fail_silent_trials(study: optuna.Study, grace_period: float,
                       now: datetime | None = None) -> list[int]:
    """Fail (and retry) RUNNING trials that never recorded a heartbeat within the grace period.

    Optuna's ``fail_stale_trials`` skips trials without any heartbeat, so a worker killed
    between creating a trial and its first heartbeat would leave that trial RUNNING forever
    and the other workers waiting for it. A live trial records its first heartbeat at once,
    so one that is older than the grace period and has none is dead. Returns the trial
    numbers failed here. ``now`` (default: the clock) lets tests judge without waiting.
    """
    storage = rdb_storage(study)
    if storage is None or storage.heartbeat_interval is None:
        return []

    cutoff = (now or datetime.now()) - timedelta(seconds=grace_period + storage.heartbeat_interval)
    running = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
               if t.datetime_start is not None and t.datetime_start < cutoff]
    failed = []
    for trial in running:
        if has_heartbeat(storage, trial_id(trial)):
            continue  # fail_stale_trials judges these
        try:
            if study_storage(study).set_trial_state_values(trial_id(trial), state=TrialState.FAIL):
                failed.append(trial)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # another worker got there first
    callback = storage.get_heartbeat_stale_trial_callback()
    for trial in failed:
        if callback is not None:
            callback(study, copy.deepcopy(study_storage(study).get_trial(trial_id(trial))))
    return [trial.number for trial in failed]


def worker_loop(settings: EvolveSettings, study: optuna.Study,
                objective: Callable[[optuna.Trial], float],
                log: Callable[[str], None] = lambda _: None) -> int:
    """Run trials until the study has ``settings.trials`` finished ones; returns trials run."""
    ran = 0
    limit = settings.trials * settings.max_attempts_factor
    while ran < limit:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            fail_stale_trials(study)
            fail_silent_trials(study, settings.grace_period)
        trials = study.get_trials(deepcopy=False)
        done = sum(is_finished(t) for t in trials)
        running = sum(t.state == TrialState.RUNNING for t in trials)
        if done >= settings.trials:
            break
        if done + running >= settings.trials:
            time.sleep(min(2.0, settings.heartbeat_interval))  # others hold the last trials
            continue
        ended: list[FrozenTrial] = []
        study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=False,
                       callbacks=[lambda _study, trial, into=ended: into.append(trial)])
        ran += 1
        for trial in ended:
            log(f"trial {trial.number}: {trial.user_attrs.get('state', trial.state.name.lower())}"
                f" value={trial.value}")
    return ran


def prepare_context(settings: EvolveSettings, space: SearchSpace,
                    worker: int | None = None) -> TrialContext:
    from llmevo.data.lm import load_lm_corpus
    from llmevo.runner.data import prepare_bpe_data
    from llmevo.train.device import resolve_device

    corpus = load_lm_corpus(settings.data_dir, settings.preset.variant, settings.preset.budgets,
                            settings.cache_dir)
    preset = settings.preset.resolved(int(corpus.tokens["train"].numel()))  # one-epoch -> steps
    data = prepare_bpe_data(corpus, preset, settings.data_dir, preset.train.seq_len)
    post_data = None
    if set(space.components.get("post_training", ("none",))) != {"none"}:
        from llmevo.components.post_training.tasks import ArithmeticConfig, load_post_train_data

        @functools.cache
        def post_data() -> Any:  # loaded by the first trial whose genome post-trains
            return load_post_train_data(settings.data_dir, data.codec, preset.train.seq_len,
                                        ArithmeticConfig())
    logs = None
    if settings.tensorboard_dir is not None:
        from llmevo.train.logging import TensorBoardLogs

        logs = TensorBoardLogs(settings.tensorboard_dir)
    return TrialContext(
        space=space, preset=preset, data=data, device=resolve_device(settings.device),
        search_seed=settings.search_seed, rescore_seeds=settings.rescore_seeds,
        score_k=settings.score_k, hurdle_fractions=settings.hurdle_fractions,
        hurdle_windows=settings.hurdle_windows, worker=worker, logs=logs, post_data=post_data,
        execution_path=settings.execution_path, replicas_max=settings.replicas_max,
        execution_workers=max(1, settings.threads_per_worker),
        lr_factors=settings.lr_factors,
    )


def worker_main(settings: EvolveSettings, index: int) -> int:
    """Entry point of one worker process (also used in-process for one worker)."""
    quiet_optuna()
    torch.set_num_threads(max(1, settings.threads_per_worker))
    promoted = frozenset(settings.promoted) if settings.promoted is not None else None
    space = build_search_space(ensure_registered(), settings.preset, promoted=promoted)
    storage = open_storage(settings)
    study = open_study(settings, space, storage)
    context = prepare_context(settings, space, worker=index)
    try:
        return worker_loop(settings, study, make_objective(context),
                           log=lambda line: print(f"[worker {index}] {line}", flush=True))
    except KeyboardInterrupt:
        return -1


def _die_with_parent() -> None:
    """Linux: a worker gets SIGKILL when the command that spawned it dies (even by SIGKILL),
    so a killed command leaves no orphan workers behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _spawned(settings: EvolveSettings, index: int) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # ignored while importing
    try:
        worker_main(settings, index)
    except KeyboardInterrupt:
        pass


def run_workers(settings: EvolveSettings) -> None:
    """Run ``settings.workers`` worker processes to completion. Ctrl-C stops them cleanly
    (the in-flight trials are marked failed and do not count) and re-raises."""
    if settings.workers == 1:
        if worker_main(settings, 0) < 0:
            raise KeyboardInterrupt
        return
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_spawned, args=(settings, i), name=f"llmevo-worker-{i}")
                 for i in range(settings.workers)]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # children start with it ignored
    try:
        for process in processes:
            process.start()
    finally:
        signal.signal(signal.SIGINT, previous)
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
    study = optuna.load_study(study_name=settings.study_name,
                              storage=open_storage(settings, heartbeat=False))
    check_workers_outcome({p.name: p.exitcode for p in processes},
                          finished=len(finished_trials(study)), target=settings.trials)
