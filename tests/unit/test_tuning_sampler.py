"""A sequential sampler for space tuning (issue 34, item 2): ``--tune-sampler sobol|tpe|gp``.

``sobol`` (the default) is today's search to the bit; ``tpe`` and ``gp`` share its Sobol start,
then propose the rest of the declared phase from the results, deterministically; the edge
extension and the block stay as they are; bad input is refused before any training."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import qmc
from test_tuning_space import CONFIG, _objective
from tuning_support import scorer

from llmevo.artifacts.schema import Tuning
from llmevo.errors import ConfigError
from llmevo.experiments import EvidenceRequest, LadderRequest, ReproductionRequest
from llmevo.runner import tuning_space
from llmevo.runner.tuning_space import arm_space, space_tuner

AXES = ("lr", "beta2", "weight_decay", "warmup")


def _tune(monkeypatch, sampler: str, trials: int = 16, seed: int = 0, evaluate=None,
          calls: list | None = None) -> tuning_space.ArmSpaceTuning:
    axes = arm_space(CONFIG.optimizer, [], CONFIG)
    plan = space_tuner("full", trials, [1000], [42], sampler_seed=seed, sampler=sampler)
    return tuning_space.tune_arm_space("baseline", CONFIG, axes, plan, scorer(monkeypatch, evaluate or _objective(3 * CONFIG.lr), calls=[] if calls is None else calls))


def _settings(result: tuning_space.ArmSpaceTuning) -> list[dict]:
    return [t.values for t in result.trials]


def test_sobol_is_the_default_and_is_todays_search(monkeypatch):
    """No sampler given is ``sobol``: every trial a Sobol point, two train_many calls, and a
    block without a sequential sampler's keys (today's artifact)."""
    default = space_tuner("full", 16, [1000], [42])
    assert default.sampler == "sobol" and default == space_tuner("full", 16, [1000], [42], sampler="sobol")
    assert default.startup_trials == default.declared_trials
    calls: list = []
    result = _tune(monkeypatch, "sobol", calls=calls)
    assert [len(c) for c in calls] == [12, 4]
    assert all(t.sampled_by == "sobol" for t in result.trials)
    points = np.array([[t.sobol[a] for a in AXES] for t in result.trials])
    assert np.array_equal(points, qmc.Sobol(4, scramble=True, seed=0).random(16))
    block = tuning_space.space_tuning_block(default, "lm_loss", {"baseline": result, "method": result})
    assert block["sampler"] == {"library": "optuna", "name": "QMCSampler", "qmc_type": "sobol",
                                "scramble": True, "seed": 0, "storage": "in-memory"}
    assert all("sampled_by" not in row for row in block["arms"]["baseline"]["settings"])
    assert "--tune-sampler" not in block["method"]


@pytest.mark.parametrize("sampler", ["tpe", "gp"])
def test_a_sequential_sampler_starts_with_the_same_sobol_points(monkeypatch, sampler):
    """Its first startup_trials (half the declared phase) are Sobol's trials exactly; the rest
    of the declared phase is proposed two at a time and differs; trial k's design point is
    still Sobol point k."""
    sobol = _tune(monkeypatch, "sobol", trials=8)
    calls: list = []
    sequential = _tune(monkeypatch, sampler, trials=8, calls=calls)
    plan = space_tuner("full", 8, [1000], [42], sampler=sampler)
    assert (plan.declared_trials, plan.startup_trials) == (6, 3)
    assert [len(c) for c in calls] == [3, 2, 1, 2]  # the start, two batches, the extension
    start = plan.startup_trials
    assert _settings(sequential)[:start] == _settings(sobol)[:start]
    assert [t.sampled_by for t in sequential.trials] == ["sobol"] * 3 + [sampler] * 3 + ["sobol"] * 2
    proposed = sequential.trials[start:plan.declared_trials]
    assert all(t.phase == "declared" for t in proposed)
    assert all(t.values != s.values for t, s in zip(proposed, sobol.trials[start:], strict=False))
    assert [t.sobol for t in sequential.trials] == [t.sobol for t in sobol.trials]  # the design
    for trial in proposed:  # a proposal inside the declared cube, trained at its own point
        assert all(0.0 <= u <= 1.0 for u in trial.coordinates.values())
        assert trial.coordinates != trial.sobol


def test_tpe_is_a_function_of_its_seed_and_the_results(monkeypatch):
    """Same seed, same results: the same trials. Other results (the same start points): other
    proposals. Another seed: another Sobol start and other proposals."""
    first, again = _tune(monkeypatch, "tpe"), _tune(monkeypatch, "tpe")
    assert _settings(first) == _settings(again)
    assert [t.validation for t in first.trials] == [t.validation for t in again.trials]
    other_results = _tune(monkeypatch, "tpe", evaluate=_objective(CONFIG.lr / 2))
    assert _settings(other_results)[:6] == _settings(first)[:6]
    assert _settings(other_results)[6:12] != _settings(first)[6:12]
    other_seed = _tune(monkeypatch, "tpe", seed=1)
    assert _settings(other_seed)[:6] != _settings(first)[:6]


def test_a_diverged_start_is_told_as_failed_and_the_search_goes_on(monkeypatch):
    """A trial that diverges is a failed trial to the sampler; proposals still come."""
    def evaluate(model) -> float:
        return math.nan if model.config.lr > CONFIG.lr else _objective(CONFIG.lr)(model)

    result = _tune(monkeypatch, "tpe", trials=8, evaluate=evaluate)
    assert len(result.trials) == 8 and any(t.mean is None for t in result.trials)
    assert [t.sampled_by for t in result.trials[3:6]] == ["tpe"] * 3


def test_the_block_records_the_sampler_and_validates(monkeypatch):
    plan = space_tuner("full", 8, [1000], [42], sampler="tpe", sampler_seed=3)
    result = _tune(monkeypatch, "tpe", trials=8, seed=3)
    block = tuning_space.space_tuning_block(plan, "lm_loss", {"baseline": result, "method": result})
    sampler = block["sampler"]
    assert (sampler["name"], sampler["seed"], sampler["multivariate"], sampler["startup_trials"],
            sampler["batch"]) == ("TPESampler", 3, True, 3, tuning_space.SEQUENTIAL_BATCH)
    assert sampler["startup"]["name"] == "QMCSampler" and sampler["startup"]["seed"] == 3
    assert [row["sampled_by"] for row in block["arms"]["baseline"]["settings"]][:6] == ["sobol"] * 3 + ["tpe"] * 3
    assert "--tune-sampler tpe" in block["method"] and "TPESampler" in block["method"]
    tuning = Tuning.model_validate(block)
    assert tuning.arms["baseline"].settings[3].sampled_by == "tpe"


@pytest.mark.parametrize("sampler, seed, message", [
    ("random", 0, "--tune-sampler 'random'"),
    ("TPE", 0, "--tune-sampler 'TPE'"),
    ("", 0, "--tune-sampler ''"),
    ("tpe", -1, "sampler seed -1"),
    ("tpe", 1.5, "sampler seed 1.5"),
])
def test_bad_samplers_are_refused(sampler, seed, message):
    with pytest.raises(ConfigError, match=message):
        space_tuner("full", 8, [1000], [42], sampler_seed=seed, sampler=sampler)


def test_the_option_is_refused_where_it_cannot_apply(tmp_path):
    """Without a space there are no trials to sample: one line, before any training."""
    with pytest.raises(ConfigError, match="--tune-sampler tpe needs --tune-space"):
        ReproductionRequest(name="rope", tune=True, tune_sampler="tpe", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="does not apply here"):
        LadderRequest(name="rope", tune_sampler="tpe", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="--tune-sampler applies to the space-tuned"):
        EvidenceRequest(only=["rope"], preset="smoke", tune_sampler="tpe", data_dir=tmp_path,
                        out=tmp_path / "table").plan()
    request = ReproductionRequest(name="muon", tune_space="full", tune_sampler="tpe", data_dir=tmp_path)
    plan = request.tuning.tuner(CONFIG.lr, [42])
    assert plan.sampler == "tpe" and plan.trials == tuning_space.DEFAULT_TRIALS
