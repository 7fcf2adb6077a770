"""Every use of Optuna's private API, in one place (checked against Optuna 5.0).

Optuna has no public way to reach a study's storage, a trial's storage id, or whether a
RUNNING trial ever recorded a heartbeat; the evolution engine and the shared ladder need them. Each
function below is one such reach, with a test in tests/unit/test_optuna_private.py,
so an Optuna upgrade that moves one of them fails there, loudly, and is fixed here.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial


def study_storage(study: optuna.Study) -> BaseStorage:
    """The storage a study reads and writes (private: ``Study._storage``)."""
    return study._storage


def rdb_storage(study: optuna.Study) -> RDBStorage | None:
    """The study's RDB storage under Optuna's cache wrapper (``_CachedStorage._backend``),
    or None when the study is not stored in a database."""
    storage = study_storage(study)
    backend = getattr(storage, "_backend", storage)
    return backend if isinstance(backend, RDBStorage) else None


def trial_id(trial: FrozenTrial | optuna.Trial) -> int:
    """A trial's id in its storage (private: ``_trial_id``; ``number`` is per study)."""
    return trial._trial_id


def has_heartbeat(storage: RDBStorage, trial_id: int) -> bool:
    """Whether the trial ever recorded a heartbeat (private: the ``_rdb.models`` table)."""
    from optuna.storages._rdb import models

    session = storage.scoped_session()
    try:
        return models.TrialHeartbeatModel.where_trial_id(trial_id, session) is not None
    finally:
        session.close()


def claim_waiting_trial(storage: RDBStorage, trial_id: int) -> bool:
    """Set a WAITING trial RUNNING in one conditional UPDATE (compare and swap); False when it
    was not waiting. Optuna's own ``set_trial_state_values`` reads the state, then writes it:
    on SQLite (``SELECT ... FOR UPDATE`` is a no-op there, and the driver begins the
    transaction only at the write) two workers can both pop one waiting trial, train it
    twice, and the second dies on "Cannot tell a COMPLETE trial" (private: the ``_rdb.models``
    table and the storage's session)."""
    from datetime import datetime

    import sqlalchemy
    from optuna.storages._rdb import models
    from optuna.trial import TrialState

    trials = models.TrialModel.__table__
    session = storage.scoped_session()
    try:
        claimed = session.execute(
            sqlalchemy.update(trials)
            .where(trials.c.trial_id == trial_id, trials.c.state == TrialState.WAITING)
            .values(state=TrialState.RUNNING, datetime_start=datetime.now()))
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
    return claimed.rowcount == 1


def suggest(trial: optuna.Trial, name: str, distribution: BaseDistribution) -> Any:
    """Suggest ``name`` from a prebuilt distribution through the public ``suggest_*`` calls
    (replaces the private ``Trial._suggest``); the distribution recorded is the same."""
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, FloatDistribution):
        return trial.suggest_float(
            name, distribution.low, distribution.high, step=distribution.step, log=distribution.log
        )
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(
            name, distribution.low, distribution.high, step=distribution.step, log=distribution.log
        )
    raise TypeError(f"gene '{name}': unsupported distribution {type(distribution).__name__}")
