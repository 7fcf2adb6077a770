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
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Metric:
    """One metric an arm reports: which way is better, and where it appears.

    ``in_statistics``: paired statistics over seeds (the artifact's ``statistics`` block);
    ``in_report``: a row of the validation and test tables of ``llmevo show`` and the README
    report; ``in_summary``: a row of the table ``llmevo reproduce`` prints when it is done.
    """

    name: str
    lower_is_better: bool
    in_statistics: bool = True
    in_report: bool = True
    in_summary: bool = False


# Every metric of an arm, once, in the order every table and the statistics block list them.
# A new metric is one row here (plus the code that measures it); the lists below follow.
METRICS: tuple[Metric, ...] = (
    Metric("lm_loss", lower_is_better=True, in_summary=True),
    Metric("perplexity", lower_is_better=True),
    Metric("bits_per_byte", lower_is_better=True, in_summary=True),
    Metric("instruction_loss", lower_is_better=True, in_summary=True),
    Metric("instruction_bpb", lower_is_better=True),
    Metric("preference_loss", lower_is_better=True, in_summary=True),
    Metric("preference_accuracy", lower_is_better=False),
    Metric("hh_preference_loss", lower_is_better=True),
    Metric("hh_preference_accuracy", lower_is_better=False),
    Metric("reasoning_nll", lower_is_better=True, in_summary=True),
    Metric("reasoning_accuracy", lower_is_better=False),
    Metric("primary", lower_is_better=False, in_summary=True),
    Metric("public_composite", lower_is_better=False),
    Metric("composite_loss", lower_is_better=True, in_report=False),  # -public_composite
    Metric("composite_bpb", lower_is_better=True),
    Metric("fitness", lower_is_better=False, in_summary=True),
    Metric("initial_loss", lower_is_better=True),
    Metric("final_loss", lower_is_better=True, in_summary=True),
    # post-training reproductions (llmevo.experiments.post_training)
    Metric("heldout_preference_accuracy", lower_is_better=False, in_summary=True),
    Metric("heldout_preference_margin", lower_is_better=False, in_report=False),
    Metric("arithmetic_exact_match", lower_is_better=False, in_summary=True),
    Metric("arithmetic_error_rate", lower_is_better=True),
    # self-consistency at k samples (PostTrainSettings.self_consistency): accuracy and its cost
    *(metric for k in (1, 4, 8) for metric in (
        Metric(f"arithmetic_sc{k}_exact_match", lower_is_better=False),
        Metric(f"arithmetic_sc{k}_tokens", lower_is_better=True, in_report=False))),
    # per arm only, no paired statistics: each arm's post-training stage is its own
    Metric("post_training_loss", lower_is_better=True, in_statistics=False, in_summary=True),
    Metric("reward_bearing_group_rate", lower_is_better=False, in_statistics=False,
           in_summary=True),
)

LOWER_IS_BETTER: dict[str, bool] = {metric.name: metric.lower_is_better for metric in METRICS}
STATISTICS_METRICS = tuple(metric.name for metric in METRICS if metric.in_statistics)
REPORT_METRICS = tuple(metric.name for metric in METRICS if metric.in_report)
SUMMARY_METRICS = tuple(metric.name for metric in METRICS if metric.in_summary)
