"""What the runner (``runner.run``) produces and the arm cache (``runner.cache``) stores and
gives back: one arm trained and evaluated under one seed (``ArmRun``), and the scores of one
call of tuning runs (``Scores``, what a tuner's ``Scorer`` answers).

Public API: ``ArmRun``, ``Scores``, ``Scorer``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from llmevo.components.post_training.stage import StageResult
from llmevo.train.execution import RunSpec
from llmevo.train.trainer import TrainResult


@dataclass
class ArmRun:
    """One arm trained and evaluated under one seed. A run whose training did not complete
    (``status`` diverged, or stopped by a hurdle) has no metrics."""

    seed: int
    validation: dict[str, float]  # with the run's initial_loss and final_loss
    test: dict[str, float]  # empty when the test split was not asked for
    train: TrainResult
    parameters: int
    architecture_stats: dict[str, Any]
    model: nn.Module
    train_config: dict[str, Any]  # the resolved training settings of this run
    path: str = "sequential"  # how it was trained (llmevo.train.execution paths)
    cached: bool = False  # loaded from the arm cache (runner.cache), not trained now
    stage: StageResult | None = None  # the post-training stage, when the arm has one

    @property
    def status(self) -> str:
        """complete, diverged or stopped (``TrainResult.status``)."""
        return self.train.status

    @property
    def lr(self) -> float:
        return float(self.train_config["lr"])


@dataclass
class Scores:
    """One call of tuning runs scored, by each run's position in the call: its validation
    metric (None: diverged; a run stopped early, ``RunSpec.stop_after``, has that step's),
    the positions loaded from the arm cache, and how each run trained (``ArmRun.path``; a
    cached run's is the original's where its entry recorded it)."""

    values: dict[int, float | None]
    hits: set[int]
    paths: dict[int, str]


# what a tuner receives to score its runs: ``runner.run.score_arm`` bound to one arm
Scorer = Callable[[Sequence[RunSpec]], Scores]
