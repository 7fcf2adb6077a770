"""Time to target (issue 35, item 3) on curves whose answer is known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from llmevo.eval.time_to_target import steps_to_target, time_to_target

STEPS = list(range(1, 1001))


def _curves(method_speed: dict[int, float], seeds=(42, 43, 44, 45)) -> dict:
    """Power-law losses 2 + 10 / sqrt(step); the method at ``speed`` x the baseline's steps."""
    baseline = {str(s): [2 + 10 / math.sqrt(t) for t in STEPS] for s in seeds}
    method = {str(s): [2 + 10 / math.sqrt(method_speed[s] * t) for t in STEPS] for s in seeds}
    return {"baseline": {"steps": STEPS, "per_seed": baseline}, "method": {"steps": STEPS, "per_seed": method}}


def test_a_method_twice_as_fast_needs_half_the_steps():
    found = time_to_target(_curves({42: 2.0, 43: 2.0, 44: 2.0, 45: 2.0}), [42, 43, 44, 45], window_share=0.001)
    # window 1: the target is the baseline's last loss, 2 + 10/sqrt(1000); the method reaches it
    # at 2t = 1000, step 500
    for row in found["per_seed"]:
        assert row["baseline_steps"] == 1000 and row["method_steps"] == 500 and row["fraction"] == 0.5
    assert found["fraction"] == pytest.approx(0.5) and found["reached"] == 4


def test_the_summary_is_a_t_interval_on_log_fractions():
    speeds = {42: 1.5, 43: 2.0, 44: 1.25, 45: 1.6}
    found = time_to_target(_curves(speeds), list(speeds))
    fractions = [row["fraction"] for row in found["per_seed"]]
    logs = np.log(fractions)
    low, high = stats.t.interval(0.95, len(logs) - 1, loc=logs.mean(), scale=stats.sem(logs))
    assert found["fraction"] == pytest.approx(math.exp(logs.mean()))
    assert (found["ci_low"], found["ci_high"]) == pytest.approx((math.exp(low), math.exp(high)))
    assert all(f < 1 for f in fractions)  # every seed's method is faster


def test_a_method_that_never_gets_there_is_not_reached():
    found = time_to_target(_curves({42: 0.5, 43: 2.0, 44: 2.0, 45: 2.0}), [42, 43, 44, 45])
    assert found["per_seed"][0]["method_steps"] is None and found["per_seed"][0]["fraction"] is None
    assert found["reached"] == 3 and found["ci_low"] is not None


def test_the_trailing_mean_by_hand():
    assert steps_to_target([10, 20, 30, 40], [5.0, 3.0, 4.0, 1.0], 3.5, window=2) == 30  # means 5, 4, 3.5
    assert steps_to_target([10, 20], [5.0, math.nan], 3.5, window=1) is None
    assert time_to_target({"baseline": {"steps": [1], "per_seed": {"42": [1.0]}}}, [42]) is None


def test_a_validation_curve_is_read_point_by_point_against_the_baseline_s_last_point():
    """Hand-made validation curves (points every 10 steps): the target is the baseline's last
    point (2.4, where a trailing mean of its last two would give 2.5) and each arm's steps the
    first point at or below it: the method's 2.45 at step 20 does not count, its 2.4 at 30 does."""
    steps = [10, 20, 30, 40]
    curves = {"baseline": {"steps": steps, "per_seed": {"42": [5.0, 4.0, 2.6, 2.4], "43": [5.0, 2.3, 2.6, 2.4]}},
              "method": {"steps": steps, "per_seed": {"42": [4.0, 2.45, 2.4, 2.0], "43": [3.0, 2.5, 2.6, 2.5]}}}
    found = time_to_target(curves, [42, 43], trailing=False)
    first, second = found["per_seed"]
    assert (first["target"], first["baseline_steps"], first["method_steps"], first["fraction"]) == (2.4, 40, 30, 0.75)
    # seed 43: the baseline dips below its own last point at step 20; the method never gets to 2.4
    assert (second["baseline_steps"], second["method_steps"], second["fraction"]) == (20, None, None)
    assert (found["reached"], found["fraction"], found["window_share"]) == (1, 0.75, None)
    trailing = time_to_target(curves, [42], window_share=0.5)  # the training reading: a mean of 2
    assert trailing["per_seed"][0]["target"] == 2.5
