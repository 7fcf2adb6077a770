"""The coordinate check (Tensor Programs V, Figure 5): after a few AdamW steps at widths 64,
128, 256 and 512, the mean |x| of each block's output and of the logits stays about flat across
widths under μP and grows with width under the standard parametrization; and across depths 2,
4, 8 and 16 at width 64, the last block's output stays about flat under CompleteP and grows
with depth under μP (whose branches are not scaled with depth).

Figures at this setting (3 steps, lr 1e-2, 2 seeds; slopes of log mean |x| on log width):
standard 2.6 / 2.2 / 1.0 (block 0, block 1, logits), mup -0.2 / -0.2 / -0.2; on log depth
(last block): mup 1.2, completep 0.2."""

from __future__ import annotations

import pytest

from llmevo.diagnostics.coordinates import coordinate_check, depth_check, width_slope

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


@pytest.fixture(scope="module")
def depths():
    return {param: depth_check((2, 4, 8, 16), param) for param in ("mup", "completep")}


def test_the_residual_stream_grows_with_depth_under_mup(depths):
    assert width_slope(depths["mup"], "last") > 0.8
    assert depths["mup"][16]["last"] > 5 * depths["mup"][2]["last"]


def test_the_residual_stream_stays_flat_with_depth_under_completep(depths):
    completep = depths["completep"]
    assert abs(width_slope(completep, "last")) < 0.4
    sizes = [completep[depth]["last"] for depth in completep]
    assert max(sizes) < 2 * min(sizes)
    assert completep[2] == depths["mup"][2]  # the base depth: the same model
