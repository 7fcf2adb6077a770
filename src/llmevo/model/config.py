"""The model genome: sizes plus one registered component (and its config) per slot."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field, PositiveInt, field_validator, model_serializer

from llmevo.model.parametrization import Parametrization
from llmevo.registry import ComponentChoice, StrictModel


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
    parametrization: Parametrization = Field(
        default="standard",
        description="How init, output and attention scales and per-parameter learning rates "
        "follow the width (model/parametrization.py): standard, or mup (Tensor Programs V, "
        "Table 8, anchored at d_model 64). Left out of the serialised config when standard, "
        "so every earlier hash and cache key is unchanged.",
    )

    @field_validator("position", "attention", "feedforward", "norm", "block", mode="before")
    @classmethod
    def _parse_text(cls, value: Any) -> Any:
        return ComponentChoice.parse(value) if isinstance(value, str) else value

    @model_serializer(mode="wrap")
    def _omit_standard(self, handler: Any) -> Any:
        data = handler(self)
        if self.parametrization == "standard" and isinstance(data, dict):
            data.pop("parametrization", None)
        return data

    def with_slot(self, slot: str, choice: ComponentChoice | str) -> ModelConfig:
        if isinstance(choice, str):
            choice = ComponentChoice.parse(choice)
        return self.model_copy(update={slot: choice})

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def fingerprint(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

