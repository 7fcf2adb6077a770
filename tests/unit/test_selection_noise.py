"""Selection noise (experiments.selection_noise): the choice per seed and how often it changes."""

from __future__ import annotations

import pytest

from llmevo.errors import ConfigError
from llmevo.experiments.selection_noise import chosen_per_seed, selection_changes

GRID = {  # lr -> {seed: validation}
    1e-3: {1000: 3.9, 2000: 3.7, 2001: 3.80},
    3e-3: {1000: 3.8, 2000: 3.9, 2001: 3.75},
    9e-3: {1000: None, 2000: 4.5, 2001: None},  # diverged on two seeds
}


def test_each_seed_chooses_its_own_lowest_lr_and_a_diverged_run_is_worst():
    assert chosen_per_seed(GRID) == {1000: 3e-3, 2000: 1e-3, 2001: 3e-3}
    assert chosen_per_seed({1e-3: {1: None}, 3e-3: {1: None}}) == {1: None}
    # only the seeds every lr has count (a confirmed setting holds more)
    assert chosen_per_seed({1e-3: {1: 1.0, 2: 0.5}, 3e-3: {1: 2.0}}) == {1: 1e-3}


def test_changes_are_counted_against_the_reference_seed():
    noise = selection_changes("baseline", GRID, 1000)
    assert noise.reference == 3e-3 and noise.chosen == {2000: 1e-3, 2001: 3e-3}
    assert noise.changed == (2000,) and noise.change_rate == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="reference seed 7"):
        selection_changes("baseline", GRID, 7)


def test_regret_is_how_much_worse_the_reference_choice_scores_under_each_other_seed():
    noise = selection_changes("baseline", GRID, 1000)  # seed 1000 chose 3e-3
    # seed 2000 chose 1e-3 (3.7); 3e-3 scored 3.9 there: 5.41% worse; seed 2001 agreed: 0
    assert noise.regret_percent == pytest.approx({2000: 100 * 0.2 / 3.7, 2001: 0.0})
    # a reference choice that diverged under another seed has no finite regret
    lost = selection_changes("method", {1e-3: {1: 2.0, 2: None}, 3e-3: {1: 2.5, 2: 3.0}}, 1)
    assert lost.chosen == {2: 3e-3} and lost.regret_percent == {2: None}
