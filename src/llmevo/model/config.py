"""The model genome: sizes plus one registered component (and its config) per slot."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field, PositiveInt, field_validator

from llmevo.registry import StrictModel


class ComponentChoice(StrictModel):
    """A component by registered name, with its hyperparameters."""

    name: str
    config: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> ComponentChoice:
        """``"rope"`` or ``"rope:theta=500000,rotary_dim=8"`` (values parsed as JSON)."""
        name, _, rest = text.partition(":")
        config: dict[str, Any] = {}
        for item in filter(None, rest.split(",")):
            key, _, raw = item.partition("=")
            try:
                config[key.strip()] = json.loads(raw)
            except json.JSONDecodeError:
                config[key.strip()] = raw
        return cls(name=name.strip(), config=config)

    def label(self) -> str:
        if not self.config:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in sorted(self.config.items()))


def _choice(name: str, **config: Any) -> ComponentChoice:
    return ComponentChoice(name=name, config=config)


class ModelConfig(StrictModel):
    """``llama_modern`` by default: exactly 139,584 parameters (SPEC, "The baseline model")."""

    architecture: str = Field(
        default="transformer", description="A registered name in the registry's architecture slot."
    )
    vocab_size: PositiveInt = 512
    d_model: PositiveInt = 64
    n_layers: PositiveInt = 2
    n_heads: PositiveInt = 4
    max_seq_len: PositiveInt = 64
    tie_embeddings: bool = True
    position: ComponentChoice = Field(default_factory=lambda: _choice("rope", theta=10_000.0))
    attention: ComponentChoice = Field(default_factory=lambda: _choice("mha", kv_heads=4))
    feedforward: ComponentChoice = Field(default_factory=lambda: _choice("swiglu", hidden=192))
    norm: ComponentChoice = Field(default_factory=lambda: _choice("rmsnorm"))
    block: ComponentChoice = Field(default_factory=lambda: _choice("pre_norm"))
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="The architecture's settings, validated by its registered typed config "
        "(BLTSettings for blt-bytes, StandinSettings for blt, none for transformer).",
    )

    @field_validator("position", "attention", "feedforward", "norm", "block", mode="before")
    @classmethod
    def _parse_text(cls, value: Any) -> Any:
        return ComponentChoice.parse(value) if isinstance(value, str) else value

    def with_slot(self, slot: str, choice: ComponentChoice | str) -> ModelConfig:
        if isinstance(choice, str):
            choice = ComponentChoice.parse(choice)
        return self.model_copy(update={slot: choice})

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def fingerprint(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]


MODEL_SLOTS = ("position", "attention", "feedforward", "norm", "block")
