"""Entropy patching: both rules against a per-position loop, max length, calibration range."""

from __future__ import annotations

import pytest
import torch

from llmevo.errors import ConfigError
from llmevo.model.blt.patcher import (
    PATCH_RULES,
    calibrate_threshold,
    entropy_patch_starts,
    mean_patch_size,
    patch_ids,
)


def loop_starts(entropies: list[float], threshold: float, rule: str, max_len: int) -> list[bool]:
    """The paper's rules, one position at a time, with the max-length cut."""
    starts, length = [], 0
    for t, value in enumerate(entropies):
        if t == 0:
            natural = True
        elif rule == "global":
            natural = value > threshold
        else:
            natural = value - entropies[t - 1] > threshold
        start = natural or length >= max_len
        length = 1 if start else length + 1
        starts.append(start)
    return starts


@pytest.mark.parametrize("rule", sorted(PATCH_RULES))
@pytest.mark.parametrize("max_len", [1, 3, 16])
def test_starts_match_a_per_position_loop(rule: str, max_len: int) -> None:
    generator = torch.Generator().manual_seed(0)
    entropies = torch.rand(6, 50, generator=generator) * 4
    starts = entropy_patch_starts(entropies, 2.5 if rule == "global" else 0.8, rule, max_len)
    for row in range(6):
        expected = loop_starts(
            entropies[row].tolist(), 2.5 if rule == "global" else 0.8, rule, max_len
        )
        assert starts[row].tolist() == expected


def test_patch_ids_and_mean_size() -> None:
    starts = torch.tensor([[True, False, False, True, False, True]])
    assert patch_ids(starts).tolist() == [[0, 0, 0, 1, 1, 2]]
    assert mean_patch_size(starts) == pytest.approx(2.0)


def test_unknown_rule_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown patching rule 'median'"):
        entropy_patch_starts(torch.zeros(1, 4), 0.0, "median", 4)


@pytest.mark.parametrize("target", [0.5, 17.0])
def test_unreachable_target_names_the_range(target: float) -> None:
    with pytest.raises(ConfigError, match=r"expected a value in \[1, 16\]"):
        calibrate_threshold(torch.rand(4, 32), target, "global", 16)


@pytest.mark.parametrize("rule", sorted(PATCH_RULES))
def test_calibration_hits_the_target(rule: str) -> None:
    entropies = torch.rand(64, 128, generator=torch.Generator().manual_seed(1)) * 3
    threshold = calibrate_threshold(entropies, 4.0, rule, 16)
    size = mean_patch_size(entropy_patch_starts(entropies, threshold, rule, 16))
    assert size == pytest.approx(4.0, rel=0.05)
