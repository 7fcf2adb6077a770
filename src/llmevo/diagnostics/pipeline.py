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
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field, model_validator

from llmevo.artifacts.io import check_output_file
from llmevo.artifacts.provenance import capture_code_state, check_publishable
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
from llmevo.experiments.sections import DIAGNOSE_TAKES, RunSection
from llmevo.registry import SectionedRequest
from llmevo.train.device import accelerator_name, resolve_device

if TYPE_CHECKING:
    from llmevo.artifacts.schema import DiagnosticArtifact

FULL_EXPERIMENTS = ("rope-relay",)  # diagnostics that have an L2 experiment


class DiagnoseRunSection(RunSection):
    """``RunSection`` for a diagnostic: ``data_dir`` is read by the L2 experiment only (None:
    not given)."""

    data_dir: Path | None = None  # type: ignore[assignment]


class DiagnoseRequest(SectionedRequest):
    """One diagnose run: what is its own (``name``, ``seeds``, ``out``, the L2 experiment:
    ``full_experiment``, ``checkpoint``, ``eval_tokens``) and the shared ``run`` section, of
    which it takes ``DIAGNOSE_TAKES`` (device, threads, publishing; ``data_dir`` with the L2
    experiment). ``out`` defaults to
    ``runs/foundation-models/<arxiv>-<name>/metrics/component-<device type>-seeds<a>-<b>.json``
    (``publish``: the same under ``docs/``, refused from a dirty checkout of ``repo_root``
    unless ``allow_dirty``, which provenance records); ``replace`` lets the artifact replace
    one that holds more; ``full_experiment`` (rope-relay only) needs ``checkpoint`` and
    ``data_dir``."""

    takes: ClassVar[frozenset[str] | None] = DIAGNOSE_TAKES
    untaken: ClassVar[str] = "{options} does not apply to diagnose, which trains no arm"

    name: str
    seeds: list[int] = Field(default_factory=lambda: [42, 43, 44], min_length=1)
    out: Path | None = None
    full_experiment: bool = False
    checkpoint: Path | None = None
    eval_tokens: int = Field(default=1024, ge=1)
    run: DiagnoseRunSection = Field(default_factory=DiagnoseRunSection)

    @model_validator(mode="after")
    def _experiment_options(self) -> DiagnoseRequest:
        # each read by the L2 experiment only (silently ignored without it before: the option walk)
        for option, given in (("--checkpoint", self.checkpoint is not None),
                              ("--data-dir", self.run.data_dir is not None),
                              ("--eval-tokens", self.eval_tokens != 1024)):
            if given and not self.full_experiment:
                raise ConfigError(f"{option} applies to --full-experiment; drop it (here it would be ignored)")
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
    settings = request.run
    device = resolve_device(settings.device)  # an unknown or unavailable device: before any work
    if settings.threads:
        import torch

        torch.set_num_threads(settings.threads)
    get_diagnostic(request.name)
    if request.full_experiment:
        if request.name not in FULL_EXPERIMENTS:
            raise ConfigError(f"--full-experiment exists for {', '.join(FULL_EXPERIMENTS)} only, "
                              f"not '{request.name}'")
        if request.checkpoint is None:
            raise ConfigError("--full-experiment needs --checkpoint DIR (a trained llama_modern)")
        if settings.data_dir is None or not Path(settings.data_dir).is_dir():
            raise ConfigError(f"--full-experiment needs the data directory; {settings.data_dir} "
                              "does not exist")
    if settings.publish:
        check_publishable(settings.repo_root, settings.allow_dirty)
    path = request.out or default_artifact_path(request.name, request.seeds, device.type,
                                                publish=settings.publish)
    check_output_file(path)
    planned = Contents(blocks=None, seeds=frozenset(request.seeds), experiments=frozenset(
        {"full_experiment"} if request.full_experiment else ()))
    check_replacement(path, planned, replace=settings.replace)
    start = capture_code_state([], Path(__file__), settings.repo_root)  # compared at write time
    run = run_diagnostic(request.name, request.seeds, device=device)
    extra_modules: list[object] = []
    if request.full_experiment:
        from llmevo.diagnostics import relay_experiment

        assert request.checkpoint is not None and settings.data_dir is not None
        run.full_experiment = relay_experiment.run_relay_experiment(
            request.checkpoint, Path(settings.data_dir), list(request.seeds),
            relay_experiment.RelayExperimentConfig(eval_tokens=request.eval_tokens), device)
        extra_modules.append(relay_experiment)
    artifact = build_artifact(
        run,
        command=settings.command or f"python: llmevo.diagnostics.pipeline.diagnose("
                                   f"{request.name!r}, seeds={list(request.seeds)})",
        artifact_path=path,
        repo_root=settings.repo_root,
        runner_file=Path(__file__),
        accelerator=accelerator_name(device),
        checkpoint=str(request.checkpoint) if request.full_experiment else None,
        extra_modules=extra_modules,
        allow_dirty=settings.allow_dirty if settings.publish else None,
        publish=settings.publish,
        since=start,
    )
    check_replacement(path, Contents.of(artifact), replace=settings.replace)
    write_artifact(artifact, path)
    return DiagnosticOutcome(run, artifact, path)
