"""External experiments through the one comparison path: the seed check, the no-op check on
the metrics, the tuning protocol of the built-ins (``tuned`` only when it ran), the options
``--experiment`` refuses by declaration, and the requests built from the shared sections.

The stubs are tiny scripts that print one JSON line in milliseconds."""

from __future__ import annotations

import json
import math
import os
import textwrap
from pathlib import Path

import pytest
from cli_runner import assert_refused, run_cli

from llmevo.errors import ConfigError
from llmevo.experiments.external import (
    EXTERNAL_REFUSED,
    ExternalRequest,
    compare_external,
    plan_external,
)
from llmevo.experiments.external_ladder import ExternalLadderRequest
from llmevo.registry import RequestModel, RequestSection

# the metric follows the seed and the activation, but "swish" is silently gelu (a typo the
# script maps onto the default, as a real script's dict.get would)
TYPO = """
    import json, math, os
    seed = int(os.environ["LLMEVO_PARAM_SEED"])
    lr = float(os.environ["LLMEVO_PARAM_LR"])
    act = os.environ["LLMEVO_PARAM_ACTIVATION"]
    scale = {"gelu": 1.0, "relu2": 0.97}.get(act, 1.0)
    print(json.dumps({"loss": scale * ((math.log10(lr) + 2.5) ** 2 + 1.0 + ((seed * 7919) % 13) / 1000.0)}))
"""
# the metric ignores the seed
NO_SEED = """
    import json, os
    act = os.environ["LLMEVO_PARAM_ACTIVATION"]
    print(json.dumps({"loss": {"gelu": 1.0, "relu2": 0.97}[act]}))
"""
TOML = """
    name = "stub"
    command = ["{python}", "script.py"]
    metric = "loss"
    [params]
    lr = 1e-3
    activation = "gelu"
    [tune]
    param = "lr"
    grid = [1e-3, 3e-3, 1e-2]
    seeds = [1000]
"""


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """The command's folder (what a refusal must leave as it was); the run cache beside it."""
    monkeypatch.setenv("LLMEVO_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def stub(folder: Path, script: str, toml: str = TOML) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "script.py").write_text(textwrap.dedent(script), encoding="utf-8")
    path = folder / "experiment.toml"
    path.write_text(textwrap.dedent(toml), encoding="utf-8")
    return path


def test_a_script_that_ignores_the_seed_is_refused_before_the_report(workdir, tmp_path, capsys):
    path = stub(tmp_path / "exp", NO_SEED)
    assert_refused(["reproduce", "--experiment", str(path), "--method", "activation=relu2", "--seeds", "1,2,3",
                    "--no-tune"], "loss does not change with {seed} (seeds 1 and 2 both gave 1.0)", capsys, workdir)
    # tuned, the check uses the tuning seeds (two here): still before any report run
    stub(tmp_path / "exp", NO_SEED, TOML.replace("seeds = [1000]", "seeds = [1000, 1001]"))
    assert_refused(["reproduce", "--experiment", str(path), "--method", "activation=relu2", "--seeds", "1,2,3"],
                   "seeds 1000 and 1001 both gave", capsys, workdir)


def test_arms_that_compute_the_same_thing_are_refused_or_classed_noop(workdir, tmp_path, capsys):
    path = stub(tmp_path / "exp", TYPO)
    args = ["reproduce", "--experiment", str(path), "--method", "activation=swish", "--seeds", "1,2,3,4"]
    assert_refused([*args, "--no-tune"], "compute the same thing (both report loss", capsys, workdir)
    assert_refused(args, "--allow-noop", capsys, workdir)  # tuned: refused before the tuning
    out = workdir / "noop.json"
    assert run_cli([*args, "--no-tune", "--allow-noop", "--out", str(out)]) == 0
    artifact = json.loads(out.read_text())
    assert artifact["verdict"]["classification"] == "no-op"
    assert artifact["checks"]["no_op"] == {"how": "metrics", "same_function": True, "allowed_noop": True,
                                           "reason": artifact["checks"]["no_op"]["reason"]}
    # a real difference passes both checks
    out = workdir / "real.json"
    assert run_cli(["reproduce", "--experiment", str(path), "--method", "activation=relu2", "--seeds", "1,2,3,4",
                    "--no-tune", "--out", str(out)]) == 0
    artifact = json.loads(out.read_text())
    assert artifact["verdict"]["classification"] == "better" and artifact["checks"]["seed"]["differ"]


def _loss(lr: float, seed: int, scale: float) -> float:
    return scale * ((math.log10(lr) + 2.5) ** 2 + 1.0 + ((seed * 7919) % 13) / 1000.0)


def test_external_arms_get_the_built_in_tuning_protocol(tmp_path):
    """The grid's best on its edge is extended once, the probe runs above the top, the
    contenders are re-scored on the confirmation seeds: ``runner.tuning``'s block, for both arms
    alike; the choice is the argmin over every tuning seed, checked by hand."""
    path = stub(tmp_path / "exp", TYPO, TOML.replace("grid = [1e-3, 3e-3, 1e-2]", "grid = [1e-4, 3e-4, 1e-3]"))
    request = ExternalRequest(experiment=path, method="activation=relu2", seeds=[1, 2, 3, 4],
                              cache_dir=tmp_path / "cache", runs_dir=tmp_path / "runs", report=False)
    artifact = compare_external(plan_external(request), dict(os.environ))
    assert artifact["tuned"] is True
    block = artifact["tuning"]
    assert block["parameter"] == "lr" and block["probe"] is True and block["confirm_seeds"] == [1001, 1002]
    for label in ("baseline", "method"):
        arm = block["arms"][label]
        scale = 1.0 if label == "baseline" else 0.97
        assert arm["extended"] == "up"  # 1e-3 was the top of the grid: one step further
        lrs = sorted(setting["lr"] for setting in arm["settings"])
        assert lrs[:4] == pytest.approx([1e-4, 3e-4, 1e-3, 1e-3 * (1e-3 / 3e-4)])
        assert arm["probe"]["lr"] == pytest.approx(1e-3 * (1e-3 / 3e-4) ** 3)  # 2 lattice steps above 3.33e-3
        # the best (3e-3: log10 nearest -2.5) chosen; its mean over the seeds it trained on, by hand
        chosen = arm["chosen"]["lr"]
        assert chosen == pytest.approx(1e-3 * (1e-3 / 3e-4))
        setting = next(s for s in arm["settings"] if s["lr"] == chosen)
        assert setting["mean"] == pytest.approx(sum(_loss(chosen, int(seed), scale) for seed in setting["validation"])
                                                / len(setting["validation"]))
        assert artifact[label]["params"]["lr"] == chosen and artifact[label]["tuning"]["chosen"] == chosen
    assert artifact["protocol"]["tuning"]["protocol"] == "grid"
    assert {"space", "fidelity", "equal_budget"} <= set(artifact["not_applicable"])
    # fragile seeds are read on 4+ seeds (a clear 3% gain has none)
    assert artifact["verdict"]["fragile_seeds"] == [] and "fragile_and_stalled" not in artifact["not_applicable"]
    # untuned: the artifact says so, and why
    untuned = compare_external(plan_external(request.updated(tune=False, out=tmp_path / "untuned.json")),
                               dict(os.environ))
    assert untuned["tuned"] is False and untuned["tuning"] is None
    assert untuned["not_applicable"]["tuning"].startswith("--no-tune")


@pytest.mark.parametrize("options, message", [
    (["--preset", "quick"], "--preset does not apply (the file and its command decide it)"),
    (["--steps", "3", "--lr", "0.1"], "--steps, --lr do not apply"),
    (["--threads", "2"], "--threads does not apply here: the command sets its own threads"),
    (["--data-dir", "."], "--data-dir does not apply here: the command reads its own data"),
    (["--tune-fidelity", "halving"], "--tune-fidelity does not apply here: halving stops runs at a step"),
    (["--tune-space", "full"], "--tune-space does not apply here: the command declares no component tuning"),
    (["--sequential"], "--sequential does not apply"),
])
def test_options_that_do_not_apply_are_refused_by_declaration(workdir, tmp_path, capsys, options, message):
    path = stub(tmp_path / "exp", TYPO)
    assert_refused(["reproduce", "--experiment", str(path), "--method", "activation=relu2", *options],
                   message, capsys, workdir)


def test_the_library_refuses_what_the_command_line_refuses(tmp_path):
    path = stub(tmp_path / "exp", TYPO)
    for field, value in (("threads", 2), ("tune_fidelity", "halving"), ("device", "cpu"), ("val_every", 5)):
        option = "--" + field.replace("_", "-")
        with pytest.raises(ConfigError, match=f"{option} does not apply here: {EXTERNAL_REFUSED[field][:20]}"):
            ExternalRequest(experiment=path, method="activation=relu2", **{field: value})
        with pytest.raises(ConfigError, match=f"{option} does not apply here"):
            ExternalLadderRequest(experiment=path, method="activation=relu2", **{field: value})
    # what applies reaches the protocol: re-scoring on 3 confirmation seeds, no probe
    plan = plan_external(ExternalRequest(experiment=path, method="activation=relu2", tune_confirm=3,
                                         tune_probe=False, tune_noise=2.0, runs_dir=tmp_path / "runs"))
    assert plan.tuner is not None and len(plan.tuner.confirm_seeds) == 3 and plan.tuner.probe is False
    assert plan.tuner.noise == 2.0 and plan.tuner.seeds == (1000,)  # the file's tuning seeds
    read = {field for section in ExternalRequest.sections().values() for field in section.model_fields
            if field not in ExternalRequest.refused}
    assert read >= {"tune_confirm", "tune_probe", "tune_noise", "arm_cache", "publish", "cache_dir"}


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _requests() -> list[type]:
    import llmevo.diagnostics.pipeline
    import llmevo.evolve.pipeline
    import llmevo.experiments.evidence
    import llmevo.experiments.external_ladder
    import llmevo.experiments.ladder
    import llmevo.experiments.pipeline  # noqa: F401  (each defines a request class)

    return sorted((cls for cls in _subclasses(RequestModel) if not issubclass(cls, RequestSection)
                   and cls.__name__ != "SectionedRequest"), key=lambda cls: cls.__name__)


@pytest.mark.parametrize("request_class", _requests(), ids=lambda cls: cls.__name__)
def test_no_request_declares_a_shared_field_itself(request_class):
    """A field of a shared section (``experiments.sections``, ``runner.settings``) is declared
    once, there: a request that declares one again beside its sections fails here."""
    shared = {field: section.__name__ for section in _subclasses(RequestSection) for field in section.model_fields}
    sections = request_class.sections() if hasattr(request_class, "sections") else {}
    again = {field: shared[field] for field in request_class.model_fields if field in shared and field not in sections}
    assert not again, f"{request_class.__name__} declares {again} itself"
    assert {"ExternalRequest", "ExternalLadderRequest", "DiagnoseRequest"} <= {cls.__name__ for cls in _requests()}
