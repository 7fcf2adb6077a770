"""Study storage and validation: bad input fails in one line before any training."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.evolve import EvolutionSettings, study
from llmevo.evolve.objective import hurdle_steps, lower_bound_score
from llmevo.evolve.plan import EvolutionPlan
from llmevo.evolve.space import build_search_space
from llmevo.evolve.workers import build_space
from llmevo.runner.presets import get_preset


def _plan(tmp_path: Path, **values) -> EvolutionPlan:
    return EvolutionSettings(**{"study": "unit", "storage": f"sqlite:///{tmp_path}/unit.db",
                                "preset": "smoke", "data_dir": tmp_path, "device": "cpu",
                                "trial_lr_factors": [], "promotion": "manifest", **values}).plan()


def test_new_study_enqueues_the_baseline_and_stores_its_settings(tmp_path):
    plan = _plan(tmp_path)
    space = build_space(plan)
    opened = study.open_study(plan, space, study.open_storage(plan, heartbeat=False))
    (trial,) = opened.get_trials()
    assert trial.state == optuna.trial.TrialState.WAITING
    assert trial.user_attrs["role"] == "baseline"
    assert space.to_genome(trial.system_attrs["fixed_params"]).hash() == space.baseline.hash()
    assert opened.user_attrs[study.PRESET_ATTR]["name"] == "smoke"


def test_reopening_with_another_preset_is_refused(tmp_path):
    plan = _plan(tmp_path)
    space = build_space(plan)
    study.open_study(plan, space, study.open_storage(plan, heartbeat=False))
    study.open_study(plan, space, study.open_storage(plan, heartbeat=False))  # same: fine
    other = _plan(tmp_path, trial_steps=7)
    with pytest.raises(ConfigError, match="different preset.*steps"):
        study.open_study(other, space, study.open_storage(other, heartbeat=False))
    other_space = build_search_space(full_registry(), get_preset("quick"))
    with pytest.raises(ConfigError, match="different search space"):
        study.open_study(plan, other_space, study.open_storage(plan, heartbeat=False))


def test_unknown_sampler_and_unreachable_storage(tmp_path):
    with pytest.raises(ConfigError, match="unknown sampler 'annealing'"):
        study.check_sampler("annealing")
    bad = _plan(tmp_path, storage="postgresql+psycopg2://u:secret@127.0.0.1:9/x")
    with pytest.raises(ConfigError, match="cannot open study storage") as info:
        study.open_storage(bad)
    assert "secret" not in str(info.value) and "\n" not in str(info.value)


def test_finished_states_count_and_lost_trials_do_not(tmp_path):
    opened = optuna.create_study()
    opened.add_trial(optuna.create_trial(value=1.0, user_attrs={"state": "complete"}))
    opened.add_trial(optuna.create_trial(state=optuna.trial.TrialState.FAIL,
                                         user_attrs={"state": "diverged"}))
    opened.add_trial(optuna.create_trial(state=optuna.trial.TrialState.FAIL,
                                         user_attrs={"state": "running"}))  # killed mid-trial
    assert len(study.finished_trials(opened)) == 2


def test_score_and_hurdle_steps():
    assert lower_bound_score([1.0, 2.0, 3.0], k=1.0) == pytest.approx(2.0 - 1.0 / 3**0.5)
    assert lower_bound_score([-5.0], k=2.0) == -5.0
    assert hurdle_steps(10, (0.5,)) == {4}
    assert hurdle_steps(1, (0.5,)) == set()


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_trial_killed_before_its_first_heartbeat_is_failed_and_retried(tmp_path):
    """Judged against the trial's own start time (``now`` passed in), never a sleep: the
    outcome cannot depend on how busy the machine is."""
    from datetime import timedelta

    import optuna
    from optuna.trial import TrialState

    from llmevo.evolve.study import open_storage
    from llmevo.runner.storage import fail_silent_trials

    plan = _plan(tmp_path, study="silent", storage=f"sqlite:///{tmp_path}/s.db", heartbeat=1,
                 grace_period=2)
    opened = optuna.create_study(study_name="silent", storage=open_storage(plan))
    dead = opened.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})  # RUNNING, no heartbeat
    started = opened.get_trials()[dead.number].datetime_start
    young = started + timedelta(seconds=1.9)  # within grace (1 s) + heartbeat interval (1 s)
    assert fail_silent_trials(opened, grace_period=1, now=young) == []  # too young to judge
    assert opened.get_trials()[dead.number].state == TrialState.RUNNING
    old = started + timedelta(seconds=2.1)
    assert fail_silent_trials(opened, grace_period=1, now=old) == [dead.number]
    trials = opened.get_trials()
    assert trials[dead.number].state == TrialState.FAIL
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == dead.number]
    assert len(retried) == 1 and retried[0].state == TrialState.WAITING
    assert retried[0].params == trials[dead.number].params
    assert fail_silent_trials(opened, grace_period=1, now=old) == []  # judged once
