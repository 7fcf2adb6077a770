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
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llmevo.catalog import build_model, build_optimizer
from llmevo.components.post_training.evaluate import evaluate_post_training
from llmevo.components.post_training.presets import post_training_settings
from llmevo.components.post_training.stage import (
    PostTrainSettings,
    PretrainedModel,
    StageResult,
    run_post_training,
)
from llmevo.components.post_training.tasks import load_post_train_data, read_preference_file
from llmevo.data.lm import load_lm_corpus
from llmevo.errors import ConfigError, DivergedError
from llmevo.eval.stats import classified_verdict
from llmevo.train.logging import RunLogs
from llmevo.train.many import RunSpec, train_many
from llmevo.train.trainer import Progress

TUNING_REFUSAL = ("--tune is not available for post-training method '{name}': tuning picks each "
                  "arm's pretraining learning rate, and both arms share one pretrained model here; "
                  "drop --tune (set the stage's rate with --post-lr)")


@dataclass(frozen=True)
class PostTrainRequest:
    """The stage's settings, the method arm's config, and an optional preference file."""

    settings: PostTrainSettings
    method_config: dict[str, Any] = field(default_factory=dict)
    preference_file: Path | None = None


def post_training_request(
    comparison: Any,
    preset_name: str,
    overrides: dict[str, Any],
    method_config: dict[str, Any] | None = None,
    preference_file: Path | None = None,
) -> PostTrainRequest:
    """A validated request: settings, the method's config and a readable preference file.

    Every bad option fails here, before any work: a non-positive step count, ``beta <= 0``,
    ``group_size`` 1, an empty or malformed preference file.
    """
    request = PostTrainRequest(post_training_settings(preset_name, overrides),
                               dict(method_config or {}), preference_file)
    resolve_arms(comparison, request)
    if preference_file is not None:
        read_preference_file(Path(preference_file), None)
    return request


def resolve_arms(comparison: Any, request: PostTrainRequest) -> Any:
    """The comparison with the method arm's config validated (e.g. beta > 0, group_size >= 2)."""
    method = comparison.method
    spec = comparison.spec
    config = spec.make_config(request.method_config)  # ConfigError names the option
    choice = method.post_training.model_copy(update={"config": config.model_dump()})
    return replace(comparison, method=replace(method, post_training=choice))


def _stage_curve(results: dict[int, StageResult], attribute: str) -> dict[str, Any] | None:
    series = {seed: getattr(result, attribute) for seed, result in results.items()}
    if not all(series.values()):
        return None
    length = min(len(values) for values in series.values())
    return {"steps": list(range(1, length + 1)),
            "per_seed": {str(seed): values[:length] for seed, values in series.items()}}


def run_post_training_reproduction(
    request: Any,  # llmevo.experiments.runner.RunRequest
    comparison: Any,  # llmevo.experiments.plans.Comparison with post_training arms
    progress: Progress | None = None,
    on_arm_done: Callable[[str, int, Any], None] | None = None,
    logs: RunLogs | None = None,
) -> Any:
    """Pretrain once per seed, post-train each arm from that checkpoint, evaluate, assemble.

    All seeds' pretraining runs go through ``train_many`` (``request.execution``); the
    stages run one after another. Returns a ``ReproductionOutcome`` whose body validates
    through the artifact schema once provenance is added. ``logs`` gets the pretraining
    steps (``pretrain-seed<seed>``) and each arm's final metrics (``<arm>-seed<seed>``).
    Learning-rate tuning (``request.tuning``) is refused: it tunes the pretraining rate,
    which both arms share here."""
    from llmevo.experiments.runner import (  # the shared reproduction machinery
        DATA_VIEWS,
        ArmRun,
        ReproductionOutcome,
        assemble_artifact,
        evaluate_arm,
        implementation_objects,
        validate_seeds,
    )

    seeds = validate_seeds(request.seeds)
    if request.tuning is not None:
        raise ConfigError(TUNING_REFUSAL.format(name=comparison.spec.name))
    post: PostTrainRequest = request.post_training or PostTrainRequest(
        post_training_settings(request.preset.name, {}))
    settings = post.settings
    comparison = resolve_arms(comparison, post)
    task = comparison.spec.cls.task or "instruction"
    preset = request.preset
    corpus = load_lm_corpus(request.data_dir, preset.variant, preset.budgets, request.cache_dir)
    preset = preset.resolved(int(corpus.tokens["train"].numel()))
    data = DATA_VIEWS["bpe"](corpus, preset, request.data_dir, preset.train.seq_len)
    post_data = load_post_train_data(
        request.data_dir, data.codec, preset.train.seq_len, settings.arithmetic,
        post.preference_file, settings.held_out_pairs)
    base_model = comparison.method.model
    train_config = preset.train.model_copy(update={"optimizer": comparison.method.optimizer})
    pretrained = train_many(  # every seed's pretraining at once; both arms start from it
        lambda: build_model(base_model), data.stream,
        [RunSpec(seed, train_config, label=f"pretrain-seed{seed}") for seed in seeds],
        request.device, progress, description="pretrain llama_modern", logs=logs,
        build_optimizer=build_optimizer, path=request.execution.path,
        replicas_max=request.execution.replicas_max)
    runs: dict[str, dict[int, ArmRun]] = {"baseline": {}, "method": {}}
    stages: dict[str, dict[int, StageResult]] = {"baseline": {}, "method": {}}
    for outcome in pretrained:
        seed, pretrain = outcome.spec.seed, outcome.result
        if pretrain.status == "diverged":
            raise DivergedError(f"pretraining seed {seed}: {pretrain.message}", pretrain.steps_done)
        checkpoint = copy.deepcopy(outcome.model).cpu()
        for arm in comparison.arms:
            arm_model = copy.deepcopy(checkpoint)
            stage = run_post_training(
                PretrainedModel(arm_model, pretrain.steps_done), arm.post_training, post_data,
                task, settings, seed + settings.seed_offset, request.device)
            validation = evaluate_arm(arm_model, data, preset, "validation", request.device)
            validation.update(evaluate_post_training(
                arm_model, post_data, "validation", request.device, settings.max_new_tokens))
            validation["initial_loss"] = pretrain.initial_loss
            validation["final_loss"] = pretrain.final_loss
            validation["post_training_loss"] = stage.post_training_loss
            validation["reward_bearing_group_rate"] = stage.reward_bearing_group_rate
            validation.update(stage.extra)
            test = evaluate_arm(arm_model, data, preset, "test", request.device)
            test.update(evaluate_post_training(
                arm_model, post_data, "test", request.device, settings.max_new_tokens))
            if logs is not None:
                logger = logs.run(f"{arm.label}-seed{seed}")
                try:
                    # the stage's per-step record, after the pretraining steps on the same axis
                    for step, (loss, norm) in enumerate(
                            zip(stage.losses, stage.grad_norms, strict=True)):
                        logger.log_metrics("post_train", {"loss": loss, "lr": settings.lr,
                                                          "grad_norm": norm},
                                           pretrain.steps_done + step + 1)
                    for step, (reward, rate) in enumerate(
                            zip(stage.rewards, stage.reward_bearing_rates, strict=True)):
                        logger.log_metrics("post_train", {"reward": reward, "reward_bearing_rate": rate},
                                           pretrain.steps_done + step + 1)
                    logger.log_metrics("validation", validation, pretrain.steps_done)
                    logger.log_metrics("test", test, pretrain.steps_done)
                finally:
                    logger.close()
            run = ArmRun(
                validation=validation, test=test, train=pretrain,
                parameters=sum(p.numel() for p in arm_model.parameters()),
                architecture_stats={"post_training_examples": stage.examples,
                                    "post_training_seconds": round(stage.wall_seconds, 3)},
                model=arm_model.cpu(),
                train_config={"pretrain": train_config.model_dump(mode="json"),
                              "post_training": settings.model_dump(mode="json"),
                              "method": arm.post_training.model_dump(mode="json")},
                path=outcome.path,
            )
            runs[arm.label][seed] = run
            stages[arm.label][seed] = stage
            if on_arm_done:
                on_arm_done(arm.label, seed, run)
        examples = {stages[label][seed].examples for label in stages}
        if len(examples) != 1 and comparison.baseline.post_training.name != "none":
            raise ConfigError(f"seed {seed}: the arms post-trained on different numbers of "
                              f"examples {sorted(examples)}")
    body = assemble_artifact(comparison, preset, seeds, corpus, {"bpe": data}, runs,
                             request.device)
    change = body["statistics"].get(comparison.metric, {}).get("paired_relative_change_percent")
    if change is not None:
        body["verdict"] = classified_verdict(body["verdict"], change, request.margin_percent)
    _add_post_training(body, comparison, stages, settings, task, post_data, seeds)
    return ReproductionOutcome(comparison, body, runs, implementation_objects(comparison),
                               corpus.tokenizer.tokenizer.to_str())


def _add_post_training(
    artifact: dict[str, Any], comparison: Any, stages: dict[str, dict[int, StageResult]],
    settings: PostTrainSettings, task: str, data: Any, seeds: list[int],
) -> None:
    """Fill the arms' post-training fields and record the stage's settings and curves."""
    for label, arm in (("baseline", comparison.baseline), ("method", comparison.method)):
        block = artifact[label]
        results = [stages[label][seed] for seed in seeds]
        block["post_training_loss"] = sum(r.post_training_loss for r in results) / len(results)
        block["reward_bearing_group_rate"] = (
            sum(r.reward_bearing_group_rate for r in results) / len(results))
        rows = [row[label] for row in artifact["per_seed"]]
        for key in ("heldout_preference_accuracy", "heldout_preference_margin",
                    "arithmetic_exact_match", "arithmetic_error_rate", "dpo_reward_margin", "dpo_reward_accuracy",
                    "grpo_mean_kl", "grpo_mean_reward"):
            if all(key in row for row in rows):
                block[key] = sum(row[key] for row in rows) / len(rows)
        block["genome"]["post_training"] = arm.post_training.model_dump(mode="json")
        block["post_training_examples"] = results[0].examples
    artifact["setup"]["post_training"] = {
        **settings.model_dump(mode="json"),
        "task": task,
        "examples_per_arm": settings.examples,
        "seed": f"run seed + {settings.seed_offset}",
        "same_pretrained_checkpoint_per_seed": True,
        "preference_source": data.preference_source,
        "preference_train_pairs": len(data.preference_train),
        "preference_heldout_pairs": {k: len(v) for k, v in data.preference_held_out.items()},
        "arithmetic_problems": {k: len(v) for k, v in data.arithmetic.items()},
    }
    artifact["setup"]["baseline_genome"] = artifact["baseline"]["genome"]
    artifact["setup"]["method_genome"] = artifact["method"]["genome"]
    artifact["pretraining_curve"] = artifact.pop("training_curves")["method"]
    curves: dict[str, Any] = {}
    for label in ("baseline", "method"):
        curves[label] = {name: curve for name in ("losses", "rewards", "reward_bearing_rates")
                         if (curve := _stage_curve(stages[label], name)) is not None}
    artifact["post_training_curves"] = curves
    loss_curves = {label: curves[label]["losses"] for label in curves if "losses" in curves[label]}
    if len(loss_curves) == 2:
        artifact["training_curves"] = loss_curves
