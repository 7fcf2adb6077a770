"""The lr grid's adequacy probe (issue 34, item 2): one run two lattice steps above the grid's
top on the tuning seed; a probe that beats the best extends the grid toward it with the
edge-extension step (selection and re-scoring then decide), else it is recorded and takes no
part in the choice.
The objectives are tables over the lattice of the default grid around 3e-3 (ratio sqrt(3)), so
every expected lr, run and gap below is worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch
from tuning_support import scorer

from llmevo.artifacts.schema import Tuning
from llmevo.errors import ConfigError
from llmevo.experiments.sections import TuningSection
from llmevo.runner import tuning
from llmevo.train.trainer import TrainConfig

CONFIG = TrainConfig(steps=2, batch_size=2, seq_len=8, lr=3e-3)
STEP = math.sqrt(3.0)  # the default grid's ratio: 5 points from lr/3 to 3 lr
GRID = tuning.default_grid(3e-3)  # lattice points -2 .. 2 around 3e-3
PROBE = 9e-3 * 3.0  # two lattice steps above the top
FILL = 9e-3 * STEP  # the lattice point between the top and the probe
BEYOND = PROBE * STEP  # one edge-extension step above the probe

# validation by lattice point k (lr = 3e-3 * sqrt(3)**k), the same on every seed
# two basins: the grid's best is interior at k=1 (5.196e-3, 4.05); the probe at k=4 (2.7e-2)
# reads 3.90, 3.70% better, far outside the default 1.42% noise
TWO_BASINS = {-2: 4.40, -1: 4.20, 0: 4.10, 1: 4.05, 2: 4.08, 3: 4.00, 4: 3.90, 5: 3.95}
# one basin: the probe reads 4.60, 13.6% worse than 4.05
ONE_BASIN = {-2: 4.40, -1: 4.20, 0: 4.10, 1: 4.05, 2: 4.08, 4: 4.60}


def _point(lr: float) -> int:
    k = math.log(lr / 3e-3) / math.log(STEP)
    assert abs(k - round(k)) < 1e-9, lr  # every run lands on the lattice
    return round(k)


def _lr_seed(spec):
    return _point(spec.config.lr), spec.seed


def _score(monkeypatch, table, calls, diverge_above=math.inf, cache=None):
    return scorer(monkeypatch, lambda model: table[_point(model.lr)], calls=calls, note=_lr_seed,
                  diverge_above=diverge_above, cache=cache)


def _tune(monkeypatch, table, calls, probe=True, confirm=0, diverge_above=math.inf, cache=None):
    plan = tuning.grid_tuner(None, [1000], [42], confirm=confirm, around=3e-3, probe=probe)
    return plan, tuning.tune_arm("m", CONFIG, plan, _score(monkeypatch, table, calls, diverge_above, cache))


def test_the_probe_lies_two_edge_extension_steps_above_the_top():
    assert tuning.probe_lr(GRID) == pytest.approx(2.7e-2)
    assert tuning.probe_lr([1e-3, 3e-3, 9e-3, 2.7e-2, 8.1e-2]) == pytest.approx(0.729)  # ratio 3: x9
    assert tuning.probe_lr([1e-3, 2e-3], steps=1) == pytest.approx(4e-3)


def test_a_probe_in_a_better_basin_extends_the_grid_and_moves_the_choice(monkeypatch):
    calls: list = []
    plan, result = _tune(monkeypatch, TWO_BASINS, calls, confirm=2)
    assert calls == [
        [(k, 1000) for k in (-2, -1, 0, 1, 2)],  # the grid: best interior (k=1), no edge extension
        [(4, 1000)],  # the probe: 3.90 against 4.05
        [(3, 1000)],  # the lattice point between the top and the probe
        [(5, 1000)],  # the probe is then the top edge: the edge rule extends once more
        [(k, s) for k in (4, 5) for s in (1001, 1002)],  # re-scoring: 3.95 is +1.28% of 3.90
    ]
    assert result.best().lr == pytest.approx(PROBE)
    assert sorted(_point(lr) for lr in result.grid) == [-2, -1, 0, 1, 2, 3, 4, 5]
    record = result.probe
    assert record["lr"] == pytest.approx(PROBE) and record["top"] == pytest.approx(9e-3)
    assert record["best_before"] == {"lr": pytest.approx(GRID[3]), "mean": 4.05}
    assert record["gap_percent"] == pytest.approx(100 * (3.90 - 4.05) / 4.05)  # -3.70
    assert record["noise"]["threshold_percent"] == 1.42 and record["noise"]["source"] == "default"
    assert record["moved"] is True and record["outcome"] == tuning.PROBE_MOVED
    assert record["added"] == pytest.approx([FILL, BEYOND])
    block = tuning.tuning_block(plan, "lm_loss", {"method": result})
    arm = block["arms"]["method"]
    assert arm["chosen"] == {"lr": pytest.approx(PROBE)} and arm["chosen_on_edge"] is False
    assert [s["lr"] for s in arm["settings"] if s.get("probe")] == [pytest.approx(PROBE)]
    assert block["probe"] is True and "probe" in block["selection"]
    Tuning.model_validate(block)
    choice = plan.tune("method", CONFIG, [], _score(monkeypatch, TWO_BASINS, []))
    assert choice.runs == 5 + 1 + 1 + 1 + 4 and choice.config.lr == pytest.approx(PROBE)


def test_a_losing_probe_changes_nothing_but_its_own_record(monkeypatch):
    calls: list = []
    plan, result = _tune(monkeypatch, ONE_BASIN, calls, confirm=2)
    off_calls: list = []
    off_plan, off = _tune(monkeypatch, ONE_BASIN, off_calls, probe=False, confirm=2)
    assert calls == [off_calls[0], [(4, 1000)], *off_calls[1:]]  # one run more: the probe
    assert result.probe["moved"] is False and result.probe["outcome"] == tuning.PROBE_KEPT
    assert result.probe["gap_percent"] == pytest.approx(100 * (4.60 - 4.05) / 4.05)  # +13.6
    assert result.probe["added"] == []
    on_block = tuning.tuning_block(plan, "lm_loss", {"m": result})
    off_block = tuning.tuning_block(off_plan, "lm_loss", {"m": off})
    probe_record = on_block["arms"]["m"].pop("probe")
    assert probe_record["validation"] == {"1000": 4.60} and probe_record["status"] == "complete"
    assert on_block["arms"] == off_block["arms"]  # settings, choice, re-scoring: all the same
    assert off_block["probe"] is False and on_block["probe"] is True
    assert plan.tune("m", CONFIG, [], _score(monkeypatch, ONE_BASIN, [])).runs == \
        off_plan.tune("m", CONFIG, [], _score(monkeypatch, ONE_BASIN, [])).runs + 1


def test_a_probe_better_by_less_than_the_noise_joins_the_grid_and_re_scoring_decides(monkeypatch):
    calls: list = []
    table = {**ONE_BASIN, 3: 4.20, 4: 4.01, 5: 4.30}  # the probe -0.99%: inside 1.42%, still better
    _, result = _tune(monkeypatch, table, calls, confirm=2)
    assert result.probe["gap_percent"] == pytest.approx(100 * (4.01 - 4.05) / 4.05)
    assert result.probe["moved"] is True and result.probe["added"] == pytest.approx([FILL, BEYOND])
    assert calls == [
        [(k, 1000) for k in (-2, -1, 0, 1, 2)],
        [(4, 1000)],  # the probe
        [(3, 1000)],  # the lattice point between the top and the probe
        [(5, 1000)],  # the probe is the top edge: extended once more (4.30, worse)
        [(k, s) for k in (1, 4) for s in (1001, 1002)],  # 4.05 within 1.42% of 4.01: both re-scored
    ]
    assert result.best().lr == pytest.approx(PROBE)  # 4.01 against 4.05 over all three seeds
    # a probe that reads worse than the best, by however little, is only recorded
    calls = []
    _, kept = _tune(monkeypatch, {**ONE_BASIN, 4: 4.06}, calls)  # +0.25%
    assert kept.probe["moved"] is False and kept.best().lr == pytest.approx(GRID[3])
    assert calls == [[(k, 1000) for k in (-2, -1, 0, 1, 2)], [(4, 1000)]]  # the grid and the probe


def test_a_diverging_probe_is_recorded_as_diverged_and_not_chosen(monkeypatch):
    calls: list = []
    plan, result = _tune(monkeypatch, ONE_BASIN, calls, diverge_above=2e-2)
    assert calls == [[(k, 1000) for k in (-2, -1, 0, 1, 2)], [(4, 1000)]]
    assert result.probe["status"] == "diverged" and result.probe["mean"] is None
    assert result.probe["validation"] == {"1000": None} and result.probe["gap_percent"] is None
    assert result.probe["moved"] is False and result.probe["outcome"] == tuning.PROBE_DIVERGED
    assert result.best().lr == pytest.approx(GRID[3])
    assert not result.at_stability_edge()  # a probe is not a grid point: the edge is the grid's
    Tuning.model_validate(tuning.tuning_block(plan, "lm_loss", {"m": result}))


def test_both_arms_get_the_same_probe(monkeypatch):
    """Equal budgets: whatever each arm's scores, each trains the probe at the same lr on the
    same seeds, and each arm's run count includes it."""
    plan = tuning.grid_tuner(None, [1000, 2000], [42], confirm=0, around=3e-3, probe=True)
    runs = {}
    for label, table in (("baseline", ONE_BASIN), ("method", TWO_BASINS)):
        calls: list = []
        choice = plan.tune(label, CONFIG, [], _score(monkeypatch, table, calls))
        assert calls[1] == [(4, 1000), (4, 2000)]
        runs[label] = choice.runs
    assert runs == {"baseline": 2 * (5 + 1), "method": 2 * (5 + 1 + 1 + 1)}


def test_no_probe_is_the_earlier_protocol(monkeypatch):
    """``--no-tune-probe``: the two-basin arm keeps the grid's interior best, exactly as before
    the probe, and the block says the probe was off."""
    calls: list = []
    plan, result = _tune(monkeypatch, TWO_BASINS, calls, probe=False, confirm=2)
    assert calls == [[(k, 1000) for k in (-2, -1, 0, 1, 2)],
                     [(k, s) for k in (0, 1, 2) for s in (1001, 1002)]]  # 4.08 +0.74%, 4.10 +1.23% of 4.05
    assert result.best().lr == pytest.approx(GRID[3]) and result.probe is None and result.probes == []
    block = tuning.tuning_block(plan, "lm_loss", {"m": result})
    assert block["probe"] is False and "probe" not in block["selection"]
    assert "probe" not in block["arms"]["m"]
    Tuning.model_validate(block)


def test_probe_runs_are_ordinary_cache_keys(monkeypatch, tmp_path):
    from llmevo.runner.cache import ArmCache, TuningEntries
    from llmevo.train.execution import Execution

    cache = ArmCache.open(tmp_path, torch.device("cpu"), Execution("sequential"), "use",
                          code_modules=["llmevo.runner.tuning"])
    assert cache is not None
    entries = TuningEntries(cache, "tuning", {"arm": "test"}, "data", {"metric": "lm_loss"})
    calls: list = []
    _tune(monkeypatch, TWO_BASINS, calls, probe=False, cache=entries)
    calls.clear()
    _, result = _tune(monkeypatch, TWO_BASINS, calls, cache=entries)  # the grid from the cache
    assert calls == [[(4, 1000)], [(3, 1000)], [(5, 1000)]]
    calls.clear()
    _, again = _tune(monkeypatch, TWO_BASINS, calls, cache=entries)
    assert calls == [] and again.probe == result.probe and len(again.cached) == 8


def test_the_pipelines_probe_by_default_and_say_when_not():
    assert TuningSection().tuner(3e-3, [42]).probe is True
    assert TuningSection(tune_probe=False).tuner(3e-3, [42]).probe is False
    ladder_rung = TuningSection(tune_probe=False).tuner(3e-3, [42]).with_grid([1e-3, 2e-3], [42])
    assert ladder_rung.probe is False and TuningSection().tuner(3e-3, [42]).with_grid([1e-3, 2e-3], [42]).probe
    assert tuning.grid_tuner([1e-3, 2e-3], [1000], [42]).probe is False  # a bare library plan: none


@pytest.mark.parametrize("given, message", [
    ({"tune": False, "tune_probe": False}, "--no-tune-probe needs tuning"),
    ({"tune": False, "tune_probe": True}, "--tune-probe needs tuning"),
    ({"tune_space": "lr", "tune_probe": True}, "--tune-probe: the adequacy probe guards the lr grid"),
])
def test_a_probe_without_an_lr_grid_is_refused(given, message):
    with pytest.raises(ConfigError, match=message):
        TuningSection(**given)


def test_an_untuned_run_refuses_the_probe_option():
    with pytest.raises(ConfigError, match="--no-tune-probe needs tuning: add --tune"):
        TuningSection(tune_probe=False).refuse_untuned("add --tune")
