"""Work shared by workers on one or many machines: numbered items (a ladder's rungs, an
evidence table's comparisons) as a queue in an Optuna RDB study (the storage ``evolve``
uses, ``runner.storage``), each item run once, an item waiting for the items it ``needs``.

One study per piece of work holds its description (a study user attribute, with its
``kind``; a request whose description differs is refused) and one enqueued trial per item;
below, "rung" stands for an item. A worker loops:
fail the trials of killed workers (heartbeats: ``fail_stale_trials``, ``fail_silent_trials``;
a failed one is re-enqueued), pop the lowest waiting trial (``study.optimize`` with one
trial: ``ask`` pops enqueued trials atomically on an RDB and a heartbeat thread runs while
the rung trains), wait (polling, at most ``wait_timeout`` seconds) for the rungs it depends
on to be complete, run it, store what it produced as the trial's user attributes and
complete it. A popped trial it does not run is *released* (failed, counting for nothing):
a second trial of a rung already complete or held by a lower-numbered trial (two workers
creating the study at once enqueue twice), a fresh trial ``ask`` made when another worker
took the last waiting one, a rung whose dependency nobody runs (waiting, or lost): that
rung is enqueued again behind it, so the dependency is popped first; and a rung whose
dependency another worker is running while some waiting rung could run at once: it goes to
the back of the queue and the worker pops that one, instead of idling (a cold table's job sat
4.3 min so). A rung that failed
with an error stops every worker with one line; rerunning the command retries it. The loop
ends when every rung is complete, and returns the rungs' trials. Interrupted (Ctrl-C,
SIGTERM), the worker fails the trial it holds, so a rerun enqueues its rung again at once.

``queue_progress`` reads a queue without changing it: one line on how far its work is, for
the process that launched the workers (``experiments.launcher``) and is otherwise blind.

Public API: ``ITEM_ATTR``, ``DESCRIPTION_ATTR``, ``open_work_queue``, ``run_work_queue``,
``queue_progress``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.samplers import RandomSampler
from optuna.storages import fail_stale_trials
from optuna.trial import FrozenTrial, TrialState

from llmevo import interrupts
from llmevo.errors import ConfigError
from llmevo.runner.optuna_private import rdb_storage
from llmevo.runner.storage import (
    describe_mismatch,
    fail_silent_trials,
    open_storage,
    quiet_optuna,
    sqlite_path,
)

DESCRIPTION_ATTR = "llmevo:work"  # the study's description of its work (with its "kind")
ITEM_ATTR = "item"  # a trial's item (a rung, a comparison's index)
ERROR_ATTR = "error"  # a rung that failed with an error: one line
RELEASED_ATTR = "released"  # why a popped trial was not run
ACTIVE = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)


class _Released(Exception):
    """A popped trial this worker does not run; its trial is failed and counts for nothing."""


def open_work_queue(url: str, study_name: str, description: dict[str, Any], rungs: list[int],
                    heartbeat_interval: int, grace_period: int) -> optuna.Study:
    """The ladder's study at ``url``: created with its description and one waiting trial per
    rung, or loaded, its description checked, and any rung without a live trial (lost to a
    kill, failed with an error) enqueued again. Unreachable storage, a study of another ladder
    or of something else: ConfigError, before anything is written."""
    quiet_optuna()
    storage = open_storage(url, heartbeat_interval=heartbeat_interval, grace_period=grace_period)
    expected = json.loads(json.dumps(description))  # as the storage returns it
    kind = description.get("kind", "ladder")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(study_name=study_name, storage=storage, sampler=RandomSampler(),
                                    load_if_exists=True)
    attrs = study.user_attrs
    if DESCRIPTION_ATTR not in attrs:
        if attrs or study.get_trials(deepcopy=False):
            raise ConfigError(f"study '{study_name}' is not a {kind}'s study; use another --study")
        study.set_user_attr(DESCRIPTION_ATTR, expected)
    elif attrs[DESCRIPTION_ATTR] != expected:
        raise ConfigError(f"study '{study_name}' holds a different {kind} "
                          f"({describe_mismatch(attrs[DESCRIPTION_ATTR], expected)[:160]}); "
                          "use another --study or the original settings")
    _enqueue_lost(study, study.get_trials(deepcopy=False), rungs, retry_errors=True)
    return study


def _rung(trial: FrozenTrial | optuna.Trial) -> int | None:
    return trial.user_attrs.get(ITEM_ATTR)


def _complete(trials: list[FrozenTrial]) -> dict[int, FrozenTrial]:
    """Each complete rung's trial (the lowest-numbered, should two ever complete)."""
    done: dict[int, FrozenTrial] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        rung = _rung(trial)
        if trial.state == TrialState.COMPLETE and rung is not None:
            done.setdefault(rung, trial)
    return done


def _enqueue_lost(study: optuna.Study, trials: list[FrozenTrial], rungs: list[int],
                  retry_errors: bool) -> dict[int, str]:
    """Enqueue each rung with no waiting, running or complete trial; a rung whose last trial
    failed with an error is enqueued only with ``retry_errors``. Returns those not retried."""
    errors = {}
    for rung in rungs:
        own = sorted((t for t in trials if _rung(t) == rung), key=lambda t: t.number)
        if any(t.state in ACTIVE for t in own):
            continue
        failed = [t for t in own if RELEASED_ATTR not in t.user_attrs]
        if failed and ERROR_ATTR in failed[-1].user_attrs and not retry_errors:
            errors[rung] = failed[-1].user_attrs[ERROR_ATTR]
            continue
        study.enqueue_trial({}, user_attrs={ITEM_ATTR: rung})
    return errors


def _ready(trials: list[FrozenTrial], done: dict[int, FrozenTrial], needs: dict[int, list[int]],
           besides: int) -> int | None:
    """The first waiting rung, other than ``besides``, whose needs are all complete: one a
    worker can run at once instead of waiting for another worker's rung to finish."""
    for trial in sorted(trials, key=lambda t: t.number):
        rung = _rung(trial)
        if (trial.state == TrialState.WAITING and rung is not None and rung != besides
                and rung not in done and all(r in done for r in needs.get(rung, []))):
            return rung
    return None


def _refresh(study: optuna.Study, grace_period: int) -> list[FrozenTrial]:
    """Fail (and retry) the trials of killed workers; return every trial."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        fail_stale_trials(study)
        fail_silent_trials(study, grace_period)
    return study.get_trials(deepcopy=False)


def run_work_queue(study: optuna.Study, rungs: list[int], needs: dict[int, list[int]],
                   run: Callable[[int, dict[int, FrozenTrial]], dict[str, Any]], *,
                   grace_period: int, poll_seconds: float, wait_timeout: float,
                   on_wait: Callable[[int, list[int]], None] | None = None,
                   noun: str = "rung") -> dict[int, FrozenTrial]:
    """Work on the queue until every rung is complete; return each rung's complete trial.

    ``run(rung, dependencies)`` runs one rung, given the complete trials of the rungs it
    ``needs``, and returns the user attributes to store (JSON values). A popped rung whose
    needs another worker is still running goes back to the queue when a waiting rung could run
    at once (that one runs now), and otherwise waits. ``on_wait(rung,
    missing)`` is told once when a popped rung starts waiting for others. A worker that waits
    longer than ``wait_timeout`` seconds, for its rung's dependencies or for the other
    workers' last rungs, stops with a ConfigError (its rung goes back to the queue)."""

    def objective(trial: optuna.Trial) -> float:
        with interrupts.allowed():  # Optuna's bookkeeping around it runs deferred
            return _objective(trial)

    def _objective(trial: optuna.Trial) -> float:
        rung = _rung(trial)
        if rung is None:  # ask() made a fresh trial: another worker took the last waiting one
            trial.set_user_attr(RELEASED_ATTR, "no waiting rung")
            raise _Released
        for other in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.COMPLETE)):
            if _rung(other) == rung and other.number != trial.number and (
                    other.state == TrialState.COMPLETE or other.number < trial.number):
                trial.set_user_attr(RELEASED_ATTR, f"duplicate of trial {other.number}")
                raise _Released
        started, told = time.monotonic(), False
        while True:
            trials = _refresh(study, grace_period)
            done = _complete(trials)
            missing = [r for r in needs[rung] if r not in done]
            if not missing:
                break
            unattended = [r for r in missing if not any(
                _rung(t) == r and t.state == TrialState.RUNNING for t in trials)]
            if unattended:  # nobody runs it: run it first (popped before this rung's new trial)
                trial.set_user_attr(RELEASED_ATTR, f"{noun} {unattended[0]} was not running")
                study.enqueue_trial({}, user_attrs={ITEM_ATTR: rung})
                raise _Released
            ready = _ready(trials, done, needs, besides=rung)
            if ready is not None:  # run that one now rather than wait; this one goes to the back
                trial.set_user_attr(RELEASED_ATTR, f"{noun} {missing[0]} still running; "
                                                   f"{noun} {ready} could run at once")
                study.enqueue_trial({}, user_attrs={ITEM_ATTR: rung})
                raise _Released
            if not told and on_wait is not None:
                on_wait(rung, missing)
                told = True
            if time.monotonic() - started > wait_timeout:
                trial.set_user_attr(RELEASED_ATTR, "wait timeout")
                study.enqueue_trial({}, user_attrs={ITEM_ATTR: rung})
                raise ConfigError(
                    f"{noun} {rung}: waited {wait_timeout:g} s for {noun}(s) {', '.join(map(str, missing))} "
                    "to finish in other workers; rerun the same command to resume")
            time.sleep(poll_seconds)
        try:
            attrs = run(rung, {r: done[r] for r in needs[rung]})
        except Exception as error:
            text = str(error).strip().splitlines()
            trial.set_user_attr(ERROR_ATTR, (text[0] if text else type(error).__name__)[:300])
            raise
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        return float(rung)

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a released trial is no warning
    try:
        idle_since = time.monotonic()
        while True:
            trials = _refresh(study, grace_period)
            done = _complete(trials)
            if all(rung in done for rung in rungs):
                return {rung: done[rung] for rung in rungs}
            errors = _enqueue_lost(study, trials, rungs, retry_errors=False)
            if errors:
                rung, message = next(iter(errors.items()))
                raise ConfigError(f"{noun} {rung} failed in another worker ({message}); "
                                  "rerun the same command to retry it")
            if any(t.state == TrialState.WAITING and _rung(t) not in done for t in trials):
                with interrupts.deferred():  # an interrupt stops the rung, never its recording
                    study.optimize(objective, n_trials=1, catch=(_Released,), gc_after_trial=False)
                idle_since = time.monotonic()
                continue
            if time.monotonic() - idle_since > wait_timeout:
                running = sorted({r for t in trials if t.state == TrialState.RUNNING
                                  and (r := _rung(t)) is not None})
                raise ConfigError(f"waited {wait_timeout:g} s for {noun}(s) {', '.join(map(str, running))} "
                                  "to finish in other workers; rerun the same command to resume")
            time.sleep(poll_seconds)
    except KeyboardInterrupt:
        with interrupts.deferred():  # a second Ctrl-C waits until the rung is given back
            _release_interrupted(study)
        raise
    finally:
        optuna.logging.set_verbosity(verbosity)


def _release_interrupted(study: optuna.Study) -> None:
    """Fail the trial this worker last popped if an interrupt left it RUNNING (it landed in
    Optuna around the objective: the trial popped, its heartbeat starting or stopping), so
    the rerun enqueues its rung again at once instead of waiting for it to go stale."""
    storage = rdb_storage(study)
    for trial in getattr(storage, "started", [])[-1:]:
        if storage.get_trial(trial).state == TrialState.RUNNING:
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                storage.set_trial_state_values(trial, state=TrialState.FAIL)


@functools.lru_cache(maxsize=8)
def _reading_storage(url: str) -> Any:
    """One storage per URL for ``queue_progress``, asked every few seconds for hours: an engine
    (and, on PostgreSQL, its connections) opened once, not at every reading."""
    return open_storage(url)


def queue_progress(url: str, study_name: str, labels: Mapping[int, str], noun: str,
                   finished: Callable[[FrozenTrial], str | None] | None = None) -> str | None:
    """One line on the queue's progress, read without writing to it: how many of the items
    (``labels``: item -> its name, e.g. a comparison's index -> its label, a rung -> "rung -1")
    are complete, which are running, the latest complete item's own line (``finished(trial)``,
    e.g. its verdict) and the time left at the pace so far; None while the study does not
    exist yet (the workers create it) or the storage cannot be read this time."""
    quiet_optuna()
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        return None  # opening would create the database beside the workers creating it
    try:
        study = optuna.load_study(study_name=study_name, storage=_reading_storage(url))
        trials = study.get_trials(deepcopy=False)
    except Exception:  # noqa: BLE001 (a progress line never stops the work: a locked or missing study is None)
        return None
    done = _complete(trials)
    done = {item: trial for item, trial in done.items() if item in labels}
    running = sorted({item for item in (_rung(t) for t in trials if t.state == TrialState.RUNNING)
                      if item in labels and item not in done})
    line = f"{noun}s: {len(done)} of {len(labels)} finished"
    if running:
        line += f"; running: {', '.join(labels[item] for item in running)}"
    latest = max(done.values(), key=lambda t: (t.datetime_complete is not None, t.datetime_complete or 0),
                 default=None)
    said = None if latest is None or finished is None else finished(latest)
    if said:
        line += f"; last finished: {said}"
    left = _minutes_left(trials, done, len(labels))
    if left is not None:
        line += f"; about {left} left at this pace"
    return line


def _minutes_left(trials: list[FrozenTrial], done: dict[int, FrozenTrial], total: int) -> str | None:
    """The remaining items at the pace of the finished ones (the time since the first trial
    started over the items complete; items differ in size, so a rough figure), once two are
    complete and some are not; None otherwise."""
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete for t in done.values() if t.datetime_complete is not None]
    if len(done) < 2 or len(done) >= total or not starts or not ends:
        return None
    minutes = (max(ends) - min(starts)).total_seconds() / 60 / len(done) * (total - len(done))
    return f"{minutes:.0f} min" if minutes < 90 else f"{minutes / 60:.1f} h"
