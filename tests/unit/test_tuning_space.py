"""Space tuning (runner.tuning_space): Sobol points, axis maps, equal budgets, disjoint seeds,
edge extension on a constructed objective, the artifact block and its schema."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import qmc
from tuning_support import scorer

from llmevo.artifacts.schema import Tuning
from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.registry import ComponentChoice, TuningAxis
from llmevo.runner import tuning_space
from llmevo.runner.tuning_space import ResolvedAxis, arm_space, axis_value, space_tuner
from llmevo.train.trainer import TrainConfig

CONFIG = TrainConfig(steps=100, batch_size=2, seq_len=8, lr=1e-3, weight_decay=0.1,
                     optimizer=ComponentChoice(name="adamw"))


def test_the_study_draws_scrambled_sobol_points_from_the_first_trial():
    """Trial k of the QMCSampler study is point k of scipy's scrambled Sobol sequence with the
    same seed (the space-defining trial keeps Optuna from sampling trial 0 at random)."""
    study = tuning_space.sobol_study(["a", "b", "c"], seed=5)
    distributions = study.trials[0].distributions
    asked = [study.ask(distributions) for _ in range(8)]
    points = np.array([[trial.params[f"u:{k}"] for k in "abc"] for trial in asked])
    expected = qmc.Sobol(3, scramble=True, seed=5).random(8)
    assert np.array_equal(points, expected)
    assert not np.array_equal(points, qmc.Sobol(3, scramble=True, seed=6).random(8))



def test_the_study_warns_of_nothing():
    """Optuna marks QMCSampler experimental; a user's reproduction should not print that."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tuning_space.sobol_study(["a"], seed=0)

def _axis(scale: str, low: float, high: float, **limits) -> ResolvedAxis:
    axis = TuningAxis(target="train", setting="lr", low=low, high=high, scale=scale, **limits)
    return ResolvedAxis("x", axis, low, high, axis.limit_low, axis.limit_high)


def test_axis_maps_follow_their_scale():
    log = _axis("log", 1e-3, 1e-1)
    assert axis_value(log, 0.0) == pytest.approx(1e-3) and axis_value(log, 1.0) == pytest.approx(1e-1)
    assert axis_value(log, 0.5) == pytest.approx(1e-2)  # the geometric mean
    assert axis_value(log, 1.5) == pytest.approx(1.0)  # the line extended: half a width beyond
    one_minus = _axis("log1m", 0.9, 0.999, limit_high=0.9999)
    assert axis_value(one_minus, 0.0) == pytest.approx(0.9)
    assert axis_value(one_minus, 1.0) == pytest.approx(0.999)
    assert 1 - axis_value(one_minus, 0.5) == pytest.approx(math.sqrt(0.1 * 0.001))
    assert axis_value(one_minus, 5.0) == 0.9999  # clipped at its limit
    linear = _axis("linear", 0.0, 0.2, limit_low=0.0)
    assert axis_value(linear, 0.25) == pytest.approx(0.05) and axis_value(linear, -0.5) == 0.0


def test_declared_spaces_resolve_against_the_preset_and_name_real_settings():
    adamw = arm_space(ComponentChoice(name="adamw"), [], CONFIG)
    assert [a.name for a in adamw] == ["lr", "beta2", "weight_decay", "warmup"]
    lr, warmup = adamw[0], adamw[3]
    assert (lr.low, lr.high) == pytest.approx((1e-3 / 3, 3e-3))
    assert (warmup.low, warmup.high) == pytest.approx((0.0, 20.0)) and warmup.axis.integer
    assert [a.name for a in arm_space(ComponentChoice(name="muon"), [], CONFIG)] == [
        "lr", "momentum", "adamw_lr"]
    assert [a.name for a in arm_space(ComponentChoice(name="lion"), [], CONFIG)] == [
        "lr", "beta2", "weight_decay"]
    assert [a.name for a in arm_space(ComponentChoice(name="adamw"), [], CONFIG, ["lr", "beta2"])] == [
        "lr", "beta2"]
    for spec in full_registry().all():  # every declared axis moves a real setting
        for name, axis in spec.manifest.tuning_space.items():
            fields = (TrainConfig.model_fields if axis.target == "train"
                      else spec.config_cls.model_fields)
            assert axis.setting in fields, (spec.name, name)
        if spec.slot == "optimizer":
            assert "lr" in spec.manifest.tuning_space, spec.name


def test_the_paper_space_is_opt_in_and_widens_what_the_papers_tune():
    """``--tune-space paper`` (issue 48, dial a): each optimizer's paper_tuning_space (weight
    decay to 1, warmup where v3 had none), a component without one keeps its tuning_space, and
    ``full`` (protocol v3) reads exactly what it read before."""
    plan = space_tuner("paper", 8, [1000], [42])
    assert plan.paper and plan.axes is None and not space_tuner("full", 8, [1000], [42]).paper

    def names(optimizer: str, paper: bool) -> list[str]:
        return [a.name for a in arm_space(ComponentChoice(name=optimizer), [], CONFIG, paper=paper)]

    assert names("lion", True) == ["lr", "beta2", "weight_decay", "warmup"]
    assert names("muon", True) == ["lr", "momentum", "adamw_lr", "weight_decay", "warmup"]
    assert names("soap", True)[-2:] == ["weight_decay", "warmup"]
    assert names("schedule_free_adamw", True) == ["lr", "beta1", "weight_decay", "warmup"]
    assert names("ademamix", True) == ["lr", "beta3", "alpha", "weight_decay", "warmup"]
    assert names("normuon", True) == ["lr", "momentum", "adamw_lr", "weight_decay", "warmup"]
    for optimizer in full_registry().names("optimizer"):  # every optimizer declares one
        decay = {a.name: a for a in arm_space(ComponentChoice(name=optimizer), [], CONFIG, paper=True)}
        assert (decay["weight_decay"].low, decay["weight_decay"].high) == (0.0, 1.0), optimizer
    lion_lr = arm_space(ComponentChoice(name="lion"), [], CONFIG, paper=True)[0]
    assert (lion_lr.low, lion_lr.high) == pytest.approx((1e-3 / 3, 6e-3))
    free_lr = arm_space(ComponentChoice(name="schedule_free_adamw"), [], CONFIG, paper=True)[0]
    assert (free_lr.low, free_lr.high) == pytest.approx((1e-3, 10 * 1e-3))  # its README's "1x-10x larger" lr
    free = {a.name: a for a in arm_space(ComponentChoice(name="schedule_free_adamw"), [], CONFIG, paper=True)}
    assert (free["beta1"].low, free["beta1"].high) == (0.9, 0.98)  # its README's 0.9, "0.95 or 0.98"
    # undeclared: the tuning space; full: unchanged by the paper spaces
    ademamix = full_registry().get("optimizer", "ademamix").manifest
    undeclared = ademamix.model_copy(update={"paper_tuning_space": {}})
    assert tuning_space.declared_space(undeclared, paper=True) == ademamix.tuning_space
    assert names("ademamix", False) == ["lr", "beta3", "alpha", "weight_decay"]
    assert names("normuon", False) == ["lr", "momentum", "neuron_beta2", "adamw_lr"]
    assert names("lion", False) == ["lr", "beta2", "weight_decay"]
    assert arm_space(ComponentChoice(name="adamw"), [], CONFIG)[2].high == 0.2
    for spec in full_registry().all():  # every paper axis moves a real setting and holds lr
        for name, axis in spec.manifest.paper_tuning_space.items():
            fields = (TrainConfig.model_fields if axis.target == "train"
                      else spec.config_cls.model_fields)
            assert axis.setting in fields, (spec.name, name)
        if spec.slot == "optimizer" and spec.manifest.paper_tuning_space:
            assert "lr" in spec.manifest.paper_tuning_space, spec.name


def test_settings_reach_the_train_config_and_the_optimizer_config():
    axes = arm_space(ComponentChoice(name="adamw"), [], CONFIG)
    config = tuning_space.apply_settings(CONFIG, axes, {"lr": 2e-3, "beta2": 0.95,
                                                        "weight_decay": 0.0, "warmup": 7})
    assert (config.lr, config.weight_decay, config.warmup_steps) == (2e-3, 0.0, 7)
    assert config.optimizer == ComponentChoice(name="adamw", config={"beta2": 0.95})
    assert CONFIG.optimizer.config == {}  # the preset's config is untouched


@pytest.mark.parametrize("space, trials, seeds, report, message", [
    ("full", 0, [1000], [42], "--tune-trials 0"),
    ("full", 1, [1000], [42], "--tune-trials 1"),
    ("full", 4, [42, 1000], [42, 43], "disjoint"),
    ("full", 4, [], [42], "no tuning seeds"),
    ("lr,,beta2", 4, [1000], [42], "empty axis"),
    ("lr,lr", 4, [1000], [42], "named twice"),
    ("beta2", 4, [1000], [42], "the space must hold lr"),  # a KeyError after training, before
    (" ", 4, [1000], [42], "'full', 'paper'"),
])
def test_bad_space_plans_are_refused(space, trials, seeds, report, message):
    with pytest.raises(ConfigError, match=message):
        space_tuner(space, trials, seeds, report)


def test_extension_share_splits_every_budget_the_same_way():
    plans = {n: space_tuner("full", n, [1000], [42]) for n in (2, 3, 4, 8, 16)}
    assert {n: (p.declared_trials, p.extension_trials) for n, p in plans.items()} == {
        2: (2, 0), 3: (3, 0), 4: (3, 1), 8: (6, 2), 16: (12, 4)}


def _objective(target_lr: float):
    """Validation loss: a bowl in log lr with its minimum at ``target_lr``, rising with weight
    decay (best at 0: an edge that is the axis's limit), flat in beta2 and warmup, plus a seed
    offset."""
    def evaluate(model: SimpleNamespace) -> float:
        return (10.0 * (math.log(model.config.lr) - math.log(target_lr)) ** 2
                + 0.5 * model.config.weight_decay + 0.001 * (model.seed - 1000))
    return evaluate


def _tune(monkeypatch, optimizer: str, target_lr: float, trials: int, calls: list):
    config = CONFIG.model_copy(update={"optimizer": ComponentChoice(name=optimizer)})
    axes = arm_space(config.optimizer, [], config)
    plan = space_tuner("full", trials, [1000, 1001], [42])
    return plan, tuning_space.tune_arm_space(optimizer, config, axes, plan, scorer(monkeypatch, _objective(target_lr), calls=calls))


def test_a_best_on_an_edge_extends_that_axis_once_beyond_it(monkeypatch):
    """Minimum at 20 x lr, far above the declared lr/3 .. 3 lr: the best declared trial is
    the one with the highest lr, so the extension trials sample lr over (3 lr, 9 lr] (half the
    declared width in log lr beyond the edge) with every other axis at the best's values."""
    calls: list = []
    plan, result = _tune(monkeypatch, "adamw", 20 * CONFIG.lr, 16, calls)
    assert len(result.trials) == 16 and [len(c) for c in calls] == [12 * 2, 4 * 2]
    declared = [t for t in result.trials if t.phase == "declared"]
    expected = qmc.Sobol(4, scramble=True, seed=plan.sampler_seed).random(16)
    assert np.array_equal(np.array([[t.sobol[a] for a in ("lr", "beta2", "weight_decay", "warmup")]
                                    for t in result.trials]), expected)
    best_declared = result.best(declared)
    assert best_declared.values["lr"] == max(t.values["lr"] for t in declared)
    assert result.extended.get("lr") == "up"
    low, high = result.extension_range("lr")
    assert (low, high) == pytest.approx((3 * CONFIG.lr, 9 * CONFIG.lr))
    for trial in result.trials[12:]:
        assert trial.phase == "extension" and 3 * CONFIG.lr < trial.values["lr"] <= 9 * CONFIG.lr
        for axis in ("beta2", "weight_decay", "warmup"):
            if axis not in result.extended:
                assert trial.values[axis] == best_declared.values[axis]
    assert result.best().phase == "extension"  # nearer the minimum than anything declared
    # each run's TrainConfig carries the trial's settings (what the arm cache keys)
    first = calls[0][0].config
    assert first.lr == result.trials[0].values["lr"]
    assert first.optimizer.config == {"beta2": result.trials[0].values["beta2"]}


def test_an_edge_at_its_limit_is_not_extended_and_the_budget_stays_equal(monkeypatch):
    """Weight decay's best is at 0, its limit: on the edge, not extended; an interior lr is
    not extended; the extension trials then continue the Sobol design (same budget)."""
    calls: list = []
    _, result = _tune(monkeypatch, "lion", CONFIG.lr, 4, calls)
    assert len(result.trials) == 4 and [len(c) for c in calls] == [3 * 2, 1 * 2]
    assert result.on_edge == {"weight_decay": "down"} and result.at_limit == ("weight_decay",)
    assert result.extended == {} and result.extension_range("weight_decay") is None
    extension = result.trials[3]
    assert extension.phase == "extension" and extension.coordinates == extension.sobol


def test_every_arm_gets_the_same_trials_and_the_block_validates(monkeypatch):
    calls: list = []
    plan, adamw = _tune(monkeypatch, "adamw", 20 * CONFIG.lr, 8, calls)
    _, muon = _tune(monkeypatch, "muon", CONFIG.lr, 8, calls)
    assert len(adamw.trials) == len(muon.trials) == 8
    assert sum(len(c) for c in calls) == 2 * 8 * 2  # trials x tuning seeds, per arm
    block = tuning_space.space_tuning_block(plan, "lm_loss", {"baseline": adamw, "method": muon})
    tuning = Tuning.model_validate(block)
    assert tuning.space and tuning.trials == 8 and tuning.seeds == [1000, 1001]
    assert list(tuning.arms["method"].space) == ["lr", "momentum", "adamw_lr"]
    chosen = tuning.arms["baseline"]
    assert chosen.chosen == {k: float(v) for k, v in adamw.best().values.items()}
    assert chosen.space["lr"].extended == "up" and chosen.space["lr"].setting == "train.lr"
    settings = block["arms"]["method"]["settings"]
    best = block["arms"]["method"]["chosen"]
    dropped = next(i for i, setting in enumerate(settings) if setting != best)  # keep the chosen trial
    unequal = {**block, "arms": {**block["arms"], "method": {
        **block["arms"]["method"], "settings": settings[:dropped] + settings[dropped + 1:]}}}
    with pytest.raises(ValueError, match="exactly 8 trials"):
        Tuning.model_validate(unequal)


def test_a_cached_trial_is_not_trained_again(monkeypatch, tmp_path):
    """The arm cache keys a trial by its whole TrainConfig: a second tuning of the same arm
    trains nothing and gives the same trials."""
    from llmevo.runner.cache import ArmCache, TuningEntries
    from llmevo.train.execution import Execution

    calls: list = []
    cache = ArmCache.open(tmp_path, torch.device("cpu"), Execution("sequential"), "use",
                          code_modules=["llmevo.runner.tuning_space"])
    assert cache is not None
    entries = TuningEntries(cache, "tuning", {"arm": "test"}, "data", {"metric": "lm_loss"})
    axes = arm_space(CONFIG.optimizer, [], CONFIG)
    plan = space_tuner("full", 4, [1000], [42])
    run = [tuning_space.tune_arm_space("baseline", CONFIG, axes, plan, scorer(monkeypatch, _objective(CONFIG.lr), calls=calls, cache=entries))
           for _ in range(2)]
    assert len(calls) == 2  # the first tuning's two phases; the second trained nothing
    assert [t.values for t in run[0].trials] == [t.values for t in run[1].trials]
    assert all(t.cached == (1000,) for t in run[1].trials)


def _narrow(model: SimpleNamespace) -> float:
    """A minimum exactly at the preset's settings (lr 1e-3, weight decay 0.1): the lr grid's
    middle point hits it; Sobol trials, which move every axis at once, miss it."""
    return (10.0 * (math.log(model.config.lr) - math.log(CONFIG.lr)) ** 2
            + 5.0 * abs(model.config.weight_decay - CONFIG.weight_decay)
            + 0.001 * (model.seed - 1000))


@pytest.mark.parametrize("evaluate, chosen_from", [(_narrow, "grid"), (_objective(20 * CONFIG.lr), "search")])
def test_the_search_never_ends_worse_than_the_lr_grid(monkeypatch, evaluate, chosen_from):
    """The grid floor (issue 34, item 2): after the Sobol trials the arm trains the lr grid
    protocol's runs (the same RunSpecs as --tune-grid, extended once past an edge) at its
    other settings, and keeps the grid's best when it is lower than the search's."""
    from llmevo.runner.tuning import default_grid

    calls: list = []
    axes = arm_space(CONFIG.optimizer, [], CONFIG)
    grid = default_grid(CONFIG.lr)
    plan = space_tuner("full", 8, [1000], [42], grid=grid)
    result = tuning_space.tune_arm_space("baseline", CONFIG, axes, plan, scorer(monkeypatch, evaluate, calls=calls))
    floor = [spec.config for call in calls[2:] for spec in call]  # after the two Sobol phases
    assert floor[:5] == [CONFIG.model_copy(update={"lr": lr}) for lr in grid]  # the grid protocol's runs
    assert [t.phase for t in result.grid_trials] == ["grid"] * len(floor)
    assert [t.number for t in result.grid_trials] == list(range(8, 8 + len(floor)))
    search, choice = result.best(), result.choice()
    grid_best = min((t for t in result.grid_trials), key=lambda t: t.mean)
    assert choice.mean == min(search.mean, grid_best.mean)  # never worse than either
    assert (choice.phase == "grid") == (chosen_from == "grid")
    chosen = tuning_space.chosen_config(CONFIG, result)
    if chosen_from == "grid":  # the preset's own settings on every other axis
        assert chosen.lr == pytest.approx(CONFIG.lr) and chosen.weight_decay == CONFIG.weight_decay
        assert chosen.optimizer.config["beta2"] == full_registry().get("optimizer", "adamw").make_config({}).beta2
    block = tuning_space.space_tuning_block(plan, "lm_loss", {"baseline": result, "method": result})
    tuning = Tuning.model_validate(block)  # the floor's rows do not count against equal trials
    record = block["arms"]["baseline"]["grid_floor"]
    assert record["chosen_from"] == chosen_from and record["held"] == (chosen_from == "search")
    assert tuning.arms["baseline"].chosen_trial == choice.number
    assert "never ends worse than the grid" in block["method"]
