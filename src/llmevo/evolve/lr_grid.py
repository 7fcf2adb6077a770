"""Trials scored at their best learning rate, and the final comparison tuned on one grid.

- A trial trains its genome at a small learning-rate grid around the genome's own lr
  (default x0.5, x1, x2), all runs at once through ``train_many``, and is scored by its best
  setting (``objective``); trial 0 (``llama_modern``) is treated the same way, so the
  baseline's learning rate is searched as much as any candidate's.
- The final champion-versus-baseline comparison tunes both arms on one shared grid
  (``llmevo.runner.tuning``, tuning seeds disjoint from the report seeds) and then
  trains each at its chosen lr under the report seeds (default 5 fresh seeds).

Public API: ``DEFAULT_TRIAL_LR_FACTORS``, ``trial_lr_grid``, ``with_lr``,
``tuned_final_evaluation``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from llmevo.catalog import build_model, build_recipe
from llmevo.errors import ConfigError
from llmevo.evolve.champion import FinalEvaluation, final_evaluation
from llmevo.runner.arm import Arm
from llmevo.runner.genome import Genome
from llmevo.runner.presets import Preset
from llmevo.runner.run import PostData, evaluate_trained
from llmevo.runner.tuning import TuningPlan, tune_arm, tuning_block
from llmevo.runner.views import DataView, arm_stream
from llmevo.train.execution import Execution
from llmevo.train.logging import RunLogs
from llmevo.train.trainer import Progress

DEFAULT_TRIAL_LR_FACTORS = (0.5, 1.0, 2.0)


def trial_lr_grid(lr: float, factors: Sequence[float]) -> list[float]:
    """The learning rates a trial tries: ``lr`` times each factor, ascending, distinct."""
    if len(set(factors)) < 2 or any(not (f > 0 and math.isfinite(f)) for f in factors):
        raise ConfigError(f"trial lr factors must be at least 2 distinct positive numbers, got {list(factors)}")
    return sorted({lr * f for f in factors})


def with_lr(genome: Genome, lr: float) -> Genome:
    return genome.model_copy(update={"train": genome.train.model_copy(update={"lr": lr})})


def tuned_final_evaluation(
    champion: Genome,
    baseline: Genome,
    data: DataView,
    preset: Preset,
    seeds: list[int],
    plan: TuningPlan,
    device: torch.device,
    progress: Progress | None = None,
    logs: RunLogs | None = None,
    execution: Execution = Execution(),
    post_data: PostData = None,  # the stage's data, or its loader (post-training genes)
) -> tuple[FinalEvaluation, dict[str, Any], dict[str, Genome]]:
    """Tune champion and baseline on ``plan`` (validation fitness), then train both at their
    chosen lr under ``seeds`` and evaluate each once on test.

    A genome with a post-training gene is scored after its stage, during tuning too; the
    tuning runs' stages use the first tuning seed's stage seed (the score callback does
    not see the run's seed)."""
    tunings = {}
    tuned: dict[str, Genome] = {}
    for label, genome in (("baseline", baseline), ("champion", champion)):
        train = genome.apply_to(preset).train

        def negative_fitness(model: torch.nn.Module, arm: Arm = genome.arm(label),
                             steps: int = train.steps) -> float:
            _, metrics = evaluate_trained(model, arm, data, preset, plan.seeds[0], steps, device,
                                          ("validation",), post_data=post_data)
            return -metrics["validation"]["fitness"]

        stream = arm_stream(build_recipe(genome.data), data)  # the genome's data recipe
        tunings[label] = tune_arm(label, lambda genome=genome: build_model(genome.model), stream,
                                  train, plan, negative_fitness, device, progress, execution)
        tuned[label] = with_lr(genome, tunings[label].best().lr)
    final = final_evaluation(tuned["champion"], tuned["baseline"], data, preset, seeds, device,
                             progress, execution=execution, logs=logs, post_data=post_data)
    block = tuning_block(plan, "negative validation fitness", tunings)
    return final, block, tuned
