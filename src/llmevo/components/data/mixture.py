"""A source mixture: every training window comes from one source, drawn by weight.

DataDecide (Magnusson et al., "DataDecide: How to Predict Best Pretraining Data with Small
Experiments", arXiv 2504.11393) compares pretraining *recipes* — which corpora, in which
proportions — across model sizes, and finds that the ranking of recipes at small scale
predicts much of the ranking at large scale. Here a recipe is weights over the training
sources (``SOURCES``: ``lm`` WikiText-2 train, ``narrative`` Tiny Shakespeare,
``instruction`` the Alpaca training records), and the ``concat`` ablation is the preset's
fixed concatenation, whose effective weights are the sources' lengths.

The draw (``MixtureWindows``): at each step, each of the B windows picks its source with
probability ``weight / sum(weights)`` (``torch.multinomial`` with replacement), then a start
uniform in that source (``torch.randint``), both from one generator seeded by the run seed.
A window never crosses from one source into another; a source with weight 0 is never drawn.
``weights_at(step)`` gives the weights of a step; a mixture's are constant, a curriculum
(``curriculum.py``) changes them over training.

Reference tests (tests/reference/test_data_recipes_reference.py): on sources whose token
ids say which source and offset they are, every window is one contiguous slice of one
source; the share of windows per source matches the weights within a binomial bound; the
draws are a function of the seed alone.

Deviations: DataDecide mixes web-scale corpora by documents and tokens; here three small
corpora are mixed by window. The weights are per window, not per token of each source.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from pydantic import NonNegativeFloat, model_validator
from torch import Tensor

from llmevo.components.data.base import SOURCES, DataRecipe, TrainSources, Windows
from llmevo.errors import ConfigError
from llmevo.registry import Paper, SearchDimension, StrictModel, register

DATADECIDE = Paper(
    arxiv_id="2504.11393",
    title="DataDecide: How to Predict Best Pretraining Data with Small Experiments",
    url="https://arxiv.org/abs/2504.11393",
    organization="Allen Institute for AI",
)


def refuse_unknown_sources(values: Any, fields: Sequence[str]) -> Any:
    """A config key that names no training source is one line naming the sources."""
    if isinstance(values, dict):
        for key in values:
            if key not in fields:
                raise ValueError(f"unknown training source '{key}'; sources are: {', '.join(SOURCES)}")
    return values


def check_weights(weights: Sequence[float], what: str) -> None:
    if sum(weights) <= 0:
        raise ValueError(f"{what} sum to zero; give at least one source a positive weight")


class MixtureConfig(StrictModel):
    """Weights over the training sources (normalised; each >= 0, not all 0)."""

    lm: NonNegativeFloat = 0.7
    narrative: NonNegativeFloat = 0.2
    instruction: NonNegativeFloat = 0.1

    @model_validator(mode="before")
    @classmethod
    def _sources(cls, values: Any) -> Any:
        return refuse_unknown_sources(values, SOURCES)

    @model_validator(mode="after")
    def _positive(self) -> MixtureConfig:
        check_weights(self.weights(), "the mixture weights")
        return self

    def weights(self) -> tuple[float, ...]:
        return tuple(float(getattr(self, name)) for name in SOURCES)


class MixtureWindows:
    """B windows per step, each from one source drawn by ``weights_at(step)``."""

    def __init__(self, parts: Sequence[Tensor], weights_at: Any, batch_size: int, seq_len: int,
                 seed: int):
        self.parts = list(parts)
        self.weights_at = weights_at  # step -> (S,) float64 weights
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.generator = torch.Generator().manual_seed(seed)
        self.offsets = torch.arange(seq_len + 1)
        self.step = 0

    def next(self) -> Tensor:
        weights = self.weights_at(self.step)  # (S,)
        self.step += 1
        choice = torch.multinomial(weights, self.batch_size, replacement=True,
                                   generator=self.generator)  # (B,) source per window
        rows = []
        for source in choice.tolist():
            part = self.parts[source]
            start = int(torch.randint(0, part.numel() - self.seq_len, (1,), generator=self.generator))
            rows.append(part[start:start + self.seq_len + 1])
        return torch.stack(rows)  # (B, T + 1)


def check_drawable(sources: TrainSources, weights: Sequence[Sequence[float]], seq_len: int) -> None:
    """Every source some weight vector can draw holds at least one window (and one more token)."""
    for index, name in enumerate(SOURCES):
        if any(w[index] > 0 for w in weights) and sources.get(name).numel() < seq_len + 2:
            raise ConfigError(f"training source '{name}' has {sources.get(name).numel()} tokens; a "
                              f"window needs {seq_len + 2}; give it weight 0")


@register(
    slot="data",
    name="mixture",
    config=MixtureConfig,
    paper=DATADECIDE,
    ablation="concat",
    implementation_status="integrated",
    evolve_integrated=True,
    scope=("Per-window source weights over WikiText-2 train, Tiny Shakespeare and the Alpaca "
           "training records, at equal tokens; DataDecide's corpora, sizes and scaling "
           "predictions are not run."),
    search_space={"narrative": SearchDimension(choices=(0.0, 0.1, 0.2, 0.4)),
                  "instruction": SearchDimension(choices=(0.0, 0.05, 0.1, 0.2))},
)
class Mixture(DataRecipe):
    config: MixtureConfig

    def pool_tokens(self, sources: TrainSources) -> int:
        weights = self.config.weights()
        return sum(int(sources.get(name).numel()) for name, w in zip(SOURCES, weights, strict=True) if w > 0)

    def check(self, sources: TrainSources, seq_len: int) -> None:
        check_drawable(sources, [self.config.weights()], seq_len)

    def windows(self, sources: TrainSources, batch_size: int, seq_len: int, seed: int,
                steps: int) -> Windows:
        self.check(sources, seq_len)
        weights = torch.tensor(self.config.weights(), dtype=torch.float64)
        return MixtureWindows([sources.get(name) for name in SOURCES], lambda step: weights,
                              batch_size, seq_len, seed)
