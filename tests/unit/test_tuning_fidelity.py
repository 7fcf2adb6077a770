"""Multi-fidelity tuning (runner.fidelity, --tune-fidelity halving): the rung schedule and the
survivors checked by hand on synthetic objectives, steps spent, equal budgets across arms, a
rung reading that is the full run's, the arm cache keeping stopped runs apart, the default
path unchanged, and the refusals."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from tuning_support import scorer

from llmevo.artifacts.schema import Tuning
from llmevo.catalog import build_model, build_optimizer
from llmevo.cli import main
from llmevo.errors import ConfigError
from llmevo.eval.sensitivity import curve
from llmevo.experiments.sections import TuningSection
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.runner import tuning, tuning_space
from llmevo.runner.arm_run import Scores
from llmevo.runner.cache import CacheContext, run_key
from llmevo.runner.fidelity import Fidelity, check_fidelity, halve, rung_schedule
from llmevo.runner.tuning_space import arm_space, space_tuner
from llmevo.train.execution import Execution, RunSpec, train_many
from llmevo.train.trainer import TrainConfig, train

HALVING = Fidelity("halving", 3)
CONFIG = TrainConfig(steps=27, batch_size=2, seq_len=8, lr=1e-3)


@pytest.mark.parametrize("candidates, steps, expected", [
    (2, 300, [(2, 300)]),                          # fewer than eta: full length
    (3, 300, [(3, 100), (1, 300)]),
    (5, 300, [(5, 100), (2, 300)]),                # the default grid: 5 at a third, 2 to the end
    (8, 300, [(8, 100), (3, 300)]),
    (9, 27, [(9, 3), (3, 9), (1, 27)]),            # one Hyperband bracket, eta = 3
    (27, 81, [(27, 3), (9, 9), (3, 27), (1, 81)]),
    (9, 5, [(9, 1), (3, 5)]),                      # 5 // 9 trains no step: that rung is dropped
])
def test_the_rung_schedule_by_hand(candidates, steps, expected):
    assert rung_schedule(candidates, steps, HALVING) == expected
    assert rung_schedule(candidates, steps, Fidelity()) == [(candidates, steps)]


def _scorer(table, calls):
    """``score`` for ``halve``: a run's reading is ``table[(candidate, steps)]`` (candidate: the
    spec's lr as an index), nothing cached."""
    def score(call):
        calls.append([(int(spec.config.lr), spec.stop_after) for spec in call])
        return Scores({i: table(int(spec.config.lr), spec.stop_after or spec.config.steps, spec.seed)
                       for i, spec in enumerate(call)}, set(), {i: "sequential" for i in range(len(call))})
    return score


def test_halving_keeps_the_best_third_at_each_rung_by_hand():
    """9 candidates (lr = index), two seeds, 27 steps. At step 3 the reading is the index
    (0 best), except candidate 7, which is the best at step 3 and then the worst; candidate 4
    diverges at step 3. Kept at step 3: 7, 0, 1 (ranked 7 < 0 < 1 by mean over the seeds); at
    step 9: the best of those is 0 (7 is now the worst), so 0 trains to 27."""
    def table(candidate, steps, seed):
        if candidate == 4:
            return None
        if candidate == 7:
            return -1.0 if steps == 3 else 100.0
        return candidate + 0.1 * (seed - 1000)

    calls: list = []
    specs = [RunSpec(seed, CONFIG.model_copy(update={"lr": float(c)})) for c in range(9) for seed in (1000, 1001)]
    result = halve(specs, 2, HALVING, _scorer(table, calls))
    assert [sorted({c for c, _ in call}) for call in calls] == [list(range(9)), [0, 1, 7], [0]]
    assert [{stop for _, stop in call} for call in calls] == [{3}, {9}, {None}]  # the last: full runs
    assert result.stopped == {2: 3, 3: 3, 4: 3, 5: 3, 6: 3, 8: 3, 1: 9, 7: 9}
    assert [r["kept"] for r in result.rungs] == [[0, 1, 7], [0], [0]]
    assert result.steps_trained == 2 * (9 * 3 + 3 * 9 + 1 * 27)  # 162, against 2 x 9 x 27 = 486
    assert result.values[0] == 0.0 and result.values[1] == 0.1  # candidate 0 at full length
    assert result.values[2 * 7] == 100.0  # 7's last reading: step 9's
    assert result.values[2 * 4] is None


def test_under_full_halve_is_one_score_call_on_the_given_runs():
    calls: list = []
    specs = [RunSpec(1000, CONFIG.model_copy(update={"lr": float(c)})) for c in range(5)]
    seen: list = []

    def score(call):
        seen.append(call)
        return _scorer(lambda c, s, seed: float(c), calls)(call)

    result = halve(specs, 1, Fidelity(), score)
    assert seen == [specs] and result.stopped == {} and result.steps_trained == 5 * 27


def _lr_stop(spec) -> tuple[float, int | None]:
    """What each scorer call records of a run: its lr and where it stops (None: full length)."""
    return spec.config.lr, spec.stop_after


def _early_bias(target: float):
    """A bowl in log lr at full length; at a rung, higher lrs read better (short-horizon bias)."""
    def evaluate(model) -> float:
        bowl = (math.log(model.lr) - math.log(target)) ** 2
        return bowl if model.steps == CONFIG.steps else bowl - 0.5 * math.log(model.lr)
    return evaluate


def test_the_lr_grid_under_halving_stops_the_worse_and_chooses_among_full_runs(monkeypatch):
    calls: list = []
    grid = [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]
    plan = tuning.grid_tuner(grid, [1000], [42], confirm=0, fidelity=HALVING)
    result = tuning.tune_arm("m", CONFIG, plan, scorer(monkeypatch, _early_bias(4e-3), calls=calls, note=_lr_stop))
    # rung at 27 // 3 = 9 steps: reading = bowl - 0.5 log lr; the two lowest are 4e-3 and 8e-3
    early = {lr: (math.log(lr) - math.log(4e-3)) ** 2 - 0.5 * math.log(lr) for lr in grid}
    kept = sorted(sorted(grid, key=early.get)[:2])
    assert kept == [4e-3, 8e-3]
    assert calls == [[(lr, 9) for lr in grid], [(lr, None) for lr in kept]]
    assert result.best().lr == 4e-3 and result.extended is None
    assert {s.lr: s.stopped_at for s in result.settings} == {1e-3: 9, 2e-3: 9, 4e-3: None, 8e-3: None, 1.6e-2: 9}
    assert result.steps_trained == 5 * 9 + 2 * 27
    block = tuning.tuning_block(plan, "lm_loss", {"baseline": result, "method": result})
    assert block["fidelity"]["kind"] == "halving" and block["fidelity"]["eta"] == 3
    statuses = {s["lr"]: (s["status"], s["stopped_at"]) for s in block["arms"]["method"]["settings"]}
    assert statuses[1e-3] == ("stopped", 9) and statuses[4e-3] == ("complete", None)
    assert block["arms"]["method"]["rungs"] == [{"steps": 9, "lrs": grid, "kept": kept},
                                                {"steps": 27, "lrs": kept, "kept": kept}]
    parsed = Tuning.model_validate(block)
    assert parsed.arms["method"].settings[0].stopped_at == 9
    # the lr curve read from the block holds the full-length settings only
    assert [lr for lr, _ in curve(parsed.arms["method"], parsed.seeds)] == kept


def test_a_stopped_best_is_not_chosen_and_the_edge_extension_trains_full(monkeypatch):
    """The best rung reading (1.6e-2, the grid's top) survives; at full length the top is also
    best, so the grid extends up by one full-length run (one candidate: no halving)."""
    calls: list = []
    grid = [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]
    plan = tuning.grid_tuner(grid, [1000], [42], confirm=0, fidelity=HALVING)
    result = tuning.tune_arm("m", CONFIG, plan, scorer(monkeypatch, _early_bias(1.0), calls=calls, note=_lr_stop))
    assert calls[1] == [(8e-3, None), (1.6e-2, None)] and calls[2] == [(pytest.approx(3.2e-2), None)]
    assert result.extended == "up" and result.best().lr == pytest.approx(3.2e-2)


def test_both_arms_get_the_same_schedule_and_the_same_steps(monkeypatch):
    plan = tuning.grid_tuner([1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2], [1000, 1001], [42], confirm=0,
                             fidelity=HALVING)
    arms = [tuning.tune_arm(label, CONFIG, plan, scorer(monkeypatch, _early_bias(target), calls=[], note=_lr_stop)) for label, target in (("baseline", 2e-3), ("method", 8e-3))]
    assert arms[0].steps_trained == arms[1].steps_trained == 2 * (5 * 9 + 2 * 27)
    assert [[(r["steps"], len(r["lrs"])) for r in arm.rungs] for arm in arms] == [[(9, 5), (27, 2)]] * 2
    assert [a.best().lr for a in arms] == [2e-3, 8e-3]


def test_space_trials_under_halving_equal_per_arm_and_the_block_validates(monkeypatch):
    calls: list = []
    config = TrainConfig(steps=30, batch_size=2, seq_len=8, lr=1e-3, optimizer=ComponentChoice(name="adamw"))

    def evaluate(model) -> float:
        return (math.log(model.lr) - math.log(2e-3)) ** 2 + (0.0 if model.steps == 30 else 1.0)

    records = {}
    for label in ("baseline", "method"):
        plan = space_tuner("lr", 8, [1000], [42], fidelity=HALVING)
        axes = arm_space(config.optimizer, [], config, plan.axes)
        records[label] = tuning_space.tune_arm_space(label, config, axes, plan, scorer(monkeypatch, evaluate, calls=calls, note=_lr_stop))
    # declared phase: 6 trials at 10 steps, the best 2 to 30; the extension's 2: full length
    assert [[stop for _, stop in call] for call in calls[:3]] == [[10] * 6, [None] * 2, [None] * 2]
    for record in records.values():
        stopped = [t for t in record.trials if t.stopped_at is not None]
        assert len(stopped) == 4 and all(t.stopped_at == 10 for t in stopped)
        assert record.best().stopped_at is None
        assert record.steps_trained == 6 * 10 + 2 * 30 + 2 * 30
    block = tuning_space.space_tuning_block(plan, "lm_loss", records)
    parsed = Tuning.model_validate(block)
    assert parsed.trials == 8 and block["fidelity"]["kind"] == "halving"
    assert sum(s.status == "stopped" for s in parsed.arms["method"].settings) == 4


def test_a_rung_reading_is_the_full_runs_at_that_step():
    """A real run stopped after k steps trains exactly the full run's first k steps (same
    losses, same windows) under the full run's cosine schedule; the batched path trains a
    stopped run alone (the replica trainer has no early stop) and the note says so."""
    stream = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0))

    def build() -> nn.Module:
        return build_model(ModelConfig(d_model=32, n_layers=1))

    config = TrainConfig(steps=12, batch_size=2, seq_len=16, lr=3e-3, schedule="cosine", warmup_steps=2)
    full, stopped = train_many(build, stream, [RunSpec(7, config), RunSpec(7, config, stop_after=5)],
                               torch.device("cpu"), build_optimizer=build_optimizer, path="sequential")
    assert stopped.result.steps_done == 5 and stopped.result.status == "stopped"
    assert stopped.result.losses == full.result.losses[:5] and full.result.steps_done == 12
    batched = train_many(build, stream, [RunSpec(7, config, stop_after=5), RunSpec(8, config, stop_after=5)],
                         torch.device("cpu"), build_optimizer=build_optimizer, path="batched")
    assert batched[0].result.losses == full.result.losses[:5] and batched[0].path == "sequential"
    assert "stopped after 5 steps trains alone" in batched[0].note


def test_a_stopped_run_has_its_own_cache_key_and_full_keys_are_unchanged():
    context = CacheContext.capture(torch.device("cpu"), Execution(), [])
    args = ("tuning", context, {"arm": 1}, "data", {"metric": "lm_loss"}, CONFIG, 1000)
    assert run_key(*args) == run_key(*args, None, None)
    assert run_key(*args, None, 9) != run_key(*args) and run_key(*args, None, 9) != run_key(*args, None, 3)


def test_bad_fidelities_are_refused():
    with pytest.raises(ConfigError, match="choose one of full, halving"):
        check_fidelity("hyperband")
    with pytest.raises(ConfigError, match="integer 2"):
        check_fidelity("halving", 1)
    with pytest.raises(ConfigError, match="needs tuning"):
        TuningSection(tune=False, tune_fidelity="halving")
    assert isinstance(TuningSection(tune_fidelity="halving").tuner(3e-3, [42]).fidelity, Fidelity)
    assert TuningSection().tuner(3e-3, [42]).fidelity == Fidelity()  # the default: full


@pytest.mark.parametrize("args, message", [
    (["reproduce", "rope", "--no-tune", "--tune-fidelity", "halving"], "needs tuning"),
    (["reproduce", "--experiment", "x.toml", "--tune-fidelity", "halving"], "--tune-fidelity"),
    (["reproduce", "rope", "--tune-fidelity", "hyperband"], "hyperband"),
])
def test_the_cli_refuses_in_one_line(args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_the_option_is_refused_where_it_cannot_apply_and_passed_on_by_the_table(tmp_path):
    from llmevo.evolve.pipeline import EvolutionSettings
    from llmevo.experiments import EvidenceRequest, LadderRequest, ReproductionRequest

    with pytest.raises(ConfigError, match="does not apply here"):
        LadderRequest(name="rope", tune_fidelity="halving", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="does not apply here"):
        EvolutionSettings(tune_fidelity="halving", data_dir=tmp_path)
    request = ReproductionRequest(name="muon", tune_space="full", tune_fidelity="halving", data_dir=tmp_path)
    assert request.tuning.tuner(3e-3, [42]).fidelity == HALVING
    table = EvidenceRequest(only=["rope"], preset="smoke", tune_fidelity="halving", data_dir=tmp_path,
                            out=tmp_path / "table")
    (entry, _), = [(e, None) for e, _ in table.plan().entries][:1]
    assert table.request(entry).tuning.tune_fidelity == "halving"


def test_under_full_the_calls_and_the_block_are_todays(monkeypatch):
    """The default: one call of every lr at full length (no run stopped), and a block with no
    key that halving adds, byte for byte the block of a plan made without a fidelity."""
    calls: list = []
    grid = [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]
    default = tuning.grid_tuner(grid, [1000], [42], confirm=0)
    assert default.fidelity == Fidelity() and default == tuning.grid_tuner(grid, [1000], [42], confirm=0,
                                                                           fidelity=Fidelity())
    result = tuning.tune_arm("m", CONFIG, default, scorer(monkeypatch, _early_bias(4e-3), calls=calls, note=_lr_stop))
    assert calls == [[(lr, None) for lr in grid]]
    block = tuning.tuning_block(default, "lm_loss", {"m": result})
    assert "fidelity" not in block and "rungs" not in block["arms"]["m"]
    assert all(set(s) == {"lr", "validation", "mean", "status", "extension", "paths"}
               for s in block["arms"]["m"]["settings"])


@pytest.mark.parametrize("optimizer", ["adamw", "schedule_free_adamw"])
def test_a_stopped_run_is_the_full_run_at_its_evaluation_point(optimizer):
    """A run stopped after k steps leaves the model where the full run's ``on_step`` hook sees
    it after its k-th step (``on_step``'s step is 0-based), at the optimizer's evaluation
    point: schedule-free AdamW's average x, which differs from the weights it trains at. A full
    run beside a stopped one in the same call (a survivor's replay) is the full run alone."""
    stream = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0))

    def build() -> nn.Module:
        return build_model(ModelConfig(d_model=32, n_layers=1))

    config = TrainConfig(steps=12, batch_size=2, seq_len=16, lr=3e-3, warmup_steps=2,
                         optimizer=ComponentChoice(name=optimizer))
    full, stopped = train_many(build, stream, [RunSpec(7, config), RunSpec(7, config, stop_after=5)],
                               torch.device("cpu"), build_optimizer=build_optimizer, path="sequential")
    torch.manual_seed(7)
    model, seen = build(), {}

    def hook(step: int, loss: float) -> bool:
        if step == 4:  # after the 5th step
            seen.update({name: value.clone() for name, value in model.state_dict().items()})
        return True

    alone = train(model, stream, config, 7, torch.device("cpu"), build_optimizer(config.optimizer),
                  None, on_step=hook)
    for name, value in stopped.model.state_dict().items():
        assert torch.equal(value, seen[name]), name
    assert alone.losses == full.result.losses and stopped.result.losses == full.result.losses[:5]
    for name, value in full.model.state_dict().items():
        assert torch.equal(value, model.state_dict()[name]), name
