"""Decay branches are arm runs cached like any other (issue 48, item 3b): with
``Execution.branches`` a run trains as the trunk of its shorter horizons, and ``run_arm`` (report
runs) and ``score_arm`` (tuning runs) store each branch under the key its standalone run has, so
that run, asked for later, loads it; what it loads equals the standalone run trained without a
cache (the independent reference)."""

from __future__ import annotations

import pytest
import torch

from llmevo.errors import ConfigError
from llmevo.experiments import ReproductionRequest
from llmevo.runner.cache import ArmCache
from llmevo.runner.run import run_arm, score_arm, seed_runs
from llmevo.runner.views import load_views
from llmevo.train.execution import Execution

CPU = torch.device("cpu")


@pytest.fixture()
def rope_wsd(tmp_path, data_dir, cache_dir):
    torch.set_num_threads(1)
    plan = ReproductionRequest(name="rope", preset="smoke", steps=12, seeds=[42], data_dir=data_dir,
                               cache_dir=cache_dir, device="cpu", threads=1, report=False,
                               out=tmp_path / "rope.json").plan()
    _, preset, views = load_views(plan.preset, ["bpe"], plan.data_dir, plan.cache_dir)
    preset = preset.model_copy(update={"train": preset.train.model_copy(update={"schedule": "wsd"})})
    arm = plan.comparison.method
    return arm, views[arm.data], preset, plan.comparison.objective


def _at(preset, steps):
    return preset.model_copy(update={"train": preset.train.model_copy(update={"steps": steps})})


def test_a_report_branch_is_the_standalone_run_and_its_cache_entry(tmp_path, rope_wsd):
    arm, data, preset, objective = rope_wsd
    branching = Execution("sequential", branches=(6, 30))  # 30 is beyond the run: no branch
    cache = ArmCache.open(tmp_path / "cache", CPU, branching, "use")
    assert cache is not None and cache.independent
    entries = cache.report(arm, data, preset, "lm_loss", objective)
    short = _at(preset, 6)
    assert entries.load(seed_runs(arm, data, short, [42])[0], [], lambda: None) is None
    (trunk,) = run_arm(arm, data, preset, seed_runs(arm, data, preset, [42]), CPU, objective=objective,
                       execution=branching, cache=entries)
    (alone,) = run_arm(arm, data, short, seed_runs(arm, data, short, [42]), CPU, objective=objective,
                       execution=Execution("sequential"))
    (loaded,) = run_arm(arm, data, short, seed_runs(arm, data, short, [42]), CPU, objective=objective,
                        execution=branching, cache=cache.report(arm, data, short, "lm_loss", objective))
    (whole,) = run_arm(arm, data, preset, seed_runs(arm, data, preset, [42]), CPU, objective=objective,
                       execution=Execution("sequential"))
    assert not trunk.cached and loaded.cached and loaded.train.steps_done == 6
    assert trunk.validation == whole.validation and trunk.train.losses == whole.train.losses
    assert loaded.validation == alone.validation and loaded.test == alone.test
    assert loaded.train.losses == alone.train.losses
    assert loaded.train.token_stream_sha256 == alone.train.token_stream_sha256
    for (name, p), q in zip(alone.model.state_dict().items(), loaded.model.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


def test_a_tuning_branch_is_scored_as_the_standalone_tuning_run(tmp_path, rope_wsd):
    arm, data, preset, objective = rope_wsd
    branching = Execution("sequential", branches=(5,))
    cache = ArmCache.open(tmp_path / "cache", CPU, branching, "use")
    assert cache is not None
    runs = seed_runs(arm, data, preset, [7, 8])
    runs = [spec.__class__(spec.seed, spec.config.model_copy(update={"lr": 3e-3})) for spec in runs]
    shorts = [spec.__class__(spec.seed, spec.config.model_copy(update={"steps": 5})) for spec in runs]
    entries = cache.tuning(arm, data, preset, "lm_loss", objective)
    scored = score_arm(arm, data, preset, runs, CPU, metric="lm_loss", execution=branching, cache=entries)
    assert not scored.hits
    loaded = score_arm(arm, data, preset, shorts, CPU, metric="lm_loss", execution=branching, cache=entries)
    alone = score_arm(arm, data, preset, shorts, CPU, metric="lm_loss", execution=Execution("sequential"))
    assert loaded.hits == {0, 1} and loaded.values == alone.values
    assert all(value is not None for value in alone.values.values())


@pytest.mark.parametrize(("given", "says"), [
    ({"branches": [6, 6]}, "distinct positive"),
    ({"branches": [0]}, "distinct positive"),
    ({"branches": [6]}, "--path sequential"),
    ({"branches": [6], "path": "sequential", "arm_cache": False}, "arm cache"),
    ({"branches": [6], "path": "sequential", "tracker": "tensorboard"}, "--tracker"),
])
def test_branches_are_refused_where_nothing_could_keep_them(tmp_path, data_dir, given, says):
    with pytest.raises(ConfigError, match=says):
        ReproductionRequest(name="rope", preset="smoke", data_dir=data_dir, out=tmp_path / "r.json", **given)
