"""The coordinate check (Tensor Programs V, Figure 5): after a few AdamW steps at widths 64,
128, 256 and 512, the mean |x| of each block's output and of the logits stays about flat across
widths under μP and grows with width under the standard parametrization.

Figures at this setting (3 steps, lr 1e-2, 2 seeds; slopes of log mean |x| on log width):
standard 2.6 / 2.2 / 1.0 (block 0, block 1, logits), mup -0.2 / -0.2 / -0.2."""

from __future__ import annotations

import pytest

from llmevo.diagnostics.coordinates import coordinate_check, width_slope

WIDTHS = (64, 128, 256, 512)
KEYS = ("block0", "block1", "logits")


@pytest.fixture(scope="module")
def coordinates():
    return {param: coordinate_check(WIDTHS, param) for param in ("standard", "mup")}


def test_activations_grow_with_width_under_standard(coordinates):
    standard = coordinates["standard"]
    for key in KEYS:
        assert width_slope(standard, key) > 0.7, key
        assert standard[512][key] > 3 * standard[64][key], key


def test_activations_stay_flat_under_mup(coordinates):
    mup = coordinates["mup"]
    for key in KEYS:
        assert abs(width_slope(mup, key)) < 0.4, key
        sizes = [mup[width][key] for width in WIDTHS]
        assert max(sizes) < 2 * min(sizes), key


def test_the_two_agree_at_the_base_width(coordinates):
    assert coordinates["mup"][64] == coordinates["standard"][64]
