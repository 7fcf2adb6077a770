"""A curriculum over the source mixture: the weights move linearly from ``start_*`` to
``end_*`` over training (by default Tiny Shakespeare's share decays from 0.3 to 0).

Li, Zhang and He ("The Stability-Efficiency Dilemma: Investigating Sequence Length Warmup
for Training GPT Models", arXiv 2108.06084) train on easier data first and pace the
difficulty with a linear schedule over the first part of training. Their difficulty is the
sequence length; here, as in the reference system behind llmevo's reference artifacts, the
paced quantity is the share of each training source (``mixture.py`` draws the windows).

At step ``s`` of ``S`` the weights are ``(1 - t) * start + t * end`` with
``t = s / (S - 1)`` (``t = 0`` for a one-step run); each endpoint is a valid mixture
(weights >= 0, not all 0), so every step's is.

Reference tests (tests/reference/test_data_recipes_reference.py): ``weights_at`` against
the formula; a curriculum from all-``lm`` to all-``narrative`` draws only ``lm`` windows at
step 0 and only ``narrative`` windows at the last step, and the share of ``narrative``
windows over each quarter of training matches the formula's mean over that quarter.

Deviations: sequence length stays fixed (the paper's curriculum variable); the pacing is
linear over the whole run rather than over a warm-up fraction.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import NonNegativeFloat, model_validator
from torch import Tensor

from llmevo.components.data.base import SOURCES, DataRecipe, TrainSources, Windows
from llmevo.components.data.mixture import (
    MixtureWindows,
    check_drawable,
    check_weights,
    refuse_unknown_sources,
)
from llmevo.registry import Paper, SearchDimension, StrictModel, register

FIELDS = tuple(f"{end}_{name}" for end in ("start", "end") for name in SOURCES)


class CurriculumConfig(StrictModel):
    """Source weights at the first step and at the last; linear in between."""

    start_lm: NonNegativeFloat = 0.6
    start_narrative: NonNegativeFloat = 0.3
    start_instruction: NonNegativeFloat = 0.1
    end_lm: NonNegativeFloat = 0.9
    end_narrative: NonNegativeFloat = 0.0
    end_instruction: NonNegativeFloat = 0.1

    @model_validator(mode="before")
    @classmethod
    def _sources(cls, values: Any) -> Any:
        if isinstance(values, dict):
            for key in values:
                end, _, source = key.partition("_")
                if key not in FIELDS and end in ("start", "end"):
                    refuse_unknown_sources({source: None}, SOURCES)
        return values

    @model_validator(mode="after")
    def _positive(self) -> CurriculumConfig:
        check_weights(self.start(), "the curriculum's start weights")
        check_weights(self.end(), "the curriculum's end weights")
        return self

    def start(self) -> tuple[float, ...]:
        return tuple(float(getattr(self, f"start_{name}")) for name in SOURCES)

    def end(self) -> tuple[float, ...]:
        return tuple(float(getattr(self, f"end_{name}")) for name in SOURCES)


def weights_at(config: CurriculumConfig, step: int, steps: int) -> Tensor:
    """(S,) the weights of ``step`` (0-based) of ``steps``: linear from start to end."""
    t = step / (steps - 1) if steps > 1 else 0.0
    start = torch.tensor(config.start(), dtype=torch.float64)
    end = torch.tensor(config.end(), dtype=torch.float64)
    return (1.0 - t) * start + t * end


@register(
    slot="data",
    name="curriculum",
    config=CurriculumConfig,
    paper=Paper(
        arxiv_id="2108.06084",
        title="The Stability-Efficiency Dilemma: Investigating Sequence Length Warmup for "
              "Training GPT Models",
        url="https://arxiv.org/abs/2108.06084",
        organization="Microsoft",
    ),
    ablation="concat",
    implementation_status="integrated",
    evolve_integrated=True,
    scope=("Source weights paced linearly over training (Tiny Shakespeare 0.3 -> 0 by "
           "default) at equal tokens; the paper's sequence-length warmup is not run."),
    search_space={"start_narrative": SearchDimension(choices=(0.1, 0.3, 0.5)),
                  "end_narrative": SearchDimension(choices=(0.0, 0.1))},
)
class Curriculum(DataRecipe):
    config: CurriculumConfig

    def pool_tokens(self, sources: TrainSources) -> int:
        used = [max(a, b) for a, b in zip(self.config.start(), self.config.end(), strict=True)]
        return sum(int(sources.get(name).numel()) for name, w in zip(SOURCES, used, strict=True) if w > 0)

    def check(self, sources: TrainSources, seq_len: int) -> None:
        check_drawable(sources, [self.config.start(), self.config.end()], seq_len)

    def windows(self, sources: TrainSources, batch_size: int, seq_len: int, seed: int,
                steps: int) -> Windows:
        self.check(sources, seq_len)
        config = self.config
        return MixtureWindows([sources.get(name) for name in SOURCES],
                              lambda step: weights_at(config, step, steps),
                              batch_size, seq_len, seed)
