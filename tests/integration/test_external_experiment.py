"""``llmevo reproduce --experiment``: the standalone examples/tiny_gpt script reproduced end to
end at a tiny size (class, interval, provenance; the same numbers from the cache and from a
recomputation), and the failure modes of an external command."""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
from pathlib import Path

import pytest
from cli_runner import assert_refused, run_cli

from llmevo.digests import sha256_file
from llmevo.eval.stats import VERDICT_CLASSES

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "tiny_gpt"
TINY = "steps=15,d_model=16,layers=1,seq_len=32,batch_size=8"


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMEVO_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def reproduce(out: Path, *extra: str, seeds: str = "42,43,44") -> int:
    return run_cli(["reproduce", "--experiment", str(EXAMPLE / "experiment.toml"),
                    "--baseline", f"norm=layernorm,{TINY}", "--method", f"norm=rmsnorm,{TINY}",
                    "--seeds", seeds, "--no-tune", "--out", str(out), *extra])


def test_the_example_script_does_not_import_llmevo():
    source = (EXAMPLE / "train.py").read_text()
    assert not re.search(r"^\s*(import|from)\s+llmevo", source, re.MULTILINE)


def test_tiny_gpt_reproduced_end_to_end(workdir, data_dir, monkeypatch, capsys):
    monkeypatch.setenv("LLMEVO_DATA", str(data_dir))
    assert reproduce(workdir / "first.json") == 0
    first = json.loads((workdir / "first.json").read_text())
    assert first["schema"] == "llmevo.external/1"
    assert first["baseline"]["label"] == "norm=layernorm" and first["method"]["label"] == "norm=rmsnorm"
    assert first["verdict"]["classification"] in VERDICT_CLASSES
    change = first["statistics"]["val_loss"]["paired_relative_change_percent"]
    assert change["n"] == 3 and change["ci_low"] < change["mean"] < change["ci_high"]
    assert first["provenance"]["files"] == {"train.py": sha256_file(EXAMPLE / "train.py")}
    assert re.fullmatch(r"[0-9a-f]{40}", first["provenance"]["git"]["commit"])
    assert isinstance(first["provenance"]["git"]["dirty"], bool)
    assert (workdir / "first.md").is_file()
    assert all(run["status"] == "ok" and (not run["cached"] or run.get("reused")) for run in first["runs"])
    assert [run["phase"] for run in first["runs"][:3]] == ["check"] * 3  # the seed and no-op checks
    assert first["checks"]["seed"]["differ"] and not first["checks"]["no_op"]["same_function"]
    assert first["tuned"] is False and first["tuning"] is None and "tuning" in first["not_applicable"]
    # the same command again: every run from the cache, the same numbers
    assert reproduce(workdir / "second.json") == 0
    second = json.loads((workdir / "second.json").read_text())
    assert all(run["cached"] for run in second["runs"])
    # cached runs keep the time they took when they ran: the artifact reports the real cost
    assert [run["wall_s"] for run in second["runs"]] == [run["wall_s"] for run in first["runs"]]
    assert second["wall_seconds"] == first["wall_seconds"] == first["wall"]["ran_s"] > 0
    assert second["wall"]["cached_runs"] == len(second["runs"]) and second["wall"]["ran_s"] == 0
    assert second["per_seed"] == first["per_seed"] and second["verdict"] == first["verdict"]
    # recomputed (--no-arm-cache): the same numbers again (the script is deterministic on a CPU)
    assert reproduce(workdir / "third.json", "--no-arm-cache", seeds="43,44") == 0  # two seeds: fewer runs
    third = json.loads((workdir / "third.json").read_text())
    assert not any(run["cached"] and not run.get("reused") for run in third["runs"])
    assert third["per_seed"] == first["per_seed"][1:]
    out = capsys.readouterr().out
    assert "verdict:" in out and "mean ± std" in out


def fake_experiment(folder: Path, script: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "script.py").write_text(textwrap.dedent(script))
    path = folder / "experiment.toml"
    path.write_text(textwrap.dedent("""
        name = "fake"
        command = ["{python}", "script.py"]
        metric = "loss"
        [params]
        mode = "good"
    """))
    return path


# the method's runs misbehave; the baseline's print a metric
CRASH = """
    import json, os, sys
    if os.environ["LLMEVO_PARAM_MODE"] == "bad":
        raise SystemExit("out of memory, pretend")
    print(json.dumps({"loss": 1.0 + int(os.environ["LLMEVO_PARAM_SEED"]) / 1000}))
"""
SILENT = """
    import json, os
    seed = int(os.environ["LLMEVO_PARAM_SEED"])
    print("done" if os.environ["LLMEVO_PARAM_MODE"] == "bad" else json.dumps({"loss": 1.0 + seed / 1000}))
"""
HANG = """
    import json, os, subprocess, sys, time
    if os.environ["LLMEVO_PARAM_MODE"] == "bad":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open("child.pid", "w") as handle:
            handle.write(str(child.pid))
        time.sleep(120)
    print(json.dumps({"loss": 1.0 + int(os.environ["LLMEVO_PARAM_SEED"]) / 1000}))
"""


@pytest.mark.parametrize("script, error", [(CRASH, "exit status 1: out of memory, pretend"),
                                           (SILENT, "not a JSON object of metrics: 'done'"),
                                           (HANG, "timed out after 2 s")])
def test_a_failing_run_is_one_line_and_recorded(workdir, capsys, script, error):
    path = fake_experiment(workdir / "exp", script)
    start = time.monotonic()
    code = run_cli(["reproduce", "--experiment", str(path), "--method", "mode=bad", "--seeds", "1,2",
                    "--timeout", "2", "--out", str(workdir / "out.json")])
    captured = capsys.readouterr()
    assert code == 0 and "Traceback" not in captured.out + captured.err
    failed_lines = [line for line in captured.out.splitlines() if line.startswith("failed")]
    assert len(failed_lines) == 3 and all(error in line for line in failed_lines), captured.out
    assert "verdict withheld" in captured.out
    artifact = json.loads((workdir / "out.json").read_text())
    assert artifact["verdict"] is None and "report seed 1 failed" in artifact["verdict_withheld"]
    # the checks (the method's check run failed: not checked), then each arm's report seeds; the
    # method's seed 1 ran once, its failure reused
    assert [(run["phase"], run["arm"], run["status"]) for run in artifact["runs"]] == [
        ("check", "baseline", "ok"), ("check", "baseline", "ok"), ("check", "method", "failed"),
        ("report", "baseline", "ok"), ("report", "baseline", "ok"), ("report", "method", "failed"),
        ("report", "method", "failed")]
    assert artifact["runs"][5]["reused"] and artifact["checks"]["no_op"]["reason"].startswith("not checked")
    assert artifact["baseline"]["report"]["n"] == 2 and artifact["method"]["report"] is None
    if script is HANG:
        assert time.monotonic() - start < 30
        child = int((workdir / "exp" / "child.pid").read_text())
        for _ in range(50):  # the whole process group was killed, the grandchild too
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the run's child process {child} outlived the timeout")


@pytest.mark.parametrize("toml, args, message", [
    ('name = "x"\ncommand = ["a"\n', [], "not valid TOML"),
    ('name = "x"\ncommand = ["a"]\nmetric = "m"\nseeds = 3\n', [], "seeds: Extra inputs are not permitted"),
    ('name = "x"\ncommand = ["a"]\nmetric = "m"\n[params]\nlr = 1.0\n', ["--method", "depth=2"],
     "'depth' is not a parameter of x"),
    ('name = "x"\ncommand = ["a"]\nmetric = "m"\n[params]\nlr = 1.0\n', ["--method", "lr=2", "--all"],
     "--all does not apply"),
])
def test_bad_experiment_input_is_refused(workdir, capsys, toml, args, message):
    path = workdir / "bad.toml"
    path.write_text(toml)
    assert_refused(["reproduce", "--experiment", str(path), *(args or ["--method", "lr=2"])],
                   message, capsys, workdir)


def test_arm_options_need_an_experiment(workdir, capsys):
    assert_refused(["reproduce", "rope", "--method", "lr=2"], "apply with --experiment FILE only",
                   capsys, workdir)
