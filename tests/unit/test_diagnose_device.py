"""``llmevo diagnose --device``: the shared device policy, passed to the library's diagnose
pipeline (``llmevo.diagnostics.pipeline.diagnose``) and on to every seed of the diagnostic."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from cli_runner import run_cli

from llmevo.diagnostics import harness, pipeline
from llmevo.diagnostics.pipeline import DiagnoseRequest, diagnose
from llmevo.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
PUBLISHED_ROPE = Path("docs/foundation-models/2104.09864-rope/metrics/component-cpu-seeds42-44.json")
UNAVAILABLE = [name for name, available in (("cuda", torch.cuda.is_available()),
                                            ("mps", torch.backends.mps.is_available()))
               if not available]


@pytest.fixture
def no_work(monkeypatch):
    """Fails the test if the diagnostic starts."""
    def started(*_args, **_kwargs):
        raise AssertionError("the diagnostic ran before the device was checked")

    monkeypatch.setattr(pipeline, "run_diagnostic", started)


@pytest.fixture
def recorded_devices(monkeypatch) -> list[torch.device]:
    """The device every seed of the ``rope`` diagnostic receives."""
    devices: list[torch.device] = []
    registered = harness.DIAGNOSTICS["rope"]

    def run_seed(config, seed, device):
        devices.append(device)
        return registered.run_seed(config, seed, device)

    monkeypatch.setitem(harness.DIAGNOSTICS, "rope", dataclasses.replace(registered, run_seed=run_seed))
    return devices


@pytest.mark.parametrize(("device", "message"),
                         [(name, f"device '{name}' is not available") for name in UNAVAILABLE]
                         + [("tpu", "'tpu' is not one of"), ("CPU", "'CPU' is not one of")])
def test_an_unknown_or_unavailable_device_is_one_line_before_any_work(
        device, message, tmp_path, monkeypatch, capsys, no_work):
    monkeypatch.chdir(tmp_path)
    code = run_cli(["diagnose", "rope", "--device", device, "--threads", "1"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # no artifact under runs/ (nor anything else)


def test_cpu_reaches_every_seed_and_reproduces_the_published_artifact(
        tmp_path, monkeypatch, capsys, recorded_devices):
    published = json.loads((REPO / PUBLISHED_ROPE).read_text())
    monkeypatch.chdir(tmp_path)
    assert run_cli(["diagnose", "rope", "--device", "cpu", "--threads", "1"]) == 0
    assert recorded_devices == [torch.device("cpu")] * 3
    default = Path("runs") / PUBLISHED_ROPE.relative_to("docs")  # named after the device
    written = json.loads(default.read_text())
    assert f"wrote {default}" in capsys.readouterr().out.replace("\n", "")
    assert written["provenance"]["accelerator"] == "CPU"
    assert [row["seed"] for row in written["per_seed"]] == [42, 43, 44]
    for row, reference in zip(written["per_seed"], published["per_seed"], strict=True):
        assert row == pytest.approx(reference, rel=1e-6, abs=1e-9)


def test_the_library_takes_a_typed_device_and_refuses_a_bad_one(tmp_path, no_work):
    with pytest.raises(ConfigError, match="--device tpu: Input should be 'auto', 'cpu', 'cuda' or 'mps'"):  # typed
        DiagnoseRequest(name="rope", device="tpu", out=tmp_path / "a.json")
    for device in UNAVAILABLE:
        with pytest.raises(ConfigError, match=f"device '{device}' is not available"):
            diagnose(DiagnoseRequest(name="rope", device=device, out=tmp_path / "a.json"))
    with pytest.raises(ConfigError, match="exists for rope-relay only"):
        diagnose(DiagnoseRequest(name="rope", device="cpu", full_experiment=True,
                                 checkpoint=tmp_path, out=tmp_path / "a.json"))
    with pytest.raises(ConfigError, match="unknown diagnostic 'nosuch'"):
        diagnose(DiagnoseRequest(name="nosuch", device="cpu", out=tmp_path / "a.json"))
    assert list(tmp_path.iterdir()) == []


def test_the_library_runs_on_the_requested_device(tmp_path, recorded_devices):
    outcome = diagnose(DiagnoseRequest(name="rope", seeds=[7], device="cpu", out=tmp_path / "r.json"))
    assert recorded_devices == [torch.device("cpu")]
    assert outcome.path == tmp_path / "r.json" and outcome.path.is_file()
    assert outcome.artifact.provenance.accelerator == "CPU"
    assert outcome.run.seeds == [7]


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["rope", "muon", "rope-relay"])
def test_cuda_agrees_with_the_cpu(name):
    """Same seeds, same drawn tensors: the checks agree and the measured numbers match."""
    cpu = harness.run_diagnostic(name, [42, 43], device=torch.device("cpu"))
    cuda = harness.run_diagnostic(name, [42, 43], device=torch.device("cuda"))
    for key, value in cpu.metrics.items():
        if isinstance(value, bool):
            assert cuda.metrics[key] is value, key
    for row, reference in zip(cuda.per_seed, cpu.per_seed, strict=True):
        for key, value in reference.items():
            assert abs(row[key] - value) <= 1e-4 * max(1.0, abs(value)), key


def test_the_resolved_device_is_the_one_every_seed_receives(tmp_path, monkeypatch):
    """A stand-in device (``meta``) that the CPU default could not produce by accident."""
    devices = []
    registered = harness.DIAGNOSTICS["muon"]

    def run_seed(config, seed, device):
        devices.append(device)
        return {"orthogonality_error": float(seed), "orthogonality_improved": True}

    monkeypatch.setitem(harness.DIAGNOSTICS, "muon", dataclasses.replace(registered, run_seed=run_seed))
    monkeypatch.setattr(pipeline, "resolve_device", lambda name: torch.device("meta"))
    outcome = diagnose(DiagnoseRequest(name="muon", seeds=[1, 2], device="cpu", out=tmp_path / "m.json"))
    assert devices == [torch.device("meta")] * 2
    assert outcome.run.metrics["orthogonality_error"]["mean"] == 1.5
