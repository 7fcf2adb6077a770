"""Post-training reproductions: a method against its ablation on the same pretrained model.

Per seed, ``llama_modern`` is pretrained once with the preset's settings (the same seeded
windows as every other reproduction); each arm post-trains its own copy of that
checkpoint with its method, the same stage seed and the same number of examples
(``steps x batch_size``), then both are evaluated on validation (deciding) and test
(reported). The pretraining token-stream hash is therefore equal for both arms by
construction, and each arm's post-training example count is checked to be equal.

The artifact is the usual reproduction artifact; per arm it carries
``post_training_loss``, ``reward_bearing_group_rate`` and the held-out metrics
(``heldout_preference_accuracy``, ``arithmetic_exact_match``), and
``post_training_curves`` holds the stage's per-step loss (and GRPO's reward and
reward-bearing rate).

With ``plan.init_from`` (``--init-from DIR``) nothing is pretrained: every seed's two arms
post-train copies of the checkpoint, on data tokenized with its own tokenizer; the setup's
``init_from`` block names the directory, its weights' sha256 and the starting model's
validation metrics.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from pydantic import BaseModel

from llmevo.artifacts.schema import ArmResult
from llmevo.components.post_training.stage import (
    PostTrainSettings,
    StageResult,
)
from llmevo.components.post_training.tasks import (
    PostTrainData,
    load_post_train_data,
)
from llmevo.errors import ConfigError
from llmevo.experiments.plans import Comparison, ReproductionPlan
from llmevo.experiments.reproduction import (
    ReproductionOutcome,
    assemble_artifact,
    implementation_objects,
    record_init_from,
)
from llmevo.runner.arm import Arm
from llmevo.runner.arm_run import ArmRun
from llmevo.runner.compare import compare_arms
from llmevo.runner.equivalence import Equivalence
from llmevo.runner.presets import Preset
from llmevo.runner.resources import check_memory, concurrent_runs
from llmevo.runner.run import (
    arm_train_config,
    build_arm_model,
    check_fits_data,
    evaluate_arm,
    post_train_and_evaluate,
    run_arm,
    seed_runs,
    stage_metrics,
)
from llmevo.runner.tuner import ArmChoice, Tuner, TuningStart
from llmevo.runner.views import DataView, load_views
from llmevo.train.execution import Execution
from llmevo.train.logging import RunLogs
from llmevo.train.trainer import Progress, TrainResult

Block = TypeVar("Block", bound=BaseModel)  # an artifact schema block


def _stage_curve(results: dict[int, StageResult], attribute: str) -> dict[str, Any] | None:
    series = {seed: getattr(result, attribute) for seed, result in results.items()}
    if not all(series.values()):
        return None
    length = min(len(values) for values in series.values())
    return {"steps": list(range(1, length + 1)),
            "per_seed": {str(seed): values[:length] for seed, values in series.items()}}


@dataclass
class PostTrainingRunner:
    """The arm runner (``runner.arm_runner.ArmRunner``) of a post-training reproduction: per
    seed one pretraining of ``pretrain`` (all seeds at once through ``train_many``; with
    ``pretrain.init`` the checkpoint itself, evaluated once), shared by both arms; each arm
    post-trains its own copy with its method (``runner.run.post_train_and_evaluate``), the same
    stage seed and the same number of examples. No tuner: it would tune the pretraining rate,
    which both arms share (``ReproductionPlan`` refuses one)."""

    pretrain: Arm
    data: DataView
    preset: Preset
    post_data: PostTrainData
    settings: PostTrainSettings
    task: str
    device: torch.device
    execution: Execution
    progress: Progress | None = None
    logs: RunLogs | None = None
    stages: dict[str, dict[int, StageResult]] = field(default_factory=lambda: {"baseline": {}, "method": {}})
    starting: dict[str, float] | None = None  # the checkpoint's validation metrics (``init``)
    _pretrained: list[ArmRun] | None = None

    def check(self, name: str, baseline: Arm, method: Arm, seeds: Sequence[int], tuner: Tuner | None,
              allow_noop: bool) -> Equivalence:
        """The pretraining fits the data and the memory, before any training. The no-op check
        does not apply: the arms share one pretraining and differ in their stage."""
        if tuner is not None:
            raise ConfigError(f"'{name}': a post-training comparison takes no tuner (it would tune the "
                              "pretraining rate, which both arms share)")
        check_fits_data(self.pretrain, self.data)  # before any training: the vocabulary, the window, memory
        check_memory("pretraining", self.pretrain.model, arm_train_config(self.pretrain, self.data, self.preset),
                     self.device, concurrent_runs(self.execution, self.device, len(seeds)))
        return Equivalence("not applicable", False, "two post-training stages on one shared pretraining")

    def tuning_start(self, arm: Arm) -> TuningStart:
        raise ConfigError("a post-training comparison takes no tuner")

    def at_choice(self, arm: Arm, start: TuningStart, choice: ArmChoice) -> Arm:
        raise ConfigError("a post-training comparison takes no tuner")

    def pretrained(self, seeds: Sequence[int]) -> list[ArmRun]:
        """Every seed's pretraining (once, for both arms), or the checkpoint's starting point."""
        if self._pretrained is None:
            if self.pretrain.init is None:
                self._pretrained = run_arm(  # every seed's pretraining at once; both arms start from it
                    self.pretrain, self.data, self.preset, seed_runs(self.pretrain, self.data, self.preset, seeds),
                    self.device, splits=(), execution=self.execution, progress=self.progress,
                    description="pretrain llama_modern", logs=self.logs)
            else:  # no pretraining: every seed starts from the checkpoint
                self._pretrained, self.starting = _checkpoint_runs(self.pretrain, self.data, self.preset,
                                                                   list(seeds), self.device)
        return self._pretrained

    def report(self, arm: Arm, seeds: Sequence[int]) -> Iterator[tuple[int, ArmRun]]:
        """The arm's stage on a copy of each seed's pretrained model, evaluated."""
        for pretrained_run in self.pretrained(seeds):
            seed, pretrain = pretrained_run.seed, pretrained_run.train
            arm_model = copy.deepcopy(pretrained_run.model).cpu()
            stage, metrics = post_train_and_evaluate(
                arm_model, arm.post_training, self.data, self.preset, self.post_data, seed, pretrain.steps_done,
                self.device, settings=self.settings, task=self.task, from_checkpoint=self.pretrain.init is not None)
            validation = metrics["validation"] | {"initial_loss": pretrain.initial_loss,
                                                  "final_loss": pretrain.final_loss} | stage_metrics(stage)
            if self.logs is not None:
                self._log(f"{arm.label}-seed{seed}", stage, validation, metrics["test"], pretrain.steps_done)
            self.stages[arm.label][seed] = stage
            yield seed, ArmRun(
                seed=seed, validation=validation, test=metrics["test"], train=pretrain,
                parameters=sum(p.numel() for p in arm_model.parameters()),
                architecture_stats={"post_training_examples": stage.examples,
                                    "post_training_seconds": round(stage.wall_seconds, 3)},
                model=arm_model.cpu(),
                train_config={"pretrain": pretrained_run.train_config,
                              "post_training": self.settings.model_dump(mode="json"),
                              "method": arm.post_training.model_dump(mode="json")},
                path=pretrained_run.path,
            )

    def _log(self, name: str, stage: StageResult, validation: dict[str, float], test: dict[str, float],
             steps_done: int) -> None:
        """The stage's per-step record, after the pretraining steps on the same axis, and the
        final metrics."""
        assert self.logs is not None
        logger = self.logs.run(name)
        try:
            for step, (loss, norm) in enumerate(zip(stage.losses, stage.grad_norms, strict=True)):
                logger.log_metrics("post_train", {"loss": loss, "lr": self.settings.lr, "grad_norm": norm},
                                   steps_done + step + 1)
            for step, (reward, rate) in enumerate(zip(stage.rewards, stage.reward_bearing_rates, strict=True)):
                logger.log_metrics("post_train", {"reward": reward, "reward_bearing_rate": rate}, steps_done + step + 1)
            logger.log_metrics("validation", validation, steps_done)
            logger.log_metrics("test", test, steps_done)
        finally:
            logger.close()

    def check_budget(self, baseline: Arm, method: Arm, runs: dict[str, dict[int, ArmRun]],
                     seeds: Sequence[int]) -> None:
        """The pretraining is one per seed, equal by construction; each seed's arms post-trained
        on equally many examples (a baseline of no stage excepted)."""
        for seed in seeds:
            examples = {self.stages[label][seed].examples for label in self.stages}
            if len(examples) != 1 and baseline.post_training.name != "none":
                raise ConfigError(f"seed {seed}: the arms post-trained on different numbers of "
                                  f"examples {sorted(examples)}")


def run_post_training_reproduction(
    plan: ReproductionPlan,
    progress: Progress | None = None,
    on_arm_done: Callable[[str, int, ArmRun], None] | None = None,
    logs: RunLogs | None = None,
) -> ReproductionOutcome:
    """Pretrain once per seed, post-train each arm from that checkpoint, evaluate, assemble:
    ``runner.compare.compare_arms`` over a ``PostTrainingRunner``.

    All seeds' pretraining runs go through ``train_many`` (``plan.execution``); the
    stages run one after another. Returns a ``ReproductionOutcome`` whose body validates
    through the artifact schema once provenance is added. ``logs`` gets the pretraining
    steps (``pretrain-seed<seed>``) and each arm's final metrics (``<arm>-seed<seed>``)."""
    seeds, comparison = plan.seeds, plan.comparison
    post = plan.post_training
    if post is None:
        raise ConfigError(f"'{plan.name}' is not a post-training method: use "
                          "llmevo.experiments.reproduction.run_reproduction")
    settings = post.settings
    task = comparison.spec.cls.task or "instruction"
    init = plan.init_from
    corpus, preset, views = load_views(plan.preset, ["bpe"], plan.data_dir, plan.cache_dir,
                                       None if init is None else init.tokenizer)
    data = views["bpe"]
    post_data = load_post_train_data(
        plan.data_dir, data.codec, preset.train.seq_len, settings.arithmetic,
        post.preference_file, settings.held_out_pairs)
    pretrain = Arm("pretrain", "llama_modern", comparison.method.model, comparison.method.optimizer,
                   init=init)
    runner = PostTrainingRunner(pretrain, data, preset, post_data, settings, task, plan.device, plan.execution,
                                progress, logs)
    paired = compare_arms(plan.name, runner, *comparison.arms, seeds, metric=comparison.metric,
                          on_arm_done=on_arm_done)
    runs = paired.runs
    body = assemble_artifact(comparison, preset, seeds, corpus, views, runs,
                             plan.device, plan.margin_percent, size=plan.size)
    _add_post_training(body, comparison, runner.stages, settings, task, post_data, seeds)
    if init is not None:
        body.pop("pretraining_curve", None)  # nothing was pretrained
        record_init_from(body, init, {
            "pretraining": "none: every seed's arms post-train the checkpoint itself",
            "starting_validation": {k: v for k, v in (runner.starting or {}).items() if v is not None},
            "initial_and_final_loss": "the checkpoint's validation lm_loss (no pretraining ran)",
        })
    return ReproductionOutcome(comparison, body, runs, implementation_objects(comparison),
                               corpus.tokenizer.tokenizer.to_str())


def _checkpoint_runs(
    start: Arm, data: DataView, preset: Preset, seeds: list[int], device: torch.device,
) -> tuple[list[ArmRun], dict[str, float]]:
    """The starting point of each seed when the arms start from a checkpoint (``start.init``):
    the loaded model, evaluated once on validation, and a pretraining record of no steps and
    no tokens whose initial and final loss are that validation loss."""
    model = build_arm_model(start).cpu()
    starting = evaluate_arm(model, data, preset, "validation", device)
    model = model.cpu()
    nothing = TrainResult(status="complete", losses=[], initial_loss=starting["lm_loss"],
                          final_loss=starting["lm_loss"], steps_done=0, tokens_seen=0,
                          token_stream_sha256=hashlib.sha256(b"").hexdigest(), wall_seconds=0.0,
                          tokens_per_second=0.0)
    runs = [ArmRun(seed=seed, validation={}, test={}, train=nothing,
                   parameters=sum(p.numel() for p in model.parameters()), architecture_stats={},
                   model=model, train_config={"init_from": str(start.init.directory) if start.init else None},
                   path="init-from")
            for seed in seeds]
    return runs, starting


def _extended(block: Block, values: dict[str, Any]) -> Block:
    """``block`` with ``values`` set: a field it has keeps its place, a new one comes last."""
    return type(block).model_validate({**block.model_dump(exclude_unset=True), **values})


def _add_post_training(
    artifact: dict[str, Any], comparison: Comparison, stages: dict[str, dict[int, StageResult]],
    settings: PostTrainSettings, task: str, data: PostTrainData, seeds: list[int],
) -> None:
    """Fill the arms' post-training fields and record the stage's settings and curves."""
    for label, arm in (("baseline", comparison.baseline), ("method", comparison.method)):
        block: ArmResult = artifact[label]
        results = [stages[label][seed] for seed in seeds]
        values: dict[str, Any] = {
            "post_training_loss": sum(r.post_training_loss for r in results) / len(results),
            "reward_bearing_group_rate": sum(r.reward_bearing_group_rate for r in results) / len(results),
        }
        rows = [row.method if label == "method" else row.baseline for row in artifact["per_seed"]]
        for key in ("heldout_preference_accuracy", "heldout_preference_margin",
                    "arithmetic_exact_match", "arithmetic_error_rate", "dpo_reward_margin", "dpo_reward_accuracy",
                    "grpo_mean_kl", "grpo_mean_reward"):
            if all(key in row for row in rows):
                values[key] = sum(row[key] for row in rows) / len(rows)
        values["genome"] = {**(block.genome or {}),
                            "post_training": arm.post_training.model_dump(mode="json")}
        values["post_training_examples"] = results[0].examples
        artifact[label] = _extended(block, values)
    artifact["setup"] = _extended(artifact["setup"], {
        "post_training": {
            **settings.model_dump(mode="json"),
            "task": task,
            "examples_per_arm": settings.examples,
            "seed": f"run seed + {settings.seed_offset}",
            "same_pretrained_checkpoint_per_seed": True,
            "preference_source": data.preference_source,
            "preference_train_pairs": len(data.preference_train),
            "preference_heldout_pairs": {k: len(v) for k, v in data.preference_held_out.items()},
            "arithmetic_problems": {k: len(v) for k, v in data.arithmetic.items()},
        },
        "baseline_genome": artifact["baseline"].genome,
        "method_genome": artifact["method"].genome,
    })
    artifact["pretraining_curve"] = artifact.pop("training_curves").method
    curves: dict[str, Any] = {}
    for label in ("baseline", "method"):
        curves[label] = {name: curve for name in ("losses", "rewards", "reward_bearing_rates")
                         if (curve := _stage_curve(stages[label], name)) is not None}
    artifact["post_training_curves"] = curves
    loss_curves = {label: curves[label]["losses"] for label in curves if "losses" in curves[label]}
    if len(loss_curves) == 2:
        artifact["training_curves"] = loss_curves
