"""One arm of an experiment: what is built (a model config), how it is trained (the
optimizer, the data view, the data recipe) and an optional post-training stage. Reproductions compare two,
evolution turns each genome into one. An arm with ``init`` starts from a checkpoint's
weights (``--init-from``) instead of the seed's random initialisation.

Public API: ``Arm``, ``CONCAT``, ``resolved_recipe``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmevo.catalog import full_registry
from llmevo.hf.load import LlamaCheckpoint
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice

CONCAT = ComponentChoice(name="concat")  # the data slot's ablation: the preset's sources end to end


@dataclass(frozen=True)
class Arm:
    """One side of a comparison: what is built and how it is trained."""

    label: str  # "baseline" or "method"
    name: str  # what the artifact calls this arm
    model: ModelConfig  # a template when ``prepare`` is set, resolved once the data is known
    optimizer: ComponentChoice
    data: str = "bpe"  # the data view: "bpe" tokens or UTF-8 "bytes" (DATA_VIEWS)
    prepare: str | None = None  # a step that resolves the model from the data (PREPARATIONS)
    post_training: ComponentChoice | None = None  # a post-training stage after pretraining
    init: LlamaCheckpoint | None = None  # start from these weights (model is their genome)
    recipe: ComponentChoice = field(default_factory=lambda: CONCAT)  # the data recipe (``data`` slot)


def resolved_recipe(choice: ComponentChoice) -> tuple[str, dict[str, Any]]:
    """A data recipe with every default filled in (``mixture`` equals ``mixture:lm=0.7``)."""
    config = full_registry().get("data", choice.name).make_config(choice.config)
    return choice.name, config.model_dump(mode="json")
