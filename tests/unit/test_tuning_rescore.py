"""Selection on more than one tuning seed where the top settings lie within seed noise (issue 34,
item 2): the contenders are re-scored on the confirmation seeds, under the lr grid and the
declared space, on constructed objectives whose means are worked out here by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from tuning_support import scorer

from llmevo.artifacts.schema import Tuning
from llmevo.errors import ConfigError, DivergedError
from llmevo.runner import tuning, tuning_space
from llmevo.runner.tuning_space import arm_space, space_tuner
from llmevo.train.trainer import TrainConfig

CONFIG = TrainConfig(steps=2, batch_size=2, seq_len=8, lr=1e-3)
GRID = [1e-3, 2e-3, 4e-3, 8e-3]


def _lr_seed(spec):
    return spec.config.lr, spec.seed


def _score(monkeypatch, values_or_evaluate, calls, diverges=lambda lr, seed: False, cache=None):
    """The real ``score_arm`` over a stand-in trainer (``tuning_support``): each call's runs are
    noted as (lr, seed); ``diverges`` says which (lr, seed) runs diverge."""
    evaluate = values_or_evaluate if callable(values_or_evaluate) else _table(values_or_evaluate)
    return scorer(monkeypatch, evaluate, calls=calls, note=_lr_seed, cache=cache,
                  diverges=lambda spec: diverges(spec.config.lr, spec.seed))


def _table(values: dict[tuple[float, int], float]):
    return lambda model: values[(model.config.lr, model.seed)]


# seed 1000: 2e-3 best (3.00); 4e-3 +0.667% and 1e-3 +1.0% are inside the default 1.42%;
# 8e-3 +6.67% is not. On seeds 1001 and 1002, 4e-3 is the better setting.
CLOSE = {(1e-3, 1000): 3.03, (2e-3, 1000): 3.00, (4e-3, 1000): 3.02, (8e-3, 1000): 3.20,
         (1e-3, 1001): 3.04, (2e-3, 1001): 3.05, (4e-3, 1001): 2.98,
         (1e-3, 1002): 3.04, (2e-3, 1002): 3.05, (4e-3, 1002): 2.98}


def _grid_arm(monkeypatch, values, calls, seeds=(1000,), confirm=2, noise=None, diverges=lambda lr, seed: False,
              top=tuning.DEFAULT_RESCORE_TOP):
    plan = tuning.grid_tuner(GRID, list(seeds), [42], extend_edges=False, confirm=confirm, noise=noise, top=top)
    return plan, tuning.tune_arm("m", CONFIG, plan, _score(monkeypatch, values, calls, diverges))


def test_runners_up_within_the_noise_are_rescored_and_the_better_mean_wins(monkeypatch):
    calls: list = []
    plan, result = _grid_arm(monkeypatch, CLOSE, calls)
    assert plan.confirm_seeds == (1001, 1002)
    assert calls[1] == [(lr, seed) for lr in (1e-3, 2e-3, 4e-3) for seed in (1001, 1002)]  # 8e-3 not
    assert result.confirmed == (1e-3, 2e-3, 4e-3)
    means = {s.lr: s.mean for s in result.settings}
    assert means[4e-3] == pytest.approx((3.02 + 2.98 + 2.98) / 3)  # 2.9933
    assert means[2e-3] == pytest.approx((3.00 + 3.05 + 3.05) / 3)  # 3.0333
    assert means[1e-3] == pytest.approx((3.03 + 3.04 + 3.04) / 3)  # 3.0367
    assert means[8e-3] == pytest.approx(3.20)  # one seed: not re-scored
    assert result.best().lr == 4e-3  # seed 1000 alone chose 2e-3
    block = tuning.tuning_block(plan, "lm_loss", {"method": result})
    record = block["arms"]["method"]["rescoring"]
    assert record["noise"]["source"] == "default" and record["noise"]["seeds"] == 1
    assert record["noise"]["spread_percent"] == record["noise"]["threshold_percent"] == 1.42
    assert record["seeds"] == [1001, 1002] and record["outcome"] == tuning.RESCORED
    gaps = {s["lr"]: s["gap_percent"] for s in record["settings"]}
    assert gaps == pytest.approx({2e-3: 0.0, 4e-3: 100 * 0.02 / 3.00, 1e-3: 100 * 0.03 / 3.00})
    assert record["next"] == {"lr": 8e-3, "gap_percent": pytest.approx(100 * 0.20 / 3.00)}
    assert block["arms"]["method"]["chosen"] == {"lr": 4e-3}
    Tuning.model_validate(block)  # the field is in the schema


def test_at_most_top_settings_are_rescored(monkeypatch):
    calls: list = []
    values = {**CLOSE, (8e-3, 1000): 3.01}  # four inside the noise: 2e-3, 8e-3, 4e-3, 1e-3
    plan, result = _grid_arm(monkeypatch, {**values, (8e-3, 1001): 3.0, (8e-3, 1002): 3.0}, calls, top=2)
    assert result.confirmed == (2e-3, 8e-3)  # the best and the nearest runner-up
    record = tuning.tuning_block(plan, "lm_loss", {"m": result})["arms"]["m"]["rescoring"]
    assert record["top"] == 2 and record["next"]["lr"] == 4e-3


def test_a_clear_winner_trains_no_extra_runs(monkeypatch):
    calls: list = []
    values = {(1e-3, 1000): 3.10, (2e-3, 1000): 3.00, (4e-3, 1000): 3.05, (8e-3, 1000): 3.30}
    plan, result = _grid_arm(monkeypatch, values, calls)  # runner-up +1.67% > 1.42%
    assert len(calls) == 1 and result.confirmed == () and result.best().lr == 2e-3
    record = tuning.tuning_block(plan, "lm_loss", {"m": result})["arms"]["m"]["rescoring"]
    assert record["seeds"] == [] and record["outcome"] == tuning.CLEAR
    assert record["settings"] == [{"lr": 2e-3, "gap_percent": 0.0, "why": "best on the tuning seeds"}]
    assert record["next"] == {"lr": 4e-3, "gap_percent": pytest.approx(100 * 0.05 / 3.00)}
    calls.clear()  # a wider noise takes the runner-up in
    _, wider = _grid_arm(monkeypatch, {**values, (2e-3, 1001): 3.0, (2e-3, 1002): 3.0, (4e-3, 1001): 3.0,
                                       (4e-3, 1002): 3.0}, calls, noise=2.0)
    assert wider.confirmed == (2e-3, 4e-3) and len(calls) == 2


def test_zero_noise_is_the_stability_edge_confirmation_alone(monkeypatch):
    calls: list = []
    _, result = _grid_arm(monkeypatch, CLOSE, calls, noise=0)
    assert len(calls) == 1 and result.confirmed == () and result.best().lr == 2e-3
    values = {**CLOSE, (8e-3, 1000): 2.90, (8e-3, 1001): 3.5, (8e-3, 1002): 3.5}  # best at the top lr
    calls.clear()
    _, edge = _grid_arm(monkeypatch, values, calls, noise=0)
    assert calls[1] == [(lr, seed) for lr in (4e-3, 8e-3) for seed in (1001, 1002)]  # its lower neighbour
    assert edge.confirmed == (4e-3, 8e-3) and edge.best().lr == 4e-3


def test_the_noise_is_measured_over_two_tuning_seeds(monkeypatch):
    """Seeds 1000 and 2000. Spread of each setting = sample sd / mean: 1e-3 (3.00, 3.06)
    0.06/sqrt(2)/3.03 = 1.40020%; 2e-3 (2.96, 3.00) 0.94914%; 4e-3 (2.99, 3.01) 0.47140%;
    8e-3 (3.05, 3.15) 2.28099%. Median 1.17467%; the threshold on a mean over two seeds
    1.17467/sqrt(2) = 0.83062%. Gaps to 2e-3's 2.98: 4e-3 +0.671% (in), 1e-3 +1.678% (out)."""
    calls: list = []
    values = {(1e-3, 1000): 3.00, (1e-3, 2000): 3.06, (2e-3, 1000): 2.96, (2e-3, 2000): 3.00,
              (4e-3, 1000): 2.99, (4e-3, 2000): 3.01, (8e-3, 1000): 3.05, (8e-3, 2000): 3.15,
              (2e-3, 2001): 3.00, (4e-3, 2001): 2.90}
    plan, result = _grid_arm(monkeypatch, values, calls, seeds=(1000, 2000), confirm=1)
    assert plan.confirm_seeds == (2001,)
    noise = tuning.tuning_block(plan, "lm_loss", {"m": result})["arms"]["m"]["rescoring"]["noise"]
    assert noise["source"] == "measured" and noise["seeds"] == 2
    assert noise["spread_percent"] == pytest.approx(1.17467, abs=1e-5)
    assert noise["threshold_percent"] == pytest.approx(0.83062, abs=1e-5)
    assert "median over the arm's 4 settings" in noise["why"]
    assert calls[1] == [(2e-3, 2001), (4e-3, 2001)] and result.confirmed == (2e-3, 4e-3)
    assert result.best().lr == 4e-3  # (2.99 + 3.01 + 2.90) / 3 = 2.9667 < (2.96 + 3.00 + 3.00) / 3


def test_every_rescored_setting_diverging_falls_back_to_the_others(monkeypatch):
    calls: list = []
    plan, result = _grid_arm(monkeypatch, CLOSE, calls, diverges=lambda lr, seed: seed == 1002)
    assert result.confirmed == (1e-3, 2e-3, 4e-3)
    assert all(s.mean is None for s in result.settings if s.lr in result.confirmed)
    assert result.best().lr == 8e-3  # the only setting that never diverged
    block = tuning.tuning_block(plan, "lm_loss", {"m": result})
    assert block["arms"]["m"]["rescoring"]["outcome"] == tuning.ALL_DIVERGED
    statuses = {s["lr"]: s["status"] for s in block["arms"]["m"]["settings"]}
    assert statuses == {1e-3: "diverged", 2e-3: "diverged", 4e-3: "diverged", 8e-3: "complete"}
    calls.clear()  # nothing left: one line saying so
    only_close = {**CLOSE, (8e-3, 1000): 3.01, (8e-3, 1001): 3.0, (8e-3, 1002): 3.0}
    with pytest.raises(DivergedError, match="re-scored"):
        _grid_arm(monkeypatch, only_close, calls, top=4, diverges=lambda lr, seed: seed == 1002)[1].best()


def test_both_arms_get_the_same_seeds_and_the_extra_runs_are_counted(monkeypatch):
    calls: list = []
    plan = tuning.grid_tuner(GRID, [1000], [42], extend_edges=False, confirm=2)
    clear = {(1e-3, 1000): 3.10, (2e-3, 1000): 3.00, (4e-3, 1000): 3.05, (8e-3, 1000): 3.30}
    choices = {label: plan.tune(label, CONFIG, [], _score(monkeypatch, values, calls))
               for label, values in (("baseline", CLOSE), ("method", clear))}
    assert choices["baseline"].runs == 4 + 3 * 2 and choices["method"].runs == 4  # grid + re-scoring
    assert choices["baseline"].config.lr == 4e-3 and choices["method"].config.lr == 2e-3
    block = plan.block("lm_loss", {label: c.record for label, c in choices.items()})
    assert block["confirm_seeds"] == [1001, 1002]  # one list of further seeds for every arm
    assert block["arms"]["baseline"]["rescoring"]["seeds"] == [1001, 1002]
    assert block["arms"]["method"]["rescoring"]["seeds"] == []
    assert block["arms"]["baseline"]["rescoring"]["noise"] == block["arms"]["method"]["rescoring"]["noise"]


def test_old_cache_keys_still_hit_and_the_extra_seeds_are_new_keys(monkeypatch, tmp_path):
    from llmevo.runner.cache import ArmCache, TuningEntries
    from llmevo.train.execution import Execution

    calls: list = []
    cache = ArmCache.open(tmp_path, torch.device("cpu"), Execution("sequential"), "use",
                          code_modules=["llmevo.runner.tuning"])
    assert cache is not None
    entries = TuningEntries(cache, "tuning", {"arm": "test"}, "data", {"metric": "lm_loss"})

    def tune(confirm: int):
        plan = tuning.grid_tuner(GRID, [1000], [42], extend_edges=False, confirm=confirm)
        return tuning.tune_arm("m", CONFIG, plan, _score(monkeypatch, CLOSE, calls, cache=entries))

    tune(0)  # the protocol without re-scoring: four keys
    calls.clear()
    result = tune(2)
    assert calls == [[(lr, seed) for lr in (1e-3, 2e-3, 4e-3) for seed in (1001, 1002)]]
    assert sorted(result.cached) == [(lr, 1000) for lr in GRID]
    calls.clear()
    again = tune(2)
    assert calls == [] and again.best().lr == result.best().lr == 4e-3


@pytest.mark.parametrize("noise, top, message", [
    (-1.0, 3, "--tune-noise"), (51.0, 3, "--tune-noise"), (float("nan"), 3, "--tune-noise"),
    (True, 3, "--tune-noise"), (1.0, 0, "re-scored settings"), (1.0, 17, "re-scored settings"),
])
def test_bad_rescoring_settings_are_refused(noise, top, message):
    with pytest.raises(ConfigError, match=message):
        tuning.grid_tuner(GRID, [1000], [42], confirm=2, noise=noise, top=top)
    with pytest.raises(ConfigError, match=message):
        space_tuner("full", 4, [1000], [42], confirm=2, noise=noise, top=top)


def test_contenders_by_hand():
    means = {"a": 3.0, "b": 3.03, "c": 3.05, "d": 3.5}
    assert list(tuning.contenders(means, "a", 1.42, 3)) == ["a", "b"]  # c is +1.67%
    assert list(tuning.contenders(means, "a", 2.0, 3)) == ["a", "b", "c"]
    assert list(tuning.contenders(means, "a", 2.0, 2)) == ["a", "b"]
    assert list(tuning.contenders(means, "a", 0.0, 3)) == ["a"]
    assert list(tuning.contenders(means, "a", 0.0, 3, neighbour="d")) == ["a", "d"]
    assert list(tuning.contenders(means, "a", 1.42, 2, neighbour="d")) == ["a", "d"]  # the neighbour first
    assert tuning.seed_noise(None, [[3.0]], 1).source == "default"
    assert tuning.seed_noise(0.5, [[3.0, 4.0]], 2).spread == 0.5
    assert tuning.seed_noise(None, [[3.0, None]], 2).source == "default"  # a diverged seed measures nothing


# --- the declared space ----------------------------------------------------------------------

def _space_objective(model: SimpleNamespace) -> float:
    """Seed 1000: 3 + 0.1 |log(lr / 1e-3)|, so trials within ~1.4% of the best are those
    whose lr is near 1e-3 (the grid floor's middle point hits it exactly); on the further seeds
    the order reverses (3 - 0.1 |log ...|), so the re-scored mean picks the farthest contender."""
    distance = abs(math.log(model.config.lr / CONFIG.lr))
    return 3.0 + (0.1 if model.seed == 1000 else -0.1) * distance + 0.0001 * model.config.weight_decay


def _space_arm(monkeypatch, calls, evaluate, grid=(), confirm=2):
    axes = arm_space(CONFIG.optimizer, [], CONFIG)
    plan = space_tuner("full", 8, [1000], [42], grid=list(grid), confirm=confirm)
    return plan, tuning_space.tune_arm_space("baseline", CONFIG, axes, plan, _score(monkeypatch, evaluate, calls))


def test_space_contenders_are_rescored_and_the_trial_count_stays_equal(monkeypatch):
    calls: list = []
    plan, result = _space_arm(monkeypatch, calls, _space_objective, grid=tuning.default_grid(CONFIG.lr))
    everything = [*result.trials, *result.grid_trials]
    first = {t.number: t.validation[1000] for t in everything}
    best = min(first, key=lambda n: (first[n], n))
    inside = sorted((n for n in first if 100 * (first[n] - first[best]) / first[best] <= 1.42),
                    key=lambda n: (first[n], n))[:3]  # at most 3, the best first
    assert len(inside) >= 2  # the objective is built so
    assert result.rescored == tuple(sorted(inside))
    retrained = {t.number: t for t in everything if t.number in inside}
    assert all(set(t.validation) == {1000, 1001, 1002} for t in retrained.values())
    assert all(set(t.validation) == {1000} for t in everything if t.number not in inside)
    expected = min(inside, key=lambda n: (math.fsum(retrained[n].validation.values()) / 3, n))
    assert result.choice().number == expected
    for trial in retrained.values():  # a grid trial retrains as the grid protocol trains it
        if trial.phase == "grid":
            assert (trial.values["lr"], 1001) in calls[-1]
    block = tuning_space.space_tuning_block(plan, "lm_loss", {"baseline": result, "method": result})
    parsed = Tuning.model_validate(block)  # still exactly 8 trials per arm
    arm = parsed.arms["baseline"]
    assert arm.chosen_trial == expected and arm.rescoring is not None
    assert [s.trial for s in arm.rescoring.settings] == inside and arm.rescoring.seeds == [1001, 1002]
    assert block["confirm_seeds"] == [1001, 1002]
    assert block["arms"]["baseline"]["grid_floor"]["search_best"]["mean"] == first[result.best().number]
    choice = plan.tune("baseline", CONFIG, [], _score(monkeypatch, _space_objective, calls))
    assert choice.runs == len(everything) + 2 * len(inside)


def test_a_clear_space_winner_trains_no_extra_runs(monkeypatch):
    calls: list = []

    def steep(model: SimpleNamespace) -> float:
        return 3.0 + 10.0 * math.log(model.config.lr / (3 * CONFIG.lr)) ** 2 + 0.001 * (model.seed - 1000)

    plan, result = _space_arm(monkeypatch, calls, steep)
    assert len(calls) == 2 and result.rescored == ()  # the two Sobol phases only
    block = tuning_space.space_tuning_block(plan, "lm_loss", {"baseline": result, "method": result})
    assert block["arms"]["baseline"]["rescoring"]["outcome"] == tuning.CLEAR
    assert block["arms"]["baseline"]["confirmed"] == []
    Tuning.model_validate(block)


def test_without_confirmation_seeds_the_space_search_is_unchanged(monkeypatch):
    calls: list = []
    plan, result = _space_arm(monkeypatch, calls, _space_objective, confirm=0)
    assert len(calls) == 2 and result.rescored == () and result.rescoring is None
    block = tuning_space.space_tuning_block(plan, "lm_loss", {"baseline": result, "method": result})
    assert "rescoring" not in block["arms"]["baseline"] and block["confirm_seeds"] == []
