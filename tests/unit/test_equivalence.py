"""The no-op check (``runner.equivalence``): arms that compute the same function are found
before training, arms that differ are not, and the runner refuses a no-op comparison."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from llmevo.errors import ConfigError
from llmevo.experiments import reproduction
from llmevo.experiments.plans import ReproductionPlan, plan_comparison
from llmevo.registry import ComponentChoice
from llmevo.runner import arm_runner, compare
from llmevo.runner.equivalence import TOLERANCE, check_equivalence
from llmevo.runner.presets import get_preset
from llmevo.runner.views import load_views

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def smoke(data_dir: Path, cache_dir: Path):
    _, preset, views = load_views(get_preset("smoke"), ["bpe"], data_dir, cache_dir)
    return preset, views


def _softcap(cap: float):
    comparison = plan_comparison("softcap")
    method = comparison.method
    choice = ComponentChoice(name="softcap", config={"cap": cap})
    return comparison.baseline, replace(method, model=method.model.with_slot("attention", choice))


def test_two_identical_arms_compute_the_same_function(smoke) -> None:
    preset, views = smoke
    baseline = plan_comparison("softcap").baseline
    found = check_equivalence(baseline, replace(baseline, label="method"), views, preset, 42, CPU)
    assert found.same_function and found.how == "outputs"
    assert found.init_difference == found.trained_difference == found.run_difference == 0.0


def test_softcap_at_a_cap_of_a_million_is_a_noop(smoke) -> None:
    """Mathematically mha: differs only by rounding, far under the tolerance at every point
    (the run-length point is measured: the two models' weights are interchangeable)."""
    preset, views = smoke
    found = check_equivalence(*_softcap(1e6), views, preset, 42, CPU)
    assert found.same_function, found.reason
    assert 0.0 < found.init_difference < TOLERANCE / 10
    assert found.run_difference is not None and found.run_difference < TOLERANCE / 10


def test_genuinely_different_arms_pass(smoke) -> None:
    preset, views = smoke
    for name in ("gelu", "qk_norm"):  # a feed-forward and an attention change
        found = check_equivalence(*plan_comparison(name).arms, views, preset, 42, CPU)
        assert not found.same_function and found.init_difference > 100 * TOLERANCE, name


def test_an_optimizer_comparison_is_decided_after_the_steps(smoke) -> None:
    """Identical models at initialisation by construction; the steps tell them apart."""
    preset, views = smoke
    found = check_equivalence(*plan_comparison("lion").arms, views, preset, 42, CPU)
    assert found.init_difference == 0.0
    assert not found.same_function and found.trained_difference > 100 * TOLERANCE


def test_a_data_recipe_is_compared_by_its_windows(smoke) -> None:
    preset, views = smoke
    found = check_equivalence(*plan_comparison("mixture").arms, views, preset, 42, CPU)
    assert found.how == "token streams" and not found.same_function


def test_the_check_leaves_the_global_rng_as_found(smoke) -> None:
    preset, views = smoke
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    check_equivalence(*_softcap(1e6), views, preset, 42, CPU)
    assert torch.equal(torch.rand(3), expected)


def test_the_runner_refuses_a_noop_before_training(smoke, data_dir, cache_dir, monkeypatch) -> None:
    """The refusal comes from the comparison (``runner.compare.compare_arms``, which
    ``run_reproduction`` calls) before any arm trains or is tuned (removing the check fails
    this test: the arms would train)."""
    baseline, method = _softcap(50.0)
    comparison = replace(plan_comparison("softcap"), method=method)
    plan = ReproductionPlan(comparison=comparison, preset=get_preset("smoke"), seeds=[42],
                            data_dir=data_dir, cache_dir=cache_dir, device=CPU)

    def no_training(*args, **kwargs):
        raise AssertionError("an arm trained before the no-op check refused")

    monkeypatch.setattr(arm_runner, "run_arm", no_training)
    monkeypatch.setattr(compare, "tune_arms", no_training)
    with pytest.raises(ConfigError, match="compute the same function.*--allow-noop"):
        reproduction.run_reproduction(plan)


def test_the_check_is_read_back_from_the_arm_cache(smoke, tmp_path, monkeypatch) -> None:
    """A warm comparison does not train the probes again: the same arms, preset and seed give
    the stored outcome (equal, field for field) without checking; another seed, another
    method or an altered entry checks again; ``refresh`` recomputes and rewrites."""
    from llmevo.runner import equivalence
    from llmevo.runner.cache import ArmCache
    from llmevo.train.execution import Execution

    preset, views = smoke
    cache = ArmCache.open(tmp_path, CPU, Execution(), code_modules=["llmevo.runner.equivalence"])
    arms = plan_comparison("qk_norm").arms
    first = check_equivalence(*arms, views, preset, 42, CPU, cache)
    checks = []
    real = equivalence._check
    monkeypatch.setattr(equivalence, "_check", lambda *a: checks.append(a) or real(*a))
    assert check_equivalence(*arms, views, preset, 42, CPU, cache) == first
    assert checks == []
    check_equivalence(*arms, views, preset, 43, CPU, cache)
    check_equivalence(*_softcap(1e6), views, preset, 42, CPU, cache)
    assert len(checks) == 2
    entries = sorted(tmp_path.glob("arms/*/*.json"))
    assert len(entries) == 3
    for entry in entries:  # an altered outcome is a miss, never a wrong answer
        entry.write_text(entry.read_text().replace('"same_function":false', '"same_function":true'))
    again = check_equivalence(*arms, views, preset, 42, CPU, cache)
    assert replace(again, seconds=0.0) == replace(first, seconds=0.0)
    assert len(checks) == 3
    refresh = ArmCache.open(tmp_path, CPU, Execution(), use="refresh",
                            code_modules=["llmevo.runner.equivalence"])
    check_equivalence(*arms, views, preset, 42, CPU, refresh)
    assert len(checks) == 4
