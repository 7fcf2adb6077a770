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
import time
from pathlib import Path

import torch
from pydantic import Field, field_validator, model_validator

from llmevo.artifacts.io import check_output_dir, check_output_file, save_artifact
from llmevo.artifacts.provenance import (
    REPO_ROOT,
    CodeState,
    capture_code_state,
    check_publishable,
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
from llmevo.experiments.genome_comparison import genome_comparison, read_genome
from llmevo.experiments.plans import (
    METHOD_CONFIG_SLOTS,
    TUNING_REFUSAL,
    Comparison,
    ReproductionOutputs,
    ReproductionPlan,
    init_comparison,
    plan_comparison,
    post_training_request,
    resolve_arms,
    scale_comparison,
    with_method_config,
)
from llmevo.experiments.post_training import run_post_training_reproduction
from llmevo.hf.load import LlamaCheckpoint, read_llama_checkpoint
from llmevo.inference.checkpoint import save_checkpoint
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice, RequestModel, check_seeds
from llmevo.reports.readme import against_slug, report_variant, write_report
from llmevo.runner.presets import Preset, get_preset
from llmevo.runner.scale import Scale, size_dial, size_label
from llmevo.runner.tuning import (
    DEFAULT_CONFIRM,
    DEFAULT_REPORT_SEEDS,
    DEFAULT_TUNING_SEEDS,
    TuningPlan,
    check_plan,
    default_grid,
)
from llmevo.runner.tuning_space import DEFAULT_TRIALS, MAX_TRIALS, SpacePlan, check_space_plan
from llmevo.train.device import accelerator_name, resolve_device
from llmevo.train.execution import Execution, check_path, default_path
from llmevo.train.logging import TensorBoardLogs
from llmevo.train.trainer import Progress


def _implementation_modules() -> list[str]:
    """The modules a reproduction runs (derived from the imports; provenance hashes them)."""
    return pipeline_modules("llmevo.experiments.pipeline")


# presets whose reproductions tune each arm's lr first; never post-training methods (one
# shared pretraining)
TUNED_BY_DEFAULT = ("quick", "standard")
# a post-training method's stage options, refused for any other component
POST_TRAINING_OPTIONS = ("post_steps", "post_batch_size", "post_lr", "post_seed_offset", "self_consistency",
                         "method_config", "preference_file", "arithmetic_max_operand")
# a stage option that sets the data of one task: refused for a method that trains on another
TASK_OPTIONS = {"preference_file": ("preference", "DPO's preference pairs"),
                "arithmetic_max_operand": ("arithmetic", "GRPO's arithmetic problems")}
# what only pretraining reads: refused where nothing is pretrained (a post-training method
# started from --init-from)
PRETRAINING_OPTIONS = ("steps", "batch_size", "lr", "warmup_steps", "weight_decay", "schedule",
                       "replicas_max")
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


class ReproductionRequest(RequestModel):
    """One reproduction: a component against its ablation (or ``against``), paired over seeds.

    ``preset`` is a preset name or a ``Preset``; ``steps`` .. ``suite`` override it.
    ``tune`` (default: on for the quick and standard presets, or when ``tune_grid`` is given)
    tunes each arm's learning rate on ``tune_grid`` (default: 5 from lr/3 to 3*lr) under
    ``tune_seeds`` first (a best at the stability edge is confirmed on ``tune_confirm``
    further seeds); ``seeds`` then defaults to 42..46 (else 42). ``tune_space`` (``"full"``
    or axes such as ``"lr,beta2"``) instead tunes each arm over its components' declared
    tuning space with ``tune_trials`` (default 8) Sobol trials per arm under ``tune_seeds``
    (``runner.tuning_space``; files say ``-tuned-space``). ``margin`` is the
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
    not used with ``tensorboard`` or for post-training methods. ``init_from`` (a
    ``transformers`` Llama directory, ``hf.load``) starts both arms from its weights,
    at its size and on data tokenized with its own tokenizer: a post-training method then
    pretrains nothing, an optimizer continues pretraining; other components, and the size
    dial, are refused. ``command`` is what provenance records as the command that ran."""

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
    weight_decay: float | None = Field(default=None, ge=0)
    schedule: str | None = None  # constant or cosine (checked by the preset)
    suite: str | None = None  # core or public (checked by the preset)
    publish: bool = False
    allow_dirty: bool = False
    replace: bool = False  # replace an artifact at out that holds more than this one would
    report: bool = True
    out: Path | None = None
    save_checkpoints: Path | None = None
    tensorboard: Path | None = None
    arm_cache: bool = True  # load runs trained before identically (runner.cache); False: retrain
    tune: bool | None = None
    tune_grid: list[float] | None = None
    tune_seeds: list[int] = Field(default_factory=lambda: list(DEFAULT_TUNING_SEEDS))
    tune_confirm: int | None = Field(default=None, ge=0)  # extra tuning seeds for a best at the stability edge (None: 2); 0: off
    tune_space: str | None = None  # "full" or axes "lr,beta2": space tuning (runner.tuning_space)
    tune_trials: int | None = Field(default=None, ge=2, le=MAX_TRIALS)  # trials per arm (None: 8)
    margin: float = Field(default=1.0, gt=0)  # percent
    post_steps: int | None = Field(default=None, ge=1)  # post-training methods: the stage's steps
    post_batch_size: int | None = Field(default=None, ge=1)
    post_lr: float | None = Field(default=None, gt=0)
    post_seed_offset: int | None = None  # the stage's seed is the run seed plus this
    self_consistency: bool | None = None  # post-training: majority vote over k = 1, 4, 8 samples too
    method_config: str | None = None  # e.g. 'beta=0.1' (post-training), 'cap=10' (a model slot, an optimizer), 'lm=0.5,narrative=0.5' (data)
    preference_file: Path | None = None  # DPO: JSONL {"chosen", "rejected"} instead of HH-RLHF
    arithmetic_max_operand: int | None = None  # GRPO: operands 0..N
    path: str = "auto"  # how an arm's seeds train: auto, sequential, batched, parallel, parallel-batched
    replicas_max: int | None = Field(default=None, ge=1)  # (checked by check_path) at most this many seeds of an arm at once
    base_model: ModelConfig = Field(default_factory=ModelConfig)
    rung: int | None = None  # the size dial (runner.scale; 0: quick's llama_modern); quick only
    d_model: int | None = Field(default=None, ge=1)  # explicit sizes replace the rung's geometry
    layers: int | None = Field(default=None, ge=1)
    heads: int | None = Field(default=None, ge=1)
    tokens_per_parameter: float | None = None  # the size dial's training tokens (default quick's ~7.26)
    seq_len: int | None = None  # the size dial's training/evaluation window (default quick's 64)
    init_from: Path | None = None  # a transformers Llama directory both arms start from
    genome: Path | None = None  # the method arm is this genome (experiments.genome_comparison); name labels it
    allow_noop: bool = False  # run arms that compute the same function (runner.equivalence), classed no-op
    command: str | None = None
    repo_root: Path = REPO_ROOT

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int] | None) -> list[int] | None:
        return None if seeds is None else check_seeds(seeds)

    @field_validator("tune_seeds")
    @classmethod
    def _tune_seeds(cls, seeds: list[int]) -> list[int]:
        return check_seeds(seeds, "--tune-seeds")

    @model_validator(mode="after")
    def _tuning_wanted(self) -> ReproductionRequest:
        if self.tune is False and self.tune_grid is not None:
            raise ConfigError("--tune-grid needs tuning; drop --no-tune (tune=False with a tune_grid)")
        if self.tune_trials is not None and self.tune_space is None:
            raise ConfigError("--tune-trials needs --tune-space (e.g. --tune-space full); the "
                              "learning-rate grid's size is --tune-grid")
        if self.tune_space is not None:
            if self.tune is False:
                raise ConfigError("--tune-space needs tuning; drop --no-tune")
            if self.tune_grid is not None:
                raise ConfigError("--tune-grid and --tune-space are two protocols; give one "
                                  "(the space's lr axis spans lr/3 .. 3*lr)")
            if self.tune_confirm is not None:
                raise ConfigError("--tune-confirm applies to the learning-rate grid only; space "
                                  "tuning gives every arm the same trials (drop --tune-confirm)")
        return self

    @model_validator(mode="after")
    def _size(self) -> ReproductionRequest:
        self.size()  # an unknown rung, heads that do not divide d_model, zero steps
        return self

    def size(self) -> Scale | None:
        """The size dial resolved (``runner.scale.scale``), or None when no size is asked for."""
        return size_dial(self.rung, self.d_model, self.layers, self.heads, self.preset,
                         self.batch_size, self.base_model, self.tokens_per_parameter, self.seq_len)

    def comparison(self) -> Comparison:
        """The two arms: ``name`` against its ablation or ``against``, or with ``genome``
        llama_modern against that genome (named ``name``)."""
        if self.genome is None:
            return plan_comparison(self.name, self.base_model, against=self.against)
        for option, value in (("--against", self.against), ("--init-from", self.init_from)):
            if value is not None:
                raise ConfigError(f"{option} does not apply with --genome: the baseline is llama_modern "
                                  "and the method the genome, each from a random initialisation")
        genome, _ = read_genome(self.genome)
        return genome_comparison(genome, self.name, self.genome, self.base_model)

    def plan(self) -> ReproductionPlan:
        """The request resolved once, before any work: the comparison (an unknown name, a bad
        ``against`` or identical arms fail here), the preset with its overrides, the report
        seeds, the tuning plan, a post-training method's stage, the device and the outputs."""
        comparison = self.comparison()
        size = self.size()
        init_from = None
        if self.init_from is not None:  # both arms start from the checkpoint, at its size
            if size is not None:
                raise ConfigError("--init-from: the model's size is the checkpoint's; drop --rung, "
                                  "--d-model, --layers and --heads")
            init_from = read_llama_checkpoint(self.init_from)
            comparison = init_comparison(comparison, init_from)
        if size is not None:
            comparison = scale_comparison(comparison, size)
            base = size.preset
        else:
            base = get_preset(self.preset) if isinstance(self.preset, str) else self.preset
        check_buildable(comparison)  # a size a component cannot take fails here, not once training starts
        preset = base.override({
            "steps": self.steps, "batch_size": self.batch_size, "lr": self.lr,
            "warmup_steps": self.warmup_steps, "weight_decay": self.weight_decay,
            "schedule": self.schedule, "suite": self.suite,
        })
        configurable = comparison.spec.slot in METHOD_CONFIG_SLOTS  # the method arm's own config
        given = [f"--{name.replace('_', '-')} ({name})" for name in POST_TRAINING_OPTIONS
                 if getattr(self, name) is not None and not (configurable and name == "method_config")]
        if configurable and self.method_config is not None:  # validated now
            comparison = with_method_config(
                comparison, ComponentChoice.parse(f"{self.name}:{self.method_config}").config)
        if given and comparison.spec.slot != "post_training":
            raise ConfigError(f"{', '.join(given)}: only for a post-training method; "
                              f"'{self.name}' fills the {comparison.spec.slot} slot")
        post_training = None
        if comparison.spec.slot == "post_training":
            if self.tune or self.tune_grid is not None or self.tune_space is not None:  # one pretraining
                raise ConfigError(TUNING_REFUSAL.format(name=self.name))
            self._check_post_training_options(comparison)
            if self.allow_noop:
                raise ConfigError("--allow-noop: a post-training method's arms share one pretraining "
                                  "and are not checked for a no-op; drop it")
            tuned = False
            post_training = post_training_request(
                comparison, preset.post_training,
                {"steps": self.post_steps, "batch_size": self.post_batch_size, "lr": self.post_lr,
                 "seed_offset": self.post_seed_offset, "self_consistency": self.self_consistency,
                 "arithmetic.max_operand": self.arithmetic_max_operand},
                ComponentChoice.parse(f"{self.name}:{self.method_config or ''}").config,
                self.preference_file)
            comparison = resolve_arms(comparison, post_training)
        elif self.tune is not None:
            tuned = self.tune
        elif self.tune_space is not None:
            tuned = True
        else:
            tuned = preset.name in TUNED_BY_DEFAULT or self.tune_grid is not None
        if self.seeds is not None:
            seeds = list(self.seeds)
        else:
            seeds = list(DEFAULT_REPORT_SEEDS) if tuned else [42]
        tuning: TuningPlan | SpacePlan | None = None
        if tuned and self.tune_space is not None:
            tuning = check_space_plan(self.tune_space, self.tune_trials or DEFAULT_TRIALS,
                                      self.tune_seeds, seeds)
            reproduction.comparison_spaces(comparison, preset, tuning)  # an unknown axis fails here
        elif tuned:
            confirm = DEFAULT_CONFIRM if self.tune_confirm is None else self.tune_confirm
            tuning = check_plan(self.tune_grid or default_grid(preset.train.lr), self.tune_seeds,
                                seeds, confirm=confirm)
        else:
            untuned = ("post-training methods are not tuned" if post_training is not None
                       else "add --tune (this run is untuned)")
            for option in ("tune_confirm", "tune_seeds"):
                if option in self.model_fields_set and getattr(self, option) is not None:
                    raise ConfigError(f"--{option.replace('_', '-')} needs tuning: {untuned}")
        check_path(self.path, self.replicas_max)
        device = resolve_device(self.device)
        self._check_execution(device)
        check_margin(self.margin)
        if self.allow_dirty and not self.publish:
            raise ConfigError("--allow-dirty applies to --publish only (an unpublished run may "
                              "come from any tree; provenance records whether it was dirty)")
        command = self.command
        if command is None:
            against = f", against={self.against!r}" if self.against is not None else ""
            init = f", init_from={str(self.init_from)!r}" if self.init_from is not None else ""
            command = (f"python: llmevo.experiments.reproduce({self.name!r}{against}, preset="
                       f"{preset.name!r}, seeds={seeds}{init})")
        return ReproductionPlan(
            comparison=comparison, preset=preset, seeds=seeds, data_dir=Path(self.data_dir),
            cache_dir=Path(self.cache_dir), device=device,
            execution=Execution(self.path, self.replicas_max), tuning=tuning,
            margin_percent=self.margin, post_training=post_training,
            arm_cache="use" if self.arm_cache else "refresh",
            outputs=self._outputs(comparison, preset, seeds, tuned, size, init_from,
                                  space=isinstance(tuning, SpacePlan)),
            tensorboard=self.tensorboard,
            threads=self.threads, publish=self.publish, allow_dirty=self.allow_dirty,
            repo_root=self.repo_root, command=command, scale=size, replace=self.replace,
            init_from=init_from, allow_noop=self.allow_noop,
        )

    def _check_post_training_options(self, comparison: Comparison) -> None:
        """Refuse a stage option the method does not read (``TASK_OPTIONS``) and, when both
        arms start from a checkpoint, every option only pretraining reads."""
        task = comparison.spec.cls.task or "instruction"
        if "arm_cache" in self.model_fields_set:
            raise ConfigError(f"--{'' if self.arm_cache else 'no-'}arm-cache: a post-training method's "
                              "runs are not cached (both arms post-train one pretraining each seed); drop it")
        for option, (wanted, what) in TASK_OPTIONS.items():
            if getattr(self, option) is not None and task != wanted:
                raise ConfigError(f"--{option.replace('_', '-')} sets {what}; '{self.name}' trains on the "
                                  f"{task} task, not on them; drop it")
        if self.init_from is not None:
            given = [f"--{option.replace('_', '-')}" for option in PRETRAINING_OPTIONS
                     if getattr(self, option) is not None]
            if self.path != "auto":
                given.append(f"--path {self.path}")
            if given:
                raise ConfigError(f"{', '.join(given)}: with --init-from a post-training method pretrains "
                                  "nothing (both arms start from the checkpoint); the stage's options "
                                  "are --post-steps, --post-batch-size, --post-lr")

    def _check_execution(self, device: torch.device) -> None:
        """Refuse execution options the chosen path never reads: ``replicas_max`` on a path
        that trains no replicas (``auto`` resolved for ``device``), and a batched or parallel
        path with ``tensorboard`` (per-step logs come from the sequential trainer)."""
        chosen = default_path(device) if self.path == "auto" else self.path
        if "arm_cache" in self.model_fields_set and self.tensorboard is not None:
            raise ConfigError(f"--{'' if self.arm_cache else 'no-'}arm-cache with --tensorboard: the step "
                              "logs need every run trained here, so the arm cache is not used; drop it")
        if self.tensorboard is not None and self.path not in ("auto", "sequential"):
            raise ConfigError(f"--path {self.path} with --tensorboard: per-step logs are written by the "
                              "sequential trainer, so the seeds would train sequentially; drop one of them")
        if chosen.startswith("parallel") and device.type != "cpu":
            raise ConfigError(f"--path {self.path}: the parallel paths run CPU worker processes; the "
                              f"device is {device.type} (use --path batched or sequential)")
        if self.tensorboard is not None:
            chosen = "sequential"
        if self.replicas_max is not None and chosen in NO_REPLICAS:
            how = ("--tensorboard trains sequentially, with no replicas" if self.tensorboard is not None
                   else f"--path auto on {device.type} is {chosen}, which trains no replicas"
                   if self.path == "auto" else f"--path {self.path} trains no replicas")
            raise ConfigError(f"--replicas-max caps the replicas of a batched path; {how}; add --path "
                              "batched (or parallel-batched) or drop --replicas-max")

    def _outputs(self, comparison: Comparison, preset: Preset, seeds: list[int],
                 tuned: bool, size: Scale | None,
                 init_from: LlamaCheckpoint | None = None, space: bool = False) -> ReproductionOutputs:
        paper = comparison.spec.manifest.paper
        folder = f"{paper.arxiv_id}-{comparison.spec.name}" if paper else comparison.spec.name
        out = self.out
        against = comparison.against
        if out is None:
            base = Path("docs/reproductions") / folder / "metrics" if self.publish else Path("runs") / folder
            out = base / artifact_filename(preset.name, seeds, tuned, against, size_label(size),
                                           None if init_from is None else init_label(init_from),
                                           space)
        # a variant (--against, --tune-space, a rung) reports in its own folder beside the
        # declared comparison's, never over it
        variant = report_variant(against, space, size_label(size))
        if self.publish:
            report = Path("docs/reproductions") / folder / variant
        else:
            report = out.parent / ("report-" + "-".join(variant.parts) if variant.parts else "report")
        return ReproductionOutputs(artifact=out, report=report if self.report else None,
                                   checkpoints=self.save_checkpoints)


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


def reproduce(request: ReproductionRequest | ReproductionPlan,
              progress: Progress | None = None, code: CodeState | None = None) -> ReproductionArtifact:
    """Run the reproduction ``request`` (or its ``plan()``) describes and write its outputs;
    return the artifact.

    Every check (preset, seeds, component, device, data directory, output paths, a clean
    tree for ``publish``) happens before any training. ``progress`` receives training steps.
    ``code``: the code state a caller that runs several reproductions (a ladder) read and
    checked (``check_publishable``) before its first write; its provenance is recorded."""
    plan = request.plan() if isinstance(request, ReproductionRequest) else request
    if not plan.data_dir.is_dir():
        raise ConfigError(f"data directory {plan.data_dir} does not exist")
    if plan.threads:
        torch.set_num_threads(plan.threads)
    if plan.publish and code is None:
        check_publishable(plan.repo_root, plan.allow_dirty)  # before any work
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
    check_output_dir(plan.tensorboard, "--tensorboard")
    logs = None
    if plan.tensorboard is not None:
        logs = TensorBoardLogs(plan.tensorboard)  # checks that tensorboard is installed
    if code is None:
        code = code_state(plan)
    cost = CpuClock()
    if plan.post_training is not None:  # a post-training method: its own pipeline
        outcome = run_post_training_reproduction(plan, progress=progress, logs=logs)
    else:
        outcome = reproduction.run_reproduction(plan, progress=progress, logs=logs)
    cpu_seconds, wall_seconds = cost.read()
    provenance = collect_provenance(
        command=plan.command,
        code=code,
        dataset_fingerprint=outcome.body["dataset"].fingerprint,
        accelerator=accelerator_name(plan.device),
        artifact_path=str(outputs.artifact),
        allow_dirty=plan.allow_dirty if plan.publish else None,
    )
    return _write_outputs(outcome, provenance, outputs, plan.preset, plan.seeds[0], plan.replace,
                          cost=(cpu_seconds, wall_seconds))


class CpuClock:
    """CPU seconds (user + system) of this process and its finished children, and wall seconds,
    since it was made (``resource.getrusage``; a worker pool's share counts once it has exited)."""

    def __init__(self) -> None:
        self._start = self._cpu(), time.perf_counter()

    @staticmethod
    def _cpu() -> float:
        import resource

        return sum(usage.ru_utime + usage.ru_stime for usage in
                   (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))

    def read(self) -> tuple[float, float]:
        return self._cpu() - self._start[0], time.perf_counter() - self._start[1]


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
        built = outcome.artifact(provenance, str(outputs.artifact))
        if cost is not None:
            built.setup.cpu_seconds, built.setup.reproduction_wall_seconds = cost
        check_replacement(outputs.artifact, Contents.of(built), replace=replace)
        track(outputs.artifact)
        artifact = save_artifact(built, outputs.artifact)
        assert isinstance(artifact, ReproductionArtifact)
        if outputs.checkpoints is not None:
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
