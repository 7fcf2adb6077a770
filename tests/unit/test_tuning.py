"""Tuning-fair comparisons: grids, plans, arm tuning with edge extension, verdict classes."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from tuning_support import scorer

from llmevo.catalog import build_optimizer
from llmevo.errors import ConfigError, DivergedError
from llmevo.eval.stats import classified_verdict, classify_change, paired_relative_change, verdict
from llmevo.runner import tuning
from llmevo.runner.arm_run import Scores
from llmevo.train.execution import train_many
from llmevo.train.trainer import TrainConfig

CONFIG = TrainConfig(steps=2, batch_size=2, seq_len=8, lr=1e-3)


def test_default_grid_is_log_spaced_from_lr_over_3_to_3_lr():
    grid = tuning.default_grid(3e-3)
    expected = [1e-3, 3e-3 / math.sqrt(3), 3e-3, 3e-3 * math.sqrt(3), 9e-3]
    assert grid == pytest.approx(expected, rel=1e-12)
    ratios = [b / a for a, b in zip(grid, grid[1:], strict=False)]
    assert ratios == pytest.approx([math.sqrt(3)] * 4)


@pytest.mark.parametrize("grid, seeds, report, message", [
    ([3e-3], [1000], [42], "at least 2"),
    ([3e-3, 3e-3], [1000], [42], "at least 2"),
    ([1e-3, 0.0], [1000], [42], "positive"),
    ([-1e-3, 1e-3], [1000], [42], "positive"),
    ([1e-3, float("nan")], [1000], [42], "positive"),
    ([1e-3, 3e-3], [42, 1000], [42, 43], "disjoint"),
    ([1e-3, 3e-3], [], [42], "no tuning seeds"),
    ([1e-3, 3e-3], [7, 7], [42], "duplicate"),
])
def test_bad_plans_are_refused(grid, seeds, report, message):
    with pytest.raises(ConfigError, match=message):
        tuning.grid_tuner(grid, seeds, report)


def test_plan_sorts_the_grid():
    plan = tuning.grid_tuner([1e-2, 1e-3, 3e-3], [1000, 1001], [42])
    assert plan.grid == (1e-3, 3e-3, 1e-2) and plan.seeds == (1000, 1001)


def _lr(spec) -> float:
    """What each scorer call records of a run."""
    return spec.config.lr


def _bowl(target: float):
    """Validation loss as a function of lr: a parabola in log lr with its minimum at target,
    plus a seed offset (so means over seeds are checked too)."""
    return lambda model: (math.log(model.lr) - math.log(target)) ** 2 + 0.01 * (model.seed - 1000)


def test_best_inside_the_grid_is_chosen_without_extension(monkeypatch):
    calls: list = []
    plan = tuning.grid_tuner([1e-3, 3e-3, 1e-2], [1000, 1001], [42])
    result = tuning.tune_arm("method", CONFIG, plan, scorer(monkeypatch, _bowl(2.5e-3), calls=calls, note=_lr))
    assert calls == [[1e-3, 1e-3, 3e-3, 3e-3, 1e-2, 1e-2]]  # one call, every lr x seed
    assert result.best().lr == 3e-3 and result.extended is None and result.edge() is None
    setting = next(s for s in result.settings if s.lr == 3e-3)
    assert setting.values == {1000: pytest.approx(math.log(1.2) ** 2),
                              1001: pytest.approx(math.log(1.2) ** 2 + 0.01)}
    assert setting.mean == pytest.approx(math.log(1.2) ** 2 + 0.005)


def test_best_on_the_edge_extends_the_grid_once_in_that_direction(monkeypatch):
    calls: list = []
    plan = tuning.grid_tuner([1e-3, 2e-3, 4e-3], [1000], [42])
    up = tuning.tune_arm("m", CONFIG, plan, scorer(monkeypatch, _bowl(1.0), calls=calls, note=_lr))
    assert calls[1] == [pytest.approx(8e-3)]  # one more step at the edge's ratio (x2)
    assert up.extended == "up" and up.best().lr == pytest.approx(8e-3)
    assert up.edge() == "up"  # still on the (extended) edge: recorded, not extended again
    assert len(calls) == 2
    calls.clear()
    down = tuning.tune_arm("m", CONFIG, plan, scorer(monkeypatch, _bowl(1.1e-3), calls=calls, note=_lr))
    assert calls[1] == [pytest.approx(5e-4)]
    assert down.extended == "down" and down.best().lr == 1e-3 and down.edge() is None
    block = tuning.tuning_block(plan, "lm_loss", {"baseline": up, "method": down})
    assert block["grid"] == [1e-3, 2e-3, 4e-3] and block["seeds"] == [1000]
    assert block["arms"]["method"]["chosen"] == {"lr": 1e-3}
    assert block["arms"]["method"]["chosen_on_edge"] is False
    assert block["arms"]["baseline"]["chosen_on_edge"] is True
    assert [s["extension"] for s in block["arms"]["method"]["settings"]] == [True, False, False, False]


def test_diverged_settings_are_never_chosen(monkeypatch):
    plan = tuning.grid_tuner([1e-3, 3e-3, 1e-2, 3e-2], [1000], [42])
    result = tuning.tune_arm("m", CONFIG, plan, scorer(monkeypatch, _bowl(1e-2), diverge_above=3e-3, note=_lr))
    assert result.best().lr == 3e-3  # 1e-2 would be best but diverged
    block = tuning.tuning_block(plan, "lm_loss", {"method": result})
    statuses = {s["lr"]: s["status"] for s in block["arms"]["method"]["settings"]}
    assert statuses[1e-2] == "diverged" and statuses[3e-3] == "complete"
    with pytest.raises(DivergedError, match="every tuning run diverged"):
        tuning.tune_arm("m", CONFIG, plan, scorer(monkeypatch, _bowl(1e-2), diverge_above=0.0, note=_lr))


def test_confirmation_seeds_follow_the_tuning_seeds_and_skip_report_seeds():
    assert tuning.confirmation_seeds(2, [1000], [42]) == (1001, 1002)
    assert tuning.confirmation_seeds(3, [41], [42, 43]) == (44, 45, 46)
    assert tuning.confirmation_seeds(0, [1000], [42]) == ()
    assert tuning.grid_tuner([1e-3, 3e-3], [1000], [42], confirm=2).confirm_seeds == (1001, 1002)
    for bad in (-1, 1.5, True, 17, 10**20):
        with pytest.raises(ConfigError, match=r"count 0 \.\. 16"):
            tuning.grid_tuner([1e-3, 3e-3], [1000], [42], confirm=bad)


def _seed_dependent(good_seeds: set[int], edge_lr: float):
    """The post_norm picture: every lr below ``edge_lr`` follows a bowl around 2e-3 (loss ~
    1.0 at 1e-3 down to ~0.98 at 3e-3); at ``edge_lr`` a run trains to 0.5 (better than all)
    on the seeds in ``good_seeds`` and stalls at 5.0 on the others."""

    def evaluate(model):
        if model.lr >= edge_lr:
            return 0.5 if model.seed in good_seeds else 5.0
        return 1.0 - 0.02 * (model.lr >= 3e-3)
    return evaluate


def test_a_lucky_best_at_the_stability_edge_is_confirmed_and_replaced(monkeypatch):
    calls: list = []
    plan = tuning.grid_tuner([1e-3, 3e-3, 1e-2], [1000], [42], extend_edges=False, confirm=2)
    result = tuning.tune_arm("m", CONFIG, plan, scorer(monkeypatch, _seed_dependent({1000}, 1e-2), calls=calls, note=_lr))
    # tuning seed 1000 is lucky at 1e-2 (0.5 < 0.98); 1e-2 is the highest lr tried, so it and
    # its lower neighbour 3e-3 are retrained on seeds 1001, 1002, where 1e-2 stalls
    assert calls[1] == [3e-3, 3e-3, 1e-2, 1e-2]
    assert result.confirmed == (3e-3, 1e-2)
    means = {s.lr: s.mean for s in result.settings}
    assert means[1e-2] == pytest.approx((0.5 + 5.0 + 5.0) / 3)
    assert means[3e-3] == pytest.approx(0.98)
    assert means[1e-3] == pytest.approx(1.0)  # not retrained
    assert result.best().lr == 3e-3 and not result.at_stability_edge()
    block = tuning.tuning_block(plan, "lm_loss", {"method": result})
    assert block["confirm_seeds"] == [1001, 1002] and block["arms"]["method"]["confirmed"] == [3e-3, 1e-2]
    assert "stability edge" in block["selection"]
    validations = {s["lr"]: s["validation"] for s in block["arms"]["method"]["settings"]}
    assert validations[1e-2] == {"1000": 0.5, "1001": 5.0, "1002": 5.0}
    assert validations[1e-3] == {"1000": 1.0}


def test_a_best_that_holds_on_the_confirmation_seeds_is_kept(monkeypatch):
    plan = tuning.grid_tuner([1e-3, 3e-3, 1e-2], [1000], [42], extend_edges=False, confirm=2)
    result = tuning.tune_arm("m", CONFIG, plan, scorer(monkeypatch, _seed_dependent({1000, 1001, 1002}, 1e-2), note=_lr))
    assert result.confirmed == (3e-3, 1e-2) and result.best().lr == 1e-2


def test_a_best_just_below_a_divergence_is_at_the_stability_edge(monkeypatch):
    calls: list = []
    plan = tuning.grid_tuner([1e-3, 3e-3, 1e-2], [1000], [42], confirm=1)
    result = tuning.tune_arm("m", CONFIG, plan, scorer(monkeypatch, _bowl(1e-2), diverge_above=3e-3, calls=calls, note=_lr))
    assert result.at_stability_edge() and calls[-1] == [1e-3, 3e-3]  # seed 1001
    assert result.confirmed == (1e-3, 3e-3) and result.best().lr == 3e-3


def test_an_interior_best_is_not_confirmed(monkeypatch):
    calls: list = []
    plan = tuning.grid_tuner([1e-3, 3e-3, 1e-2], [1000], [42], confirm=2)
    result = tuning.tune_arm("m", CONFIG, plan, scorer(monkeypatch, _bowl(3e-3), calls=calls, note=_lr))
    assert len(calls) == 1 and result.confirmed == () and not result.at_stability_edge()
    assert tuning.tuning_block(plan, "lm_loss", {"m": result})["arms"]["m"]["confirmed"] == []


def test_tune_arm_trains_real_models_through_train_many():
    """Without fakes: a tiny bigram model at two learning rates; the lower validation loss
    (computed here independently) wins."""
    torch.manual_seed(0)
    stream = torch.randint(0, 16, (400,))

    def build() -> nn.Module:
        return nn.Sequential(nn.Embedding(16, 8), nn.Linear(8, 16))

    def evaluate(model: nn.Module) -> float:
        with torch.no_grad():
            logits = model(stream[:-1][None])  # (1, N, V)
            return float(nn.functional.cross_entropy(logits[0], stream[1:]))

    def score(runs) -> Scores:
        outcomes = train_many(build, stream, runs, torch.device("cpu"), build_optimizer=build_optimizer)
        return Scores({i: evaluate(o.model) for i, o in enumerate(outcomes)}, set(), {})

    plan = tuning.grid_tuner([1e-4, 1e-1], [1000], [42])
    config = TrainConfig(steps=20, batch_size=4, seq_len=8, lr=1e-3)
    result = tuning.tune_arm("m", config, plan, score)
    by_lr = {s.lr: s.mean for s in result.settings}
    assert result.best().lr == min(by_lr, key=by_lr.get)


# --- four verdict classes, hand-computed ---------------------------------------------------

@pytest.mark.parametrize("low, high, expected", [
    (-3.0, -0.5, "better"),        # upper < 0
    (-2.0, 0.6, "non-inferior"),   # 0 <= upper < δ = 1
    (-2.0, 1.5, "inconclusive"),   # interval reaches δ, not worse
    (0.2, 0.8, "worse"),           # lower > 0 (significantly worse even inside the margin)
    (0.5, 3.0, "worse"),
    (-1.0, 1.0, "inconclusive"),   # upper == δ is not below δ
])
def test_classes_on_hand_made_intervals(low, high, expected):
    assert classify_change(low, high, 1.0) == expected


def test_classes_flip_when_higher_is_better_and_need_an_interval():
    assert classify_change(0.5, 3.0, 1.0, lower_is_better=False) == "better"
    assert classify_change(-0.6, 2.0, 1.0, lower_is_better=False) == "non-inferior"
    assert classify_change(-3.0, -0.2, 1.0, lower_is_better=False) == "worse"
    assert classify_change(None, None, 1.0) is None
    with pytest.raises(ConfigError, match="margin"):
        classify_change(-1.0, 1.0, 0.0)


def test_classified_verdict_from_seed_values():
    """Three seeds whose relative changes are -1%, 0%, +0.5%: mean -1/6 %, sample std
    0.7638 %, t(0.975, 2) = 4.3027, half-width 1.8974 %: CI [-2.064, +1.731] -> with δ = 1%
    inconclusive; with δ = 2% non-inferior."""
    baseline = [4.0, 4.0, 4.0]
    method = [3.96, 4.0, 4.02]
    change = paired_relative_change(baseline, method)
    assert change["ci_low"] == pytest.approx(-1 / 6 - 4.302653 * 0.763763 / math.sqrt(3), abs=1e-4)
    assert change["ci_high"] == pytest.approx(-1 / 6 + 4.302653 * 0.763763 / math.sqrt(3), abs=1e-4)
    block = verdict("lm_loss", baseline, method)
    assert classified_verdict(block, change, 1.0)["classification"] == "inconclusive"
    wide = classified_verdict(block, change, 2.0)
    assert wide["classification"] == "non-inferior" and wide["margin_percent"] == 2.0
    assert "non-inferior" in wide["summary"]
    few = paired_relative_change(baseline[:2], method[:2])
    assert classified_verdict(verdict("lm_loss", baseline[:2], method[:2]), few, 1.0)["classification"] is None
