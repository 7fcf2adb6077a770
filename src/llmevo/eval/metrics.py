"""Metric and fitness formulas, each in exactly one place (SPEC "Metrics and fitness").

Every loss here is in nats unless its name says bits. The weights of the composite
objective are those of the reference protocol:

    primary          = -(lm_loss + 0.15 * instruction_loss)
    public_composite = primary - 0.10 * preference_loss - 0.05 * reasoning_nll
    composite_loss   = -public_composite

A term that the evaluation suite does not score counts as 0 (so under the ``core`` suite
``public_composite == primary``). ``composite_bpb`` is the byte-normalised twin of
``composite_loss``; it is a *loss* (lower is better) and is the objective whenever
genomes differ in tokenization (e.g. BLT, arXiv 2412.09871).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from llmevo.errors import ConfigError

INSTRUCTION_WEIGHT = 0.15
PREFERENCE_WEIGHT = 0.10
REASONING_WEIGHT = 0.05


def perplexity(lm_loss: float) -> float:
    """``exp(lm_loss)``: perplexity of a mean next-token NLL in nats."""
    return math.exp(lm_loss)


def bits_per_byte(total_nll_nats: float, n_bytes: int) -> float:
    """Total NLL (nats) over ``ln 2 * n_bytes`` (UTF-8 bytes of the predicted text)."""
    if n_bytes <= 0:
        raise ConfigError(f"bits_per_byte needs a positive byte count, got {n_bytes}")
    return total_nll_nats / (math.log(2.0) * n_bytes)


def primary(lm_loss: float, instruction_loss: float) -> float:
    """``-(lm_loss + 0.15 * instruction_loss)``; higher is better."""
    return -(lm_loss + INSTRUCTION_WEIGHT * instruction_loss)


def public_composite(
    primary_value: float,
    preference_loss: float | None = None,
    reasoning_nll: float | None = None,
) -> float:
    """``primary - 0.10 * preference_loss - 0.05 * reasoning_nll``; an unscored term is 0."""
    preference = 0.0 if preference_loss is None else preference_loss
    reasoning = 0.0 if reasoning_nll is None else reasoning_nll
    return primary_value - PREFERENCE_WEIGHT * preference - REASONING_WEIGHT * reasoning


def composite_loss(public_composite_value: float) -> float:
    """``-public_composite``: the composite as a loss (lower is better)."""
    return -public_composite_value


def composite_bpb(
    lm_bpb: float,
    instruction_bpb: float,
    preference_loss: float | None = None,
    reasoning_nll: float | None = None,
) -> float:
    """Byte-normalised twin of ``composite_loss``; a loss, lower is better.

    ``lm_bpb + 0.15 * instruction_bpb + 0.10 * preference_loss + 0.05 * reasoning_nll``.
    The preference and reasoning terms are choice cross-entropies over candidates, which do
    not depend on the tokenizer, so they enter unchanged; an unscored term counts 0.
    """
    preference = 0.0 if preference_loss is None else preference_loss
    reasoning = 0.0 if reasoning_nll is None else reasoning_nll
    return (
        lm_bpb
        + INSTRUCTION_WEIGHT * instruction_bpb
        + PREFERENCE_WEIGHT * preference
        + REASONING_WEIGHT * reasoning
    )


# Each objective: the metric it reads and the sign that makes higher better.
OBJECTIVES: dict[str, tuple[str, float]] = {
    "public_composite": ("public_composite", 1.0),
    "composite_bpb": ("composite_bpb", -1.0),
}


def fitness(metrics: Mapping[str, float | None], objective: str = "public_composite") -> float:
    """The chosen objective as a fitness (higher is better).

    ``public_composite`` is returned as is; ``composite_bpb`` (a loss) is negated.
    """
    if objective not in OBJECTIVES:
        raise ConfigError(f"unknown objective {objective!r}; expected one of {sorted(OBJECTIVES)}")
    metric, sign = OBJECTIVES[objective]
    value = metrics.get(metric)
    if value is None:
        raise ConfigError(f"objective {objective!r} needs the metric {metric!r}, which is missing")
    return sign * float(value)


def derive_arm_metrics(
    raw: Mapping[str, float | None], objective: str = "public_composite"
) -> dict:
    """Add the derived metrics to one arm's measured values.

    ``raw`` must hold ``lm_loss`` and ``instruction_loss``; it may hold ``preference_loss``,
    ``reasoning_nll``, ``bits_per_byte`` and ``instruction_bpb``. Returns a new dict with the
    measured values plus ``perplexity``, ``primary``, ``public_composite``,
    ``composite_loss``, ``composite_bpb`` (only when both bpb inputs exist) and ``fitness``.
    """
    for name in ("lm_loss", "instruction_loss"):
        if raw.get(name) is None:
            raise ConfigError(f"derive_arm_metrics needs {name!r}; got keys {sorted(raw)}")
    out = dict(raw)
    preference = raw.get("preference_loss")
    reasoning = raw.get("reasoning_nll")
    out["perplexity"] = perplexity(raw["lm_loss"])
    out["primary"] = primary(raw["lm_loss"], raw["instruction_loss"])
    out["public_composite"] = public_composite(out["primary"], preference, reasoning)
    out["composite_loss"] = composite_loss(out["public_composite"])
    if raw.get("bits_per_byte") is not None and raw.get("instruction_bpb") is not None:
        out["composite_bpb"] = composite_bpb(
            raw["bits_per_byte"], raw["instruction_bpb"], preference, reasoning
        )
    out["fitness"] = fitness(out, objective)
    return out


# Direction of each reported metric: True where lower is better.
LOWER_IS_BETTER: dict[str, bool] = {
    "lm_loss": True,
    "perplexity": True,
    "instruction_loss": True,
    "bits_per_byte": True,
    "instruction_bpb": True,
    "preference_loss": True,
    "hh_preference_loss": True,
    "reasoning_nll": True,
    "composite_loss": True,
    "composite_bpb": True,
    "initial_loss": True,
    "final_loss": True,
    "primary": False,
    "public_composite": False,
    "fitness": False,
    "preference_accuracy": False,
    "hh_preference_accuracy": False,
    "reasoning_accuracy": False,
    "heldout_preference_accuracy": False,
    "heldout_preference_margin": False,
    "arithmetic_exact_match": False,
    "arithmetic_error_rate": True,
    "post_training_loss": True,
    "reward_bearing_group_rate": False,
}
