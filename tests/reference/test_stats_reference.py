"""The paired t-interval against textbook t values (Student's t table, two-sided 95%)."""

from __future__ import annotations

import math

import pytest

from llmevo.eval import stats

# Two-sided 95% critical values from a printed t table.
T_TABLE_0975 = {2: 4.303, 4: 2.776, 9: 2.262}


def _changes_to_arms(changes: list[float]) -> tuple[list[float], list[float]]:
    baseline = [100.0] * len(changes)
    return baseline, [100.0 + change for change in changes]


@pytest.mark.parametrize(
    "changes",
    [
        [-2.0, -3.0, -4.0],  # mean -3, s = 1, n = 3
        [1.0, 2.0, 3.0, 4.0, 5.0],  # mean 3, s = sqrt(2.5), n = 5
        [0.5, -1.5, 2.5, 0.0, 1.0, -0.5, 3.0, 1.5, 2.0, -1.0],  # n = 10
    ],
)
def test_t_interval_matches_table(changes):
    n = len(changes)
    mean = sum(changes) / n
    s = math.sqrt(sum((c - mean) ** 2 for c in changes) / (n - 1))
    half = T_TABLE_0975[n - 1] * s / math.sqrt(n)
    baseline, method = _changes_to_arms(changes)
    result = stats.paired_relative_change(baseline, method)
    assert result["n"] == n
    assert result["mean"] == pytest.approx(mean, abs=1e-9)
    # table values carry 3 decimals: allow 5e-4 in t times s / sqrt(n)
    tolerance = 5e-4 * s / math.sqrt(n) + 1e-9
    assert result["ci_low"] == pytest.approx(mean - half, abs=tolerance)
    assert result["ci_high"] == pytest.approx(mean + half, abs=tolerance)


def test_textbook_worked_example():
    # n = 5 differences with mean 3 and s = sqrt(2.5) = 1.5811:
    # 3 +- 2.776 * 1.5811 / sqrt(5) = 3 +- 1.963 -> (1.037, 4.963)
    result = stats.paired_relative_change(*_changes_to_arms([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert result["ci_low"] == pytest.approx(1.037, abs=1e-3)
    assert result["ci_high"] == pytest.approx(4.963, abs=1e-3)


def test_wider_confidence_gives_wider_interval():
    arms = _changes_to_arms([1.0, 2.0, 3.0, 4.0, 5.0])
    narrow = stats.paired_relative_change(*arms, confidence=0.90)
    wide = stats.paired_relative_change(*arms, confidence=0.99)
    assert wide["ci_low"] < narrow["ci_low"] and wide["ci_high"] > narrow["ci_high"]
