"""Presets: data budgets, training settings and evaluation protocol, by name.

``smoke`` is the reference protocol of SPEC "The reference protocol" exactly: tokenized
WikiText-2, 120,000 / 8,000 / 8,000 tokens (narrative 120,000), 12 steps of batch 4 x 64,
AdamW lr 6e-4 with PyTorch defaults otherwise, clip 1.0, ``lm_loss`` over the first 32
windows, the ``core`` suite. ``quick`` trains about 1M tokens with warmup + cosine and
evaluates whole splits; ``standard`` makes one pass over the full WikiText-2 train split.
Each preset also sets the post-training stage (``post_training``: the steps, batch and rate
a post-training method runs with after pretraining); every preset must name them.
Any field can be overridden (``Preset.override``); an explicit step count always wins over
``one_epoch``. A preset is resolved in one place, ``Preset.resolved(train_tokens)``, once the
training stream is known: every pipeline (reproduction, evolution trials, the evolution's
final comparison) trains on the resolved preset, whose ``steps`` are concrete.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, PositiveInt, ValidationError

from llmevo.components.post_training.stage import PostTrainSettings
from llmevo.data.lm import LMBudgets
from llmevo.errors import ConfigError
from llmevo.registry import StrictModel, one_line_error
from llmevo.train.trainer import TrainConfig


class Preset(StrictModel):
    name: str
    variant: Literal["tokens", "raw"]
    train_tokens: PositiveInt | None
    validation_tokens: PositiveInt | None
    test_tokens: PositiveInt | None
    narrative_tokens: PositiveInt | None
    suite: Literal["core", "public"]
    train_on: tuple[Literal["lm", "narrative", "instruction"], ...] = ("lm",)
    train: TrainConfig
    post_training: PostTrainSettings = Field(
        description="The post-training stage's settings (no default: each preset names its own)."
    )
    eval_max_windows: PositiveInt | None = None
    eval_batch_size: PositiveInt = 64
    one_epoch: bool = Field(
        default=False, description="Set the step count to one pass over the training stream."
    )

    @property
    def budgets(self) -> LMBudgets:
        return LMBudgets(
            train=self.train_tokens,
            validation=self.validation_tokens,
            test=self.test_tokens,
            narrative=self.narrative_tokens,
        )

    def resolved(self, stream_tokens: int) -> Preset:
        """The preset to train with: a one-epoch preset gets the steps that consume
        ``stream_tokens`` once (and ``one_epoch=False``, since its steps are now concrete);
        any other preset is returned unchanged."""
        if not self.one_epoch:
            return self
        steps = math.ceil(stream_tokens / self.train.tokens_per_step)
        train = self.train.model_copy(update={"steps": steps})
        return self.model_copy(update={"train": train, "one_epoch": False})

    def override(self, values: dict[str, Any]) -> Preset:
        """A copy with top-level or ``train.<field>`` values replaced, validated.

        An explicit ``steps`` (or ``train.steps``) turns ``one_epoch`` off: the caller's step
        count wins over the preset's one-pass rule."""
        data = self.model_dump()
        if values.get("steps") is not None or values.get("train.steps") is not None:
            data["one_epoch"] = False
        for key, value in values.items():
            if value is None:
                continue
            target, _, field = key.partition(".")
            if field:
                if target != "train" or field not in TrainConfig.model_fields:
                    raise ConfigError(f"unknown preset field '{key}'")
                data["train"][field] = value
            elif key in TrainConfig.model_fields and key not in Preset.model_fields:
                data["train"][key] = value
            elif key in Preset.model_fields:
                data[key] = value
            else:
                raise ConfigError(f"unknown preset field '{key}'")
        try:
            return Preset.model_validate(data)
        except ValidationError as error:
            raise one_line_error(error, f"preset '{self.name}'") from None


PRESETS: dict[str, Preset] = {
    "smoke": Preset(
        name="smoke",
        variant="tokens",
        train_tokens=120_000,
        validation_tokens=8_000,
        test_tokens=8_000,
        narrative_tokens=120_000,
        suite="core",
        train=TrainConfig(steps=12, batch_size=4, seq_len=64, lr=6e-4),
        post_training=PostTrainSettings(steps=4, batch_size=4, lr=1e-3, held_out_pairs=64),
        eval_max_windows=32,
    ),
    "quick": Preset(
        name="quick",
        variant="raw",
        train_tokens=None,
        validation_tokens=None,
        test_tokens=None,
        narrative_tokens=None,
        suite="public",
        train_on=("lm", "narrative", "instruction"),
        train=TrainConfig(
            steps=330, batch_size=48, seq_len=64, lr=3e-3, schedule="cosine", warmup_steps=30,
            weight_decay=0.1,
        ),
        post_training=PostTrainSettings(steps=120, batch_size=16, lr=1e-3),
    ),
    "standard": Preset(
        name="standard",
        variant="raw",
        train_tokens=None,
        validation_tokens=None,
        test_tokens=None,
        narrative_tokens=None,
        suite="public",
        train=TrainConfig(
            steps=1, batch_size=48, seq_len=64, lr=3e-3, schedule="cosine", warmup_steps=100,
            weight_decay=0.1,
        ),
        post_training=PostTrainSettings(steps=240, batch_size=16, lr=1e-3),
        one_epoch=True,
    ),
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"--preset {name}: unknown preset; known: {', '.join(PRESETS)}") from None
