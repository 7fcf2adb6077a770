"""One test per use of Optuna's private API (llmevo.runner.optuna_private), so an Optuna
upgrade that moves any of them fails here, naming the use."""

from __future__ import annotations

import collections
import threading

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from llmevo.runner.optuna_private import (
    claim_waiting_trial,
    has_heartbeat,
    rdb_storage,
    study_storage,
    suggest,
    trial_id,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.filterwarnings(
    "ignore::optuna.exceptions.ExperimentalWarning", "ignore:Heartbeat of storage:UserWarning"
)


def _sqlite_study(tmp_path, heartbeat: int | None = None) -> optuna.Study:
    storage = RDBStorage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval=heartbeat)
    return optuna.create_study(study_name="s", storage=storage)


def test_study_storage_is_the_storage_the_study_writes_to():
    study = optuna.create_study()
    trial = study.ask()
    study_storage(study).set_trial_user_attr(trial_id(trial), "note", "x")
    assert study.trials[0].user_attrs == {"note": "x"}


def test_trial_id_of_live_and_frozen_trials_is_the_storage_id(tmp_path):
    study = _sqlite_study(tmp_path)
    first, second = study.ask(), study.ask()
    frozen = study.get_trials(deepcopy=False)
    assert [trial_id(t) for t in frozen] == [trial_id(first), trial_id(second)]
    assert study_storage(study).get_trial(trial_id(second)).number == 1


def test_rdb_storage_unwraps_the_cache_and_is_none_in_memory(tmp_path):
    study = _sqlite_study(tmp_path)
    assert isinstance(rdb_storage(study), RDBStorage)
    assert rdb_storage(optuna.create_study()) is None


def test_has_heartbeat_reads_the_heartbeat_table(tmp_path):
    study = _sqlite_study(tmp_path, heartbeat=60)
    storage = rdb_storage(study)
    trial = study.ask()
    assert not has_heartbeat(storage, trial_id(trial))
    storage.record_heartbeat(trial_id(trial))
    assert has_heartbeat(storage, trial_id(trial))
    assert study.trials[0].state == TrialState.RUNNING


@pytest.mark.parametrize(
    "distribution",
    [
        CategoricalDistribution(("rope", "alibi", 3)),
        FloatDistribution(1e-4, 1e-2, log=True),
        FloatDistribution(0.0, 0.3, step=0.05),
        IntDistribution(8, 64, step=8),
        IntDistribution(1, 1024, log=True),
    ],
)
def test_suggest_records_the_same_distribution(distribution):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    value = suggest(trial, "gene", distribution)
    if isinstance(distribution, CategoricalDistribution):
        assert value in distribution.choices
    else:
        assert distribution.low <= value <= distribution.high
    frozen = study.get_trials(deepcopy=False)[0]
    assert frozen.distributions["gene"] == distribution
    assert frozen.params["gene"] == value


def test_suggest_rejects_an_unknown_distribution():
    class Odd(CategoricalDistribution):
        pass

    trial = optuna.create_study().ask()
    with pytest.raises(TypeError, match="gene 'g'"):
        suggest(trial, "g", object())  # type: ignore[arg-type]
    assert suggest(trial, "h", Odd((1, 2))) in (1, 2)  # subclasses of known kinds are fine


def test_claim_waiting_trial_sets_a_waiting_trial_running_once(tmp_path):
    study = _sqlite_study(tmp_path)
    study.enqueue_trial({"x": 1.0})
    waiting = study.trials[0]
    storage = rdb_storage(study)
    assert claim_waiting_trial(storage, trial_id(waiting))
    assert not claim_waiting_trial(storage, trial_id(waiting))  # already running
    [running] = study.get_trials()
    assert running.state == TrialState.RUNNING and running.datetime_start is not None
    study.tell(running.number, 1.0)
    assert not claim_waiting_trial(storage, trial_id(running))  # finished


def test_workers_popping_one_queue_never_pop_a_trial_twice(tmp_path):
    """Four connections popping 60 waiting trials from one SQLite file: Optuna's own pop
    (read the state, then write it) gave 8-18 double pops in 200 here; through the storage
    ``open_storage`` returns (``claim_waiting_trial``) each trial is popped once."""
    from llmevo.runner.storage import open_storage

    url = f"sqlite:///{tmp_path / 'queue.db'}"
    study = optuna.create_study(study_name="q", storage=open_storage(url))
    for value in range(60):
        study.enqueue_trial({"x": float(value)})
    popped: collections.Counter[int] = collections.Counter()

    def worker() -> None:
        own = optuna.load_study(study_name="q", storage=open_storage(url))
        while (popped_id := own._pop_waiting_trial_id()) is not None:  # what ask() calls
            popped[popped_id] += 1

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(popped) == 60 and set(popped.values()) == {1}
