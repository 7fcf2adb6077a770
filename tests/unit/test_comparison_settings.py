"""What a comparison trains under, resolved once in the runner (``runner.settings``, issue 33):
the preset at the request's overrides, the tuner around that preset's learning rate, checked
against the arms when made; a request planned once, its outputs its plan's; and a bad tuning
option refused before any data is read, through both doors."""

from __future__ import annotations

import math

import pytest
from cli_runner import run_cli

from llmevo.errors import ConfigError
from llmevo.experiments import ReproductionRequest, reproduce
from llmevo.experiments import reproduction as reproduction_module
from llmevo.experiments.plans import plan_comparison
from llmevo.runner.presets import get_preset
from llmevo.runner.settings import ComparisonSettings, TuningSection

LR = 1.2345e-3


def test_the_preset_takes_the_overrides_and_the_grid_lies_around_the_given_lr():
    arms = plan_comparison("rope").arms
    settings = ComparisonSettings(get_preset("smoke"), {"lr": LR, "steps": 2, "batch_size": None},
                                  arms, [42], TuningSection())
    train = settings.preset.train
    assert (train.lr, train.steps, train.batch_size) == (LR, 2, 4)  # batch_size None: smoke's 4 stays
    # by hand: five points log-spaced from LR / 3 to 3 LR, the middle one LR itself
    by_hand = [LR / 3, LR / math.sqrt(3), LR, LR * math.sqrt(3), LR * 3]
    assert settings.tuner is not None and settings.tuner.kind == "grid"
    assert settings.tuner.grid == pytest.approx(by_hand, rel=1e-12)
    # tuning seed 1000; the two confirmation seeds are the next integers that are neither it nor 42
    assert (settings.tuner.seeds, settings.tuner.confirm_seeds) == ((1000,), (1001, 1002))


def test_an_untuned_comparison_has_no_tuner_and_the_preset_its_overrides():
    settings = ComparisonSettings(get_preset("smoke"), {"lr": LR}, plan_comparison("rope").arms, [42])
    assert settings.tuner is None and settings.preset.train.lr == LR
    assert get_preset("smoke").train.lr == 6e-4  # the base is left as it was


@pytest.mark.parametrize(("overrides", "tuning", "message"), [
    ({}, TuningSection(tune_space="lr,nosuch"), "--tune-space: unknown axis 'nosuch'"),  # against the arms
    ({}, TuningSection(tune_seeds=[42]), "tuning seeds [42] are also report seeds"),
    ({"schedule": "linear"}, None, "schedule"),  # the override itself
])
def test_bad_settings_are_refused_when_made(overrides, tuning, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ComparisonSettings(get_preset("smoke"), overrides, plan_comparison("muon").arms, [42], tuning)


def test_a_request_is_planned_once_and_its_outputs_are_its_plans(tmp_path, data_dir):
    request = ReproductionRequest(name="rope", data_dir=data_dir, out=tmp_path / "a.json", tune=True, lr=LR,
                                  seeds=[42], report=False)
    plan = request.plan()
    assert request.plan() is plan and request.outputs() == plan.outputs
    assert request.outputs().artifact == tmp_path / "a.json"
    assert plan.preset.train.lr == LR and plan.tuning is not None and LR in plan.tuning.grid
    again = request.plan(request.comparison())  # a caller's comparison: planned anew, not kept
    assert again is not plan and again.tuning == plan.tuning


@pytest.mark.parametrize(("options", "values", "message"), [
    (["--tune-space", "lr,nosuch"], {"tune_space": "lr,nosuch"}, "unknown axis 'nosuch'"),
    (["--tune", "--tune-seeds", "42"], {"tune": True, "tune_seeds": [42]}, "are also report seeds"),
])
def test_bad_tuning_input_is_refused_before_any_data_is_read(options, values, message, tmp_path, data_dir,
                                                              capsys, monkeypatch):
    def no_data(*args, **kwargs):
        raise AssertionError("data loaded before the tuning options were checked")

    monkeypatch.setattr(reproduction_module, "load_views", no_data)
    out = tmp_path / "a.json"
    assert run_cli(["reproduce", "muon", "--seeds", "42", "--lr", str(LR), "--data-dir", str(data_dir),
                    "--out", str(out), *options]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err, err
    with pytest.raises(ConfigError, match=message):
        reproduce(ReproductionRequest(name="muon", seeds=[42], lr=LR, data_dir=data_dir, out=out, **values))
    assert list(tmp_path.iterdir()) == []
