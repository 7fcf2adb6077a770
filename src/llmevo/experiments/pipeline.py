"""The reproduction pipeline as one typed function: ``reproduce(request) -> ReproductionArtifact``.

``ReproductionRequest`` names everything a reproduction needs (component, preset and its
overrides, seeds, data, device, outputs); ``reproduce`` checks it before any work, captures
the code state (provenance), trains and evaluates both arms (``runner.run_reproduction``),
writes the validated artifact, then the optional checkpoints and report. When a later write
fails, what this call wrote is removed again (no artifact without its checkpoints).

The command line (``llmevo reproduce``) only turns its options into a request and prints
the result; from Python::

    from llmevo.experiments import ReproductionRequest, reproduce
    artifact = reproduce(ReproductionRequest(name="rope", data_dir="data", seeds=[42]))

Public API: ``ReproductionRequest``, ``ReproductionOutputs``, ``reproduce``,
``artifact_filename``.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import torch
from pydantic import Field, field_validator, model_validator

from llmevo.artifacts.io import save_artifact
from llmevo.artifacts.provenance import (
    capture_code_state,
    check_publishable,
    collect_provenance,
    module_files,
)
from llmevo.artifacts.schema import ReproductionArtifact
from llmevo.errors import ConfigError
from llmevo.eval.stats import check_margin
from llmevo.experiments import runner
from llmevo.experiments.plans import Comparison, plan_comparison
from llmevo.model.config import ModelConfig
from llmevo.registry import RequestModel, StrictModel
from llmevo.reports.report import against_slug
from llmevo.runner.presets import Preset, get_preset
from llmevo.runner.tuning import (
    DEFAULT_CONFIRM,
    DEFAULT_REPORT_SEEDS,
    DEFAULT_TUNING_SEEDS,
    TuningPlan,
    check_plan,
    default_grid,
)
from llmevo.train.device import accelerator_name, resolve_device
from llmevo.train.many import Execution, check_path
from llmevo.train.trainer import Progress

# the llmevo source checkout: where --publish checks for uncommitted changes
REPO_ROOT = Path(__file__).resolve().parents[3]
IMPLEMENTATION_MODULES = (
    "llmevo.model.transformer", "llmevo.train.trainer", "llmevo.eval.lm", "llmevo.eval.suites",
    "llmevo.eval.metrics", "llmevo.eval.stats", "llmevo.data.lm", "llmevo.data.suites",
    "llmevo.runner.presets", "llmevo.experiments.plans", "llmevo.runner.data",
    "llmevo.runner.tuning", "llmevo.runner.cache", "llmevo.train.many",
)
POST_TRAINING_MODULES = (
    "llmevo.components.post_training.stage", "llmevo.components.post_training.objectives", "llmevo.components.post_training.tasks",
    "llmevo.components.post_training.evaluate", "llmevo.components.post_training.presets", "llmevo.experiments.post_training",
)
# presets whose reproductions tune each arm's lr first; never post-training methods (one
# shared pretraining)
TUNED_BY_DEFAULT = ("quick", "standard")


def artifact_filename(preset: str, seeds: list[int], tuned: bool = False,
                      against: str | None = None) -> str:
    """``public[-<preset>][-tuned][-vs-<other>]-seed42.json``, ``...-seeds42-44.json`` (a
    range) or ``...-seeds42-47-50.json``; ``-vs-<other>``: a baseline chosen by ``--against``."""
    prefix = (("public" if preset == "smoke" else f"public-{preset}") + ("-tuned" if tuned else "")
              + (f"-vs-{against_slug(against)}" if against is not None else ""))
    if len(seeds) == 1:
        return f"{prefix}-seed{seeds[0]}.json"
    return f"{prefix}-seeds{seeds[0]}-{seeds[-1]}.json" if seeds == list(
        range(seeds[0], seeds[-1] + 1)) else f"{prefix}-seeds{'-'.join(map(str, seeds))}.json"


class ReproductionOutputs(StrictModel):
    """Where a request writes: the artifact file, the report folder and the checkpoints."""

    artifact: Path
    report: Path | None
    checkpoints: Path | None


class ReproductionRequest(RequestModel):
    """One reproduction: a component against its ablation (or ``against``), paired over seeds.

    ``preset`` is a preset name or a ``Preset``; ``steps`` .. ``suite`` override it.
    ``tune`` (default: on for the quick and standard presets, or when ``tune_grid`` is given)
    tunes each arm's learning rate on ``tune_grid`` (default: 5 from lr/3 to 3*lr) under
    ``tune_seeds`` first (a best at the stability edge is confirmed on ``tune_confirm``
    further seeds); ``seeds`` then defaults to 42..46 (else 42). ``margin`` is the
    non-inferiority margin (percent) of the verdict class.
    ``out`` defaults to ``runs/<paper>-<name>/<artifact_filename>`` (``--publish``:
    ``docs/reproductions/<paper>-<name>/metrics/...``, refused from a dirty checkout unless
    ``allow_dirty``). ``against`` (e.g. ``"rope"``, ``"swiglu:hidden=192"``) fills the
    baseline's slot with another registered component of that slot instead of the declared
    ablation; its files say ``-vs-<other>`` (report folder ``vs-<other>``) so they never
    replace the declared ablation's. ``arm_cache`` (default on) loads every run, tuning or
    report, that was trained before under identical settings, code and data from
    ``<cache_dir>/arms`` instead of training it again (``runner.cache``; the
    artifact's ``cache`` block lists them); False retrains everything (and stores it). It is
    not used with ``tensorboard`` or for post-training methods. ``command`` is what
    provenance records as the command that ran."""

    name: str = "rope"
    against: str | None = None  # baseline slot choice instead of the declared ablation, e.g. "rope"
    preset: str | Preset = "smoke"
    seeds: list[int] | None = None  # None: 42, or 42..46 when tuned
    data_dir: Path
    cache_dir: Path = Path(".cache/llmevo")
    device: str = "auto"  # auto, cpu, cuda or mps (checked by resolve_device)
    threads: int | None = Field(default=None, ge=1)
    steps: int | None = Field(default=None, ge=1)
    batch_size: int | None = Field(default=None, ge=1)
    lr: float | None = Field(default=None, gt=0)
    warmup_steps: int | None = Field(default=None, ge=0)
    schedule: str | None = None  # constant or cosine (checked by the preset)
    suite: str | None = None  # core or public (checked by the preset)
    publish: bool = False
    allow_dirty: bool = False
    report: bool = True
    out: Path | None = None
    save_checkpoints: Path | None = None
    tensorboard: Path | None = None
    arm_cache: bool = True  # load runs trained before identically (runner.cache); False: retrain
    tune: bool | None = None
    tune_grid: list[float] | None = None
    tune_seeds: list[int] = Field(default_factory=lambda: list(DEFAULT_TUNING_SEEDS))
    tune_confirm: int | None = None  # extra tuning seeds for a best at the stability edge (None: 2); 0: off
    margin: float = 1.0
    post_steps: int | None = Field(default=None, ge=1)  # post-training methods: the stage's steps
    post_batch_size: int | None = Field(default=None, ge=1)
    post_lr: float | None = Field(default=None, gt=0)
    post_seed_offset: int | None = None  # the stage's seed is the run seed plus this
    method_config: str | None = None  # e.g. 'beta=0.1' or 'group_size=8,kl_beta=0.04'
    preference_file: Path | None = None  # DPO: JSONL {"chosen", "rejected"} instead of HH-RLHF
    arithmetic_max_operand: int | None = None  # GRPO: operands 0..N
    path: str = "auto"  # how an arm's seeds train: auto, sequential, batched, parallel, parallel-batched
    replicas_max: int | None = None  # (checked by check_path) at most this many seeds of an arm at once
    base_model: ModelConfig = Field(default_factory=ModelConfig)
    command: str | None = None
    repo_root: Path = REPO_ROOT

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int] | None) -> list[int] | None:
        return None if seeds is None else runner.validate_seeds(seeds)

    @model_validator(mode="after")
    def _tuning_wanted(self) -> ReproductionRequest:
        if self.tune is False and self.tune_grid is not None:
            raise ConfigError("--tune-grid needs tuning; drop --no-tune (tune=False with a tune_grid)")
        return self

    def post_training(self) -> bool:
        return plan_comparison(self.name, self.base_model, against=self.against).spec.slot == "post_training"

    def tuned(self) -> bool:
        if self.post_training():
            if self.tune or self.tune_grid is not None:  # both arms share one pretraining
                from llmevo.experiments.post_training import TUNING_REFUSAL

                raise ConfigError(TUNING_REFUSAL.format(name=self.name))
            return False
        if self.tune is not None:
            return self.tune
        return self.resolved_preset().name in TUNED_BY_DEFAULT or self.tune_grid is not None

    def report_seeds(self) -> list[int]:
        if self.seeds is not None:
            return list(self.seeds)
        return list(DEFAULT_REPORT_SEEDS) if self.tuned() else [42]

    def tuning_plan(self) -> TuningPlan | None:
        """The validated tuning plan (None: untuned); a bad grid or seeds are a ConfigError."""
        if not self.tuned():
            if self.tune_confirm is not None:
                raise ConfigError("--tune-confirm needs tuning: add --tune (this run is untuned)")
            return None
        grid = self.tune_grid or default_grid(self.resolved_preset().train.lr)
        confirm = DEFAULT_CONFIRM if self.tune_confirm is None else self.tune_confirm
        return check_plan(grid, self.tune_seeds, self.report_seeds(), confirm=confirm)

    def resolved_preset(self) -> Preset:
        base = get_preset(self.preset) if isinstance(self.preset, str) else self.preset
        return base.override({
            "steps": self.steps, "batch_size": self.batch_size, "lr": self.lr,
            "warmup_steps": self.warmup_steps, "schedule": self.schedule, "suite": self.suite,
        })

    def outputs(self, comparison: Comparison | None = None) -> ReproductionOutputs:
        """The paths this request writes (before any work; plans the comparison if not given)."""
        comparison = comparison or plan_comparison(self.name, self.base_model, against=self.against)
        paper = comparison.spec.manifest.paper
        folder = f"{paper.arxiv_id}-{comparison.spec.name}" if paper else comparison.spec.name
        out = self.out
        against = comparison.against
        if out is None:
            base = Path("docs/reproductions") / folder / "metrics" if self.publish else Path("runs") / folder
            out = base / artifact_filename(self.resolved_preset().name, self.report_seeds(), self.tuned(),
                                           against)
        # a baseline chosen by --against gets its own report folder beside the declared ablation's
        suffix = f"vs-{against_slug(against)}" if against is not None else None
        if self.publish:
            report = Path("docs/reproductions") / folder / (suffix or "")
        else:
            report = out.parent / (f"report-{suffix}" if suffix else "report")
        return ReproductionOutputs(artifact=out, report=report if self.report else None,
                                   checkpoints=self.save_checkpoints)

    def provenance_command(self) -> str:
        if self.command is not None:
            return self.command
        against = f", against={self.against!r}" if self.against is not None else ""
        return (f"python: llmevo.experiments.reproduce({self.name!r}{against}, preset="
                f"{self.resolved_preset().name!r}, seeds={self.report_seeds()})")


def _check_writable(path: Path | None, what: str, directory: bool) -> None:
    if path is None:
        return
    if directory and path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {path} exists and is not a directory")
    if not directory and path.is_dir():
        raise ConfigError(f"{what} {path} is a directory; expected a file path")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{what} {path}: {parent} is not a directory")
            break


def reproduce(request: ReproductionRequest, progress: Progress | None = None) -> ReproductionArtifact:
    """Run the reproduction ``request`` describes and write its outputs; return the artifact.

    Every check (preset, seeds, component, device, data directory, output paths, a clean
    tree for ``publish``) happens before any training. ``progress`` receives training steps."""
    preset = request.resolved_preset()
    seeds = request.report_seeds()
    check_path(request.path, request.replicas_max)
    plan = request.tuning_plan()
    check_margin(request.margin)
    device = resolve_device(request.device)
    if not Path(request.data_dir).is_dir():
        raise ConfigError(f"data directory {request.data_dir} does not exist")
    if request.threads:
        torch.set_num_threads(request.threads)
    # unknown names, a bad --against, identical arms
    comparison = plan_comparison(request.name, request.base_model, against=request.against)
    if request.publish:
        check_publishable(request.repo_root, request.allow_dirty)  # before any work
    outputs = request.outputs(comparison)
    _check_writable(outputs.artifact, "artifact", directory=False)
    _check_writable(outputs.report, "report folder", directory=True)
    _check_writable(outputs.checkpoints, "checkpoint folder", directory=True)
    _check_writable(request.tensorboard, "tensorboard folder", directory=True)
    logs = None
    if request.tensorboard is not None:
        from llmevo.train.logging import TensorBoardLogs

        logs = TensorBoardLogs(request.tensorboard)  # checks that tensorboard is installed
    post_training = comparison.spec.slot == "post_training"
    post_request = None
    if post_training:
        from llmevo.experiments.post_training import post_training_request
        from llmevo.registry import ComponentChoice

        post_request = post_training_request(
            comparison, preset.name,
            {"steps": request.post_steps, "batch_size": request.post_batch_size,
             "lr": request.post_lr, "seed_offset": request.post_seed_offset,
             "arithmetic.max_operand": request.arithmetic_max_operand},
            ComponentChoice.parse(f"{request.name}:{request.method_config or ''}").config,
            request.preference_file)
    # the code that runs, read now: a commit or an edit during training must not reach provenance
    modules = IMPLEMENTATION_MODULES + (POST_TRAINING_MODULES if post_training else ())
    code = capture_code_state(
        module_files(runner.implementation_objects(comparison)
                     + [importlib.import_module(module) for module in modules]),
        Path(runner.__file__), request.repo_root)
    run_request = runner.RunRequest(
        name=request.name, preset=preset, seeds=seeds, data_dir=Path(request.data_dir),
        cache_dir=Path(request.cache_dir), device=device, base_model=request.base_model,
        execution=Execution(request.path, request.replicas_max),
        tuning=plan, margin_percent=request.margin, post_training=post_request,
        against=request.against, arm_cache="use" if request.arm_cache else "refresh",
    )
    if post_request is not None:  # a post-training method: its own pipeline
        from llmevo.experiments.post_training import run_post_training_reproduction

        outcome = run_post_training_reproduction(run_request, comparison, progress=progress, logs=logs)
    else:
        outcome = runner.run_reproduction(run_request, progress=progress, logs=logs)
    provenance = collect_provenance(
        command=request.provenance_command(),
        code=code,
        dataset_fingerprint=outcome.body["dataset"]["fingerprint"],
        accelerator=accelerator_name(device),
        artifact_path=str(outputs.artifact),
        allow_dirty=request.allow_dirty if request.publish else None,
    )
    return _write_outputs(outcome, provenance, outputs, preset, seeds[0])


def _write_outputs(outcome: runner.ReproductionOutcome, provenance: dict, outputs: ReproductionOutputs,
                   preset: Preset, first_seed: int) -> ReproductionArtifact:
    """Artifact, then checkpoints, then report; on any failure remove what was written."""
    written: list[Path] = []  # the topmost path each write creates

    def track(path: Path) -> None:
        new = None
        for candidate in (path, *path.parents):
            if candidate.exists():
                break
            new = candidate
        if new is not None:
            written.append(new)

    try:
        track(outputs.artifact)
        artifact = save_artifact(outcome.artifact(provenance, str(outputs.artifact)), outputs.artifact)
        assert isinstance(artifact, ReproductionArtifact)
        if outputs.checkpoints is not None:
            from llmevo.inference.checkpoint import save_checkpoint

            for arm in outcome.comparison.arms:
                run = outcome.runs[arm.label][first_seed]
                track(outputs.checkpoints / arm.label)
                save_checkpoint(
                    outputs.checkpoints / arm.label, run.model, arm.model,
                    tokenizer_json=outcome.tokenizer_json if arm.data == "bpe" else None,
                    metadata={"arm": arm.name, "seed": first_seed, "artifact": str(outputs.artifact),
                              "preset": preset.name, "train": run.train_config},
                )
        if outputs.report is not None:
            from llmevo.reports.report import write_report

            track(outputs.report)
            write_report(artifact, outputs.artifact, outputs.report)
    except BaseException:
        for path in reversed(written):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise
    return artifact
