"""Study storage and validation.

The study lives in an Optuna RDB storage (a SQLite file by default, any SQLAlchemy URL
such as PostgreSQL); two commands creating its tables at once retry. A new study stores
its search space, trial preset, trial learning-rate grid and sampler as study user
attributes; reopening it with another space, preset or grid is refused. Trial 0 of a new
study is the baseline genome (``llama_modern`` with the preset's training settings),
enqueued so that the population starts from it.

Heartbeats (``heartbeat_interval``/``grace_period``) detect a worker killed mid-trial; its
trial is marked failed and retried once (``RetryFailedTrialCallback``); a trial killed
before its first heartbeat is failed here too (``fail_silent_trials``). Finished trials
are those in a final state (complete, pruned, diverged, failed, invalid, duplicate); a
trial lost to a kill or Ctrl-C does not count, so re-running the command resumes.

Public API: ``SAMPLERS``, ``check_sampler``, ``check_storage_url``, ``open_storage``,
``open_study``, ``finished_trials``, ``fail_silent_trials``, ``quiet_optuna``.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
import warnings
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
from optuna.samplers import BaseSampler, NSGAIISampler, RandomSampler, TPESampler
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from llmevo.errors import ConfigError
from llmevo.evolve.objective import FINAL_STATES
from llmevo.evolve.optuna_private import has_heartbeat, rdb_storage, study_storage, trial_id
from llmevo.evolve.plan import EvolutionPlan
from llmevo.evolve.pruner import HurdlePruner
from llmevo.evolve.sampler import RegularizedEvolutionSampler
from llmevo.evolve.space import SearchSpace
from llmevo.runner.presets import Preset

SPACE_ATTR = "llmevo:search_space"
PRESET_ATTR = "llmevo:preset"
SAMPLER_ATTR = "llmevo:sampler"
LR_FACTORS_ATTR = "llmevo:trial_lr_factors"
MAX_RETRY = 1  # a trial lost to a killed worker is retried once

# name -> sampler of (space, population, tournament, seed)
SAMPLERS: dict[str, Callable[[SearchSpace, int, int, int | None], BaseSampler]] = {
    "regularized": lambda space, population, tournament, seed: RegularizedEvolutionSampler(
        space, population=population, tournament=tournament, seed=seed),
    "nsga2": lambda space, population, tournament, seed: NSGAIISampler(
        population_size=population, seed=seed),
    "tpe": lambda space, population, tournament, seed: TPESampler(
        seed=seed, n_startup_trials=population),
    "random": lambda space, population, tournament, seed: RandomSampler(seed=seed),
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


def open_storage(plan: EvolutionPlan, heartbeat: bool = True) -> RDBStorage:
    """The RDB storage, with heartbeats and retry of stale trials; unreachable: ConfigError."""
    url = plan.storage_url
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
            "heartbeat_interval": plan.heartbeat_interval,
            "grace_period": plan.grace_period,
            # set below: Optuna >= 4.9's name for RetryFailedTrialCallback
        }
    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if options:
                options["heartbeat_stale_trial_callback"] = RetryHeartbeatStaleTrialCallback(
                    max_retry=MAX_RETRY)
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


def open_study(plan: EvolutionPlan, space: SearchSpace, storage: RDBStorage) -> optuna.Study:
    """Create the study (baseline enqueued as trial 0) or load and validate it."""
    check_sampler(plan.sampler)
    sampler = SAMPLERS[plan.sampler](space, plan.population, plan.tournament, plan.sampler_seed)
    pruner = HurdlePruner(population=plan.population)
    study = optuna.create_study(study_name=plan.study_name, storage=storage,
                                sampler=sampler, pruner=pruner, direction="maximize",
                                load_if_exists=True)
    attrs = study.user_attrs
    expected = {SPACE_ATTR: space.describe(), PRESET_ATTR: preset_description(plan.trial_preset),
                LR_FACTORS_ATTR: list(plan.lr_factors)}
    if any(key not in attrs for key in (SPACE_ATTR, PRESET_ATTR)):  # new (or being created by another command)
        for key, value in expected.items():
            if key in attrs and attrs[key] != value:
                break  # the other command stored different settings: refused below
            study.set_user_attr(key, value)
        else:
            study.set_user_attr(SAMPLER_ATTR, plan.sampler)
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
                f"study '{plan.study_name}' was created with a different {what[key]} "
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


def is_finished(trial: FrozenTrial) -> bool:
    """A trial that counts toward --trials: it reached a final state."""
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return trial.state == TrialState.FAIL and trial.user_attrs.get("state") in FINAL_STATES


def finished_trials(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if is_finished(t)]


class _SilentOnInterrupt(logging.Filter):
    """Optuna reports a trial stopped by Ctrl-C (or SIGTERM) as a warning carrying the whole
    traceback, then a second one; the command says in one line that it stopped, so from
    the first interrupted trial on nothing more of Optuna's is printed by this process."""

    interrupted = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt):
            self.interrupted = True
        return not self.interrupted


_SILENT_ON_INTERRUPT = _SilentOnInterrupt()


def quiet_optuna() -> None:
    """Optuna's INFO lines and experimental-feature warnings (heartbeats) off, and nothing
    of its once a trial was interrupted."""
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module="optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)
    _SILENT_ON_INTERRUPT.interrupted = False
    for handler in logging.getLogger("optuna").handlers:  # Optuna's own stderr handler
        handler.addFilter(_SILENT_ON_INTERRUPT)


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
