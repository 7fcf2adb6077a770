"""The verdict interface for research loops: one comparison's answer as a small, versioned record.

A loop (a person's script, an LLM agent, a sweep) that asks "is this candidate better than
that baseline?" needs the protocol's answer in a form it can read, not a table. A
``VerdictRecord`` (schema ``llmevo.verdict/1``, documented field by field below and in the
user guide) is made from any comparison artifact: a built-in reproduction (a component
against its ablation, ``--against``, or ``--genome``) or an external experiment
(``--experiment``). It carries

- the class (better / non-inferior / inconclusive / worse, or ``no verdict`` with the reason),
  the change of the verdict metric with its 95% paired interval, the seeds, and the p-value
  of the paired t-test (``eval.multiplicity.p_value``, the procedure the interval uses);
- the family reading: Holm's adjustment over the published family with this comparison in
  it, a published comparison of the same key replaced by it (a rerun supersedes), so
  ``family_p_value`` and ``family_classification`` are what the leaderboard would show if it
  were published. A reproduction's family is llmevo's table (``promotion.family_entries``);
  an external experiment's is its own experiment's published comparisons
  (``external_family``: ``docs/external/<name>/``), never llmevo's table;
- the noise floor (the baseline's seed-to-seed spread, percent of its mean);
- the budget: runs in the comparison, how many were trained and how many loaded from the
  cache, the wall seconds spent, and what is left under a declared cap;
- the calibration: the ``regime`` the verdict was measured in (parameters, tokens per
  parameter, layers, context, what was tuned; ``eval.concordance.regime_of``, read from the
  artifact's recorded config), the ``transfer`` rate of its class (how often the published
  table's verdicts of that class held in studies at scale, ``eval.concordance``: computed from
  the published leaderboard and the references file when the record is made), and
  ``calibration``, the sentence that says both (a class below one half is not called a
  decision). An external experiment records no regime, and its class's transfer is not measured.

A ladder (``ladder.json``: a built-in ladder, or an external one) is answered rung by rung
(``VerdictService.records``): one record per rung, ``size`` naming the rung (its parameters,
or the external ladder's size parameter) and ``ladder`` the file.

``VerdictService`` is the warm mode: it reads the published family once and answers many
artifacts without reading it again, so a loop pays the family's fixed cost once
(``verdict_record`` is the one-shot form).

Public API: ``VERDICT_SCHEMA``, ``VerdictRecord``, ``Budget``, ``FamilyReading``,
``TransferReading``, ``VerdictService``, ``verdict_record``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from llmevo.digests import sha256_file
from llmevo.errors import ArtifactError, ConfigError
from llmevo.eval.concordance import Regime, Transfer, calibration_sentence
from llmevo.registry import StrictModel

__all__ = ["VERDICT_SCHEMA", "Budget", "FamilyReading", "TransferReading", "VerdictRecord", "VerdictService",
           "verdict_record"]

VERDICT_SCHEMA = "llmevo.verdict/1"
EXTERNAL_SCHEMA = "llmevo.external/1"
EXTERNAL_LADDER = "llmevo.external-ladder/1"
NOT_COMPARISONS = {"llmevo.external-family/1": "an external experiment's family index (family.json)"}


class Budget(StrictModel):
    """What the comparison cost: runs (report and tuning, both arms), trained or loaded."""

    runs: int = Field(description="training runs the comparison consists of (both arms, tuning and report)")
    runs_trained: int = Field(description="of those, trained by this command")
    runs_cached: int = Field(description="of those, loaded from the arm cache (trained before)")
    wall_seconds: float | None = Field(description="wall seconds the command spent training and evaluating")
    cap_seconds: float | None = Field(description="the declared cap (--budget-seconds), if any")
    left_seconds: float | None = Field(description="cap minus wall seconds, if a cap was declared")


class FamilyReading(StrictModel):
    """Holm over the published family with this comparison in it."""

    size: int = Field(description="comparisons in the family, this one included")
    p_value: float = Field(description="Holm-adjusted p-value of this comparison")
    ci_low: float = Field(description="the interval widened to its Holm step-down level (percent)")
    ci_high: float
    classification: str | None = Field(description="the class read from the widened interval")
    replaces: str | None = Field(description="the published artifact of the same comparison this one stands in for")
    scope: str = Field("llmevo's published table (docs/reproductions)",
                       description="which family: llmevo's table, or an external experiment's own comparisons")


class TransferReading(StrictModel):
    """How often the published table's verdicts of this class held in studies at scale."""

    class_: str = Field(alias="class", description="the verdict class it is the rate of")
    held: int = Field(description="rows of that class whose reference at scale agrees (eval.concordance's rule)")
    of: int = Field(description="rows of that class with a reference")
    rate: float | None
    low: float | None = Field(description="95% Wilson interval of the rate")
    high: float | None
    decision: bool = Field(description="whether the class may be called a decision: it held in at least half")

    @classmethod
    def of_transfer(cls, transfer: Transfer) -> TransferReading:
        return cls.model_validate({"class": transfer.classification, "held": transfer.held, "of": transfer.of,
                                   "rate": transfer.rate, "low": transfer.low, "high": transfer.high,
                                   "decision": transfer.decision})


class VerdictRecord(StrictModel):
    """One comparison's answer (schema ``llmevo.verdict/1``)."""

    schema_: Literal["llmevo.verdict/1"] = Field(VERDICT_SCHEMA, alias="schema")
    kind: Literal["reproduction", "external"]
    name: str
    baseline: str = Field(description="the baseline arm, as the artifact names it")
    method: str = Field(description="the candidate arm")
    metric: str
    lower_is_better: bool
    classification: str | None = Field(description="better / non-inferior / inconclusive / worse; None: no verdict")
    no_verdict_reason: str | None = None
    change_percent: float | None = Field(description="mean per-seed relative change of the metric (percent)")
    ci_low: float | None = Field(description="95% paired Student t-interval (percent)")
    ci_high: float | None = None
    seeds: int
    p_value: float | None = Field(description="two-sided paired t-test of no change")
    margin_percent: float
    noise_floor_percent: float | None = Field(description="the baseline's seed-to-seed std, percent of its mean")
    formal: bool = Field(description="3 or more paired seeds (a formal comparison)")
    tuned: bool
    family: FamilyReading | None = Field(description="Holm over the published family; None without an interval")
    budget: Budget
    artifact: str
    regime: Regime | None = Field(None, description="where it was measured, from the artifact's config; "
                                  "None for an external experiment")
    transfer: TransferReading | None = Field(None, description="its class's transfer rate to scale; None: no "
                                             "class, no published concordance, or an external experiment")
    calibration: str = Field("", description="the sentence that says the regime and the transfer rate")
    size: str | None = Field(None, description="a ladder's rung: its size (parameters, or the declared size)")
    ladder: str | None = Field(None, description="the ladder file the rung was read from")

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such artifact") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ArtifactError(f"{path}: not a readable JSON artifact ({error})") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path}: not an artifact (a JSON object)")
    return data


def _external(path: Path, data: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return _external_facts(path, data)
    except (KeyError, TypeError, AttributeError, ValueError) as error:  # a torn or hand-edited file
        raise ArtifactError(f"{path}: not a complete external artifact (at {error!s:.60})") from None


def _external_facts(path: Path, data: Mapping[str, Any]) -> dict[str, Any]:
    spec = data["experiment"]
    verdict = data.get("verdict")
    change = ((data.get("statistics") or {}).get(spec["metric"]) or {}).get("paired_relative_change_percent") or {}
    runs = data.get("runs") or []
    cached = sum(1 for run in runs if run.get("cached"))
    from llmevo.experiments.external import artifact_key

    return {
        "kind": "external", "name": data["name"], "key": artifact_key(data), "data": data,
        "baseline": data["baseline"]["label"], "method": data["method"]["label"],
        "metric": spec["metric"], "lower_is_better": spec["direction"] == "lower",
        "classification": (verdict or {}).get("classification"), "no_verdict_reason": data.get("verdict_withheld"),
        "change": change, "seeds": len(data.get("per_seed") or []),
        "margin": float(data["protocol"]["margin_percent"]),
        "noise": (verdict or {}).get("noise_floor_percent"),
        "tuned": bool(data.get("tuned", data["protocol"].get("tuning") is not None)),
        "runs": len(runs), "cached": cached,
        # the real cost: a cached run counts at the time it took when it ran (recorded in its cache entry;
        # a run reused within one comparison is recorded at 0 s)
        "wall": sum(float(run.get("wall_s") or 0.0) for run in runs),
        "regime": None,
    }


def _tuning_runs(tuning: Mapping[str, Any] | None) -> int:
    if not tuning:
        return 0
    seeds = len(tuning.get("seeds") or [])
    total = 0
    for arm in (tuning.get("arms") or {}).values():
        total += len(arm.get("settings") or []) * seeds
        total += sum(len(item.get("seeds") or [1]) if isinstance(item, Mapping) else 1
                     for item in arm.get("confirmed") or [])
    return total


def _reproduction(path: Path, raw: Mapping[str, Any]) -> dict[str, Any]:
    from llmevo.artifacts.schema import ReproductionArtifact, validate_artifact
    from llmevo.eval.concordance import regime_of
    from llmevo.promotion import comparison_key

    artifact = validate_artifact(raw, str(path))
    if not isinstance(artifact, ReproductionArtifact):
        raise ConfigError(f"{path}: a {artifact.kind} artifact has no comparison verdict; "
                          "give a reproduction or an --experiment artifact")
    change = artifact.headline_change
    stats = artifact.statistics.get(change.metric) if artifact.statistics else None
    paired = stats.paired_relative_change_percent if stats is not None else None
    verdict = artifact.verdict
    cache = raw.get("cache") or {}
    cached = sum(len(block.get("report_seeds") or []) + len(block.get("tuning") or []) for block in cache.values())
    seeds = len(artifact.per_seed)
    wall = (raw.get("setup") or {}).get("wall_seconds")
    baseline = raw["baseline"].get("name") or artifact.against or "baseline"
    return {
        "kind": "reproduction", "name": artifact.name, "key": comparison_key(artifact),
        "baseline": str(raw["baseline"].get("arm") or baseline), "method": str(raw["method"].get("arm") or artifact.name),
        "metric": change.metric, "lower_is_better": verdict.lower_is_better if verdict else True,
        "classification": verdict.classification if verdict else None,
        "no_verdict_reason": None if verdict and verdict.classification else
        ("fewer than 3 paired seeds: no interval" if seeds < 3 else None),
        "change": {"mean": change.percent, "ci_low": change.ci_low, "ci_high": change.ci_high,
                   "n": paired.n if paired is not None else seeds},
        "seeds": seeds, "margin": float((verdict.margin_percent if verdict else None) or 1.0),
        "noise": verdict.noise_floor_percent if verdict else None,
        "tuned": artifact.tuning is not None,
        "runs": 2 * seeds + _tuning_runs(raw.get("tuning")), "cached": cached,
        "wall": sum(wall.values()) if isinstance(wall, Mapping) else wall,
        "regime": regime_of(artifact),
    }


class VerdictService:
    """Answers many artifacts against one read of the published family (the warm mode).

    ``docs``: the folder whose ``reproductions/*/metrics/`` hold the published family (None:
    no family reading)."""

    def __init__(self, docs: Path | None = Path("docs")):
        self.docs = docs
        self._read_family = False  # the family is read (and ``docs`` checked) after the first artifact

    def _family_read(self) -> None:
        if self._read_family:
            return
        from llmevo.eval.multiplicity import from_interval
        from llmevo.promotion import comparison_key, family_entries

        docs = self.docs
        if docs is not None and not Path(docs).is_dir():
            raise ConfigError(f"--docs {docs}: no such folder (the published family Holm reads); "
                              "give the repository's docs/ or --no-family")
        from llmevo.artifacts.provenance import REPO_ROOT
        from llmevo.eval.concordance import published_concordance

        # the transfer rates: the published table's concordance (this docs/, else the checkout's)
        self.concordance = published_concordance(Path(docs) if docs is not None else REPO_ROOT / "docs")
        self._external: dict[str, list] = {}  # an experiment's published family, read on first use
        members = [] if docs is None or not (Path(docs) / "reproductions").is_dir() else family_entries(Path(docs))
        # only what Holm reads is kept: the typed artifacts would stay alive for every answer,
        # and multipletests runs gc.collect(), whose cost grows with the objects alive (0.5 s
        # a call with the family's artifacts held, measured; docs/LOG.md)
        self._family = []
        for member_path, member in members:
            head = member.headline_change
            n = member.statistics[head.metric].paired_relative_change_percent.n  # type: ignore[index]
            self._family.append((comparison_key(member), member_path,
                                 from_interval(head.percent, head.ci_low, head.ci_high, n)))
        self._read_family = True

    def _external_reading(self, facts: Mapping[str, Any], path: Path) -> FamilyReading | None:
        """Holm over the published comparisons of the artifact's own experiment (read once
        per experiment), this one in it."""
        from llmevo.experiments.external_family import family_members, family_reading

        folder = Path(self.docs) / "external" / facts["name"]  # type: ignore[arg-type]
        if facts["name"] not in self._external:
            self._external[facts["name"]] = family_members(folder)
        reading = family_reading(folder, path, facts["data"], self._external[facts["name"]])
        if reading is None:
            return None
        return FamilyReading(size=reading["size"], p_value=float(reading["p_holm"]),
                             ci_low=float(reading["ci_low"]), ci_high=float(reading["ci_high"]),
                             classification=reading["classification"], replaces=reading["replaces"],
                             scope=reading["scope"])

    def _family_reading(self, facts: Mapping[str, Any], path: Path) -> FamilyReading | None:
        from llmevo.eval.multiplicity import from_interval, holm
        from llmevo.eval.stats import classify_change

        if facts["kind"] == "external":
            return None if self.docs is None else self._external_reading(facts, path)
        change = facts["change"]
        if self.docs is None or None in (change.get("mean"), change.get("ci_low"), change.get("ci_high")) \
                or (change.get("n") or 0) < 2:
            return None
        estimates, replaced = [], None
        for key, member_path, estimate in self._family:
            if facts["key"] is not None and key == facts["key"]:
                replaced = member_path
                continue
            estimates.append(estimate)
        estimates.append(from_interval(change["mean"], change["ci_low"], change["ci_high"], int(change["n"])))
        result = holm(estimates)[-1]
        same = replaced is not None and replaced.resolve() == Path(path).resolve()
        return FamilyReading(size=result.family_size, p_value=float(result.p_holm),
                             ci_low=float(result.ci_low), ci_high=float(result.ci_high),
                             classification=classify_change(result.ci_low, result.ci_high, facts["margin"],
                                                            facts["lower_is_better"]),
                             replaces=None if replaced is None or same else str(replaced))

    def verdict(self, path: Path | str, budget_seconds: float | None = None) -> VerdictRecord:
        """The record for the artifact at ``path`` (a reproduction or an external experiment)."""
        from llmevo.eval.multiplicity import from_interval, p_value

        if budget_seconds is not None and not budget_seconds > 0:
            raise ConfigError(f"--budget-seconds must be positive, got {budget_seconds}")
        path = Path(path)
        data = _read(path)
        if data.get("schema") in NOT_COMPARISONS:
            raise ConfigError(f"{path}: {NOT_COMPARISONS[data['schema']]}, not a comparison artifact; "
                              "give one of its comparisons' artifacts")
        if _is_ladder(data):
            raise ConfigError(f"{path}: a ladder file, one comparison per rung; read it with "
                              "VerdictService.records (llmevo verdict does)")
        facts = _external(path, data) if data.get("schema") == EXTERNAL_SCHEMA else _reproduction(path, data)
        self._family_read()  # after the artifact is checked: a bad artifact is named before a missing --docs
        change = facts["change"]
        interval = None not in (change.get("mean"), change.get("ci_low"), change.get("ci_high")) \
            and (change.get("n") or 0) >= 2
        p = p_value(from_interval(change["mean"], change["ci_low"], change["ci_high"], int(change["n"]))) \
            if interval else None
        classification = facts["classification"]
        if classification is None and interval and facts["seeds"] >= 3:
            from llmevo.eval.stats import classify_change

            # an artifact written before the four classes: the class its interval gives by the same rule
            classification = classify_change(change["ci_low"], change["ci_high"], facts["margin"],
                                             facts["lower_is_better"])
        wall = None if facts["wall"] is None else float(facts["wall"])
        trained = max(facts["runs"] - facts["cached"], 0)
        external = facts["kind"] == "external"
        transfer = None if external or self.concordance is None else self.concordance.transfer(classification)
        return VerdictRecord(
            kind=facts["kind"], name=facts["name"], baseline=facts["baseline"], method=facts["method"],
            metric=facts["metric"], lower_is_better=facts["lower_is_better"],
            classification=classification,
            no_verdict_reason=None if classification else (facts["no_verdict_reason"] or "no paired interval"),
            change_percent=change.get("mean"), ci_low=change.get("ci_low"), ci_high=change.get("ci_high"),
            seeds=facts["seeds"], p_value=p, margin_percent=facts["margin"], noise_floor_percent=facts["noise"],
            formal=facts["seeds"] >= 3, tuned=facts["tuned"],
            family=self._family_reading(facts, path) if interval else None,
            budget=Budget(runs=facts["runs"], runs_trained=trained, runs_cached=facts["cached"], wall_seconds=wall,
                          cap_seconds=budget_seconds,
                          left_seconds=None if budget_seconds is None or wall is None else budget_seconds - wall),
            artifact=str(path), regime=facts["regime"],
            transfer=None if transfer is None else TransferReading.of_transfer(transfer),
            calibration=calibration_sentence(facts["regime"], transfer, external=external),
        )

    def records(self, path: Path | str, budget_seconds: float | None = None) -> list[VerdictRecord]:
        """The records of one file: a comparison artifact's one, or a ladder's, one per rung in
        size order, each labelled by its size (a rung's artifact must be the one the ladder file
        records: sha256)."""
        path = Path(path)
        data = _read(path)
        if not _is_ladder(data):
            return [self.verdict(path, budget_seconds)]
        records = []
        for artifact, sha256, size in _ladder_rungs(path, data):
            try:
                digest = sha256_file(artifact)
            except OSError as error:
                raise ArtifactError(f"{path}: the rung artifact {artifact} cannot be read "
                                    f"({error.strerror or error})") from None
            if digest != sha256:
                raise ArtifactError(f"{path}: the rung artifact {artifact} is not the one the ladder file "
                                    "records (sha256 differs)")
            record = self.verdict(artifact, budget_seconds)
            records.append(record.model_copy(update={"size": size, "ladder": str(path)}))
        return records

    def many(self, paths: Sequence[Path | str]) -> list[VerdictRecord]:
        return [record for path in paths for record in self.records(path)]


def _is_ladder(data: Mapping[str, Any]) -> bool:
    from llmevo.artifacts.ladder import LADDER_KIND

    return data.get("kind") == LADDER_KIND or data.get("schema") == EXTERNAL_LADDER


def _ladder_rungs(path: Path, data: Mapping[str, Any]) -> list[tuple[Path, str, str]]:
    """``(rung artifact, its recorded sha256, its size label)`` per rung, in size order."""
    if data.get("schema") == EXTERNAL_LADDER:
        param = (data.get("size") or {}).get("param", "size")
        rows = data.get("rungs") or []
        try:
            return [(path.parent / row["artifact"], row["artifact_sha256"], f"{param}={row['size']}")
                    for row in rows]
        except (KeyError, TypeError):
            raise ArtifactError(f"{path}: an external ladder whose rungs do not name their artifacts") from None
    from llmevo.artifacts.ladder import load_ladder

    ladder = load_ladder(path)
    return [(path.parent / rung.artifact, rung.artifact_sha256, f"{rung.parameters:,} parameters (rung {rung.rung})")
            for rung in sorted(ladder.rungs, key=lambda rung: rung.parameters)]


def verdict_record(path: Path | str, docs: Path | None = Path("docs"),
                   budget_seconds: float | None = None) -> VerdictRecord:
    """One artifact's ``VerdictRecord`` (reads the published family under ``docs`` once)."""
    return VerdictService(docs).verdict(path, budget_seconds)
