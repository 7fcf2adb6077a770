"""Reproduction plans: which two arms a reproduction trains, and the whole resolved plan.

For a component in a model slot, the optimizer slot or the data slot, the baseline arm is
``llama_modern`` with that slot set to the component's declared ablation and the method
arm is ``llama_modern`` with the component — nothing else differs (a data recipe changes
which training windows an arm draws, never the model or the optimizer). ``against=OTHER``
replaces the declared ablation with another registered component of the same slot (with
optional config, ``"rope:theta=500000"``), for the comparisons a paper makes against
llama_modern's own choice (ALiBi against RoPE, ReLU² against SwiGLU); naming llama_modern's
choice without config makes the baseline arm llama_modern itself. Such a comparison is
extra evidence, never the component's claim (``llmevo.promotion`` ignores it). Whole
architectures (``blt-bytes``, ``blt``) and post-training methods have no ``against``. A plan
whose two arms build the same model is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch

from llmevo.catalog import full_registry
from llmevo.components.post_training.stage import PostTrainSettings
from llmevo.components.post_training.tasks import read_preference_file
from llmevo.data.bytes import byte_stream
from llmevo.data.lm import LMCorpus
from llmevo.errors import ConfigError
from llmevo.eval.stats import DEFAULT_MARGIN_PERCENT
from llmevo.experiments.sections import prologue
from llmevo.hf.load import LlamaCheckpoint
from llmevo.model.config import ModelConfig
from llmevo.registry import (
    MODEL_SLOTS,
    SLOTS,
    ComponentChoice,
    ComponentSpec,
    StrictModel,
    check_seeds,
)
from llmevo.runner.arm import CONCAT, Arm, resolved_recipe
from llmevo.runner.cache import CacheUse
from llmevo.runner.presets import Preset
from llmevo.runner.size import Size, check_parametrization, resize_model
from llmevo.runner.tuner import Tuner
from llmevo.runner.views import DataView
from llmevo.train.execution import Execution


@dataclass(frozen=True)
class Comparison:
    spec: ComponentSpec
    baseline: Arm
    method: Arm
    metric: str = "lm_loss"  # what the verdict is about (bits_per_byte across tokenizations)
    objective: str = "public_composite"  # composite_bpb when the arms tokenize differently
    against: str | None = None  # the baseline's choice when it is not the declared ablation

    @property
    def arms(self) -> tuple[Arm, Arm]:
        return self.baseline, self.method


def plan_comparison(
    name: str,
    base_model: ModelConfig | None = None,
    base_optimizer: ComponentChoice | None = None,
    against: str | None = None,
) -> Comparison:
    """Baseline vs method arms for a registered component, differing in its slot only.

    The baseline fills the slot with the declared ablation, or with ``against`` (a
    registered component of the same slot, optionally ``name:key=value,...``)."""
    registry = full_registry()
    spec = registry.find(name)
    if spec.manifest.ablation is None:
        raise ConfigError(
            f"component '{name}' declares no ablation, so there is nothing to compare it with; "
            f"components with one: {', '.join(s.name for s in registry.all() if s.manifest.ablation)}"
        )
    reproducible = (spec.slot in MODEL_SLOTS or spec.slot in ("optimizer", "post_training", "data")
                    or spec.name in ARCHITECTURE_PLANS)
    if not reproducible:
        raise ConfigError(
            f"component '{name}' fills the {spec.slot} slot, which has no L2 reproduction here; "
            f"use `llmevo diagnose {name}`"
        )
    if against is not None and (spec.slot not in MODEL_SLOTS and spec.slot not in AGAINST_RUN_SLOTS):
        raise ConfigError(
            f"--against is for components of a model slot, the optimizer or the data recipe; '{name}' "
            + ("is a post-training method, compared with its ablation on one shared pretraining"
               if spec.slot == "post_training" else "is a whole architecture with its own plan"))
    model = base_model or ModelConfig()
    optimizer = base_optimizer or ComponentChoice(name="adamw")
    method_choice = ComponentChoice(name=spec.name)
    ablation_choice = ComponentChoice.parse(spec.manifest.ablation)
    registry.get(spec.slot, ablation_choice.name)  # the ablation must exist in the same slot
    ablation_label = ablation_choice.name
    if against is not None:
        current = (getattr(model, spec.slot) if spec.slot in MODEL_SLOTS
                   else optimizer if spec.slot == "optimizer" else CONCAT)
        ablation_choice = against_choice(spec, against, current)
        ablation_label = ComponentChoice.parse(against).label()  # as given: "rope", not its config
    if spec.slot in MODEL_SLOTS:
        baseline = Arm("baseline", f"llama_modern[{spec.slot}={ablation_label}]",
                       model.with_slot(spec.slot, ablation_choice), optimizer)
        method = Arm("method", spec.name, model.with_slot(spec.slot, method_choice), optimizer)
    elif spec.slot == "optimizer":
        baseline = Arm("baseline", f"llama_modern[optimizer={ablation_label}]", model, ablation_choice)
        method = Arm("method", spec.name, model, method_choice)
    elif spec.slot == "data":  # the same model and optimizer; the windows differ
        baseline = Arm("baseline", f"llama_modern[data={ablation_label}]", model, optimizer,
                       recipe=ablation_choice)
        method = Arm("method", spec.name, model, optimizer, recipe=method_choice)
    elif spec.slot == "post_training":  # same pretrained model; the stage differs
        baseline = Arm("baseline", f"llama_modern+{ablation_choice.name}", model, optimizer,
                       post_training=ablation_choice)
        method = Arm("method", f"llama_modern+{spec.name}", model, optimizer,
                     post_training=method_choice)
        comparison = Comparison(spec=spec, baseline=baseline, method=method,
                                metric=spec.cls.verdict_metric)
        check_distinct(comparison)
        return comparison
    else:
        comparison = ARCHITECTURE_PLANS[spec.name](spec, model, optimizer)
        check_distinct(comparison)
        return comparison
    comparison = Comparison(spec=spec, baseline=baseline, method=method,
                            against=ablation_label if against is not None else None)
    check_distinct(comparison)
    return comparison


def resize_comparison(comparison: Comparison, size: Size) -> Comparison:
    """Both arms' models at ``size``'s geometry, each component's sizes scaled from the
    arm's own (``runner.size.resize_model``), with room for ``size``'s window; whole
    architectures are refused there."""
    baseline, method = comparison.arms

    def sized(model: ModelConfig) -> ModelConfig:
        model = resize_model(model, size.geometry)
        if size.model.max_seq_len > model.max_seq_len:  # a longer window (``--seq-len``)
            model = model.model_copy(update={"max_seq_len": size.model.max_seq_len})
        return model

    return replace(comparison, baseline=replace(baseline, model=sized(baseline.model)),
                   method=replace(method, model=sized(method.model)))


def parametrize_comparison(comparison: Comparison, parametrization: str) -> Comparison:
    """Both arms' models under ``parametrization`` (``model/parametrization.py``), each checked
    with its optimizer (``runner.size.check_parametrization``: one line where it cannot apply);
    ``standard`` returns the comparison as it is."""
    if parametrization == "standard":
        return comparison
    arms = []
    for arm in comparison.arms:
        model = arm.model.model_copy(update={"parametrization": parametrization})
        check_parametrization(model, arm.optimizer)
        arms.append(replace(arm, model=model))
    return replace(comparison, baseline=arms[0], method=arms[1])


# the slots whose two arms build the same model, so that both can start from one checkpoint
INIT_FROM_SLOTS = ("post_training", "optimizer")
# whole-run slots whose baseline may be another registered component (``--against``)
AGAINST_RUN_SLOTS = ("optimizer", "data")


def init_comparison(comparison: Comparison, checkpoint: LlamaCheckpoint) -> Comparison:
    """Both arms start from ``checkpoint`` (``--init-from``): its genome and its weights.
    Only post-training methods and optimizers compare arms that build the same model; any
    other component changes the model, so one of its arms could not hold those weights."""
    spec = comparison.spec
    if spec.slot not in INIT_FROM_SLOTS:
        raise ConfigError(
            f"--init-from: '{spec.name}' fills the {spec.slot} slot, so its two arms build different "
            "models and one could not start from the checkpoint's weights; --init-from applies to "
            "post-training methods (sft, dpo, grpo, neftune) and optimizers (continued pretraining)")
    return replace(comparison, **{
        label: replace(arm, model=checkpoint.model_config, init=checkpoint)
        for label, arm in (("baseline", comparison.baseline), ("method", comparison.method))})


def against_choice(spec: ComponentSpec, against: str, current: ComponentChoice) -> ComponentChoice:
    """The baseline's choice for ``--against OTHER``: a registered component of ``spec``'s
    slot other than ``spec`` and its declared ablation, its config validated. OTHER without
    config that names llama_modern's ``current`` choice is that choice, config and all."""
    registry = full_registry()
    choice = ComponentChoice.parse(against)
    if not choice.name:
        raise ConfigError("--against needs a component name, e.g. --against rope")
    if choice.name not in registry.names(spec.slot):
        other_slots = [slot for slot in SLOTS if choice.name in registry.names(slot)]
        if other_slots:
            raise ConfigError(
                f"--against {choice.name}: it fills the {other_slots[0]} slot, but '{spec.name}' "
                f"fills {spec.slot}; choose one of: {', '.join(registry.names(spec.slot))}")
        raise ConfigError(f"--against {choice.name}: unknown {spec.slot} component; "
                          f"known: {', '.join(registry.names(spec.slot))}")
    if choice.name == spec.name:
        raise ConfigError(f"--against {choice.name}: that is the method itself; "
                          "name another component of its slot")
    ablation = ComponentChoice.parse(spec.manifest.ablation or "")
    if choice.name == ablation.name and choice.config == ablation.config:
        raise ConfigError(f"--against {choice.name}: that is already the declared ablation of "
                          f"'{spec.name}'; drop --against")
    if not choice.config and choice.name == current.name:
        return current  # llama_modern's own choice, exactly as the baseline model has it
    registry.get(spec.slot, choice.name).make_config(choice.config)  # unknown keys, bad values
    return choice


# the slots whose method arm takes ``--method-config`` here (post-training methods take it
# through their stage request, ``post_training_request``)
METHOD_CONFIG_SLOTS = (*MODEL_SLOTS, "optimizer", "data")


def with_method_config(comparison: Comparison, values: dict[str, Any]) -> Comparison:
    """The comparison whose method arm's component uses ``values`` as its config
    (``--method-config cap=10`` for a model slot or an optimizer, ``lm=0.5,narrative=0.5`` for
    a data recipe), validated now: an unknown key or a bad value (a negative weight, weights
    that sum to zero) is a one-line ``ConfigError`` naming the component."""
    spec, method = comparison.spec, comparison.method
    if spec.slot not in METHOD_CONFIG_SLOTS:
        raise ConfigError(f"--method-config: '{spec.name}' fills the {spec.slot} slot, which takes "
                          "no method config here")
    config = spec.make_config(values).model_dump(mode="json")
    if spec.slot == "data":
        arm = replace(method, recipe=method.recipe.model_copy(update={"config": config}))
    elif spec.slot == "optimizer":
        arm = replace(method, optimizer=method.optimizer.model_copy(update={"config": config}))
    else:
        choice = getattr(method.model, spec.slot).model_copy(update={"config": config})
        arm = replace(method, model=method.model.with_slot(spec.slot, choice))
    comparison = replace(comparison, method=arm)
    check_distinct(comparison)
    return comparison


def check_distinct(comparison: Comparison) -> None:
    """Refuse a comparison whose two arms build and train the same model."""
    baseline, method = comparison.arms
    if (baseline.model == method.model and baseline.optimizer == method.optimizer
            and baseline.post_training == method.post_training
            and resolved_recipe(baseline.recipe) == resolved_recipe(method.recipe)):
        raise ConfigError(
            f"the baseline and method arms of '{comparison.spec.name}' build the same model "
            f"({baseline.model.position.label()} / {baseline.optimizer.label()}); "
            "a comparison needs two different arms"
        )


def _prepare_blt(arm: Arm, data: DataView, corpus: LMCorpus, cache_dir: Path, seed: int) -> ModelConfig:
    """Train (or load) the entropy model and calibrate the patcher on the training bytes."""
    from llmevo.model.blt import blt_model_config, prepare_blt

    template = blt_model_config(corpus.bytes_per_token("train"), seq_len_tokens=64)
    assert template.max_seq_len == data.seq_len, "byte window and BLT context must agree"
    # The entropy model learns from the LM training text alone (pure UTF-8 bytes); the
    # arm's training stream may also hold instruction records framed by <bos>/<eos>.
    return prepare_blt(template, byte_stream(corpus.texts["train"]), data.validation, cache_dir, seed)


PREPARATIONS: dict[str, Callable[[Arm, DataView, LMCorpus, Path, int], ModelConfig]] = {
    "blt": _prepare_blt,
}


def _plan_blt_bytes(spec: ComponentSpec, model: ModelConfig, optimizer: ComponentChoice) -> Comparison:
    from llmevo.model.blt import blt_model_config

    return Comparison(
        spec=spec,
        baseline=Arm("baseline", "llama_modern (BPE-512)", model, optimizer),
        method=Arm("method", "blt-bytes", blt_model_config(2.0), optimizer, data="bytes", prepare="blt"),
        metric="bits_per_byte",
        objective="composite_bpb",
    )


def _plan_blt_standin(spec: ComponentSpec, model: ModelConfig, optimizer: ComponentChoice) -> Comparison:
    from llmevo.model.blt import blt_standin_config

    standin = blt_standin_config(vocab_size=model.vocab_size, seq_len=model.max_seq_len)
    return Comparison(
        spec=spec,
        baseline=Arm("baseline", "llama_modern", model, optimizer),
        method=Arm("method", "blt (token-level proxy)", standin, optimizer),
    )


ARCHITECTURE_PLANS: dict[str, Callable[[ComponentSpec, ModelConfig, ComponentChoice], Comparison]] = {
    "blt-bytes": _plan_blt_bytes,
    "blt": _plan_blt_standin,
}


# --- post-training methods: the stage's settings and the method arm's config ----------


@dataclass(frozen=True)
class PostTrainRequest:
    """The stage's settings, the method arm's config, and an optional preference file."""

    settings: PostTrainSettings
    method_config: dict[str, Any] = field(default_factory=dict)
    preference_file: Path | None = None


def post_training_request(
    comparison: Comparison,
    settings: PostTrainSettings,
    overrides: dict[str, Any],
    method_config: dict[str, Any] | None = None,
    preference_file: Path | None = None,
) -> PostTrainRequest:
    """A validated request: ``settings`` (the preset's) with ``overrides``, the method's
    config and a readable preference file.

    Every bad option fails here, before any work: a non-positive step count, ``beta <= 0``,
    ``group_size`` 1, an empty or malformed preference file.
    """
    request = PostTrainRequest(settings.override(overrides),
                               dict(method_config or {}), preference_file)
    resolve_arms(comparison, request)
    if preference_file is not None:
        read_preference_file(Path(preference_file), None)
    return request


def resolve_arms(comparison: Comparison, request: PostTrainRequest) -> Comparison:
    """The comparison with the method arm's config validated (e.g. beta > 0, group_size >= 2)."""
    method = comparison.method
    spec = comparison.spec
    config = spec.make_config(request.method_config)  # ConfigError names the option
    choice = method.post_training.model_copy(update={"config": config.model_dump()})
    return replace(comparison, method=replace(method, post_training=choice))


# --- the whole plan of one reproduction ----------------------------------------------------


TUNING_REFUSAL = ("--tune is not available for post-training method '{name}': tuning picks each "
                  "arm's pretraining learning rate, and both arms share one pretrained model here; "
                  "drop --tune (set the stage's rate with --post-lr)")


class ReproductionOutputs(StrictModel):
    """Where a request writes: the artifact file, the report folder and the checkpoints."""

    artifact: Path
    report: Path | None
    checkpoints: Path | None


@dataclass(frozen=True)
class ReproductionPlan:
    """One reproduction resolved once from its request (``ReproductionRequest.plan()``):
    the comparison (planned once; a post-training method's config already validated), the
    preset with its overrides, the report seeds, the tuning plan, where the data, the cache
    and the outputs are. The runners receive these values and plan nothing again."""

    comparison: Comparison
    preset: Preset
    seeds: list[int]
    data_dir: Path
    cache_dir: Path
    device: torch.device
    execution: Execution = Execution()
    # tune each arm first: its learning rate on one grid (runner.tuning), or its declared
    # space with an equal number of trials per arm (runner.tuning_space)
    tuning: Tuner | None = None  # runner.tuner: the lr grid or the declared space
    margin_percent: float = DEFAULT_MARGIN_PERCENT  # non-inferiority margin of the verdict class
    post_training: PostTrainRequest | None = None  # the stage of a post-training method
    arm_cache: CacheUse = "off"  # use / refresh / off the arm cache under cache_dir
    outputs: ReproductionOutputs | None = None  # None: the caller writes nothing
    tracker: str = "none"  # where report runs are logged (train.tracking; not none: the arm cache is off)
    tracker_dir: Path | None = None  # the tracker's folder (None: its default)
    threads: int | None = None  # torch's CPU threads for this process
    publish: bool = False  # refuse a dirty checkout of repo_root (unless allow_dirty)
    allow_dirty: bool = False
    repo_root: Path | None = None  # the llmevo checkout provenance reads
    command: str = ""  # what provenance records as the command that ran
    replace: bool = False  # replace an artifact at the output path that holds more
    size: Size | None = None  # the size dial (a rung or explicit sizes); None: the preset's model
    init_from: LlamaCheckpoint | None = None  # both arms start from it, on its own tokenizer
    allow_noop: bool = False  # run arms that compute the same function, classed no-op
    match: Literal["tokens", "flops"] = "tokens"  # equal tokens, or equal training FLOPs (runner.flops)
    experiment: dict[str, Any] | None = None  # the resolved experiment file (provenance records it)

    def __post_init__(self) -> None:
        check_seeds(self.seeds)
        if self.comparison.spec.slot == "post_training":
            if self.tuning is not None:
                raise ConfigError(TUNING_REFUSAL.format(name=self.name))
            if self.post_training is None:
                raise ConfigError(f"post-training method '{self.name}' needs its stage settings "
                                  "(plans.post_training_request)")

    @property
    def name(self) -> str:
        return self.comparison.spec.name

    def prologue(self, check_publish: bool = True) -> None:
        """The run prologue (``sections.prologue``) before this plan's first run."""
        prologue(self.data_dir, self.threads, self.publish and check_publish, self.allow_dirty,
                 self.repo_root, cache_dir=self.cache_dir)

    def with_grid(self, grid: list[float]) -> ReproductionPlan:
        """This plan tuned on ``grid`` instead (a ladder's rung: its grid is chosen by the lr
        rule once the rungs below are done), checked as any lr grid is."""
        if self.tuning is None:
            raise ConfigError("a grid binds to a plan tuned on a learning-rate grid; this one is untuned")
        return replace(self, tuning=self.tuning.with_grid(grid, self.seeds))
