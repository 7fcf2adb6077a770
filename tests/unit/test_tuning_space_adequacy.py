"""Every optimizer's declared lr range holds the lr its own published lr-grid tuning chose
(issue 34: Muon's range was lr/3 .. 3·lr of AdamW's preset lr, [1e-3, 9e-3] at quick, and
left out the 1.56e-2 its grid found, so its space-tuned row measured a mis-tuned Muon)."""

import json
from pathlib import Path

import pytest

from llmevo.catalog import full_registry
from llmevo.registry import ComponentChoice
from llmevo.runner.presets import get_preset
from llmevo.runner.tuning_space import arm_space

ROOT = Path(__file__).resolve().parents[2]
GRID_ROWS = sorted((ROOT / "docs" / "reproductions").glob("*/metrics/public-quick-tuned-seeds42-46.json"))


def _optimizer_rows():
    optimizers = set(full_registry().names("optimizer"))
    for path in GRID_ROWS:
        artifact = json.loads(path.read_text(encoding="utf-8"))
        name = path.parents[1].name.split("-", 1)[1]
        if name in optimizers:
            yield pytest.param(name, artifact, id=name)


@pytest.mark.parametrize(("name", "artifact"), list(_optimizer_rows()))
def test_the_declared_lr_range_holds_the_lr_grids_choice(name, artifact):
    train = get_preset("quick").train
    arms = artifact["tuning"]["arms"]
    for arm, optimizer in (("method", name), ("baseline", _baseline_optimizer(name))):
        chosen = arms[arm]["chosen"]["lr"]
        (lr_axis,) = [axis for axis in arm_space(ComponentChoice(name=optimizer), [], train) if axis.name == "lr"]
        assert lr_axis.low <= chosen <= lr_axis.high, (
            f"{optimizer}: its lr grid chose {chosen:.3g}, outside its declared lr range "
            f"[{lr_axis.low:.3g}, {lr_axis.high:.3g}]")


def _baseline_optimizer(name: str) -> str:
    return full_registry().get("optimizer", name).manifest.ablation or "adamw"


def test_the_rows_are_found():
    assert {"muon", "soap", "normuon", "lion"} <= {param.values[0] for param in _optimizer_rows()}
