"""``scripts/gpu_check.py`` (issue 21 item 8): the prepared GPU check, proven in its CPU dry
mode. Nothing here measures or claims a GPU figure."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run_script(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_the_dry_run_runs_every_step_and_writes_the_figures(tmp_path, full_data_dir, cache_dir):
    data_dir = full_data_dir  # the quick preset (WikiText-2 raw) in a subprocess
    out = tmp_path / "gpu-check.json"
    done = run_script("--dry-run", "--threads", "1", "--out", str(out), "--data-dir", str(data_dir),
                      "--cache-dir", str(cache_dir))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["schema"] == "llmevo.gpu-check/1" and report["mode"] == "dry-run"
    assert report["gpu_figures"] is False and report["device"]["type"] == "cpu"
    assert {"torch", "cuda", "name", "commit"} <= set(report["device"])
    steps = {step["name"]: step for step in report["steps"]}
    assert list(steps) == ["cuda-tests", "bench", "train"]
    for step in steps.values():
        assert step["status"] == "ok" and step["returncode"] == 0, step
        assert 0 < step["wall_seconds"] <= step["budget_seconds"]
    assert report["steps_ok"] == 3 and report["steps_failed"] == 0
    assert sum(s["budget_seconds"] for s in steps.values()) <= report["budget_seconds"]
    tests = steps["cuda-tests"]["figures"]  # the CUDA tests were collected and skipped here
    assert tests["tests"] >= 3 and tests["skipped"] == tests["tests"] and tests["passed"] == 0
    assert "-m" in steps["cuda-tests"]["command"] and "cuda" in steps["cuda-tests"]["command"]
    bench = steps["bench"]["figures"]
    assert {row["replicas"] for row in bench["rows"]} == {1, 2}
    assert all(row["train_tokens_per_second"] > 0 for row in bench["rows"])
    assert bench["single_model_tokens_per_second"] > 0
    train = steps["train"]["figures"]
    assert train["rung"] == -2 and train["steps_per_arm"] == 4 and train["parameters"] == 43_168
    assert [run["steps"] for run in train["runs"]] == [4, 4]
    assert all(rate > 0 for rate in train["train_tokens_per_second"])
    assert train["peak_memory_mib"] is None  # torch.cuda.max_memory_allocated: CUDA only
    assert "NOT GPU figures" in done.stdout and f"wrote {out}" in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no CUDA device is")
def test_the_full_mode_refuses_without_cuda_in_one_line(tmp_path, data_dir):
    out = tmp_path / "gpu-check.json"
    done = run_script("--out", str(out), "--data-dir", str(data_dir), timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "no CUDA device" in done.stderr
    assert "--dry-run" in done.stderr and not out.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--budget-train", "600"], "exceed --total-budget 300"),
    (["--replicas", "1,0"], "each count must be at least 1"),
    (["--replicas", "1,x"], "comma-separated whole numbers"),
    (["--train-steps", "0"], "--train-steps 0"),
    (["--rung", "9"], "--rung 9: unknown rung"),
    (["--budget-bench", "-5"], "must be a positive number"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, data_dir):
    out = tmp_path / "gpu-check.json"
    done = run_script("--dry-run", "--out", str(out), "--data-dir", str(data_dir), *args, timeout=120)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()


def test_an_unwritable_out_and_a_missing_data_folder_are_refused(tmp_path, data_dir):
    done = run_script("--dry-run", "--out", str(tmp_path / "no" / "x.json"), "--data-dir", str(data_dir))
    assert done.returncode == 2 and "does not exist" in done.stderr
    done = run_script("--dry-run", "--out", str(tmp_path / "x.json"), "--data-dir", str(tmp_path / "none"))
    assert done.returncode == 2 and "not a folder" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_step_past_its_budget_is_stopped_with_its_children(tmp_path):
    """The hard per-step budget: the step's whole process group is killed, the plan goes on."""
    gpu_check = load_script()
    marker = tmp_path / "child-alive"
    grandchild = tmp_path / "grandchild.py"
    grandchild.write_text(f"import pathlib, time\ntime.sleep(3)\npathlib.Path({str(marker)!r}).touch()\n")
    sleeper = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, {str(grandchild)!r}]); "
               "time.sleep(60)")
    step = gpu_check.StepResult("slow", [sys.executable, "-c", sleeper], 1.5)
    started = time.perf_counter()
    gpu_check.run_step(step, 1.5, tmp_path / "slow.log", {})
    assert step.status == "timeout" and "budget of 1.5 s" in step.message
    assert time.perf_counter() - started < 15
    time.sleep(4)
    assert not marker.exists()  # the grandchild went with its group


def test_cuda_tests_that_skip_on_a_cuda_device_fail_the_step(tmp_path):
    gpu_check = load_script()
    report = tmp_path / "junit.xml"
    report.write_text('<testsuites><testsuite tests="3" failures="0" errors="0" skipped="1">'
                      "</testsuite></testsuites>")
    plan = type("P", (), {"dry_run": False})()
    step = gpu_check.StepResult("cuda-tests", [], 90, status="ok")
    gpu_check.check_tests(step, report, plan)
    assert step.status == "failed" and "skipped on a CUDA device" in step.message
    assert step.figures["passed"] == 2
    assert "tests/unit/test_diagnose_device.py" in gpu_check.cuda_test_files()
