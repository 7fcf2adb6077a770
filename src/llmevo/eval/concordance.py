"""Concordance with references at scale: does a verdict at 15k–1M parameters predict the
verdict of a careful study at 100M+ parameters?

**References** (``references.toml`` beside this module, loaded by ``load_references``): one
entry per comparison, the finding at scale (direction and, where the source states one, the
change in percent), the size and tokens it was measured at, whether it was tuned, its seeds,
whether it is independent of the method's proposers, its source, and whether it is one of the
development set's rows (``../shared/reference-at-scale/``).

**How a row is scored** (``score``; the shared rule, word for word in effect, so that figures
stay comparable; ``tests/unit/test_concordance.py`` holds it):

- llmevo *better* agrees with reference *better*; *worse* agrees with *worse*; each disagrees
  with anything else;
- *non-inferior* agrees with *same* or *better*; disagrees with *worse*;
- *inconclusive* agrees with *same* only when |Δ| ≤ 1% (llmevo's own change, ``MARGIN_PERCENT``,
  the verdict's non-inferiority margin); otherwise it is a miss, scored *inconclusive*: an
  answer that says nothing is not agreement;
- a row without a class (or classed no-op) is not scored.

**What is reported** (``Concordance``): the strict rate (agree over every scored row with a
reference), agree over agree + disagree, how many of llmevo's *better* and of its *worse*
verdicts held (the per-class rates, each with its Wilson interval, ``eval.decisions.Agreement``),
how many rows are inconclusive where the reference decides, and llmevo's effect over the
reference's wherever both are numbers.

**Calibrated verdicts.** ``regime_of`` reads the regime a verdict was measured in from what the
artifact records (parameters, tokens per parameter, layers, context, what was tuned);
``Concordance.transfer`` is the measured transfer rate of a class ("tiny-scale *worse* verdicts
with a reference held in k of n"), and ``calibration_sentence`` says both. A class whose
transfer rate is below one half (``DECISION_RATE``) is not called a decision.

Public API: ``Reference``, ``load_references``, ``REFERENCES``, ``score``, ``Measured``,
``ScoredRow``, ``Concordance``, ``concordance``, ``measured_from_rows``, ``arm_choice``,
``Regime``, ``regime_of``, ``Transfer``, ``calibration_sentence``, ``published_concordance``,
``MARGIN_PERCENT``, ``DECISION_RATE``.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError, model_validator

from llmevo.errors import ConfigError
from llmevo.eval.decisions import Agreement
from llmevo.registry import StrictModel

if TYPE_CHECKING:
    from llmevo.artifacts.schema import ReproductionArtifact

REFERENCES = Path(__file__).with_name("references.toml")
MARGIN_PERCENT = 1.0  # inconclusive agrees with *same* only when |Δ| is within it
DECISION_RATE = 0.5  # a class that held in less than this share is not called a decision
CLASSES = ("better", "non-inferior", "inconclusive", "worse")
SCORES = ("agree", "disagree", "inconclusive")


class Reference(StrictModel):
    """One comparison's finding at realistic scale (``references.toml``)."""

    method: str
    vs: str
    reference: Literal["better", "same", "worse"]
    delta_percent: float | None = Field(None, description="method vs `vs`, percent; negative: lower loss")
    params: int | None = Field(None, gt=0)
    tokens: int | None = Field(None, gt=0)
    tuned: bool | None = None
    seeds: int | None = Field(None, gt=0)
    independent: bool
    strength: Literal["strong", "medium", "weak"]
    development: bool = False
    source: str = Field(min_length=1)
    note: str | None = None

    @model_validator(mode="after")
    def _direction_matches(self) -> Reference:
        delta = self.delta_percent
        if delta is not None and ((self.reference == "better" and delta >= 0)
                                  or (self.reference == "worse" and delta <= 0)):
            raise ValueError(f"{self.method} vs {self.vs}: reference {self.reference} with a change of "
                             f"{delta:+g}% (better is a negative change, worse a positive one)")
        return self


def load_references(path: Path = REFERENCES) -> tuple[Reference, ...]:
    """The references in ``path`` (a TOML file of ``[[reference]]`` tables), checked: every
    field typed, directions consistent with their numbers, each comparison once."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such references file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: not a readable references file ({error})") from None
    extra = sorted(set(data) - {"reference"})
    if extra or not isinstance(data.get("reference"), list):
        raise ConfigError(f"{path}: expected only [[reference]] tables" + (f", got {', '.join(extra)}" if extra else ""))
    found: list[Reference] = []
    for index, entry in enumerate(data["reference"]):
        try:
            found.append(Reference.model_validate(entry))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "entry"
            raise ConfigError(f"{path}: reference {index + 1}: {where}: {first['msg']}") from None
    keys = [(ref.method, ref.vs) for ref in found]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ConfigError(f"{path}: {', '.join(f'{m} vs {v}' for m, v in repeated)} given twice")
    return tuple(found)


def score(classification: str | None, reference: str, change_percent: float | None) -> str | None:
    """The shared rule (module docstring): ``agree``, ``disagree`` or ``inconclusive`` for
    llmevo's ``classification`` against the ``reference`` direction; None (not scored) for no
    class or no-op. ``change_percent`` is llmevo's change, read only for an inconclusive."""
    if reference not in ("better", "same", "worse"):
        raise ConfigError(f"a reference is better, same or worse, got {reference!r}")
    if classification in ("better", "worse"):
        return "agree" if classification == reference else "disagree"
    if classification == "non-inferior":
        return "agree" if reference in ("same", "better") else "disagree"
    if classification == "inconclusive":
        if reference == "same" and change_percent is not None and abs(change_percent) <= MARGIN_PERCENT:
            return "agree"
        return "inconclusive"
    return None


_SLOT_CHOICE = re.compile(r"llama_modern\[\w+=(.+)\]")


def arm_choice(arm: str) -> str:
    """``llama_modern[position=learned]`` -> ``learned``: the slot choice the arm makes."""
    match = _SLOT_CHOICE.fullmatch(arm)
    return match.group(1) if match else arm


# --- the regime a verdict was measured in ----------------------------------------------------


class Regime(StrictModel):
    """Where a verdict was measured, read from the artifact's recorded config."""

    params: int | None = Field(description="the baseline arm's parameters")
    method_params: int | None = Field(description="the method arm's parameters")
    tokens: int | None = Field(description="training tokens per arm")
    tokens_per_parameter: float | None = Field(description="tokens over the baseline's parameters")
    layers: int | None
    context: int | None = Field(description="the training sequence length (seq_len)")
    tuned: Literal["lr", "space", "untuned", "other"] = Field(
        description="lr: each arm's learning rate on a grid; space: each arm over its declared space; "
                    "untuned: one setting for both; other: what an external experiment declares")
    tuned_axes: dict[str, list[str]] | None = Field(None, description="space tuning: each arm's tuned axes")

    def describe(self) -> str:
        """``139,584 parameters, 7.3 tokens per parameter, 2 layers, context 64, tuned: lr only``."""
        parts = []
        if self.params is not None:
            parts.append(f"{self.params:,} parameters" + (
                f" (method {self.method_params:,})" if self.method_params not in (None, self.params) else ""))
        if self.tokens_per_parameter is not None:
            parts.append(f"{_per_parameter(self.tokens_per_parameter)} tokens per parameter")
        if self.layers is not None:
            parts.append(f"{self.layers} layers")
        if self.context is not None:
            parts.append(f"context {self.context}")
        parts.append(f"tuned: {self.tuning_words()}")
        return ", ".join(parts)

    def short(self) -> str:
        """``139,584 · 7.3 tok/p · 2 L · ctx 64 · lr`` (a table cell)."""
        parts = [f"{self.params:,}" if self.params else None,
                 f"{_per_parameter(self.tokens_per_parameter)} tok/p" if self.tokens_per_parameter else None,
                 f"{self.layers} L" if self.layers else None, f"ctx {self.context}" if self.context else None,
                 {"lr": "lr", "space": "space", "untuned": "untuned", "other": "grid"}[self.tuned]]
        return " · ".join(part for part in parts if part)

    def tuning_words(self) -> str:
        if self.tuned == "space":
            axes = self.tuned_axes or {}
            said = "; ".join(f"{arm} {', '.join(names)}" for arm, names in axes.items())
            return "a declared space per arm" + (f" ({said})" if said else "")
        return {"lr": "lr only", "untuned": "untuned (one setting for both arms)",
                "other": "the experiment's declared grid"}[self.tuned]


def _per_parameter(value: float) -> str:
    """7.3, or 0.021 below one (a smoke run's budget)."""
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def _tokens(artifact: ReproductionArtifact) -> int | None:
    setup = artifact.setup
    if setup.training_tokens:
        return int(setup.training_tokens)
    recorded = setup.recorded("tokens_per_arm")
    if isinstance(recorded, int) and recorded > 0:
        return recorded
    if setup.batch_size:
        return setup.steps_per_variant * setup.batch_size * setup.sequence_length
    return None


def regime_of(artifact: ReproductionArtifact) -> Regime:
    """The regime a reproduction's verdict was measured in: its parameters (the size dial's, else
    the baseline arm's), training tokens per arm and tokens per parameter, layers, context, and
    what was tuned, all from fields the artifact records (published artifacts included)."""
    setup, tuning = artifact.setup, artifact.tuning
    params = setup.parameters or artifact.baseline.parameters
    tokens = _tokens(artifact)
    if tuning is None:
        tuned, axes = "untuned", None
    elif tuning.space:
        tuned = "space"
        axes = {arm: list(block.space or {}) for arm, block in tuning.arms.items()}
    else:
        tuned, axes = "lr", None
    return Regime(params=params, method_params=artifact.method.parameters, tokens=tokens,
                  tokens_per_parameter=None if not tokens or not params else tokens / params,
                  layers=setup.layers, context=setup.sequence_length, tuned=tuned, tuned_axes=axes)


# --- scoring the table against the references ------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """One llmevo row: the comparison, its class, its change, and where it was measured."""

    method: str
    vs: str
    classification: str | None
    change_percent: float | None
    source: str | None = None
    regime: Mapping[str, Any] | None = None


def measured_from_rows(rows: Sequence[Mapping[str, Any]]) -> list[Measured]:
    """The leaderboard's Holm family members (``reports.leaderboard`` rows) as ``Measured``."""
    return [Measured(row["name"], arm_choice(str(row["baseline"])), row.get("classification"),
                     row.get("change_percent"), row.get("source"), row.get("regime"))
            for row in rows if row.get("kind") == "reproduction" and row.get("holm")]


@dataclass(frozen=True)
class ScoredRow:
    reference: Reference
    measured: Measured | None  # None: llmevo's table has no such comparison
    score: str | None  # agree / disagree / inconclusive; None: not scored

    @property
    def ratio(self) -> float | None:
        """llmevo's change over the reference's, where both are numbers (and the reference's is not 0)."""
        if self.measured is None or self.measured.change_percent is None or not self.reference.delta_percent:
            return None
        return self.measured.change_percent / self.reference.delta_percent

    def to_json(self) -> dict[str, Any]:
        measured = self.measured
        return {"method": self.reference.method, "vs": self.reference.vs,
                "reference": self.reference.model_dump(mode="json"),
                "llmevo": None if measured is None else {
                    "class": measured.classification, "change_percent": measured.change_percent,
                    "source": measured.source, "regime": measured.regime},
                "score": self.score, "ratio": self.ratio}


@dataclass(frozen=True)
class Transfer:
    """How often tiny-scale verdicts of one class held at scale: ``held`` of ``of``."""

    classification: str
    held: int
    of: int
    low: float | None
    high: float | None

    @property
    def rate(self) -> float | None:
        return self.held / self.of if self.of else None

    @property
    def decision(self) -> bool:
        """Whether the class may be called a decision: it held in at least half its rows."""
        return self.rate is not None and self.rate >= DECISION_RATE

    def to_json(self) -> dict[str, Any]:
        return {"class": self.classification, "held": self.held, "of": self.of, "rate": self.rate,
                "low": self.low, "high": self.high, "decision": self.decision}


@dataclass(frozen=True)
class Concordance:
    """Every reference scored against the table (see the module docstring)."""

    rows: tuple[ScoredRow, ...]

    @property
    def scored(self) -> tuple[ScoredRow, ...]:
        return tuple(row for row in self.rows if row.score is not None)

    def count(self, score_: str) -> int:
        return sum(row.score == score_ for row in self.rows)

    @property
    def strict(self) -> Agreement:
        """Agree over every scored row with a reference."""
        return Agreement.of(self.count("agree"), len(self.scored))

    @property
    def decided(self) -> Agreement:
        """Agree over agree + disagree."""
        return Agreement.of(self.count("agree"), self.count("agree") + self.count("disagree"))

    def by_class(self, classification: str) -> Agreement:
        """Of the scored rows llmevo classed ``classification``, those that agree."""
        rows = [row for row in self.scored if row.measured and row.measured.classification == classification]
        return Agreement.of(sum(row.score == "agree" for row in rows), len(rows))

    def transfer(self, classification: str | None) -> Transfer | None:
        """The measured transfer rate of a class; None for no class (or a class never scored)."""
        if classification not in CLASSES:
            return None
        found = self.by_class(classification)
        return Transfer(classification, found.agreed, found.total, found.low, found.high)

    @property
    def inconclusive_where_decided(self) -> int:
        """Rows scored inconclusive whose reference is better or worse."""
        return sum(row.score == "inconclusive" and row.reference.reference != "same" for row in self.rows)

    def ratios(self, tuned_only: bool = False) -> list[float]:
        return [row.ratio for row in self.rows if row.ratio is not None
                and (not tuned_only or row.reference.tuned)]

    def development(self) -> Concordance:
        """The development set's rows alone."""
        return Concordance(tuple(row for row in self.rows if row.reference.development))

    def summary(self) -> str:
        """``4 of 11 rows agree (36%); 'better' held 2 of 3, 'worse' held 0 of 2; 3 rows
        inconclusive where the reference decides`` (the shared README's form)."""
        strict, better, worse = self.strict, self.by_class("better"), self.by_class("worse")
        rate = "" if strict.rate is None else f" ({100 * strict.rate:.0f}%)"
        return (f"{strict.agreed} of {strict.total} rows agree{rate}; 'better' held {better.agreed} of "
                f"{better.total}, 'worse' held {worse.agreed} of {worse.total}; "
                f"{self.inconclusive_where_decided} rows inconclusive where the reference decides")

    def to_json(self) -> dict[str, Any]:
        def median(values: list[float]) -> float | None:
            return statistics.median(values) if values else None

        return {"rule": RULE, "margin_percent": MARGIN_PERCENT, "decision_rate": DECISION_RATE,
                "strict": self.strict.to_json(), "agree_over_decided": self.decided.to_json(),
                "by_class": {cls: self.by_class(cls).to_json() for cls in CLASSES},
                "inconclusive_where_reference_decides": self.inconclusive_where_decided,
                "median_ratio": median(self.ratios()), "median_ratio_tuned": median(self.ratios(True)),
                "development": self.development().summary(), "summary": self.summary(),
                "rows": [row.to_json() for row in self.rows]}


RULE = ("better agrees with better, worse with worse; non-inferior agrees with same or better and "
        "disagrees with worse; inconclusive agrees with same only when |Δ| ≤ 1% (llmevo's change), "
        "otherwise it is a miss (inconclusive); a row without a class is not scored")


def concordance(measured: Sequence[Measured], references: Sequence[Reference]) -> Concordance:
    """Each reference scored against llmevo's rows of the same comparison (method and baseline
    choice): one scored row per such llmevo row (the table holds one per comparison and preset),
    and a reference without one listed, not scored."""
    index: dict[tuple[str, str], list[Measured]] = {}
    for row in measured:
        index.setdefault((row.method, row.vs), []).append(row)
    scored = []
    for reference in references:
        found = index.get((reference.method, reference.vs)) or [None]
        scored += [ScoredRow(reference, row, None if row is None else
                             score(row.classification, reference.reference, row.change_percent))
                   for row in found]
    return Concordance(tuple(scored))


def calibration_sentence(regime: Regime | None, transfer: Transfer | None, external: bool = False) -> str:
    """What a verdict sentence adds: the regime it was measured in and its class's transfer rate
    at scale; a class below ``DECISION_RATE`` is said not to be a decision."""
    where = ("Measured at " + regime.describe() + ".") if regime is not None else \
        "Measured in the regime the experiment's script sets (its sizes are not recorded)."
    if external:
        return f"{where} How its class transfers to scale is not measured for external scripts."
    if transfer is None:
        return f"{where} Its transfer to scale is unmeasured (no class, or no published concordance)."
    if transfer.of == 0:
        return (f"{where} At scale: no tiny-scale *{transfer.classification}* verdict has a reference yet, "
                "so its transfer is unmeasured and it is not a decision for a larger model.")
    held = (f"{where} At scale: tiny-scale *{transfer.classification}* verdicts with a reference held in "
            f"{transfer.held} of {transfer.of} ({100 * (transfer.rate or 0):.0f}%, 95% Wilson "
            f"{100 * (transfer.low or 0):.0f}–{100 * (transfer.high or 0):.0f}%)")
    if transfer.decision:
        return held + "."
    return held + "; below one half, so it is not a decision for a larger model."


@lru_cache(maxsize=8)
def _published(path: Path, stamp: int, references: Path, references_stamp: int) -> Concordance | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None
    return concordance(measured_from_rows(rows), load_references(references))


def published_concordance(docs: Path, references: Path = REFERENCES) -> Concordance | None:
    """The concordance of the published table (``docs/LEADERBOARD.json``'s rows, which
    ``llmevo leaderboard`` writes from the artifacts) with ``references``; None where ``docs``
    holds no leaderboard."""
    path = Path(docs) / "LEADERBOARD.json"
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return None
    return _published(path.resolve(), stamp, Path(references).resolve(), Path(references).stat().st_mtime_ns)


def format_ratio(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.2g}×" if abs(value) < 10 else f"{value:.0f}×"
