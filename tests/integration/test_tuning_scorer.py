"""The tuning scorer is run_arm's tuning mode (issue 33, item 3): a tuning run and a report run of
the same (arm, lr, seed) train the same model and read the same validation loss, to the bit,
and that loss is the mean next-token cross-entropy over the validation windows (computed here
by hand); the arm cache gives a tuning run back as it was scored."""

from __future__ import annotations

import math

import torch
from torch.nn import functional

from llmevo.eval.lm import evaluation_windows
from llmevo.experiments import ReproductionRequest
from llmevo.runner.cache import ArmCache
from llmevo.runner.run import arm_train_config, run_arm, score_arm
from llmevo.runner.views import load_views
from llmevo.train.execution import Execution, RunSpec

CPU = torch.device("cpu")


def _mean_cross_entropy(model: torch.nn.Module, tokens: torch.Tensor, seq_len: int, max_windows: int | None) -> float:
    """The validation loss by hand: every window's next-token cross-entropy, summed in float64,
    over the number of predicted tokens."""
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for window in evaluation_windows(tokens, seq_len, max_windows):
            if window.numel() < 2:
                continue
            logits = model(window[None, :-1])  # (1, T, V)
            total += float(functional.cross_entropy(logits[0].double(), window[1:], reduction="sum"))
            count += window.numel() - 1
    return total / count


def test_a_tuning_run_reads_the_validation_loss_a_report_run_records(tmp_path, data_dir, cache_dir):
    plan = ReproductionRequest(name="rope", preset="smoke", steps=6, seeds=[42], data_dir=data_dir,
                               cache_dir=cache_dir, device="cpu", threads=1, report=False,
                               out=tmp_path / "rope.json").plan()
    _, preset, views = load_views(plan.preset, ["bpe"], plan.data_dir, plan.cache_dir)
    arm = plan.comparison.method
    data = views[arm.data]
    config = arm_train_config(arm, data, preset)
    runs = [RunSpec(seed, config.model_copy(update={"lr": lr})) for lr in (1e-3, 4e-3) for seed in (1000, 1001)]
    sequential = Execution("sequential")

    reported = run_arm(arm, data, preset, runs, CPU, execution=sequential)
    scored = score_arm(arm, data, preset, runs, CPU, metric="lm_loss", execution=sequential)

    assert scored.values == {index: run.validation["lm_loss"] for index, run in enumerate(reported)}
    assert scored.hits == set() and scored.paths == {index: "sequential" for index in range(len(runs))}
    assert len(set(scored.values.values())) == len(runs)  # four different runs, four readings
    by_hand = _mean_cross_entropy(reported[0].model, data.validation, config.seq_len, preset.eval_max_windows)
    assert math.isclose(scored.values[0], by_hand, rel_tol=1e-6)
    bits = score_arm(arm, data, preset, runs[:1], CPU, metric="bits_per_byte", execution=sequential)
    assert bits.values == {0: reported[0].validation["bits_per_byte"]}

    cache = ArmCache.open(tmp_path / "cache", CPU, sequential, "use")
    assert cache is not None
    entries = cache.tuning(arm, data, preset, "lm_loss", plan.comparison.objective)
    first = score_arm(arm, data, preset, runs[:2], CPU, metric="lm_loss", execution=sequential, cache=entries)
    again = score_arm(arm, data, preset, runs[:2], CPU, metric="lm_loss", execution=sequential, cache=entries)
    assert first.hits == set() and again.hits == {0, 1}
    assert again.values == first.values == {0: scored.values[0], 1: scored.values[1]}
    assert again.paths == first.paths
