"""What a reader is told about one artifact, as plain-text sections: the one place an
artifact's content is worded.

``artifact_sections`` turns a validated, typed artifact into ``Section`` s (sentences and
tables of plain strings): the verdict, the protocol, the metric tables with their relative
changes, the test split, the arms, the tuning block, provenance. Two writers lay those
sections out and add nothing of their own: ``llmevo.reports.terminal`` (``llmevo show``) and
``llmevo.reports.readme`` (the Markdown README, plus plots). So a metric cell, a relative
change or a verdict sentence is formatted by exactly one function here; the terminal's
``llmevo compare`` uses the same cell formatters.

A block that an historical artifact lacks is said to be missing, never invented.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmevo.artifacts.schema import (
    ArmResult,
    Artifact,
    DiagnosticArtifact,
    MeanStd,
    MetricStatistics,
    Provenance,
    ReproductionArtifact,
)
from llmevo.eval.metrics import LOWER_IS_BETTER, REPORT_METRICS
from llmevo.eval.sensitivity import ArmSensitivity, advantage_band, lr_sensitivity
from llmevo.eval.stats import verdict
from llmevo.promotion import verdict_class

NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Section:
    """One titled part of an artifact's report, as plain text.

    ``sentences`` come first, then ``warnings``, then a table: ``columns`` names its columns,
    or is empty for a two-column key/value table (``rows`` of ``(key, value)``).
    """

    key: str
    title: str
    sentences: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()


# --- cell formatters -------------------------------------------------------------------------


def format_number(value: Any) -> str:
    """Booleans yes/no, integers with thousands separators, floats to 4 decimals (or 4
    significant digits in scientific notation below 1e-3), None as a dash."""
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "—"}[value]
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == 0.0:
            return "0"
        if abs(value) < 1e-3:
            return f"{value:.3e}"
        if abs(value) < 1000:
            return f"{value:.4f}"
        return f"{value:,.1f}"
    return str(value)


def table_cell(text: object) -> str:
    """``text`` as one markdown table cell: pipes escaped, lines joined, None as —."""
    return str(text if text is not None else "—").replace("|", "\\|").replace("\n", " ")


def format_decimals(value: float | int | None) -> str:
    """A float to 4 fixed decimals (so a column of metric values lines up), None as a dash,
    anything else as it prints; for the leaderboard and the evolution README, whose columns
    are not ``format_number`` cells (no scientific notation, no thousands separators)."""
    if value is None:
        return "—"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def format_percent(value: float | None) -> str:
    """A signed percentage to 2 decimals; a dash when undefined."""
    return "—" if value is None else f"{value:+.2f}%"


def relative_change_percent(before: float | None, after: float | None) -> float | None:
    """``100 * (after - before) / |before|``; None when undefined (missing or zero base)."""
    if before is None or after is None or isinstance(before, bool) or isinstance(after, bool):
        return None
    if before == 0 or not (math.isfinite(before) and math.isfinite(after)):
        return None
    return 100.0 * (after - before) / abs(before)


def format_mean_std(stats: MeanStd) -> str:
    return f"{format_number(stats.mean)} ± {format_number(stats.std)} (n={stats.n})"


def format_metric(value: MeanStd | bool | float | int | None) -> str:
    """A diagnostic metric: mean ± std (n) over seeds, or a yes/no check."""
    return format_mean_std(value) if isinstance(value, MeanStd) else format_number(value)


def format_paired_change(stats: MetricStatistics) -> str:
    """``-3.23% [-3.76%, -2.70%]``, or the mean alone when there is no interval."""
    change = stats.paired_relative_change_percent
    if change.ci_low is None or change.ci_high is None:
        return f"{format_percent(change.mean)} (no CI, n={change.n})"
    return (
        f"{format_percent(change.mean)} "
        f"[{format_percent(change.ci_low)}, {format_percent(change.ci_high)}]"
    )


def numeric_values(arm: ArmResult | Mapping[str, Any] | None) -> dict[str, float]:
    """The numeric (non-boolean) values an arm (or a split's values of it) records, by name."""
    if arm is None:
        return {}
    values = arm.model_dump(mode="python", exclude_unset=True) if isinstance(arm, ArmResult) else arm
    return {
        key: value
        for key, value in values.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


# a post-training stage's own metrics, each with the stage curve that shows a stage measured it
STAGE_METRICS = {"post_training_loss": "losses", "reward_bearing_group_rate": "reward_bearing_rates"}


def applicable_metrics(artifact: ReproductionArtifact, metrics: Iterable[str]) -> tuple[str, ...]:
    """``metrics`` less those that do not apply to this comparison: a post-training stage's
    own metrics (``STAGE_METRICS``) where no arm's stage recorded their curve. The schema
    keeps them on every arm, as 0 for a pretraining comparison (no stage ran) and a rate of 0
    for a stage without sampled groups (SFT, DPO): zeros that are not measurements."""
    curves = artifact.post_training_curves or {}
    return tuple(metric for metric in metrics if metric not in STAGE_METRICS
                 or any(STAGE_METRICS[metric] in arm for arm in curves.values()))


def ordered_union(*key_lists: Iterable[str]) -> list[str]:
    """Every key of the lists once, in the order first seen."""
    keys: list[str] = []
    for key_list in key_lists:
        keys.extend(key for key in key_list if key not in keys)
    return keys


def _key_value_rows(rows: Iterable[tuple[str, Any]]) -> tuple[tuple[str, ...], ...]:
    return tuple((key, value if isinstance(value, str) else format_number(value)) for key, value in rows)


# --- reproduction content --------------------------------------------------------------------


def verdict_sentence(artifact: ReproductionArtifact) -> tuple[str, str] | None:
    """``(metric, summary)``: the artifact's verdict, or one recomputed from what it records
    (said so in the sentence); None when it records no lm_loss for both arms."""
    if artifact.verdict is not None:
        return artifact.verdict.metric, artifact.verdict.summary
    metric = artifact.verdict_metric
    paired = artifact.paired_values(metric)
    if paired is None:
        return None
    baseline, method = paired
    result = verdict(metric, baseline, method, LOWER_IS_BETTER[metric], artifact.method.name)
    return metric, (
        f"{result['summary']} (recomputed by the report: the artifact has no verdict block)"
    )


def calibration(artifact: ReproductionArtifact) -> str:
    """The regime the verdict was measured in and how often its class held at scale
    (``eval.concordance.calibration_sentence``; the transfer rate from this checkout's published
    table and references, read when the sentence is written)."""
    from llmevo.artifacts.provenance import REPO_ROOT
    from llmevo.eval.concordance import calibration_sentence, published_concordance, regime_of

    found = published_concordance(REPO_ROOT / "docs")
    transfer = None if found is None else found.transfer(verdict_class(artifact))
    return calibration_sentence(regime_of(artifact), transfer)


def identical_arms(artifact: ReproductionArtifact) -> bool:
    """Both arms report the same value for every table metric they share."""
    baseline, method = numeric_values(artifact.baseline), numeric_values(artifact.method)
    shared = [metric for metric in REPORT_METRICS if metric in baseline and metric in method]
    return bool(shared) and all(baseline[metric] == method[metric] for metric in shared)


def _reproduction_header(artifact: ReproductionArtifact) -> Section:
    paper = artifact.paper
    title = artifact.name + (f" (arXiv {artifact.arxiv})" if artifact.arxiv else "")
    organization = f", {paper.organization}" if paper.organization else ""
    return Section(
        "header",
        title,
        sentences=(
            f"Paper: {paper.title}{organization} ({paper.url}).",
            f"Manifest: {artifact.manifest_ref}.",
            f"Arms: baseline {artifact.baseline.name} vs method {artifact.method.name}.",
            *((f"Baseline chosen with --against {artifact.against}, not the declared ablation: "
               "extra evidence about that choice, which never promotes the component.",)
              if artifact.against is not None else ()),
        ),
    )


def _verdict_section(artifact: ReproductionArtifact) -> Section:
    found = verdict_sentence(artifact)
    sentence = found[1] if found else "No verdict: the artifact records no lm_loss for both arms."
    warnings = (
        (
            "both arms report identical validation metrics, so this comparison is vacuous "
            "(the baseline probably already contains the method).",
        )
        if identical_arms(artifact)
        else ()
    )
    narrow = narrow_advantage(artifact)
    from llmevo.eval.time_to_target import artifact_time_to_target, describe

    found = artifact_time_to_target(artifact)
    reached = describe(found)
    unit = "training FLOPs" if found is not None and found.get("unit") == "flops" else "steps"
    validation = found is not None and found.get("curve") == "validation"
    loss = "validation loss" if validation else "training loss"
    curve = (f"; read on the validation curves: {found['windows']} fixed validation windows every "
             f"{found['every']} steps"
             if validation else "")  # "final training loss" names the training curve
    timing = () if reached is None else (
        f"Time to target: no seed of the method reached the baseline's final {loss} within "
        f"its budget{curve}.",) if found is not None and found.get("fraction") is None else (
        f"Time to target: the method reached the baseline's final {loss} in "
        f"{reached.removesuffix(' on validation')} of the baseline's {unit} (geometric mean over "
        f"the seeds, 95% interval; the same runs read at equal loss instead of equal budget{curve}).",)
    return Section("verdict", "Verdict", sentences=(sentence, calibration(artifact), *timing),
                   warnings=warnings + ((narrow,) if narrow else ()))


def narrow_advantage(artifact: ReproductionArtifact) -> str | None:
    """For a tuned artifact classed better: the sentence saying its advantage holds only in
    a narrow learning-rate band (``llmevo.eval.sensitivity.advantage_band``), else None."""
    if artifact.tuning is None or not artifact.evaluation_protocol.formal_comparison:
        return None
    if verdict_class(artifact) != "better":
        return None
    band = advantage_band(artifact.tuning)
    return band.sentence if band is not None and band.narrow else None


def sensitivity_sentence(name: str, arm: ArmSensitivity) -> str:
    """One arm's learning-rate sensitivity in words (``llmevo.eval.sensitivity``)."""
    band = (f"lr {arm.band_low_lr:.3g} to {arm.band_high_lr:.3g} ({arm.band_decades:.2f} decades)"
            if arm.band_high_lr > arm.band_low_lr else f"only its best lr {arm.best_lr:.3g}")
    diverged = f"; {len(arm.diverged)} diverged" if arm.diverged else ""
    return (f"{name}: spread {arm.spread:.4f} ({arm.relative_spread_percent:.1f}% of its best "
            f"{arm.best:.4f} at lr {arm.best_lr:.3g}) over {len(arm.trained)} settings that "
            f"trained{diverged}; within {arm.tolerance_percent:g}% of its best: {band}.")


def _learning_rate(artifact: ReproductionArtifact) -> str:
    """The preset's learning rate, or, in a tuned artifact, each arm's chosen one (the preset's
    is then only the grid's centre, never what an arm trained at)."""
    preset = format_number(artifact.setup.learning_rate)
    if artifact.tuning is None:
        return preset
    chosen = ", ".join(f"{label} {format_number(arm.chosen['lr'])}"
                       for label, arm in artifact.tuning.arms.items())
    return f"tuned per arm: {chosen} (the preset's {preset}; see Tuning)"


def _protocol_section(artifact: ReproductionArtifact) -> Section:
    setup, dataset, protocol = artifact.setup, artifact.dataset, artifact.evaluation_protocol
    seeds = artifact.seed_list
    tokens = (
        f"train {dataset.train_tokens:,}, validation {dataset.validation_tokens:,}, "
        f"test {dataset.test_tokens:,}"
    )
    stream = setup.token_stream_sha256
    budget = format_number(setup.same_tokens_optimizer_and_budget) + (
        f" (token stream sha256 {stream[:16]}…)" if stream else " (token stream hash not recorded)"
    )
    steps: object = setup.steps_per_variant
    flops = setup.flops if setup.match == "flops" else None
    if flops is not None:  # --match flops: the method's steps spend the baseline's training FLOPs
        per_token = flops.flops_per_token
        budget = (f"equal training FLOPs (--match flops): baseline {flops.steps['baseline']:,} steps at "
                  f"{per_token['baseline']['counted']:,.0f} FLOPs per token, method {flops.steps['method']:,} "
                  f"steps at {per_token['method']['counted']:,.0f}; method / baseline total {flops.ratio:.4f} "
                  "(counted by torch's FlopCounterMode, matrix products of one forward and backward pass)")
        steps = f"baseline {flops.steps['baseline']:,}, method {flops.steps['method']:,} (FLOP-matched)"
    rows = [
        ("tier", protocol.tier),
        ("preset", setup.preset or NOT_RECORDED),
        ("suite", dataset.benchmark_suite),
        ("data", f"{dataset.name} ({tokens})"),
        ("seeds", f"{len(seeds)}: {', '.join(str(seed) for seed in seeds)}" if seeds else "none"),
        ("steps per arm", steps),
        ("batch size / learning rate", f"{format_number(setup.batch_size)} / {_learning_rate(artifact)}"),
        (
            "model",
            f"d_model {format_number(setup.dimensions)}, {format_number(setup.layers)} layers, "
            f"sequence length {format_number(setup.sequence_length)}",
        ),
        ("equal training budget", budget),
        ("formal comparison", protocol.formal_comparison),
        ("claim policy", protocol.claim_policy),
        ("interval", protocol.interval or NOT_RECORDED),
        ("selection split", protocol.selection_split or NOT_RECORDED),
    ]
    return Section("protocol", "Protocol", rows=_key_value_rows(rows))


def _validation_section(artifact: ReproductionArtifact) -> Section:
    statistics = artifact.statistics or {}
    baseline, method = numeric_values(artifact.baseline), numeric_values(artifact.method)
    rows = []
    for metric in applicable_metrics(artifact, REPORT_METRICS):
        stats = statistics.get(metric)
        if stats is not None:
            cells = [format_mean_std(stats.baseline), format_mean_std(stats.method)]
            delta, significant = format_paired_change(stats), format_number(stats.significant)
        elif metric in baseline and metric in method:
            cells = [format_number(float(baseline[metric])), format_number(float(method[metric]))]
            change = relative_change_percent(baseline[metric], method[metric])
            delta = "—" if change is None else f"{format_percent(change)} (means; no CI)"
            significant = "—"
        else:
            continue
        direction = "↓" if LOWER_IS_BETTER.get(metric, True) else "↑"
        rows.append((f"{metric} {direction}", *cells, delta, significant))
    return Section(
        "validation",
        "Validation results",
        sentences=(
            "Mean ± sample std over seeds; Δ% is the mean per-seed relative change of the "
            "method against the baseline; ↓ lower is better, ↑ higher is better.",
        ),
        columns=(
            "metric (validation)",
            f"baseline: {artifact.baseline.name}",
            f"method: {artifact.method.name}",
            "Δ% paired [95% CI]",
            "significant",
        ),
        rows=tuple(rows),
    )


def _test_section(artifact: ReproductionArtifact) -> Section:
    title = "Test split (evaluated once, not used for selection)"
    if artifact.test is None:
        return Section("test", title, sentences=("This artifact records no test-split results.",))
    baseline, method = numeric_values(artifact.test.baseline), numeric_values(artifact.test.method)
    rows = tuple(
        (
            metric,
            format_number(float(baseline[metric])),
            format_number(float(method[metric])),
            format_percent(relative_change_percent(baseline[metric], method[metric])),
        )
        for metric in applicable_metrics(artifact, REPORT_METRICS)
        if metric in baseline and metric in method
    )
    return Section(
        "test",
        title,
        sentences=("Test split, evaluated once at the end, not used for selection.",),
        columns=("metric (test split)", "baseline", "method", "Δ% of means"),
        rows=rows,
    )


def _arms_section(artifact: ReproductionArtifact) -> Section:
    rows = []
    for role, arm in (("baseline", artifact.baseline), ("method", artifact.method)):
        stats = ", ".join(
            f"{key}={format_number(value)}" for key, value in arm.architecture_stats.items()
        )
        rows.append(
            (
                role,
                arm.name,
                format_number(arm.parameters),
                arm.optimizer,
                arm.device,
                arm.status or "—",
                stats or "—",
            )
        )
    return Section(
        "arms",
        "Arms",
        columns=("arm", "name", "parameters", "optimizer", "device", "status", "architecture stats"),
        rows=tuple(rows),
    )


def budget_sentence(artifact: ReproductionArtifact) -> str | None:
    """Each arm's tuning budget (runs, trained, steps per run, CPU seconds), when recorded: the
    same declared budget for both arms, plus the adaptive extensions each arm's own tuning
    asked for, so the counts may differ."""
    tuning = artifact.tuning
    if tuning is None:
        return None
    names = {"baseline": artifact.baseline.name, "method": artifact.method.name}
    parts = []
    for label, block in tuning.arms.items():
        budget = block.budget
        if budget is not None:
            parts.append(f"{label} ({names.get(label, label)}) {budget.runs} runs of "
                         f"{budget.steps_per_run} steps ({budget.trained} trained, "
                         f"{budget.cpu_seconds:.0f} CPU s)")
    return ("Tuning budget (the same declared budget, plus adaptive extensions: edge extension, "
            "probe, re-scoring; recorded per arm, CPU seconds of the runs trained here): "
            + "; ".join(parts) + ".") if parts else None


def cache_sentence(artifact: ReproductionArtifact) -> str | None:
    """Which runs the arm cache gave instead of training (None: the cache was not read)."""
    if artifact.cache is None:
        return None
    names = {"baseline": artifact.baseline.name, "method": artifact.method.name}
    parts = []
    for label, runs in artifact.cache.items():
        loaded = []
        if runs.report_seeds:
            loaded.append(f"report seed(s) {', '.join(map(str, runs.report_seeds))}")
        if runs.tuning:
            loaded.append(f"{len(runs.tuning)} tuning run(s)")
        if loaded:
            parts.append(f"{label} ({names.get(label, label)}): {' and '.join(loaded)}")
    if not parts:
        return "Arm cache: no run was found in it; every run was trained for this artifact."
    return ("Loaded from the arm cache instead of retrained (trained before with identical "
            "settings, code and data; their wall times are the original runs'): "
            + "; ".join(parts) + ".")


def rescoring_phrase(block: Any) -> str:
    """What an arm's re-scoring did (``ArmTuning.rescoring``), in a few words; "" when absent."""
    record = block.rescoring
    if record is None:
        return ""
    noise = f"seed noise {record.noise.threshold_percent:.3g}%, {record.noise.source}" + (
        f": spread {record.noise.spread_percent:.3g}% / sqrt({record.noise.seeds})" if record.noise.seeds > 1 else "")
    if not record.seeds:
        nearest = record.next.get("gap_percent") if record.next else None
        return (f"a clear winner ({noise}" + (f"; the runner-up +{nearest:.3g}%" if nearest is not None else "")
                + "): nothing re-scored")
    named = " and ".join(f"{setting.lr:.3g}" if setting.lr is not None else f"trial {setting.trial}"
                         for setting in record.settings)
    fallback = "; every one diverged on a seed, chosen among the others" if "diverged" in record.outcome else ""
    return f"{named} re-scored on seeds {', '.join(map(str, record.seeds))} ({noise}){fallback}"


def probe_phrase(block: Any) -> str:
    """What an arm's adequacy probe (``ArmTuning.probe``) found, in a few words; "" when absent."""
    record = block.probe
    if record is None:
        return ""
    if record.mean is None:
        return f"probe {record.lr:.3g} diverged"
    gap = f"{record.gap_percent:+.3g}%" if record.gap_percent is not None else "?"
    if record.moved:
        return (f"probe {record.lr:.3g} {gap} of the best: grid extended to "
                + ", ".join(f"{lr:.3g}" for lr in sorted([*record.added, record.lr])))
    return f"probe {record.lr:.3g} {gap} of the best ({record.noise.threshold_percent:.3g}% noise): not taken"


def _space_tuning_section(artifact: ReproductionArtifact, cached: tuple[str, ...]) -> Section:
    """Space tuning (``runner.tuning_space``): per arm its axes and ranges, the chosen trial's
    settings, and which axes were extended."""
    tuning = artifact.tuning
    assert tuning is not None
    extra = tuning.model_extra or {}
    seeds = ", ".join(str(seed) for seed in tuning.seeds)
    sampler = tuning.sampler or {}
    names = {"baseline": artifact.baseline.name, "method": artifact.method.name}
    rows = []
    for arm, block in tuning.arms.items():
        space = block.space or {}
        ranges = ", ".join(f"{name} {format_number(axis.low)}..{format_number(axis.high)} ({axis.scale})"
                           for name, axis in space.items())
        chosen = ", ".join(f"{name} {format_number(block.chosen.get(name))}" for name in space)
        extended = [f"{name} {axis.extended} to {format_number(axis.extension[0])}.."
                    f"{format_number(axis.extension[1])}"
                    for name, axis in space.items() if axis.extended and axis.extension]
        at_limit = [name for name, axis in space.items() if axis.on_edge and not axis.extended]
        edges = "; ".join(filter(None, (
            ("extended " + ", ".join(extended)) if extended else "",
            ("on an edge at its limit: " + ", ".join(at_limit)) if at_limit else "",
            "best still on an edge" if block.chosen_on_edge else "",
            rescoring_phrase(block)))) or "no edge"
        diverged = sum(1 for s in block.settings if s.mean is None)
        searched = sum(1 for s in block.settings if s.phase != "grid")
        stopped = sum(1 for s in block.settings if s.stopped_at is not None)
        trials = (f"{searched} trials" + (f", {diverged} diverged" if diverged else "")
                  + (f", {stopped} stopped early by halving" if stopped else ""))
        floor = block.grid_floor
        if floor is not None:  # the lr grid the search must not end worse than
            lower = "" if floor.grid_best is None else format_number(floor.grid_best.lr)
            trials += (f"; lr grid floor: {len(block.settings) - searched} runs, "
                       + ("held" if floor.held else f"the grid's lr {lower} was lower, so kept"))
        rows.append((names.get(arm, arm), f"{ranges}; {trials}",
                     f"trial {block.chosen_trial}: {chosen}", edges))
    return Section(
        "tuning",
        "Tuning",
        sentences=(
            f"Each arm ran {tuning.trials} trials over its components' declared tuning space "
            f"under tuning seed(s) {seeds} (disjoint from the report seeds), sampled by "
            + (f"{sampler.get('name', 'QMCSampler')} ({sampler.get('qmc_type', 'sobol')}, scrambled, "
               f"seed {sampler.get('seed')})" if "startup" not in sampler else
               f"Sobol points (scrambled, seed {sampler.get('seed')}) for the first "
               f"{sampler.get('startup_trials')}, then {sampler.get('name')} (seed {sampler.get('seed')}, "
               f"{sampler.get('batch')} trials at a time)")
            + f"; chosen by {extra.get('selection', 'validation')}.",
            str(extra.get("method", "")),
            *cached,
            "Learning-rate sensitivity is not computed for a space tuning: the other axes vary "
            "from trial to trial, so loss against lr is not a curve.",
        ),
        columns=("arm", "space", "chosen", "edges"),
        rows=tuple(rows),
    )


def _tuning_section(artifact: ReproductionArtifact) -> Section:
    tuning = artifact.tuning
    cached = tuple(sentence for sentence in (cache_sentence(artifact), budget_sentence(artifact)) if sentence)
    post = artifact.setup.post_training
    if tuning is None and post:
        return Section(
            "tuning",
            "Tuning",
            warnings=(
                f"untuned, both arms post-trained at one learning rate ({format_number(post.get('lr'))}) "
                "from the same pretrained model; learning-rate tuning is not run for "
                "post-training comparisons.",
            ),
        )
    if tuning is None:
        return Section(
            "tuning",
            "Tuning",
            sentences=cached,
            warnings=(
                "untuned, both arms trained at the preset's one learning rate; a method "
                "that needs another learning rate may lose for that reason.",
            ),
        )
    if tuning.space:
        return _space_tuning_section(artifact, cached)
    selection = (tuning.model_extra or {}).get("selection", "validation")
    seeds = ", ".join(str(seed) for seed in tuning.seeds)
    names = {"baseline": artifact.baseline.name, "method": artifact.method.name}
    rows = []
    for arm, block in tuning.arms.items():
        cells = ", ".join(f"{s.lr:.3g}: {format_number(s.mean)}"
                          + (f" (stopped at step {s.stopped_at})" if s.stopped_at is not None else "")
                          for s in block.settings)
        edge = f"extended {block.extended}" if block.extended else "not extended"
        if block.chosen_on_edge:
            edge += "; best still on the edge"
        if block.probe is not None:
            edge += f"; {probe_phrase(block)}"
        if block.rescoring is not None:
            edge += f"; {rescoring_phrase(block)}"
        elif block.confirmed:
            confirmed = " and ".join(f"{lr:.3g}" for lr in block.confirmed)
            edge += f"; {confirmed} confirmed on seeds {', '.join(map(str, tuning.confirm_seeds))}"
        rows.append((names.get(arm, arm), cells, f"{block.chosen['lr']:.3g}", edge))
    sensitivity = [sensitivity_sentence(names.get(arm, arm), result)
                   for arm, result in lr_sensitivity(tuning).items()]
    band = advantage_band(tuning)
    return Section(
        "tuning",
        "Tuning",
        sentences=(
            f"Each arm trained at every learning rate of one grid under tuning seed(s) {seeds} "
            f"(disjoint from the report seeds); chosen by {selection}.",
            *(("No adequacy probe above the grid's top (--no-tune-probe): a better region beyond "
               "it would go unseen.",) if tuning.probe is False else ()),
            *cached,
            f"Learning-rate sensitivity (Wortsman et al. 2309.14322; means over tuning seed(s) "
            f"{seeds}): " + " ".join(sensitivity),
            *((band.sentence,) if band is not None else ()),
        ),
        columns=("arm", f"lr: validation {tuning.metric}", "chosen", "grid"),
        rows=tuple(rows),
    )


def _paper_section(artifact: ReproductionArtifact) -> Section | None:
    if not artifact.paper_results:
        return None
    return Section("paper", "What the paper reports", rows=_key_value_rows(artifact.paper_results.items()))


_PROVENANCE_SHOWN_ABOVE = frozenset({"code_commit", "code_dirty", "original_code_commit"})
# Fields only some artifacts carry (historical ones, --publish --allow-dirty): absent is normal.
_ONLY_WHEN_RECORDED = frozenset({"historical_migration", "allow_dirty"})


def _provenance_section(provenance: Provenance, artifact_link: str | None) -> Section:
    """Every provenance field in schema order; a missing one says so (historical-only fields
    are left out when absent). ``artifact_link`` is where the writer has the artifact file."""
    recorded = provenance.model_dump(mode="python", exclude_unset=True)
    commit = recorded.get("code_commit") or recorded.get("original_code_commit")
    dirty = recorded.get("code_dirty")
    rows: list[tuple[str, Any]] = []
    if artifact_link is not None:
        rows.append(("artifact", artifact_link))
    rows.append(
        (
            "code commit",
            (commit or NOT_RECORDED)
            + (f" (working tree dirty: {format_number(dirty)})" if dirty is not None else ""),
        )
    )
    for key in ordered_union(type(provenance).model_fields, recorded):
        if key in _PROVENANCE_SHOWN_ABOVE or (key in _ONLY_WHEN_RECORDED and key not in recorded):
            continue
        value = recorded.get(key, NOT_RECORDED)
        if isinstance(value, Mapping) and key == "implementation_files":
            value = ", ".join(f"{path} {digest[:12]}" for path, digest in value.items())
        elif isinstance(value, Mapping):
            value = ", ".join(f"{name} {version}" for name, version in value.items())
        rows.append((key.replace("_", " "), NOT_RECORDED if value is None else value))
    return Section("provenance", "Provenance", rows=_key_value_rows(rows))


def _reproduction_sections(
    artifact: ReproductionArtifact, artifact_link: str | None
) -> list[Section]:
    sections = [
        _reproduction_header(artifact),
        _verdict_section(artifact),
        Section("scope", "Scope", sentences=(artifact.scope or NOT_RECORDED,)),
        _protocol_section(artifact),
        _validation_section(artifact),
        _test_section(artifact),
        _arms_section(artifact),
        _tuning_section(artifact),
        _paper_section(artifact),
        _provenance_section(artifact.provenance, artifact_link),
    ]
    return [section for section in sections if section is not None]


# --- diagnostic content ----------------------------------------------------------------------


def _diagnostic_sections(artifact: DiagnosticArtifact, artifact_link: str | None) -> list[Section]:
    protocol, dataset = artifact.evaluation_protocol, artifact.dataset
    full = artifact.full_experiment
    title = artifact.name + (f" (arXiv {artifact.arxiv})" if artifact.arxiv else "")
    status = (
        f"Component diagnostic (tier {artifact.evaluation_tier}), implementation status "
        f"{artifact.implementation_status}, full experiment {full.status}, "
        f"promotion eligible: {format_number(artifact.promotion_eligible)}."
    )
    rows = _key_value_rows(
        [
            ("diagnostic only", artifact.diagnostic_only),
            ("evolve integrated", artifact.evolve_integrated),
            ("measured locally", artifact.measured_locally),
            ("claim policy", protocol.claim_policy),
            ("formal comparison", protocol.formal_comparison),
            ("seeds", ", ".join(str(seed) for seed in artifact.seeds) or "none"),
            ("dataset", f"{dataset.id} @ {dataset.revision}"),
        ]
    )
    sections = [
        Section(
            "header",
            title,
            sentences=(
                *(
                    (f"Paper: arXiv {artifact.arxiv} (https://arxiv.org/abs/{artifact.arxiv}).",)
                    if artifact.arxiv
                    else ()
                ),
                f"Manifest: {artifact.manifest_ref}.",
            ),
        ),
        Section("status", "Status", sentences=(status,), rows=rows),
        Section(
            "metrics",
            "Metrics",
            columns=("metric", "mean ± std (n) or check"),
            rows=tuple((key, format_metric(value)) for key, value in artifact.metrics.items()),
        ),
    ]
    table = (full.model_extra or {}).get("table") or []
    if table:
        columns = tuple(
            key for key in ("arm", "retention_ratio", "budget", "lm_loss") if key in table[0]
        )
        sections.append(
            Section(
                "full_experiment",
                "Full experiment (L2)",
                sentences=(full.status,),
                columns=columns,
                rows=tuple(tuple(format_number(row.get(key)) for key in columns) for row in table),
            )
        )
    if artifact.configuration:
        sections.append(
            Section("configuration", "Configuration", rows=_key_value_rows(artifact.configuration.items()))
        )
    sections.append(_provenance_section(artifact.provenance, artifact_link))
    return sections


_SECTIONS: dict[type, Callable[[Any, str | None], list[Section]]] = {
    ReproductionArtifact: _reproduction_sections,
    DiagnosticArtifact: _diagnostic_sections,
}


def artifact_sections(artifact: Artifact, artifact_link: str | None = None) -> list[Section]:
    """Everything a reader is told about one artifact, as plain-text sections in order."""
    return _SECTIONS[type(artifact)](artifact, artifact_link)
