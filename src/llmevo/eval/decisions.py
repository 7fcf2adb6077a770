"""Decision accuracy over the ladders: does a verdict at one rung predict the next rung's?

Input: one ``LadderDecisions`` per ladder (its fitted rungs' classes, ascending; the slot it
compares; the components its two arms compare; its arms' per-seed values at each rung).
Everything here is a count over those; nothing trains. DataDecide (Magnusson et al.,
arXiv 2504.11393) reports the same kind of figure for the field: how often the ranking at a
small scale is the ranking at a larger one (about 80% from 150M to 1B parameters).

**Pairs.** Each ladder gives the adjacent pairs (k, k+1) of its *fitted* rungs, ascending: a
degenerate rung (one head, for a position or attention comparison) is left out here as it is
from every across-rung quantity, so rope over rungs -2..0 gives (-2, -1) and (-1, 0). The
*to-top* pairs are (k, top) for every fitted rung k below the top rung.

**What counts** (the classes are the verdict's four: better, non-inferior, inconclusive, worse):

- ``same class``: over every pair, the class at the upper rung equals the class at the lower;
- ``better/worse only``: over the pairs whose lower rung is classed better or worse (a
  significant direction), the upper rung has the same class (what each ladder file records as
  its ``transfers``; a better that becomes non-inferior did not hold).

Each count carries a Wilson score interval (statsmodels ``proportion_confint``,
``method="wilson"``, 95%): unlike the normal-approximation interval it stays inside [0, 1]
and is not empty at 0 or n of n. It treats the pairs as independent draws; pairs of one
ladder share its arms and pairs of ladders that share an arm share a component, so it is, if
anything, too narrow; that is why the count is also given without the ladders that share one.

**Shared arms.** A ladder's *compared components* are the registered components its two arms
differ in, read from the genomes in its top rung's artifact (``artifacts.ladder.arm_components``):
rope vs learned compares (position, rope) and (position, learned); the fair champion compares
(optimizer, muon) and (optimizer, adamw), since its rope differs from the baseline's in a
setting (theta), not a component. Two ladders *share an arm* when they compare the same
component in the same slot, on either side (the same method, the same baseline, or one's
method as the other's baseline); a ladder whose arms record no genome cannot be shown not to
share one and is counted as sharing. Below that level every published ladder trains the
default llama_modern on one side, and where their tuned learning rates agree it is the same
runs; ``shared_runs`` reports it (an arm of each with the same seeds and per-seed values equal
within ``RUNS_RTOL`` at the same rung: the same runs reused, or rerun on another execution
path), but it is not what the figure leaves out: every ablation is measured against the
default model.

Public API: ``LadderDecisions``, ``RungPair``, ``Agreement``, ``AccuracyRow``,
``DecisionAccuracy``, ``decision_accuracy``, ``wilson_interval``, ``adjacent_pairs``,
``to_top_pairs``, ``shared_arms``, ``shared_runs``, ``RULES``, ``ALL_SLOTS``, ``SEVERAL_SLOTS``,
``UNKNOWN_SLOT``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmevo.errors import ConfigError

DIRECTIONAL = frozenset({"better", "worse"})
ALL_SLOTS = "all slots"
SEVERAL_SLOTS = "several slots"  # a ladder whose arms differ in more than one slot (a champion's genome)
UNKNOWN_SLOT = "unknown slot"  # a ladder whose arms record no genome
RULES = {
    "pairs": "adjacent fitted rungs (k, k+1) of every ladder; a degenerate rung is left out, as from "
             "every across-rung quantity",
    "same_class": "same class at k+1: over every pair, the class at rung k+1 equals the class at rung k "
                  "(better, non-inferior, inconclusive, worse)",
    "better_worse": "better/worse only: over the pairs whose class at rung k is better or worse, the "
                    "class at rung k+1 is the same",
    "to_top": "rung k → top: the same two counts with the ladder's top fitted rung in place of k+1",
    "shared_arm": "two ladders share an arm when they compare the same registered component in the same "
                  "slot, on either side (method or baseline), read from the genomes of the top rung's "
                  "artifact where the two arms' component names differ; a ladder without genomes counts "
                  "as sharing",
    "interval": "Wilson score interval, 95% (statsmodels proportion_confint, method='wilson'), pairs "
                "taken as independent",
}


def wilson_interval(agreed: int, total: int, level: float = 0.95) -> tuple[float, float] | None:
    """The Wilson score interval of ``agreed`` of ``total``; None when there is nothing counted."""
    if not 0 <= agreed <= total:
        raise ConfigError(f"a count of {agreed} of {total} is not a proportion")
    if total == 0:
        return None
    from statsmodels.stats.proportion import proportion_confint  # imported when a count needs it

    low, high = proportion_confint(agreed, total, alpha=1.0 - level, method="wilson")
    return float(low), float(high)


@dataclass(frozen=True)
class LadderDecisions:
    """What the counts read from one ladder."""

    label: str  # the ladder's name, with the baseline it was compared against where --against chose one
    source: str  # where its ladder file is
    slot: str  # the compared slot, or SEVERAL_SLOTS
    classes: tuple[tuple[int, str | None], ...]  # (rung, class) of the fitted rungs, ascending
    components: frozenset[tuple[str, str]] | None  # (slot, component name), both arms; None: no genomes
    runs: tuple[tuple[int, tuple[int, ...], tuple[float, ...]], ...] = ()  # (rung, seeds, values) of each arm


@dataclass(frozen=True)
class RungPair:
    """A verdict at a lower rung and the verdict at a higher rung of the same ladder."""

    ladder: str
    lower: int
    upper: int
    lower_class: str | None
    upper_class: str | None

    @property
    def same_class(self) -> bool:
        return self.lower_class == self.upper_class

    @property
    def directional(self) -> bool:
        return self.lower_class in DIRECTIONAL


def adjacent_pairs(ladder: LadderDecisions) -> list[RungPair]:
    """The pairs (k, k+1) of adjacent fitted rungs."""
    return [RungPair(ladder.label, lower, upper, low_class, high_class)
            for (lower, low_class), (upper, high_class) in zip(ladder.classes, ladder.classes[1:], strict=False)]


def to_top_pairs(ladder: LadderDecisions) -> list[RungPair]:
    """The pairs (k, top) for every fitted rung k below the top one."""
    if not ladder.classes:
        return []
    top, top_class = ladder.classes[-1]
    return [RungPair(ladder.label, rung, top, cls, top_class) for rung, cls in ladder.classes[:-1]]


@dataclass(frozen=True)
class Agreement:
    """``agreed`` of ``total`` pairs, with the Wilson interval (None when ``total`` is 0)."""

    agreed: int
    total: int
    low: float | None
    high: float | None

    @property
    def rate(self) -> float | None:
        return self.agreed / self.total if self.total else None

    @classmethod
    def same_class(cls, pairs: Sequence[RungPair], level: float = 0.95) -> Agreement:
        return cls.of(sum(pair.same_class for pair in pairs), len(pairs), level)

    @classmethod
    def better_worse(cls, pairs: Sequence[RungPair], level: float = 0.95) -> Agreement:
        directional = [pair for pair in pairs if pair.directional]
        return cls.of(sum(pair.same_class for pair in directional), len(directional), level)

    @classmethod
    def of(cls, agreed: int, total: int, level: float = 0.95) -> Agreement:
        interval = wilson_interval(agreed, total, level)
        return cls(agreed, total, *(interval if interval is not None else (None, None)))

    def to_json(self) -> dict[str, Any]:
        return {"agreed": self.agreed, "pairs": self.total, "rate": self.rate, "low": self.low, "high": self.high}

    def cell(self, nothing: str) -> str:
        """``3/5: 60% [23, 88]`` (the rate and its interval in percent), or ``— (nothing)``."""
        if not self.total:
            return f"— ({nothing})"
        return (f"{self.agreed}/{self.total}: {100 * (self.rate or 0):.0f}% "
                f"[{100 * (self.low or 0):.0f}, {100 * (self.high or 0):.0f}]")


@dataclass(frozen=True)
class AccuracyRow:
    """The four counts over one set of ladders: a slot (or all of them), with or without the
    ladders that share an arm."""

    slot: str
    independent: bool  # True: the ladders that share an arm with another are left out
    ladders: tuple[str, ...]
    next_same: Agreement
    next_better_worse: Agreement
    top_same: Agreement
    top_better_worse: Agreement

    def to_json(self) -> dict[str, Any]:
        return {"slot": self.slot, "without_shared_arms": self.independent, "ladders": list(self.ladders),
                "next_rung": {"same_class": self.next_same.to_json(),
                              "better_worse": self.next_better_worse.to_json()},
                "top_rung": {"same_class": self.top_same.to_json(),
                             "better_worse": self.top_better_worse.to_json()}}


def _row(slot: str, independent: bool, ladders: Sequence[LadderDecisions], level: float) -> AccuracyRow:
    following = [pair for ladder in ladders for pair in adjacent_pairs(ladder)]
    top = [pair for ladder in ladders for pair in to_top_pairs(ladder)]
    return AccuracyRow(slot, independent, tuple(ladder.label for ladder in ladders),
                       Agreement.same_class(following, level), Agreement.better_worse(following, level),
                       Agreement.same_class(top, level), Agreement.better_worse(top, level))


def shared_arms(ladders: Sequence[LadderDecisions]) -> dict[str, dict[str, list[str]]]:
    """``{ladder: {other ladder: ["slot=component", ...]}}`` for every ladder that shares an
    arm (see the module docstring); a ladder without genomes maps to ``{}`` and still counts
    as sharing (``DecisionAccuracy.independent``)."""
    found: dict[str, dict[str, list[str]]] = {}
    for ladder in ladders:
        for other in ladders:
            if other is ladder or ladder.components is None or other.components is None:
                continue
            common = sorted(ladder.components & other.components)
            if common:
                found.setdefault(ladder.label, {})[other.label] = [f"{slot}={name}" for slot, name in common]
        if ladder.components is None:
            found.setdefault(ladder.label, {})
    return found


RUNS_RTOL = 1e-4  # a rerun of the same runs on another execution path moves the sixth digit


def _same_runs(one: LadderDecisions, other: LadderDecisions) -> bool:
    """Whether an arm of ``one`` and an arm of ``other`` have, at the same rung, the same seeds
    and per-seed values equal within ``RUNS_RTOL``."""
    return any(rung == rung_other and seeds == seeds_other
               and all(math.isclose(a, b, rel_tol=RUNS_RTOL) for a, b in zip(values, values_other, strict=True))
               for rung, seeds, values in one.runs for rung_other, seeds_other, values_other in other.runs)


def shared_runs(ladders: Sequence[LadderDecisions]) -> dict[str, list[str]]:
    """``{ladder: [other ladders]}``: the ladders with an arm of the same seeds and the same
    per-seed values (within ``RUNS_RTOL``) at the same rung: the same runs, or reruns of them."""
    found: dict[str, list[str]] = {}
    for ladder in ladders:
        others = [other.label for other in ladders if other is not ladder and _same_runs(ladder, other)]
        if others:
            found[ladder.label] = others
    return found


@dataclass(frozen=True)
class DecisionAccuracy:
    """The counts over every ladder and by slot, with and without the ladders that share an arm."""

    ladders: tuple[LadderDecisions, ...]
    rows: tuple[AccuracyRow, ...]  # all slots (all, independent), then each slot (all, independent)
    shared_arms: dict[str, dict[str, list[str]]]
    shared_runs: dict[str, list[str]]
    level: float = 0.95

    def row(self, slot: str = ALL_SLOTS, independent: bool = False) -> AccuracyRow:
        return next(row for row in self.rows if row.slot == slot and row.independent == independent)

    @property
    def independent(self) -> tuple[str, ...]:
        """The ladders that share no arm with another."""
        return tuple(ladder.label for ladder in self.ladders if ladder.label not in self.shared_arms)

    def to_json(self) -> dict[str, Any]:
        return {
            "definition": dict(RULES),
            "level": self.level,
            "rows": [row.to_json() for row in self.rows],
            "ladders": [{"ladder": ladder.label, "source": ladder.source, "slot": ladder.slot,
                         "classes": [{"rung": rung, "class": cls} for rung, cls in ladder.classes],
                         "components": None if ladder.components is None
                         else [f"{slot}={name}" for slot, name in sorted(ladder.components)],
                         "shares_arm_with": self.shared_arms.get(ladder.label, {}),
                         "shares_runs_with": self.shared_runs.get(ladder.label, []),
                         "next_rung": [{"rung": pair.lower, "next": pair.upper, "class": pair.lower_class,
                                        "next_class": pair.upper_class, "same_class": pair.same_class}
                                       for pair in adjacent_pairs(ladder)]}
                        for ladder in self.ladders],
        }


def decision_accuracy(ladders: Sequence[LadderDecisions], level: float = 0.95) -> DecisionAccuracy:
    """The counts of the module docstring over ``ladders``: over all slots and by slot, each
    with every ladder and without the ladders that share an arm with another."""
    labels = [ladder.label for ladder in ladders]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ConfigError(f"ladder(s) {', '.join(repeated)} given twice: each ladder is counted once")
    arms = shared_arms(ladders)
    alone = [ladder for ladder in ladders if ladder.label not in arms]
    rows = [_row(ALL_SLOTS, False, ladders, level), _row(ALL_SLOTS, True, alone, level)]
    for slot in sorted({ladder.slot for ladder in ladders}, key=lambda slot: (slot == SEVERAL_SLOTS, slot)):
        rows += [_row(slot, False, [ladder for ladder in ladders if ladder.slot == slot], level),
                 _row(slot, True, [ladder for ladder in alone if ladder.slot == slot], level)]
    return DecisionAccuracy(tuple(ladders), tuple(rows), arms, shared_runs(ladders), level)
