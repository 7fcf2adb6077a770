"""The diagnose pipeline as one typed function: ``diagnose(request) -> DiagnosticOutcome``.

``DiagnoseRequest`` names the diagnostic, the seeds, the device, the artifact path and the
optional L2 experiment (rope-relay: streaming WikiText-2 with a trained checkpoint);
``diagnose`` checks all of it (an unknown or unavailable device first), runs the L1
diagnostic over the seeds on the device, runs the L2 experiment if asked, and writes the
validated component-diagnostic artifact: under ``runs/`` unless ``publish`` (under
``docs/``, from a clean checkout unless ``allow_dirty``, as ``reproduce`` does), and never
over an artifact holding more (a block, the L2 experiment, a seed) unless ``replace``
(``llmevo.artifacts.replacement``). ``llmevo diagnose`` only parses its options into a
request and prints the outcome; from Python::

    from llmevo.diagnostics.pipeline import DiagnoseRequest, diagnose
    outcome = diagnose(DiagnoseRequest(name="rope", seeds=[42, 43, 44], device="cpu"))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from llmevo.artifacts.io import check_output_file
from llmevo.artifacts.provenance import (
    REPO_ROOT,
    capture_code_state,
    check_dirty_needs_publish,
    check_publishable,
)
from llmevo.artifacts.replacement import Contents, check_replacement
from llmevo.diagnostics.harness import (
    DiagnosticRun,
    build_artifact,
    default_artifact_path,
    get_diagnostic,
    run_diagnostic,
    write_artifact,
)
from llmevo.errors import ConfigError
from llmevo.registry import RequestModel
from llmevo.train.device import accelerator_name, resolve_device

if TYPE_CHECKING:
    from llmevo.artifacts.schema import DiagnosticArtifact

FULL_EXPERIMENTS = ("rope-relay",)  # diagnostics that have an L2 experiment


class DiagnoseRequest(RequestModel):
    """One diagnose run. ``out`` defaults to
    ``runs/foundation-models/<arxiv>-<name>/metrics/component-<device type>-seeds<a>-<b>.json``
    (``publish``: the same under ``docs/``, refused from a dirty checkout of ``repo_root``
    unless ``allow_dirty``, which provenance records); ``replace`` lets the artifact replace
    one that holds more; ``full_experiment`` (rope-relay only) needs ``checkpoint`` and
    ``data_dir``."""

    name: str
    seeds: list[int] = Field(default_factory=lambda: [42, 43, 44], min_length=1)
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"  # checked by resolve_device
    out: Path | None = None
    full_experiment: bool = False
    checkpoint: Path | None = None
    data_dir: Path | None = None
    eval_tokens: int = Field(default=1024, ge=1)
    publish: bool = False
    allow_dirty: bool = False
    replace: bool = False
    command: str | None = None
    repo_root: Path = REPO_ROOT

    @model_validator(mode="after")
    def _dirty_needs_publish(self) -> DiagnoseRequest:
        check_dirty_needs_publish(self.publish, self.allow_dirty)
        return self


@dataclass(frozen=True)
class DiagnosticOutcome:
    """What ``diagnose`` measured and wrote."""

    run: DiagnosticRun
    artifact: DiagnosticArtifact
    path: Path


def diagnose(request: DiagnoseRequest) -> DiagnosticOutcome:
    """Run the diagnostic ``request`` names on its device and write the artifact.

    Every check (device, diagnostic name, experiment options, a clean tree to publish from,
    the artifact path and what the artifact there holds) happens before any work; the
    artifact is validated, checked again against the one it replaces, and written
    atomically."""
    device = resolve_device(request.device)  # an unknown or unavailable device: before any work
    get_diagnostic(request.name)
    if request.full_experiment:
        if request.name not in FULL_EXPERIMENTS:
            raise ConfigError(f"--full-experiment exists for {', '.join(FULL_EXPERIMENTS)} only, "
                              f"not '{request.name}'")
        if request.checkpoint is None:
            raise ConfigError("--full-experiment needs --checkpoint DIR (a trained llama_modern)")
        if request.data_dir is None or not Path(request.data_dir).is_dir():
            raise ConfigError(f"--full-experiment needs the data directory; {request.data_dir} "
                              "does not exist")
    if request.publish:
        check_publishable(request.repo_root, request.allow_dirty)
    path = request.out or default_artifact_path(request.name, request.seeds, device.type,
                                                publish=request.publish)
    check_output_file(path)
    planned = Contents(blocks=None, seeds=frozenset(request.seeds), experiments=frozenset(
        {"full_experiment"} if request.full_experiment else ()))
    check_replacement(path, planned, replace=request.replace)
    start = capture_code_state([], Path(__file__), request.repo_root)  # compared at write time
    run = run_diagnostic(request.name, request.seeds, device=device)
    extra_modules: list[object] = []
    if request.full_experiment:
        from llmevo.diagnostics import relay_experiment

        assert request.checkpoint is not None and request.data_dir is not None
        run.full_experiment = relay_experiment.run_relay_experiment(
            request.checkpoint, Path(request.data_dir), list(request.seeds),
            relay_experiment.RelayExperimentConfig(eval_tokens=request.eval_tokens), device)
        extra_modules.append(relay_experiment)
    artifact = build_artifact(
        run,
        command=request.command or f"python: llmevo.diagnostics.pipeline.diagnose("
                                   f"{request.name!r}, seeds={list(request.seeds)})",
        artifact_path=path,
        repo_root=request.repo_root,
        runner_file=Path(__file__),
        accelerator=accelerator_name(device),
        checkpoint=str(request.checkpoint) if request.full_experiment else None,
        extra_modules=extra_modules,
        allow_dirty=request.allow_dirty if request.publish else None,
        publish=request.publish,
        since=start,
    )
    check_replacement(path, Contents.of(artifact), replace=request.replace)
    write_artifact(artifact, path)
    return DiagnosticOutcome(run, artifact, path)
