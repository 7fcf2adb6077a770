"""One tuner interface (issue 33, item 3): the lr grid and the declared space are two
implementations of ``runner.tuner.Tuner``, and a third plugs into a reproduction with no
change above the runner."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from llmevo.experiments import ReproductionRequest
from llmevo.experiments.reproduction import run_reproduction
from llmevo.runner.tuner import ArmChoice, Tuner
from llmevo.runner.tuning import ArmTuning, GridTuner, SettingResult, grid_tuner, tuning_block
from llmevo.runner.tuning_space import space_tuner

SRC = Path(__file__).resolve().parents[2] / "src" / "llmevo"


@dataclasses.dataclass(frozen=True)
class FixedTuner:
    """A tuner that trains nothing: each arm "chooses" the learning rate given for its label
    (a stand-in for a tuner written later, e.g. a multi-fidelity one)."""

    choices: dict[str, float]
    seeds: tuple[int, ...] = (1000,)
    kind = "grid"
    calls: list = dataclasses.field(default_factory=list)

    def runs_at_once(self) -> int:
        return 1

    def check_arms(self, arms, preset) -> None:
        self.calls.append(("check_arms", [arm.label for arm in arms]))

    def with_grid(self, grid, report_seeds):
        raise AssertionError("not a ladder")

    def tune(self, label, config, components, score):
        self.calls.append(("tune", label, config.lr, [c.name for c in components]))
        lr = self.choices[label]
        record = ArmTuning(label, [SettingResult(value, {seed: 0.0 if value == lr else 1.0 for seed in self.seeds})
                                   for value in sorted(set(self.choices.values()))])
        return ArmChoice(config.model_copy(update={"lr": lr}), record, [], 0)

    def block(self, metric, records):
        plan = GridTuner(tuple(sorted(set(self.choices.values()))), self.seeds, extend_edges=False)
        return tuning_block(plan, metric, records)


def test_the_two_tuners_implement_one_interface():
    grid = grid_tuner([1e-3, 3e-3], [1000], [42])
    space = space_tuner("lr", 4, [1000], [42])
    protocol = {name for name, _ in inspect.getmembers(Tuner) if not name.startswith("_")}
    for tuner in (grid, space):
        assert protocol <= set(dir(tuner)), protocol - set(dir(tuner))
        for name in ("tune", "with_grid", "check_arms", "block"):
            wanted = list(inspect.signature(getattr(Tuner, name)).parameters)[1:]
            assert list(inspect.signature(getattr(tuner, name)).parameters) == wanted, (type(tuner), name)
    assert (grid.kind, space.kind) == ("grid", "space")
    assert grid.runs_at_once() == 2 and space.runs_at_once() == space.declared_trials
    assert grid.with_grid([1e-2, 3e-2], [42]).grid == (1e-2, 3e-2)
    with pytest.raises(Exception, match="a grid binds to a plan tuned on a learning-rate grid"):
        space.with_grid([1e-2, 3e-2], [42])


def test_no_pipeline_tells_the_tuners_apart_by_type():
    """Above the runner a tuner is a ``Tuner``: no isinstance check, no import of the two plans'
    types outside their own modules (the report seeds' default and check functions aside)."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.parent.name == "runner" and path.stem in {"tuning", "tuning_space", "tuner"}:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                if names & {"GridTuner", "SpaceTuner"}:
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == []


@pytest.mark.slow
def test_a_new_tuner_plugs_into_a_reproduction_without_a_change_above_the_runner(tmp_path, data_dir):
    plan = ReproductionRequest(name="relu2", preset="smoke", steps=3, seeds=[42], data_dir=data_dir,
                               cache_dir=tmp_path / "cache", device="cpu", threads=1, arm_cache=False,
                               tune_grid=[1e-3, 3e-3], report=False, out=tmp_path / "a.json").plan()
    fixed = FixedTuner({"baseline": 2e-3, "method": 5e-3})
    outcome = run_reproduction(dataclasses.replace(plan, tuning=fixed))
    tunes = [call for call in fixed.calls if call[0] == "tune"]
    assert [call[1] for call in tunes] == ["baseline", "method"]
    assert {call[2] for call in tunes} == {plan.preset.train.lr}  # each arm handed its preset's settings
    assert "relu2" in tunes[1][3] and "relu2" not in tunes[0][3]  # and its own components
    body = outcome.body
    # the report seeds trained at each arm's choice, and the block is the tuner's
    assert body["baseline"].learning_rate == 2e-3 and body["method"].learning_rate == 5e-3
    assert body["baseline"].train["lr"] == 2e-3 and body["method"].train["lr"] == 5e-3
    assert outcome.runs["method"][42].train_config["lr"] == 5e-3
    assert body["tuning"].grid == [2e-3, 5e-3]
    budget = body["tuning"].arms["method"].budget  # each arm's, whichever the tuner (a typed field)
    assert budget.runs == budget.trained == 0 and budget.steps_per_run == 3
