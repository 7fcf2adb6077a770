"""Study storage and validation: bad input fails in one line before any training."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from llmevo.catalog import ensure_registered
from llmevo.errors import ConfigError
from llmevo.evolve import engine
from llmevo.evolve.objective import hurdle_steps, lower_bound_score
from llmevo.evolve.space import build_search_space
from llmevo.runner.presets import get_preset


def _settings(tmp_path: Path, preset=None, **values) -> engine.EvolveSettings:
    return engine.EvolveSettings(study_name="unit", storage_url=f"sqlite:///{tmp_path}/unit.db",
                                 preset=preset or get_preset("smoke"), **values)


def test_new_study_enqueues_the_baseline_and_stores_its_settings(tmp_path):
    settings = _settings(tmp_path)
    space = build_search_space(ensure_registered(), settings.preset)
    study = engine.open_study(settings, space, engine.open_storage(settings, heartbeat=False))
    (trial,) = study.get_trials()
    assert trial.state == optuna.trial.TrialState.WAITING
    assert trial.user_attrs["role"] == "baseline"
    assert space.to_genome(trial.system_attrs["fixed_params"]).hash() == space.baseline.hash()
    assert study.user_attrs[engine.PRESET_ATTR]["name"] == "smoke"


def test_reopening_with_another_preset_is_refused(tmp_path):
    settings = _settings(tmp_path)
    space = build_search_space(ensure_registered(), settings.preset)
    engine.open_study(settings, space, engine.open_storage(settings, heartbeat=False))
    engine.open_study(settings, space, engine.open_storage(settings, heartbeat=False))  # same: fine
    other = _settings(tmp_path, get_preset("smoke").override({"steps": 7}))
    with pytest.raises(ConfigError, match="different preset.*steps"):
        engine.open_study(other, space, engine.open_storage(other, heartbeat=False))
    other_space = build_search_space(ensure_registered(), get_preset("quick"))
    with pytest.raises(ConfigError, match="different search space"):
        engine.open_study(settings, other_space, engine.open_storage(settings, heartbeat=False))


def test_unknown_sampler_and_unreachable_storage(tmp_path):
    with pytest.raises(ConfigError, match="unknown sampler 'annealing'"):
        engine.check_sampler("annealing")
    settings = _settings(tmp_path)
    bad = engine.EvolveSettings(**{**settings.__dict__,
                                   "storage_url": "postgresql+psycopg2://u:secret@127.0.0.1:9/x"})
    with pytest.raises(ConfigError, match="cannot open study storage") as info:
        engine.open_storage(bad)
    assert "secret" not in str(info.value) and "\n" not in str(info.value)


def test_finished_states_count_and_lost_trials_do_not(tmp_path):
    study = optuna.create_study()
    study.add_trial(optuna.create_trial(value=1.0, user_attrs={"state": "complete"}))
    study.add_trial(optuna.create_trial(state=optuna.trial.TrialState.FAIL,
                                        user_attrs={"state": "diverged"}))
    study.add_trial(optuna.create_trial(state=optuna.trial.TrialState.FAIL,
                                        user_attrs={"state": "running"}))  # killed mid-trial
    assert len(engine.finished_trials(study)) == 2


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

    from llmevo.evolve.engine import EvolveSettings, fail_silent_trials, open_storage
    from llmevo.runner.presets import get_preset

    settings = EvolveSettings(study_name="silent", storage_url=f"sqlite:///{tmp_path}/s.db",
                              preset=get_preset("smoke"), heartbeat_interval=1, grace_period=1)
    study = optuna.create_study(study_name="silent", storage=open_storage(settings))
    dead = study.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})  # RUNNING, no heartbeat
    started = study.get_trials()[dead.number].datetime_start
    young = started + timedelta(seconds=1.9)  # within grace (1 s) + heartbeat interval (1 s)
    assert fail_silent_trials(study, grace_period=1, now=young) == []  # too young to judge
    assert study.get_trials()[dead.number].state == TrialState.RUNNING
    old = started + timedelta(seconds=2.1)
    assert fail_silent_trials(study, grace_period=1, now=old) == [dead.number]
    trials = study.get_trials()
    assert trials[dead.number].state == TrialState.FAIL
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == dead.number]
    assert len(retried) == 1 and retried[0].state == TrialState.WAITING
    assert retried[0].params == trials[dead.number].params
    assert fail_silent_trials(study, grace_period=1, now=old) == []  # judged once
