"""Decay branches are arm runs cached like any other (issue 48, item 3b): ``run_horizons`` stores
each horizon under the key its standalone report run has, so that run (``run_arm`` at a preset
with those steps, as ``ArmRunner.report`` calls it) loads it, and what it loads equals the
standalone run trained without a cache (the independent reference)."""

from __future__ import annotations

import torch

from llmevo.experiments import ReproductionRequest
from llmevo.runner.cache import ArmCache
from llmevo.runner.run import run_arm, run_horizons, seed_runs
from llmevo.runner.views import load_views
from llmevo.train.execution import Execution

CPU = torch.device("cpu")


def test_a_branch_is_the_standalone_run_and_its_cache_entry(tmp_path, data_dir, cache_dir):
    torch.set_num_threads(1)
    plan = ReproductionRequest(name="rope", preset="smoke", steps=12, seeds=[42], data_dir=data_dir,
                               cache_dir=cache_dir, device="cpu", threads=1, report=False,
                               out=tmp_path / "rope.json").plan()
    _, preset, views = load_views(plan.preset, ["bpe"], plan.data_dir, plan.cache_dir)
    preset = preset.model_copy(update={"train": preset.train.model_copy(update={"schedule": "wsd"})})
    arm, objective = plan.comparison.method, plan.comparison.objective
    data = views[arm.data]
    execution = Execution("parallel")  # the default CPU path; at one thread its runs are independent
    cache = ArmCache.open(tmp_path / "cache", CPU, execution, "use")
    assert cache is not None and cache.independent

    def entries(at):
        return cache.report(arm, data, at, "lm_loss", objective)

    branches = run_horizons(arm, data, preset, 42, [12, 6], CPU, objective=objective, execution=execution,
                            cache=entries(preset))
    assert not any(run.cached for run in branches)
    short = preset.model_copy(update={"train": preset.train.model_copy(update={"steps": 6})})
    (alone,) = run_arm(arm, data, short, seed_runs(arm, data, short, [42]), CPU, objective=objective,
                       execution=execution)
    (loaded,) = run_arm(arm, data, short, seed_runs(arm, data, short, [42]), CPU, objective=objective,
                        execution=execution, cache=entries(short))
    branch = branches[1]
    assert loaded.cached and branch.train.steps_done == 6
    for run in (branch, loaded):
        assert run.validation == alone.validation and run.test == alone.test
        assert run.train.losses == alone.train.losses
        assert run.train.token_stream_sha256 == alone.train.token_stream_sha256
        for (name, p), q in zip(alone.model.state_dict().items(), run.model.state_dict().values(), strict=True):
            assert torch.equal(p, q), name
    again = run_horizons(arm, data, preset, 42, [6, 12], CPU, objective=objective, execution=execution,
                         cache=entries(preset))
    assert all(run.cached for run in again) and again[1].validation == branches[0].validation
