"""A genome: one serialisable description of a run — a component per model slot, the
optimizer, the training hyperparameters, an optional post-training stage and the data
recipe (``data``: which training windows the run draws). Its hash (sha256 of the canonical JSON)
identifies it, so the same run is never trained twice in one study."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import NonNegativeFloat, NonNegativeInt, PositiveFloat

from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice, StrictModel
from llmevo.runner.arm import CONCAT, Arm
from llmevo.runner.presets import Preset
from llmevo.train.execution import RunSpec


class TrainGenes(StrictModel):
    lr: PositiveFloat
    warmup_steps: NonNegativeInt
    weight_decay: NonNegativeFloat


NO_POST_TRAINING = ComponentChoice(name="none")
FIXED_DATA = CONCAT  # the preset's sources concatenated: the data gene's baseline


class Genome(StrictModel):
    model: ModelConfig
    optimizer: ComponentChoice
    train: TrainGenes
    post_training: ComponentChoice = NO_POST_TRAINING  # a stage after pretraining (experiments.post_training)
    data: ComponentChoice = FIXED_DATA  # the data recipe (the ``data`` slot, components/data)

    def canonical_json(self) -> str:
        """Without a post-training stage or a data recipe the JSON (and hash) is what it was
        before those genes."""
        data = self.model_dump(mode="json")
        if self.post_training == NO_POST_TRAINING:
            del data["post_training"]
        if self.data == FIXED_DATA:
            del data["data"]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def hash(self) -> str:
        """Stable 16-hex-digit identity of the genome."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    def label(self) -> str:
        slots = [getattr(self.model, s).label() for s in ("position", "attention", "feedforward",
                                                          "norm", "block")]
        if self.post_training != NO_POST_TRAINING:
            slots.append("post:" + self.post_training.label())
        if self.data != FIXED_DATA:
            slots.append("data:" + self.data.label())
        return (" / ".join([*slots, self.optimizer.label()])
                + f" / lr={self.train.lr:.2e},warmup={self.train.warmup_steps},"
                  f"wd={self.train.weight_decay:g}")

    def apply_to(self, preset: Preset) -> Preset:
        """The preset with this genome's training genes and optimizer."""
        train = preset.train.model_copy(update={
            "lr": self.train.lr, "warmup_steps": self.train.warmup_steps,
            "weight_decay": self.train.weight_decay, "optimizer": self.optimizer,
        })
        return preset.model_copy(update={"train": train})

    def arm(self, label: str) -> Arm:
        """This genome as one arm of the shared runner (``runner.run``), named by its hash."""
        return Arm(label, self.hash(), self.model, self.optimizer, post_training=self.post_training,
                   recipe=self.data)

    def runs(self, preset: Preset, runs: Sequence[tuple[float, int]]) -> list[RunSpec]:
        """One ``RunSpec`` per ``(lr, seed)``: ``preset`` with this genome's training genes,
        at that learning rate."""
        train = self.apply_to(preset).train
        return [RunSpec(seed, train.model_copy(update={"lr": lr}), label=f"lr {lr:.3g} seed {seed}")
                for lr, seed in runs]

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> Genome:
        return cls.model_validate_json(data) if isinstance(data, str) else cls.model_validate(data)
