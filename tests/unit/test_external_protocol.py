"""External experiments (``llmevo.experiments.external``): the experiment file, how a run
receives its parameters and reports its metrics, the protocol's tuning and statistics
against an independent computation, the cache and an interrupted command's resume."""

from __future__ import annotations

import json
import math
import os
import textwrap
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from llmevo.errors import ConfigError
from llmevo.experiments.experiment_file import (
    RunFailed,
    execute,
    load_experiment,
    parse_metrics,
    parse_settings,
)
from llmevo.experiments.external import ExternalRequest, compare_external, plan_external

# metric = (log10(lr) + 2.5)^2 + offset + seed noise: the best lr of the grid is 3e-3
QUADRATIC = """
    import json, math, os
    lr = float(os.environ["LLMEVO_PARAM_LR"])
    seed = int(os.environ["LLMEVO_PARAM_SEED"])
    offset = float(os.environ["LLMEVO_PARAM_OFFSET"])
    noise = ((seed * 7919) % 13) / 1000.0
    print("some log line")
    print(json.dumps({"loss": (math.log10(lr) + 2.5) ** 2 + offset + noise + 1.0, "note": "text"}))
"""


def make_experiment(folder: Path, script: str, toml: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "script.py").write_text(textwrap.dedent(script), encoding="utf-8")
    path = folder / "experiment.toml"
    path.write_text(textwrap.dedent(toml), encoding="utf-8")
    return path


QUADRATIC_TOML = """
    name = "quadratic"
    command = ["{python}", "script.py"]
    metric = "loss"
    [params]
    lr = 1e-3
    offset = 0.0
    [tune]
    param = "lr"
    grid = [1e-3, 3e-3, 1e-2]
    seeds = [1000, 1001]
"""


def request(path: Path, tmp_path: Path, **values) -> ExternalRequest:
    defaults = dict(experiment=path, baseline="", method="offset=-0.05", seeds=[42, 43, 44],
                    cache_dir=tmp_path / "cache", runs_dir=tmp_path / "runs", report=False)
    return ExternalRequest(**{**defaults, **values})


def test_parameters_reach_the_run_three_ways(tmp_path):
    """argv templates, LLMEVO_PARAM_<NAME> and the JSON file all carry the same values; the
    run's working directory is the experiment's folder."""
    script = """
        import json, os, sys
        with open(os.environ["LLMEVO_PARAMS_FILE"]) as handle:
            from_file = json.load(handle)
        env = {k: v for k, v in os.environ.items() if k.startswith("LLMEVO_PARAM_")}
        with open("seen.json", "w") as handle:
            json.dump({"argv": sys.argv[1:], "env": env, "file": from_file, "cwd": os.getcwd()}, handle)
        print(json.dumps({"score": 1.5}))
    """
    path = make_experiment(tmp_path / "exp", script, """
        name = "echo"
        command = ["{python}", "script.py", "--lr={lr}", "--norm={norm}", "{{literal}}"]
        metric = "score"
        [params]
        lr = 0.001
        norm = "layernorm"
        steps = 10
        flag = false
    """)
    loaded = load_experiment(path)
    assert loaded.files == {"script.py": loaded.files["script.py"]}  # named by the command
    settings = parse_settings("norm=rmsnorm,steps=12,lr=1", loaded.spec, "--method")
    assert settings == {"norm": "rmsnorm", "steps": 12, "lr": 1.0}  # lr declared float: 1 -> 1.0
    params = {**loaded.spec.params, **settings}
    assert execute(loaded, params, 7, timeout=60, base_env=dict(os.environ)) == {"score": 1.5}
    seen = json.loads((tmp_path / "exp" / "seen.json").read_text())
    assert seen["argv"] == ["--lr=1.0", "--norm=rmsnorm", "{literal}"]
    assert seen["env"]["LLMEVO_PARAM_LR"] == "1.0" and seen["env"]["LLMEVO_PARAM_NORM"] == "rmsnorm"
    assert seen["env"]["LLMEVO_PARAM_STEPS"] == "12" and seen["env"]["LLMEVO_PARAM_FLAG"] == "false"
    assert seen["env"]["LLMEVO_PARAM_SEED"] == "7"
    assert seen["file"] == {"seed": 7, "lr": 1.0, "norm": "rmsnorm", "steps": 12, "flag": False}
    assert Path(seen["cwd"]).resolve() == (tmp_path / "exp").resolve()


def test_settings_are_checked_against_the_declared_parameters(tmp_path):
    spec = load_experiment(make_experiment(tmp_path, QUADRATIC, QUADRATIC_TOML)).spec
    with pytest.raises(ConfigError, match="'depth' is not a parameter of quadratic"):
        parse_settings("depth=3", spec, "--method")
    with pytest.raises(ConfigError, match="expected a number"):
        parse_settings("lr=fast", spec, "--method")
    with pytest.raises(ConfigError, match="not k=v"):
        parse_settings("lr", spec, "--method")
    with pytest.raises(ConfigError, match="given twice"):
        parse_settings("lr=1,lr=2", spec, "--method")


def test_metrics_parsing():
    assert parse_metrics('{"loss": 2, "acc": 0.5, "name": "x", "flag": true}', "loss", "line") == \
        {"loss": 2.0, "acc": 0.5}
    assert parse_metrics('{"loss": 1.0, "other": NaN}', "loss", "line") == {"loss": 1.0}
    for text, message in [("", "not a JSON object"), ("loss=1.0", "not a JSON object"),
                          ("[1, 2]", "not an object"), ('{"acc": 1}', "no metric 'loss'"),
                          ('{"loss": NaN}', "not a finite number"), ('{"loss": Infinity}', "not a finite"),
                          ('{"loss": "1.0"}', "not a finite number"), ('{"loss": true}', "not a finite")]:
        with pytest.raises(RunFailed, match=message):
            parse_metrics(text, "loss", "line")


def test_a_metrics_file_report(tmp_path):
    path = make_experiment(tmp_path, """
        import json, os
        with open(os.environ["LLMEVO_METRICS_FILE"], "w") as handle:
            json.dump({"loss": 0.25}, handle)
        print("not json")
    """, """
        name = "file"
        command = ["{python}", "script.py"]
        metric = "loss"
        [read]
        from = "file"
    """)
    assert execute(load_experiment(path), {}, 1, 60, dict(os.environ)) == {"loss": 0.25}


@pytest.mark.parametrize("toml, message", [
    ('name = "x"\ncommand = [', "not valid TOML"),
    ('name = "x"\ncommand = ["a"]\nmetric = "m"\ncolour = 1', "colour: Extra inputs are not permitted"),
    ('name = "x"\ncommand = ["a"]\nmetric = "m"\ndirection = "up"', "direction"),
    ('name = "x"\ncommand = ["a"]\nmetric = "m"\n[tune]\nparam = "lr"\ngrid = [1]', "is not a declared parameter"),
    ('name = "x"\ncommand = ["a"]\nmetric = "m"\nfiles = ["missing.py"]', "missing.py is not a file"),
    ('command = ["a"]\nmetric = "m"', "no name; the file declares its name"),
])
def test_bad_experiment_files_are_one_line(tmp_path, toml, message):
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=message) as caught:
        load_experiment(path)
    assert "\n" not in str(caught.value)


def test_the_protocol_tunes_both_arms_alike_and_classifies(tmp_path):
    """Both arms see the same grid under the same tuning seeds; the chosen lr is the grid's
    argmin of the mean; the interval and class agree with a direct paired t computation."""
    path = make_experiment(tmp_path / "exp", QUADRATIC, QUADRATIC_TOML)
    plan = plan_external(request(path, tmp_path))
    artifact = compare_external(plan, dict(os.environ), created="fixed")
    tune_runs = [run for run in artifact["runs"] if run["phase"] == "tune"]
    seen = {arm: sorted((run["params"]["lr"], run["seed"]) for run in tune_runs if run["arm"] == arm)
            for arm in ("baseline", "method")}
    assert [lr for lr, _ in seen["baseline"]] == [lr for lr, _ in seen["method"]]  # the same tuner
    for arm in ("baseline", "method"):
        assert {(lr, s) for lr in (1e-3, 3e-3, 1e-2) for s in (1000, 1001)} <= set(seen[arm])
        assert artifact[arm]["tuning"]["chosen"] == 3e-3
        assert artifact[arm]["params"]["lr"] == 3e-3

    def loss(lr, seed, offset):
        return (math.log10(lr) + 2.5) ** 2 + offset + ((seed * 7919) % 13) / 1000.0 + 1.0

    baseline = [loss(3e-3, s, 0.0) for s in (42, 43, 44)]
    method = [loss(3e-3, s, -0.05) for s in (42, 43, 44)]
    assert [row["baseline"]["loss"] for row in artifact["per_seed"]] == pytest.approx(baseline, rel=1e-12)
    changes = [100 * (m - b) / abs(b) for b, m in zip(baseline, method, strict=True)]
    mean = sum(changes) / 3
    sd = math.sqrt(sum((c - mean) ** 2 for c in changes) / 2)
    half = scipy_stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    change = artifact["statistics"]["loss"]["paired_relative_change_percent"]
    assert change["mean"] == pytest.approx(mean) and change["ci_high"] == pytest.approx(mean + half)
    assert artifact["verdict"]["classification"] == "better" and artifact["verdict_withheld"] is None
    assert set(artifact["statistics"]) == {"loss"}  # "note" is text, not a metric
    assert json.loads(plan.artifact.read_text())["schema"] == "llmevo.external/1"


def test_the_cache_and_an_interrupted_command_resume(tmp_path):
    path = make_experiment(tmp_path / "exp", QUADRATIC, QUADRATIC_TOML)
    completed = []

    def interrupt_after_three(record):
        completed.append(record)
        if len(completed) == 3:
            raise KeyboardInterrupt

    plan = plan_external(request(path, tmp_path))
    with pytest.raises(KeyboardInterrupt):
        compare_external(plan, dict(os.environ), on_run=interrupt_after_three)
    assert not plan.artifact.exists()
    first = compare_external(plan, dict(os.environ))
    assert [run["cached"] for run in first["runs"][:3]] == [True] * 3
    assert not any(run["cached"] and not run.get("reused") for run in first["runs"][3:])
    again = compare_external(plan, dict(os.environ))
    assert all(run["cached"] for run in again["runs"])
    assert again["per_seed"] == first["per_seed"]
    refreshed = compare_external(plan_external(request(path, tmp_path, arm_cache=False)), dict(os.environ))
    assert not any(run["cached"] and not run.get("reused") for run in refreshed["runs"]) and refreshed["per_seed"] == first["per_seed"]
    # an altered entry is a miss, not a wrong number
    key = first["runs"][0]["key"]
    entry = tmp_path / "cache" / "external" / key[:2] / f"{key}.json"
    data = json.loads(entry.read_text())
    data["payload"]["metrics"]["loss"] = 0.0
    entry.write_text(json.dumps(data))
    assert not compare_external(plan, dict(os.environ))["runs"][0]["cached"]
    # an edit to the script changes every key
    (tmp_path / "exp" / "script.py").write_text(textwrap.dedent(QUADRATIC) + "\n# edited\n")
    edited = compare_external(plan_external(request(path, tmp_path)), dict(os.environ))
    assert not any(run["cached"] and not run.get("reused") for run in edited["runs"])


def test_requests_are_checked_before_anything_runs(tmp_path):
    path = make_experiment(tmp_path / "exp", QUADRATIC, QUADRATIC_TOML)
    with pytest.raises(ConfigError, match="are also report seeds"):
        plan_external(request(path, tmp_path, tune_seeds=[42]))
    with pytest.raises(ConfigError, match="sets lr, the tuned axis"):
        plan_external(request(path, tmp_path, method="lr=0.01"))
    with pytest.raises(ConfigError, match="same parameters"):
        plan_external(request(path, tmp_path, method="offset=0"))
    with pytest.raises(ConfigError, match="duplicate seeds"):
        plan_external(request(path, tmp_path, seeds=[1, 1]))
    assert plan_external(request(path, tmp_path, method="lr=0.01", tune=False)).tuner is None
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


def test_the_artifact_is_named_by_the_arms_difference_and_shared_settings(tmp_path):
    path = make_experiment(tmp_path / "exp", QUADRATIC, QUADRATIC_TOML)
    plan = plan_external(request(path, tmp_path, baseline="offset=0.5", method="offset=-0.5"))
    assert plan.labels == {"baseline": "offset=0.5", "method": "offset=-0.5"}
    assert plan.artifact == tmp_path / "runs" / "quadratic" / "offset--0.5-vs-offset-0.5.json"  # the sign kept
    plan = plan_external(request(path, tmp_path, baseline="lr=0.1,offset=1", method="lr=0.1",
                                 tune=False))
    assert plan.labels == {"baseline": "offset=1.0", "method": "offset=0.0"}
    assert plan.artifact.name == "offset-0.0-vs-offset-1.0_lr-0.1.json"


def test_provenance_names_the_scripts_commit_and_whether_it_changed(tmp_path):
    import subprocess

    folder = tmp_path / "repo"
    path = make_experiment(folder, QUADRATIC, QUADRATIC_TOML)

    def git(*args):
        return subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t",
                               *args], check=True, capture_output=True, text=True).stdout.strip()

    outside = compare_external(plan_external(request(path, tmp_path, tune=False)), dict(os.environ))
    assert outside["provenance"]["git"] == {"commit": "unknown (not a git checkout)", "dirty": None,
                                            "files_dirty": None}
    git("init", "-q")
    git("add", "script.py", "experiment.toml")
    git("commit", "-qm", "script")
    (folder / "notes.txt").write_text("an untracked file elsewhere in the tree")
    clean = compare_external(plan_external(request(path, tmp_path, tune=False)), dict(os.environ))
    assert clean["provenance"]["git"] == {"commit": git("rev-parse", "HEAD"), "dirty": True,
                                          "files_dirty": False}
    (folder / "script.py").write_text(textwrap.dedent(QUADRATIC) + "# edited\n")
    edited = compare_external(plan_external(request(path, tmp_path, tune=False)), dict(os.environ))
    assert edited["provenance"]["git"]["files_dirty"] is True
    assert edited["provenance"]["files"]["script.py"] != clean["provenance"]["files"]["script.py"]


def test_output_that_is_not_utf8_is_a_failed_run_not_a_crash(tmp_path):
    path = make_experiment(tmp_path, """
        import sys
        sys.stdout.buffer.write(b"\\xff\\xfe not text\\n")
    """, 'name = "bytes"\ncommand = ["{python}", "script.py"]\nmetric = "loss"\n')
    with pytest.raises(RunFailed, match="not a JSON object"):
        execute(load_experiment(path), {}, 1, 60, dict(os.environ))
