"""What a data-recipe component provides: the windows an arm trains on, drawn from the
training sources by the run's seeded generator.

A *training source* is one part of the TRAIN split a preset can train on (``SOURCES``:
``lm``, the WikiText-2 train split; ``narrative``, Tiny Shakespeare; ``instruction``, the
320 Alpaca training records). Validation and test never enter: a ``TrainSources`` holds
training tokens only. A recipe component turns the sources into a ``Windows`` sampler
(``next()`` gives one batch of (seq_len + 1)-token windows) whose draws come from one
``torch.Generator`` seeded by the run seed and nothing else, so two arms of a seed that use
the same recipe draw the same windows, and two recipes draw equally many tokens (steps x
batch x seq_len): the budget is equal tokens.

``TrainStream`` binds a recipe to the sources; the trainer receives it (or a bare token
tensor, which trains exactly as the ``concat`` recipe) and hashes the recipe's identity
(``identity``: the canonical JSON of its name and full typed config; empty for ``concat``,
so today's hashes are unchanged) before the windows it consumed: the token-stream hash
covers the recipe.

Public API: ``SOURCES``, ``TrainSources``, ``DataRecipe``, ``Windows``, ``WindowSampler``,
``TrainStream``, ``windows_for``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from llmevo.errors import ConfigError
from llmevo.registry import StrictModel

SOURCES = ("lm", "narrative", "instruction")


class Windows(Protocol):
    def next(self) -> Tensor: ...  # (B, T + 1) token ids


class WindowSampler:
    """Uniformly random (seq_len + 1)-token windows of a token stream, seeded.

    The same seed, stream length and shape always give the same windows, whichever model
    consumes them.
    """

    def __init__(self, stream: Tensor, batch_size: int, seq_len: int, seed: int):
        if stream.numel() < seq_len + 2:
            raise ConfigError(
                f"the training stream has {stream.numel()} tokens; need at least {seq_len + 2}"
            )
        self.stream = stream
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.generator = torch.Generator().manual_seed(seed)
        self.offsets = torch.arange(seq_len + 1)

    def next(self) -> Tensor:
        high = self.stream.numel() - self.seq_len
        starts = torch.randint(0, high, (self.batch_size,), generator=self.generator)
        return self.stream[starts[:, None] + self.offsets]  # (B, T + 1)


@dataclass(frozen=True)
class TrainSources:
    """The training sources of one data view (tokens or bytes), train split only.

    ``parts``: every source by name (``SOURCES``); ``default``: the preset's ``train_on``,
    the order the ``concat`` ablation concatenates; ``stream``: that concatenation."""

    parts: Mapping[str, Tensor]
    default: tuple[str, ...]
    stream: Tensor

    def get(self, name: str) -> Tensor:
        if name not in self.parts:
            raise ConfigError(f"unknown training source '{name}'; sources are: {', '.join(SOURCES)}")
        return self.parts[name]


class DataRecipe:
    """A registered data-recipe component: its typed ``Config`` and the windows it draws."""

    Config: ClassVar[type[StrictModel]]
    component_name: ClassVar[str]

    def __init__(self, config: StrictModel):
        self.config = config

    def identity(self) -> str:
        """What the token-stream hash starts with: name and full config as canonical JSON."""
        return json.dumps({"data": self.component_name, "config": self.config.model_dump(mode="json")},
                          sort_keys=True, separators=(",", ":"))

    def pool_tokens(self, sources: TrainSources) -> int:
        """How many tokens the windows are drawn from (reported as ``train_stream_tokens``)."""
        raise NotImplementedError

    def check(self, sources: TrainSources, seq_len: int) -> None:
        """Refuse, before training, sources this recipe cannot draw windows from."""

    def windows(self, sources: TrainSources, batch_size: int, seq_len: int, seed: int,
                steps: int) -> Windows:
        raise NotImplementedError

    def describe(self, sources: TrainSources) -> dict[str, Any]:
        """What an artifact records about the recipe on these sources."""
        return {"name": self.component_name, "config": self.config.model_dump(mode="json"),
                "pool_tokens": self.pool_tokens(sources)}


@dataclass(frozen=True)
class TrainStream:
    """A recipe bound to the training sources: what ``train()`` draws its windows from."""

    sources: TrainSources
    recipe: DataRecipe

    def identity(self) -> str:
        """Empty for the ``concat`` ablation (the hash of a bare stream), else the recipe's."""
        return "" if self.recipe.component_name == "concat" else self.recipe.identity()

    def numel(self) -> int:
        return self.recipe.pool_tokens(self.sources)

    def windows(self, batch_size: int, seq_len: int, seed: int, steps: int) -> Windows:
        return self.recipe.windows(self.sources, batch_size, seq_len, seed, steps)


def windows_for(stream: Tensor | TrainStream, batch_size: int, seq_len: int, seed: int,
                steps: int) -> tuple[Windows, bytes]:
    """The sampler of one run and the bytes its token-stream hash starts with."""
    if isinstance(stream, Tensor):
        return WindowSampler(stream, batch_size, seq_len, seed), b""
    identity = stream.identity()
    prefix = f"recipe:{identity}\n".encode() if identity else b""
    return stream.windows(batch_size, seq_len, seed, steps), prefix
