"""A component's standing, read from its published evidence: the tier it reached, and
whether it is promoted into the evolution search space (and why).

The tier is what the artifacts under ``docs/`` show, never a flag in the manifest: a
published reproduction (``docs/reproductions/<arxiv>-<name>/metrics/*.json``) is
``l2_public_dataset``, a published component diagnostic
(``docs/foundation-models/<arxiv>-<name>/metrics/*.json``) is ``l1_mechanism``, nothing is
``none``. Only artifacts whose ``manifest_ref`` is the component's count.

A component is promoted when its manifest declares it part of the baseline, or when a
published *tuned formal* reproduction (3 or more paired seeds, both arms tuned on one
learning-rate grid: a ``tuning`` block) classed it ``better`` or ``non-inferior`` than its
ablation on validation (the four-class verdict with margin δ,
``llmevo.eval.stats.classify_change``): evidence of non-inferiority, not absence of
evidence. An untuned reproduction never promotes; neither does an ``inconclusive`` or
``worse`` one, nor a ``no-op`` one (its arms compute the same function, measured before
training by ``llmevo.runner.equivalence`` and run only on ``--allow-noop``: whatever its
interval, it is no evidence about the component). The newest tuned formal artifact decides (by its ``provenance.created_at``).
Only comparisons against the declared ablation count: an artifact whose baseline was chosen
with ``llmevo reproduce NAME --against OTHER`` (``setup.against``) is extra evidence about
llama_modern's own choice, shown by ``show``/``report``/``leaderboard``, never a claim
(SPEC: the ablation is "the component it is compared against in the baseline arm").

**Family-wise.** The class that promotes is the Holm-adjusted one (``FamilyVerdict``,
``llmevo.eval.multiplicity``): the family is the published table of tuned evidence
(``family_entries``: every tuned formal reproduction under ``docs/reproductions/``, the newest
per comparison: component, baseline choice, preset), each comparison's interval widened to
its Holm step-down level and classed by the same rules. A no-op member stays in the family
(it was run and published; counting it only makes the others' levels stricter) and is classed
``no-op`` alone and after Holm. A component better than its ablation
alone but inconclusive once the table's other comparisons are counted is not promoted.

Artifacts are read through the validated schema (``load_artifact``): a file in a metrics
folder that does not validate (malformed, or NaN/infinity in a statistic) is an error, not
evidence and not silently skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from llmevo.artifacts.schema import Artifact, ReproductionArtifact, load_artifact
from llmevo.errors import ConfigError
from llmevo.eval.multiplicity import DEFAULT_ALPHA, HolmAdjusted, from_interval, holm
from llmevo.eval.stats import DEFAULT_MARGIN_PERCENT, NOOP_CLASS, classify_change
from llmevo.registry import ComponentSpec, Registry

PROMOTING_CLASSES = ("better", "non-inferior")

EvaluationTier = Literal["none", "l1_mechanism", "l2_public_dataset"]
EVIDENCE_FOLDERS: tuple[tuple[EvaluationTier, str], ...] = (
    ("l2_public_dataset", "reproductions"),
    ("l1_mechanism", "foundation-models"),
)


@dataclass(frozen=True)
class Promotion:
    name: str
    slot: str
    promoted: bool
    reason: str
    artifact: Path | None = None


def reproduction_folder(spec: ComponentSpec) -> str:
    """``<arxiv>-<name>``: where ``llmevo reproduce --publish`` writes ``spec``'s artifacts."""
    paper = spec.manifest.paper
    return f"{paper.arxiv_id}-{spec.name}" if paper else spec.name


def published_artifacts(spec: ComponentSpec, docs: Path, kind: str) -> list[tuple[Path, Artifact]]:
    """``spec``'s artifacts under ``docs/<kind>/<arxiv>-<name>/metrics/``, by path.

    Each file is loaded through the validated schema: one that does not validate is an
    ``ArtifactError``, never skipped. Only artifacts whose ``manifest_ref`` is ``spec``'s count."""
    folder = docs / kind / reproduction_folder(spec) / "metrics"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        artifact = load_artifact(path)
        if artifact.manifest_ref == spec.manifest.manifest_ref:
            found.append((path, artifact))
    return found


def tier_reached(spec: ComponentSpec, docs: Path) -> EvaluationTier:
    """The highest tier ``spec``'s published artifacts under ``docs`` show."""
    for tier, kind in EVIDENCE_FOLDERS:
        if published_artifacts(spec, docs, kind):
            return tier
    return "none"


def formal_artifacts(spec: ComponentSpec, docs: Path) -> list[tuple[Path, ReproductionArtifact]]:
    """Formal reproduction artifacts of ``spec`` against its declared ablation under ``docs``,
    newest first (``--against`` artifacts are left out)."""
    found = [
        (path, artifact)
        for path, artifact in published_artifacts(spec, docs, "reproductions")
        if isinstance(artifact, ReproductionArtifact) and artifact.evaluation_protocol.formal_comparison
        and artifact.against is None
    ]
    found.sort(key=lambda item: item[1].provenance.created_at or "", reverse=True)
    return found


def _significantly_worse(artifact: ReproductionArtifact) -> bool:
    """The verdict is significant and its metric's paired change points the wrong way.

    A significant verdict whose metric has no statistics cannot show which way it went;
    it counts as worse (the rule never promotes on missing evidence)."""
    verdict = artifact.verdict
    if verdict is None or not verdict.significant:
        return False
    entry = (artifact.statistics or {}).get(verdict.metric)
    if entry is None:
        return True
    mean = entry.paired_relative_change_percent.mean
    return mean > 0 if verdict.lower_is_better else mean < 0


def promotion(spec: ComponentSpec, docs: Path,
              family: Mapping[Path, FamilyVerdict] | None = None) -> Promotion:
    """``spec``'s standing; ``family``: the published family's verdicts
    (``family_verdicts(family_entries(docs))``, read here when not given)."""
    if spec.manifest.baseline:
        return Promotion(spec.name, spec.slot, True, "declared in its manifest (baseline component)")
    artifacts = formal_artifacts(spec, docs)
    if not artifacts:
        return Promotion(spec.name, spec.slot, False, "no formal (3+ seed) reproduction published yet")
    tuned = [(path, artifact) for path, artifact in artifacts if artifact.tuning is not None]
    if not tuned:
        path, artifact = artifacts[0]
        worse = " (and it was significantly worse)" if _significantly_worse(artifact) else ""
        return Promotion(spec.name, spec.slot, False,
                         f"no tuned formal reproduction yet; untuned evidence does not promote{worse}", path)
    path, artifact = tuned[0]
    if artifact.noop:
        return Promotion(spec.name, spec.slot, False,
                         f"{NOOP_CLASS} (tuned): its arms compute the same function "
                         f"({artifact.equivalence.reason if artifact.equivalence else 'recorded'}); "
                         "a no-op never promotes", path)
    if family is None:
        family = family_verdicts(family_entries(docs))
    summary = artifact.verdict.summary if artifact.verdict else "no verdict recorded"
    adjusted = family.get(path.resolve())
    if adjusted is None:  # no interval to adjust: the class alone (None promotes nothing)
        label, how = verdict_class(artifact), ""
    else:
        label = adjusted.classification
        how = (f" after Holm over {adjusted.holm.family_size} published comparisons "
               f"(alone: {adjusted.alone})")
    promoted = label in PROMOTING_CLASSES
    return Promotion(spec.name, spec.slot, promoted,
                     f"{label or 'unclassified'} (tuned){how}: {summary}", path)


def verdict_class(artifact: ReproductionArtifact) -> str | None:
    """The artifact's four-class verdict: recorded, or classified from the interval of its
    headline change at its margin (``DEFAULT_MARGIN_PERCENT`` where none is recorded)."""
    verdict = artifact.verdict
    if artifact.noop:
        return NOOP_CLASS
    if verdict is not None and verdict.classification:
        return verdict.classification
    change = artifact.headline_change
    margin = (verdict.margin_percent if verdict is not None else None) or DEFAULT_MARGIN_PERCENT
    lower_is_better = verdict.lower_is_better if verdict is not None else True
    return classify_change(change.ci_low, change.ci_high, float(margin), lower_is_better)


def promotions(registry: Registry, docs: Path) -> dict[str, Promotion]:
    """``{name: Promotion}`` for every registered component (the family read once)."""
    family = family_verdicts(family_entries(docs))
    return {spec.name: promotion(spec, docs, family) for spec in registry.all()}


# --- the published family, Holm-adjusted ---------------------------------------------------


@dataclass(frozen=True)
class FamilyVerdict:
    """One comparison of the published family: its class alone and after Holm."""

    alone: str | None  # the per-comparison class (95% interval)
    classification: str | None  # the class of the Holm-adjusted interval
    margin_percent: float
    holm: HolmAdjusted


def comparison_key(artifact: ReproductionArtifact) -> tuple[str, str | None, str | None]:
    """What one row of the published table compares: component, baseline choice, preset."""
    return artifact.manifest_ref, artifact.against, artifact.setup.preset


def family_members(entries: Sequence[tuple[Path, Artifact]]) -> list[tuple[Path, ReproductionArtifact]]:
    """The tuned formal reproductions of ``entries`` with an interval on their headline
    change, the newest per ``comparison_key`` (an older one is superseded, not a member),
    in path order. A compute-matched reproduction (``--match flops``) is no member: it reads
    the same claim at another budget, so counting it would test one hypothesis twice, and the
    protocol of record matches tokens; it is shown beside the family, never promoting."""
    newest: dict[tuple, tuple[Path, ReproductionArtifact]] = {}
    for path, artifact in entries:
        if not (isinstance(artifact, ReproductionArtifact) and artifact.tuning is not None
                and artifact.evaluation_protocol.formal_comparison):
            continue
        if artifact.setup.match == "flops":
            continue
        change = artifact.headline_change
        if change.percent is None or change.ci_low is None or change.ci_high is None:
            continue
        key = comparison_key(artifact)
        held = newest.get(key)
        if held is None or (artifact.provenance.created_at or "") > (held[1].provenance.created_at or ""):
            newest[key] = (path, artifact)
    return sorted(newest.values(), key=lambda entry: str(entry[0]))


def family_entries(docs: Path) -> list[tuple[Path, ReproductionArtifact]]:
    """The published family: ``family_members`` of every artifact under
    ``docs/reproductions/*/metrics/`` (each loaded through the validated schema)."""
    paths = sorted((Path(docs) / "reproductions").glob("*/metrics/*.json"))
    return family_members([(path, load_artifact(path)) for path in paths])


def family_verdicts(members: Sequence[tuple[Path, ReproductionArtifact]],
                    alpha: float = DEFAULT_ALPHA) -> dict[Path, FamilyVerdict]:
    """``{resolved path: FamilyVerdict}``: ``members`` (one family) Holm-adjusted at
    ``alpha``; each estimate recovered from its recorded 95% paired t-interval."""
    estimates, margins, lowers = [], [], []
    for path, artifact in members:
        change = artifact.headline_change  # an interval exists only with paired statistics
        n = artifact.statistics[change.metric].paired_relative_change_percent.n  # type: ignore[index]
        try:
            estimates.append(from_interval(change.percent, change.ci_low, change.ci_high, n))
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}") from None
        verdict = artifact.verdict
        margins.append(float((verdict.margin_percent if verdict else None) or DEFAULT_MARGIN_PERCENT))
        lowers.append(verdict.lower_is_better if verdict is not None else True)
    adjusted = holm(estimates, alpha)
    return {
        path.resolve(): FamilyVerdict(
            alone=verdict_class(artifact),
            classification=NOOP_CLASS if artifact.noop else classify_change(
                result.ci_low, result.ci_high, margin, lower),
            margin_percent=margin, holm=result)
        for (path, artifact), result, margin, lower in zip(members, adjusted, margins, lowers, strict=True)
    }


def batched_replicas(spec: ComponentSpec) -> bool | None:
    """Whether ``llmevo.train.replicas`` can train it batched (None: not a training part):
    an optimizer whose component has a batched twin (``OptimizerComponent.batched``), a
    model part whose manifest says ``supports_replicas``."""
    if spec.slot == "optimizer":
        return spec.cls.batched is not None
    if spec.slot == "kv_cache":
        return None
    return spec.manifest.supports_replicas
