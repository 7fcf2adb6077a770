"""The reproduction pipeline as one typed function: ``reproduce(request) -> ReproductionArtifact``.

``ReproductionRequest`` names everything a reproduction needs (component, preset and its
overrides, seeds, data, device, outputs); ``reproduce`` checks it before any work, captures
the code state (provenance), trains and evaluates both arms (``reproduction.run_reproduction``),
writes the validated artifact, then the optional checkpoints and report. When a later write
fails, what this call wrote is removed again (no artifact without its checkpoints).

The command line (``llmevo reproduce``) only turns its options into a request and prints
the result; from Python::

    from llmevo.experiments import ReproductionRequest, reproduce
    artifact = reproduce(ReproductionRequest(name="rope", data_dir="data", seeds=[42]))

Public API: ``ReproductionRequest``, ``reproduce``, ``code_state``,
``artifact_filename``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, PrivateAttr, model_validator
from pydantic_core import to_jsonable_python

from llmevo.artifacts.io import check_output_dir, check_output_file, save_artifact
from llmevo.artifacts.provenance import (
    CodeState,
    capture_code_state,
    collect_provenance,
    module_files,
    module_sources,
    pipeline_modules,
)
from llmevo.artifacts.replacement import Contents, check_replacement
from llmevo.artifacts.schema import ReproductionArtifact
from llmevo.errors import ConfigError
from llmevo.eval.stats import check_margin
from llmevo.experiments import reproduction
from llmevo.experiments.plans import (
    METHOD_CONFIG_SLOTS,
    TUNING_REFUSAL,
    Comparison,
    ReproductionOutputs,
    ReproductionPlan,
    init_comparison,
    parametrize_comparison,
    plan_comparison,
    post_training_request,
    resize_comparison,
    resolve_arms,
    with_method_config,
)
from llmevo.experiments.sections import (
    PostTrainingSection,
    RunSection,
    SizeSection,
    TrainingSection,
    TuningSection,
    experiment_of,
)
from llmevo.hf.load import LlamaCheckpoint, read_llama_checkpoint
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice, SectionedRequest, Seeds
from llmevo.reports.readme import against_slug, report_variant, write_report
from llmevo.runner.presets import Preset, get_preset
from llmevo.runner.resources import CpuClock, check_memory, concurrent_runs
from llmevo.runner.settings import ComparisonSettings
from llmevo.runner.size import Size, size_label
from llmevo.runner.tuning import DEFAULT_REPORT_SEEDS
from llmevo.train.device import accelerator_name, resolve_device
from llmevo.train.execution import default_path
from llmevo.train.tracking import (
    Tracking,
    check_tracker,
    open_tracker,
    tracker_group,
    verdict_summary,
)
from llmevo.train.trainer import Progress


def _implementation_modules() -> list[str]:
    """The modules a reproduction runs (derived from the imports; provenance hashes them)."""
    return pipeline_modules("llmevo.experiments.pipeline")


# presets whose reproductions tune each arm's lr first; never post-training methods (one
# shared pretraining)
TUNED_BY_DEFAULT = ("quick", "standard")
# a stage option that sets the data of one task: refused for a method that trains on another
TASK_OPTIONS = {"preference_file": ("preference", "DPO's preference pairs"),
                "arithmetic_max_operand": ("arithmetic", "GRPO's arithmetic problems")}
NO_REPLICAS = ("sequential", "parallel")  # paths that train no replicas: --replicas-max cannot apply


def artifact_filename(preset: str, seeds: list[int], tuned: bool = False,
                      against: str | None = None, size: str | None = None,
                      init: str | None = None, space: bool = False) -> str:
    """``public[-<preset>][-<size>][-init-<checkpoint>][-tuned[-space]][-vs-<other>]-seed42.json``
    (``-space``: tuned over the arms' declared spaces, ``--tune-space``),
    ``...-seeds42-44.json`` (a range) or ``...-seeds42-47-50.json``; ``-vs-<other>``: a
    baseline chosen by ``--against``; ``<size>``: ``rung1`` or ``d96-l2-h6`` (the size dial;
    none at rung 0); ``<checkpoint>``: ``init_label`` of an ``--init-from`` directory."""
    prefix = (("public" if preset == "smoke" else f"public-{preset}") + (f"-{size}" if size else "")
              + (f"-init-{init}" if init else "")
              + ("-tuned" if tuned else "") + ("-space" if tuned and space else "")
              + (f"-vs-{against_slug(against)}" if against is not None else ""))
    if len(seeds) == 1:
        return f"{prefix}-seed{seeds[0]}.json"
    return f"{prefix}-seeds{seeds[0]}-{seeds[-1]}.json" if seeds == list(
        range(seeds[0], seeds[-1] + 1)) else f"{prefix}-seeds{'-'.join(map(str, seeds))}.json"


def init_label(checkpoint: LlamaCheckpoint) -> str:
    """``<directory name>-<first 8 hex of the weights' sha256>``, lower-case, in [a-z0-9.-]."""
    name = re.sub(r"[^a-z0-9.]+", "-", checkpoint.directory.resolve().name.lower()).strip("-.")
    return f"{name or 'checkpoint'}-{checkpoint.weights_sha256[:8]}"


class ReproductionRequest(SectionedRequest):
    """One reproduction: a component against its ablation (or ``against``), paired over seeds.

    What is its own: ``name``, ``against`` (e.g. ``"rope"``, ``"swiglu:hidden=192"``: another
    registered component of the slot fills the baseline instead of the declared ablation; its
    files say ``-vs-<other>`` so they never replace the declared ablation's), ``genome`` (the
    method arm is this genome, named ``name``), ``init_from`` (a ``transformers`` Llama
    directory, ``hf.load``, both arms start from: at its size and tokenizer; a post-training
    method then pretrains nothing, an optimizer continues pretraining; other components and
    the size dial are refused), ``preset`` (a name or a ``Preset``), ``seeds`` (report seeds;
    None: 42..46 when tuned, else 42), ``margin`` (the non-inferiority margin, percent),
    ``method_config`` (the method arm's config: ``'beta=0.1'``, ``'cap=10'``,
    ``'lm=0.5,narrative=0.5'``), ``allow_noop`` and the outputs: ``out`` (default
    ``runs/<paper>-<name>/<artifact_filename>``; with ``publish``
    ``docs/reproductions/<paper>-<name>/metrics/...``), ``report``, ``save_checkpoints``,
    and the tracker (the run section's ``tracker``: per-step logs; turns the arm cache off).

    Its sections (``experiments.sections``; each field may be given flat): ``run`` (data,
    cache, device, threads, path, arm cache, publish), ``train`` (the preset's overrides),
    ``tuning`` (default: on for the quick and standard presets, or when a grid or space is
    given; files say ``-tuned`` / ``-tuned-space``), ``size`` (the dial) and
    ``post_training`` (a post-training method's stage). The arm cache is not used with
    a tracker or for post-training methods."""

    name: str = "rope"
    against: str | None = None  # baseline slot choice instead of the declared ablation, e.g. "rope"
    genome: Path | None = None  # the method arm is this genome (experiments.genome_comparison); name labels it
    init_from: Path | None = None  # a transformers Llama directory both arms start from
    preset: str | Preset = "smoke"
    seeds: Seeds | None = None  # None: 42, or 42..46 when tuned
    margin: float = Field(default=1.0, gt=0)  # percent
    method_config: str | None = None  # e.g. 'beta=0.1' (post-training), 'cap=10' (a model slot, an optimizer), 'lm=0.5,narrative=0.5' (data)
    base_model: ModelConfig = Field(default_factory=ModelConfig)
    allow_noop: bool = False  # run arms that compute the same function (runner.equivalence), classed no-op
    report: bool = True
    out: Path | None = None
    save_checkpoints: Path | None = None
    run: RunSection
    train: TrainingSection = Field(default_factory=TrainingSection)
    tuning: TuningSection = Field(default_factory=TuningSection)
    size: SizeSection = Field(default_factory=SizeSection)
    post_training: PostTrainingSection = Field(default_factory=PostTrainingSection)
    _resolved: Size | None = PrivateAttr(default=None)
    _planned: ReproductionPlan | None = PrivateAttr(default=None)  # plan() of the request alone, made once

    @model_validator(mode="after")
    def _resolve_size(self) -> ReproductionRequest:
        # resolved once: an unknown rung, heads that do not divide d_model, zero steps fail here
        self.tuning.check_trials()
        self._resolved = self.size.resolve(self.preset, self.train.batch_size, self.base_model)
        return self

    @property
    def resolved_size(self) -> Size | None:
        """The size dial resolved (``runner.size.size_dial``), or None when no size is asked for."""
        return self._resolved

    def comparison(self) -> Comparison:
        """The two arms (``plan_arms``)."""
        return plan_arms(self.name, self.against, self.genome, self.base_model, self.init_from)

    def plan(self, comparison: Comparison | None = None) -> ReproductionPlan:
        """The request resolved once, before any work: the comparison (an unknown name, a bad
        ``against`` or identical arms fail here), the preset with its overrides and the tuner
        (``runner.settings.ComparisonSettings``: resolved and checked against the arms in the
        runner), the report seeds, a post-training method's stage, the device and the outputs.
        ``comparison``: the two arms a caller planned already (a ladder plans them once for
        all its rungs; ``--all`` once per comparison), at the preset's size: this request's
        size, checkpoint and method config are applied to them here. Without it the plan is
        made once and kept (the request is frozen): ``reproduce(request)`` and ``outputs()``
        read the same plan."""
        if comparison is not None:
            return self._plan(comparison)
        if self._planned is None:
            self._planned = self._plan(self.comparison())
        return self._planned

    def outputs(self) -> ReproductionOutputs:
        """Where this request writes (artifact, report folder, checkpoints): its plan's."""
        outputs = self.plan().outputs
        assert outputs is not None  # a request's plan always names its outputs
        return outputs

    def _plan(self, comparison: Comparison) -> ReproductionPlan:
        size = self._resolved
        init_from = None
        if self.init_from is not None:  # both arms start from the checkpoint, at its size
            if size is not None:
                raise ConfigError("--init-from: the model's size is the checkpoint's; drop --rung, "
                                  "--d-model, --layers and --heads")
            init_from = read_llama_checkpoint(self.init_from)
            comparison = init_comparison(comparison, init_from)
        if size is not None:
            comparison = resize_comparison(comparison, size)
            base = size.preset
        else:
            base = get_preset(self.preset) if isinstance(self.preset, str) else self.preset
        if self.size.param != "standard":
            if init_from is not None:
                raise ConfigError(f"--param {self.size.param} with --init-from: the checkpoint was trained "
                                  "under the standard parametrization; drop --param")
            comparison = parametrize_comparison(comparison, self.size.param)  # refused here where it cannot apply
        check_buildable(comparison)  # a size a component cannot take fails here, not once training starts
        configurable = comparison.spec.slot in METHOD_CONFIG_SLOTS  # the method arm's own config
        given = self.post_training.given()
        if self.method_config is not None and not configurable:
            given.append("--method-config (method_config)")
        if configurable and self.method_config is not None:  # validated now
            comparison = with_method_config(
                comparison, ComponentChoice.parse(f"{self.name}:{self.method_config}").config)
        if given and comparison.spec.slot != "post_training":
            raise ConfigError(f"{', '.join(given)}: only for a post-training method; "
                              f"'{self.name}' fills the {comparison.spec.slot} slot")
        post_training = None
        tuning_options = self.tuning
        if comparison.spec.slot == "post_training":
            if tuning_options.tune or tuning_options.tune_grid is not None or tuning_options.tune_space is not None:
                raise ConfigError(TUNING_REFUSAL.format(name=self.name))  # one pretraining
            self._check_post_training_options(comparison)
            if self.allow_noop:
                raise ConfigError("--allow-noop: a post-training method's arms share one pretraining "
                                  "and are not checked for a no-op; drop it")
            tuned = False
            post_training = post_training_request(  # the overrides never reach the stage's settings
                comparison, base.post_training, self.post_training.stage_overrides(),
                ComponentChoice.parse(f"{self.name}:{self.method_config or ''}").config,
                self.post_training.preference_file)
            comparison = resolve_arms(comparison, post_training)
        else:
            tuned = tuning_options.wanted(base.name in TUNED_BY_DEFAULT)
        if self.size.match == "flops":
            check_flops_match(comparison)
        seeds = list(self.seeds) if self.seeds is not None else (
            list(DEFAULT_REPORT_SEEDS) if tuned else [42])
        if not tuned:
            tuning_options.refuse_untuned("post-training methods are not tuned" if post_training is not None
                                          else "add --tune (this run is untuned)")
        # the preset at its overrides and the tuner, resolved and checked by the runner that runs them
        settings = ComparisonSettings(base, self.train.overrides(), comparison.arms, seeds,
                                      tuning_options if tuned else None)
        preset, tuning = settings.preset, settings.tuner
        run = self.run
        execution = run.execution()
        device = resolve_device(run.device)
        self._check_execution(device)
        most_runs = max(len(seeds), 0 if tuning is None else tuning.runs_at_once())
        for arm in comparison.arms:  # a model that cannot fit is refused now, before any data is read
            if arm.model.architecture == "transformer":  # the BLT architectures are sized by their data
                check_memory(f"{arm.label} arm '{arm.name}'", arm.model,
                             preset.train.model_copy(update={"optimizer": arm.optimizer}), device,
                             concurrent_runs(execution, device, most_runs))
        check_margin(self.margin)
        command = run.command
        if command is None:
            against = f", against={self.against!r}" if self.against is not None else ""
            init = f", init_from={str(self.init_from)!r}" if self.init_from is not None else ""
            command = (f"python: llmevo.experiments.reproduce({self.name!r}{against}, preset="
                       f"{preset.name!r}, seeds={seeds}{init})")
        return ReproductionPlan(
            comparison=comparison, preset=preset, seeds=seeds, data_dir=Path(run.data_dir),
            cache_dir=Path(run.cache_dir), device=device, execution=execution, tuning=tuning,
            margin_percent=self.margin, post_training=post_training,
            arm_cache="use" if run.arm_cache else "refresh",
            outputs=self._outputs(comparison, preset, seeds, tuned, size, init_from,
                                  space=tuning is not None and tuning.kind == "space"),
            tracker=run.tracker, tracker_dir=run.tracker_dir,
            threads=run.threads, publish=run.publish, allow_dirty=run.allow_dirty,
            repo_root=run.repo_root, command=command, size=size, replace=run.replace,
            init_from=init_from, allow_noop=self.allow_noop, match=self.size.match,
            experiment=experiment_of(self),
        )

    def _check_post_training_options(self, comparison: Comparison) -> None:
        """Refuse a stage option the method does not read (``TASK_OPTIONS``) and, when both
        arms start from a checkpoint, every option only pretraining reads."""
        task = comparison.spec.cls.task or "instruction"
        if "arm_cache" in self.run.model_fields_set:
            raise ConfigError(f"--{'' if self.run.arm_cache else 'no-'}arm-cache: a post-training method's "
                              "runs are not cached (both arms post-train one pretraining each seed); drop it")
        if self.run.val_every is not None:
            raise ConfigError("--val-every: a post-training method's arms share one pretraining, so there "
                              "is no time to target to read from a validation curve; drop it")
        for option, (wanted, what) in TASK_OPTIONS.items():
            if getattr(self.post_training, option) is not None and task != wanted:
                raise ConfigError(f"--{option.replace('_', '-')} sets {what}; '{self.name}' trains on the "
                                  f"{task} task, not on them; drop it")
        if self.init_from is not None:
            given = [option for option in self.train.given() if option != "--suite"]  # the suite still evaluates
            if self.run.replicas_max is not None:
                given.append("--replicas-max")
            if self.run.path != "auto":
                given.append(f"--path {self.run.path}")
            if given:
                raise ConfigError(f"{', '.join(given)}: with --init-from a post-training method pretrains "
                                  "nothing (both arms start from the checkpoint); the stage's options "
                                  "are --post-steps, --post-batch-size, --post-lr")

    def _check_execution(self, device: torch.device) -> None:
        """Refuse execution options the chosen path never reads: ``replicas_max`` on a path
        that trains no replicas (``auto`` resolved for ``device``), the arm cache asked for with a
        tracker, a tracker folder without a tracker, and a tracker not installed."""
        run = self.run
        chosen = default_path(device) if run.path == "auto" else run.path
        if run.tracker == "none" and run.tracker_dir is not None:
            raise ConfigError("--tracker-dir is where --tracker writes; add --tracker (tensorboard, wandb or "
                              "trackio) or drop it")
        if "arm_cache" in run.model_fields_set and run.tracker != "none":
            raise ConfigError(f"--{'' if run.arm_cache else 'no-'}arm-cache with --tracker: the tracker "
                              "logs every run trained here, so the arm cache is not used; drop it")
        check_tracker(run.tracker)  # installed: a one-line error naming the pip extra, before any work
        if chosen.startswith("parallel") and device.type != "cpu":
            raise ConfigError(f"--path {run.path}: the parallel paths run CPU worker processes; the "
                              f"device is {device.type} (use --path batched or sequential)")
        if run.replicas_max is not None and chosen in NO_REPLICAS:
            how = (f"--path auto on {device.type} is {chosen}, which trains no replicas"
                   if run.path == "auto" else f"--path {run.path} trains no replicas")
            raise ConfigError(f"--replicas-max caps the replicas of a batched path; {how}; add --path "
                              "batched (or parallel-batched) or drop --replicas-max")

    def _size_label(self, size: Size | None) -> str | None:
        """``size_label`` with ``-tpp60`` and ``-ctx256`` where the tokens per parameter or the
        window are given, ``-mup`` (or ``mup`` alone) under a parametrization other than standard
        and ``-flops`` under ``--match flops``, so that their files never replace the default's."""
        given = self.size.tokens_per_parameter, self.size.seq_len
        parts = [size_label(size), *(None if value is None else f"{name}{value:g}"
                                     for name, value in zip(("tpp", "ctx"), given, strict=True)),
                 None if self.size.param == "standard" else self.size.param,
                 None if self.size.match == "tokens" else self.size.match]
        return "-".join(part for part in parts if part) or None

    def _outputs(self, comparison: Comparison, preset: Preset, seeds: list[int],
                 tuned: bool, size: Size | None,
                 init_from: LlamaCheckpoint | None = None, space: bool = False) -> ReproductionOutputs:
        paper = comparison.spec.manifest.paper
        folder = f"{paper.arxiv_id}-{comparison.spec.name}" if paper else comparison.spec.name
        out = self.out
        against = comparison.against
        if out is None:
            base = Path("docs/reproductions") / folder / "metrics" if self.run.publish else Path("runs") / folder
            out = base / artifact_filename(preset.name, seeds, tuned, against, self._size_label(size),
                                           None if init_from is None else init_label(init_from),
                                           space)
        # a variant (--against, --tune-space, a rung) reports in its own folder beside the
        # declared comparison's, never over it
        variant = report_variant(against, space, self._size_label(size))
        if self.run.publish:
            report = Path("docs/reproductions") / folder / variant
        else:
            report = out.parent / ("report-" + "-".join(variant.parts) if variant.parts else "report")
        return ReproductionOutputs(artifact=out, report=report if self.report else None,
                                   checkpoints=self.save_checkpoints)


def plan_arms(name: str, against: str | None = None, genome: Path | None = None,
              base_model: ModelConfig | None = None, init_from: Path | None = None) -> Comparison:
    """The two arms of a comparison: ``name`` against its ablation or ``against``, or with
    ``genome`` llama_modern against that genome (named ``name``)."""
    if genome is None:
        return plan_comparison(name, base_model, against=against)
    for option, value in (("--against", against), ("--init-from", init_from)):
        if value is not None:
            raise ConfigError(f"{option} does not apply with --genome: the baseline is llama_modern "
                              "and the method the genome, each from a random initialisation")
    from llmevo.experiments.genome_comparison import genome_comparison, read_genome

    read, _ = read_genome(genome)
    return genome_comparison(read, name, genome, base_model or ModelConfig())


def check_flops_match(comparison: Comparison) -> None:
    """Refuse ``--match flops`` where it has nothing to match or no common unit: a
    post-training method (one shared pretraining), an optimizer or a data recipe (both arms
    build the same model, so equal FLOPs per token: the optimizer's own step is not counted),
    and arms on different tokenizations (a FLOP per byte is not a FLOP per token)."""
    spec, (baseline, method) = comparison.spec, comparison.arms
    if spec.slot == "post_training":
        raise ConfigError(f"--match flops: '{spec.name}' is a post-training method; its arms share one "
                          "pretraining, so there is no pretraining compute to match (drop --match)")
    if baseline.data != method.data:
        raise ConfigError(f"--match flops: the arms of '{spec.name}' read different tokenizations "
                          f"({baseline.data}, {method.data}), so a FLOP per token is not one unit; drop --match")
    if baseline.model == method.model:
        raise ConfigError(f"--match flops: both arms of '{spec.name}' build the same model ({spec.slot} slot), "
                          "so their FLOPs per token are equal (an optimizer's own step is not counted) and "
                          "--match flops would train what --match tokens does; drop --match")


def check_buildable(comparison: Comparison) -> None:
    """Build each arm's model once as a skeleton (``llmevo.skeleton``: shapes, no
    training-sized memory), so that a configuration a
    component refuses only when it is built (differential attention's even heads, a genome's
    bad config) is refused when the request is planned; arms resolved from the data later
    (``prepare``) and checkpoints' genomes (``--init-from``, checked as they are read) are not
    built here."""
    from llmevo.skeleton import build_skeleton

    for arm in comparison.arms:
        if arm.prepare is None and arm.init is None:  # a checkpoint's genome was checked on reading
            build_skeleton(arm.model)  # shapes only: bounded memory, whatever the size (checked later)


def code_state(plan: ReproductionPlan) -> CodeState:
    """The code a reproduction of ``plan`` runs, read now (commit, dirty, file digests): a
    commit or an edit made during training must not reach provenance."""
    return capture_code_state(
        module_files(reproduction.implementation_objects(plan.comparison))
        + module_sources(_implementation_modules()), Path(reproduction.__file__), plan.repo_root)


def tracker_config(plan: ReproductionPlan) -> dict[str, Any]:
    """What a tracker records as every run's configuration: the comparison's settings."""
    arms = plan.comparison
    return {"comparison": plan.name, "baseline": arms.baseline.name, "method": arms.method.name,
            "preset": plan.preset.name, "seeds": plan.seeds, "tuned": plan.tuning is not None,
            "path": plan.execution.path, "device": str(plan.device), "command": plan.command,
            "train": plan.preset.train.model_dump(mode="json")}


def _plain(value: Any) -> Any:
    return None if value is None else to_jsonable_python(value)


def reproduce(request: ReproductionRequest | ReproductionPlan,
              progress: Progress | None = None, code: CodeState | None = None) -> ReproductionArtifact:
    """Run the reproduction ``request`` (or its ``plan()``) describes and write its outputs;
    return the artifact.

    Every check (preset, seeds, component, device, data directory, output paths, a clean
    tree for ``publish``) happens before any training. ``progress`` receives training steps.
    ``code``: the code state a caller that runs several reproductions (a ladder) read and
    checked (``check_publishable``) before its first write; its provenance is recorded."""
    plan = request.plan() if isinstance(request, ReproductionRequest) else request
    plan.prologue(check_publish=code is None)  # a caller that read the code state checked it
    outputs = plan.outputs
    if outputs is None:
        raise ConfigError("the plan names no outputs; make it with ReproductionRequest.plan()")
    check_output_file(outputs.artifact, "--out")
    # a published (or any) artifact is never replaced by one holding less, unless replace
    check_replacement(outputs.artifact, Contents(blocks=None, experiments=frozenset(),
                                                 seeds=frozenset(plan.seeds)), replace=plan.replace)
    check_output_dir(outputs.report, "report folder")
    if outputs.checkpoints is not None:
        for folder in (outputs.checkpoints, outputs.checkpoints / "baseline", outputs.checkpoints / "method"):
            check_output_dir(folder, "--save-checkpoints")
    check_output_dir(plan.tracker_dir, "--tracker-dir")
    tracker = open_tracker(plan.tracker, plan.tracker_dir, tracker_group(outputs.artifact))
    logs = None if tracker is None else Tracking(tracker, tracker_config(plan))
    if code is None:
        code = code_state(plan)
    cost = CpuClock()
    try:
        if plan.post_training is not None:  # a post-training method: its own pipeline
            from llmevo.experiments.post_training import run_post_training_reproduction

            outcome = run_post_training_reproduction(plan, progress=progress, logs=logs)
        else:
            outcome = reproduction.run_reproduction(plan, progress=progress, logs=logs)
        if logs is not None:
            body = outcome.body
            logs.summary(verdict_summary(_plain(body.get("verdict")), _plain(body.get("statistics")),
                                         body.get("verdict_withheld")))
    finally:
        if logs is not None:
            logs.finish()
    cpu_seconds, wall_seconds = cost.read()
    provenance = collect_provenance(
        command=plan.command,
        code=code,
        dataset_fingerprint=outcome.body["dataset"].fingerprint,
        accelerator=accelerator_name(plan.device),
        artifact_path=str(outputs.artifact),
        allow_dirty=plan.allow_dirty if plan.publish else None,
        publish=plan.publish,  # the code changed since the start: refused here, before any write
    )
    if plan.experiment is not None:
        provenance["experiment"] = plan.experiment
    return _write_outputs(outcome, provenance, outputs, plan.preset, plan.seeds[0], plan.replace,
                          cost=(cpu_seconds, wall_seconds))


def _write_outputs(outcome: reproduction.ReproductionOutcome, provenance: dict, outputs: ReproductionOutputs,
                   preset: Preset, first_seed: int, replace: bool = False,
                   cost: tuple[float, float] | None = None) -> ReproductionArtifact:
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
        # validated, refused where it would replace an artifact holding more, and written: one call
        artifact = save_artifact(outcome.record(provenance, cost), outputs.artifact, replace=replace)
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
