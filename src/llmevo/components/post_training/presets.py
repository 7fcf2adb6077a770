"""The post-training stage's settings per preset, and the stage as an evolution gene.

Below the experiment layer (components and experiments both use it): it only resolves
settings and runs ``run_post_training`` on a model that was just pretrained.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import ValidationError

from llmevo.components.post_training.stage import (
    PostTrainSettings,
    PretrainedModel,
    StageResult,
    run_post_training,
)
from llmevo.errors import ConfigError
from llmevo.registry import REGISTRY

POST_TRAINING_PRESETS: dict[str, PostTrainSettings] = {
    "smoke": PostTrainSettings(steps=4, batch_size=4, lr=1e-3, held_out_pairs=64),
    "quick": PostTrainSettings(steps=120, batch_size=16, lr=1e-3),
    "standard": PostTrainSettings(steps=240, batch_size=16, lr=1e-3),
}


def post_training_settings(preset_name: str, overrides: dict[str, Any]) -> PostTrainSettings:
    """The preset's stage settings with non-None ``overrides`` applied and validated."""
    base = POST_TRAINING_PRESETS.get(preset_name, POST_TRAINING_PRESETS["quick"])
    values = base.model_dump()
    for key, value in overrides.items():
        if value is None:
            continue
        if key.startswith("arithmetic."):
            values["arithmetic"][key.split(".", 1)[1]] = value
        else:
            values[key] = value
    try:
        return PostTrainSettings.model_validate(values)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"post-training setting {where}: {first['msg']}") from None


def post_train_genome_model(
    model: torch.nn.Module,
    choice: Any,  # ComponentChoice of the post_training slot
    data: Any,  # PostTrainData, or a function that returns it
    preset_name: str,
    seed: int,
    device: torch.device,
    pretrain_steps: int,
) -> StageResult:
    """Evolution: run a genome's post-training gene on its freshly pretrained model.

    The stage uses the preset's post-training settings and the method's own task (SFT:
    Alpaca instructions); the stage seed is ``seed`` plus the settings' offset.
    """
    if callable(data):  # a loader, called once the first genome needs the data
        data = data()
    settings = post_training_settings(preset_name, {})
    task = REGISTRY.get("post_training", choice.name).cls.task or "instruction"
    return run_post_training(PretrainedModel(model, pretrain_steps), choice, data, task,
                             settings, seed + settings.seed_offset, device)
