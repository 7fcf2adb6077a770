"""Study storage and validation.

The study lives in an Optuna RDB storage (a SQLite file by default, any SQLAlchemy URL
such as PostgreSQL; opened by ``runner.storage``, which the shared ladder uses too). A new study stores
its search space, trial preset, trial learning-rate grid and sampler as study user
attributes; reopening it with another space, preset or grid is refused. Trial 0 of a new
study is the baseline genome (``llama_modern`` with the preset's training settings),
enqueued so that the population starts from it.

Heartbeats (``heartbeat``/``grace_period``) detect a worker killed mid-trial; its
trial is marked failed and retried once (``RetryFailedTrialCallback``); a trial killed
before its first heartbeat is failed too (``runner.storage.fail_silent_trials``). Finished trials
are those in a final state (complete, pruned, diverged, failed, invalid, duplicate); a
trial lost to a kill or Ctrl-C does not count, so re-running the command resumes.

Public API: ``GENOME_SAMPLERS``, ``check_sampler``, ``open_storage``, ``open_study``,
``finished_trials``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import optuna
from optuna.samplers import BaseSampler, NSGAIISampler, RandomSampler, TPESampler
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from llmevo.errors import ConfigError
from llmevo.evolve.objective import FINAL_STATES
from llmevo.evolve.plan import EvolutionPlan
from llmevo.evolve.pruner import HurdlePruner
from llmevo.evolve.sampler import RegularizedEvolutionSampler
from llmevo.evolve.space import SearchSpace
from llmevo.runner import storage as shared_storage
from llmevo.runner.optuna_private import study_storage, trial_id
from llmevo.runner.presets import Preset

SPACE_ATTR = "llmevo:search_space"
PRESET_ATTR = "llmevo:preset"
SAMPLER_ATTR = "llmevo:sampler"
LR_FACTORS_ATTR = "llmevo:trial_lr_factors"
SAMPLER_SEED_ATTR = "llmevo:sampler_seed"  # the seed the study was created with
# the search settings the study was created with (a report rebuilt by `evolve --explain`,
# which runs no search, records these rather than its own command's defaults)
SEARCH_SETTINGS_ATTR = "llmevo:search_settings"
SEARCH_SETTINGS = ("trials", "workers", "population", "tournament", "rescore_seeds", "score_k")

# name -> sampler of (space, population, tournament, seed)
GENOME_SAMPLERS: dict[str, Callable[[SearchSpace, int, int, int | None], BaseSampler]] = {
    "regularized": lambda space, population, tournament, seed: RegularizedEvolutionSampler(
        space, population=population, tournament=tournament, seed=seed),
    "nsga2": lambda space, population, tournament, seed: NSGAIISampler(
        population_size=population, seed=seed),
    "tpe": lambda space, population, tournament, seed: TPESampler(
        seed=seed, n_startup_trials=population),
    "random": lambda space, population, tournament, seed: RandomSampler(seed=seed),
}


def check_sampler(name: str) -> None:
    if name not in GENOME_SAMPLERS:
        raise ConfigError(f"unknown sampler '{name}'; known: {', '.join(GENOME_SAMPLERS)}")


def open_storage(plan: EvolutionPlan, heartbeat: bool = True) -> RDBStorage:
    """The plan's RDB storage (``runner.storage.open_storage``), with its heartbeats and
    retry of stale trials unless ``heartbeat`` is False."""
    return shared_storage.open_storage(plan.storage_url,
                                       heartbeat_interval=plan.heartbeat if heartbeat else None,
                                       grace_period=plan.grace_period)


def preset_description(preset: Preset) -> dict[str, Any]:
    # without the post-training stage settings, as stored before they joined the preset, so
    # that earlier studies still resume (the stage settings are not checked on resume)
    return preset.model_dump(mode="json", exclude={"post_training"})


def open_study(plan: EvolutionPlan, space: SearchSpace, storage: RDBStorage) -> optuna.Study:
    """Create the study (baseline enqueued as trial 0) or load and validate it."""
    check_sampler(plan.sampler)
    sampler = GENOME_SAMPLERS[plan.sampler](space, plan.population, plan.tournament, plan.sampler_seed)
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
            study.set_user_attr(SAMPLER_ATTR, "proposer" if plan.proposer is not None else plan.sampler)
            study.set_user_attr(SAMPLER_SEED_ATTR, plan.sampler_seed)
            study.set_user_attr(SEARCH_SETTINGS_ATTR, {name: getattr(plan, name) for name in SEARCH_SETTINGS})
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
                f"({shared_storage.describe_mismatch(attrs.get(key), value)[:160]}); use another --study or the original settings"
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
