"""Stalled seeds (issue 34, item 4): the modified z-score of Iglewicz & Hoaglin over the paired
changes, checked by hand and against scipy's median absolute deviation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import median_abs_deviation

from llmevo.eval.stats import STALL_POINTS, STALL_Z, stalled_seeds

SEEDS = [42, 43, 44, 45, 46]
BASELINE = [3.80, 3.70, 3.72, 3.74, 3.82]  # seeds 42 and 46 are hard for both arms


def test_a_stalled_seed_by_hand():
    # post_norm-like: the method stalls at seed 44. Changes (%): -1.05, -1.08, +20.16, -1.07, -1.05
    # -> median -1.05; |d - median| = 0, .03, 21.2, .02, 0 -> MAD .02; seed 44: 0.6745 x 21.2 / .02 >> 3.5
    method = [3.76, 3.66, 4.47, 3.70, 3.78]
    assert stalled_seeds(SEEDS, BASELINE, method) == {"baseline": [], "method": [44]}
    # the baseline stalls at seed 43: the method looks far better there
    assert stalled_seeds(SEEDS, [3.80, 4.40, 3.72, 3.74, 3.82], method[:2] + [3.68, 3.70, 3.78]) == \
        {"baseline": [43], "method": []}
    # a seed hard for both arms (the pairing cancels it) is no stall
    assert stalled_seeds(SEEDS, BASELINE, [b * 0.99 for b in BASELINE]) == {"baseline": [], "method": []}
    # an outlier by z but within a point of the other seeds' changes is noise, not a stall
    assert stalled_seeds(SEEDS, BASELINE, [3.762, 3.663, 3.695, 3.703, 3.782]) == {"baseline": [], "method": []}


@pytest.mark.parametrize("seed", range(20))
def test_the_rule_is_the_modified_z_score_of_scipys_mad(seed):
    rng = np.random.default_rng(seed)
    baseline = list(3.8 + rng.normal(0, 0.05, 5))
    method = [b * (1 + rng.normal(-0.01, 0.004)) + (0.5 if seed % 3 == 0 and i == seed % 5 else 0.0)
              for i, b in enumerate(baseline)]
    changes = np.array([100 * (m - b) / b for b, m in zip(baseline, method, strict=True)])
    median, mad = float(np.median(changes)), float(median_abs_deviation(changes))
    off = changes - median
    expected = [s for s, d in zip(SEEDS, off, strict=True) if d >= STALL_POINTS and 0.6745 * d / mad > STALL_Z]
    assert stalled_seeds(SEEDS, baseline, method)["method"] == expected
    assert (expected != []) == (seed % 3 == 0)  # the planted stalls, and only they


def test_diverged_runs_and_too_few_seeds():
    assert stalled_seeds(SEEDS, BASELINE, [3.7, math.nan, 3.71, 3.69, 3.7])["method"] == [43]
    assert stalled_seeds([1, 2, 3], [3.7, 3.7, 3.7], [3.6, 3.6, 9.0]) == {"baseline": [], "method": []}
