"""Optuna RDB storage shared by every command that coordinates workers through a database:
``evolve`` (its study) and ``ladder --storage`` (its queue of rungs).

A SQLite file or any SQLAlchemy URL (PostgreSQL for several machines). ``check_storage_url``
refuses, before anything is created, a SQLite path that cannot be a database;
``open_storage`` connects (two commands creating the tables at once retry; an unreachable
server, a bad URL or a missing driver is one ``ConfigError`` line without the password),
optionally with heartbeats (``heartbeat_interval``/``grace_period``) so that a trial whose
worker was killed is failed and retried (``RetryHeartbeatStaleTrialCallback``);
``fail_silent_trials`` fails those killed before their first heartbeat, which Optuna's own
``fail_stale_trials`` skips. ``quiet_optuna`` silences Optuna's INFO lines.

Every call of the storage is a whole call even under Ctrl-C: ``open_storage`` returns a
``DeferringStorage``, whose methods hold an interrupt of the main thread until they return
(``llmevo.interrupts``), which remembers the trials this process set RUNNING
(``started``), so that the one an interrupt left behind can be failed, and which pops a
waiting trial atomically (two SQLite workers could both pop one and train it twice).

Public API: ``MAX_RETRY``, ``sqlite_path``, ``check_storage_url``, ``open_storage``,
``DeferringStorage``, ``fail_silent_trials``, ``quiet_optuna``, ``describe_mismatch``.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from llmevo import interrupts
from llmevo.errors import ConfigError
from llmevo.runner.optuna_private import (
    claim_waiting_trial,
    has_heartbeat,
    rdb_storage,
    study_storage,
    trial_id,
)

MAX_RETRY = 1  # a trial lost to a killed worker is retried once


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


def _deferring(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        with interrupts.deferred():
            return method(*args, **kwargs)

    return call


class DeferringStorage(RDBStorage):
    """Optuna's RDB storage whose every call completes before an interrupt is raised (an
    interrupt inside a SQLAlchemy session left the SQLite file locked, or a trial RUNNING
    with nobody to end it). ``started``: the ids of the trials this process set RUNNING, in
    order (a new trial, or a waiting one popped); whoever runs trials may clear it;
    ``on_start``: called with each of them as it starts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.started: list[int] = []
        self.on_start: Callable[[int], None] | None = None
        with interrupts.deferred():
            super().__init__(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("on_start", None)  # this process's, as is what it started
        state.pop("started", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.started, self.on_start = [], None
        super().__setstate__(state)

    def _started(self, trial_id: int) -> None:
        self.started.append(trial_id)
        if self.on_start is not None:
            self.on_start(trial_id)

    def _create_new_trial(self, study_id: int,
                          template_trial: FrozenTrial | None = None) -> FrozenTrial:
        # private, as Optuna's cache wrapper calls it (and create_new_trial does)
        with interrupts.deferred():
            trial = super()._create_new_trial(study_id, template_trial)
            if template_trial is None or template_trial.state == TrialState.RUNNING:
                self._started(trial._trial_id)
            return trial

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        with interrupts.deferred():
            if state != TrialState.RUNNING or values is not None:
                return super().set_trial_state_values(trial_id, state, values)
            # a waiting trial popped: atomically, or two workers may pop the same one
            claimed = claim_waiting_trial(self, trial_id)
            if claimed:
                self._started(trial_id)
            return claimed


_OWN = {"_create_new_trial", "set_trial_state_values"}
for _name, _method in list(vars(RDBStorage).items()):
    # every database call, the private ones too: Optuna's cache wrapper calls _get_trials,
    # _create_new_trial, _set_trial_param, fail_stale_trials calls _get_stale_trial_ids
    if inspect.isfunction(_method) and not _name.startswith("__") and _name not in _OWN:
        setattr(DeferringStorage, _name, _deferring(_method))


def open_storage(url: str, heartbeat_interval: int | None = None, grace_period: int | None = None,
                 max_retry: int | None = MAX_RETRY) -> DeferringStorage:
    """The RDB storage at ``url``; with ``heartbeat_interval`` (seconds), trials record
    heartbeats and one silent for ``grace_period`` is failed and retried up to ``max_retry``
    times. Unreachable: ConfigError."""
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
    if heartbeat_interval is not None:
        options = {"heartbeat_interval": heartbeat_interval, "grace_period": grace_period}
    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if options:  # Optuna >= 4.9's name for RetryFailedTrialCallback
                options["heartbeat_stale_trial_callback"] = RetryHeartbeatStaleTrialCallback(
                    max_retry=max_retry)
            for attempt in range(10):
                try:
                    return DeferringStorage(url, engine_kwargs=engine_kwargs, **options)
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


def describe_mismatch(stored: Any, current: Any) -> str:
    """The first difference between two stored descriptions, as ``key: stored …, now …``."""
    if isinstance(stored, dict) and isinstance(current, dict):
        for key in sorted(set(stored) | set(current)):
            if stored.get(key) != current.get(key):
                return f"{key}: {describe_mismatch(stored.get(key), current.get(key))}"
    return f"stored {stored!r}, now {current!r}"


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
        with interrupts.deferred():  # a session of its own, outside the storage's calls
            beating = has_heartbeat(storage, trial_id(trial))
        if beating:
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
