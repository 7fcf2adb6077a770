"""Equal-budget reproductions: a baseline arm and a method arm, paired over seeds.

For a component with a declared ablation, the baseline arm is ``llama_modern`` with that
slot set to the ablation and the method arm is ``llama_modern`` with the component —
nothing else differs. Both arms of a seed draw the same training windows (the same
generator seed) and start from the same initialisation seed; the token stream each arm
consumed is hashed and the hashes must agree, so "equal budget" is verified. Selection
and verdicts use the validation split; the test split is evaluated once, at the end of
each arm's run, and only reported.

Every arm runs through the shared runner (``runner.run.run_arm``); the plan comes from
``llmevo.experiments.plans`` (``ReproductionPlan``, made once by
``ReproductionRequest.plan()``) and the arms' data from ``llmevo.runner.views``.

Each arm is tuned first when the plan has a tuner (``runner.tuner.tune_arms``: the lr grid
or the declared space, the same interface).

Public API: ``run_reproduction``, ``ReproductionOutcome``,
``assemble_artifact``, ``implementation_objects``, ``cache_code_modules``.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from llmevo.artifacts.provenance import pipeline_modules
from llmevo.artifacts.schema import (
    ArmCurve,
    ArmResult,
    CachedRuns,
    DatasetInfo,
    EquivalenceCheck,
    EvaluationProtocol,
    FlopsMatch,
    HeldOutTest,
    MetricStatistics,
    Paper,
    Relative,
    SeedArms,
    Setup,
    TrainingCurves,
    Tuning,
    ValidationCurves,
    Verdict,
)
from llmevo.catalog import ARCHITECTURES, build_recipe, full_registry
from llmevo.components import COMPONENTS
from llmevo.data.lm import LMCorpus
from llmevo.errors import ConfigError
from llmevo.eval.metrics import LOWER_IS_BETTER, METRICS, derive_arm_metrics
from llmevo.eval.stats import claim_policy, decide, mean
from llmevo.experiments.plans import PREPARATIONS, Comparison, ReproductionPlan
from llmevo.hf.load import LlamaCheckpoint
from llmevo.registry import MODEL_SLOTS, ComponentSpec
from llmevo.runner.arm import CONCAT, Arm
from llmevo.runner.arm_run import ArmRun
from llmevo.runner.arm_runner import FlopsBudget, InProcessRunner
from llmevo.runner.cache import ArmCache
from llmevo.runner.compare import compare_arms, paired_rows, paired_statistics
from llmevo.runner.equivalence import Equivalence
from llmevo.runner.presets import Preset
from llmevo.runner.size import Size
from llmevo.runner.views import DataView, load_views, recipe_fingerprint
from llmevo.train.logging import RunLogs
from llmevo.train.trainer import Progress

CURVE_POINTS = 200


@dataclass
class ReproductionOutcome:
    comparison: Comparison
    body: dict[str, Any]  # every artifact block but provenance (known only to the caller)
    runs: dict[str, dict[int, ArmRun]]
    implementation_objects: list[object]
    tokenizer_json: str  # the BPE tokenizer, for checkpoints of BPE arms

    def record(self, provenance: dict[str, Any],
               cost: tuple[float, float] | None = None) -> dict[str, Any]:
        """The artifact's data, for ``artifacts.io.save_artifact`` (which validates it once, as
        it writes it): the body with ``provenance`` (``collect_provenance``) and, given, the
        reproduction's ``cost`` (CPU seconds, wall seconds) in its setup."""
        body = {**self.body, "provenance": provenance}
        if cost is not None:
            setup = body["setup"]
            body["setup"] = type(setup).model_validate({
                **setup.model_dump(exclude_unset=True),
                "cpu_seconds": cost[0], "reproduction_wall_seconds": cost[1]})
        return body


@functools.cache
def cache_code_modules() -> tuple[str, ...]:
    """The modules whose source the arm cache's keys cover: everything this module reaches
    through its imports, every component and architecture included (``runner.cache``): the
    catalog declares them by module name, imported when a run names one."""
    declared = [*(f"llmevo.components.{module}" for _, _, module in COMPONENTS), *ARCHITECTURES.values()]
    packages = {module.rpartition(".")[0] for module in declared}  # imported before the module
    return tuple(pipeline_modules(__name__, *declared, *sorted(packages), follow_catalog=True))


def run_reproduction(
    plan: ReproductionPlan,
    progress: Progress | None = None,
    on_arm_done: Callable[[str, int, ArmRun], None] | None = None,
    logs: RunLogs | None = None,
) -> ReproductionOutcome:
    """Train and evaluate both arms under every seed; return the artifact body (typed and
    validated as it is written, once the caller adds provenance: ``outcome.record(provenance)``).

    ``logs`` (e.g. ``TensorBoardLogs``) gets one run per arm and seed, ``<arm>-seed<seed>``;
    it turns the arm cache off (its step loggers need the training). ``plan.arm_cache``
    ``use`` loads runs trained before under identical settings (``runner.cache``)
    and the body's ``cache`` block lists them; ``refresh`` trains everything and stores it.

    Before anything trains, the no-op check (``runner.equivalence``) compares the two arms'
    outputs; arms that compute the same function are a ``ConfigError`` unless
    ``plan.allow_noop``, and then the artifact is classed no-op (its ``equivalence`` block)."""
    seeds, comparison = plan.seeds, plan.comparison
    if comparison.spec.slot == "post_training":
        raise ConfigError(f"'{plan.name}' is a post-training method: use "
                          "llmevo.experiments.post_training.run_post_training_reproduction")
    init = plan.init_from
    corpus, preset, views = load_views(plan.preset, [arm.data for arm in comparison.arms],
                                       plan.data_dir, plan.cache_dir,
                                       None if init is None else init.tokenizer)
    arms = []
    for arm in comparison.arms:  # resolved from the data where the arm needs it
        if arm.prepare is not None:
            model = PREPARATIONS[arm.prepare](arm, views[arm.data], corpus, plan.cache_dir, seeds[0])
            arm = replace(arm, model=model)
        arms.append(arm)
    resolved = replace(comparison, baseline=arms[0], method=arms[1])
    cache = ArmCache.open(plan.cache_dir, plan.device, plan.execution,
                          "off" if logs is not None else plan.arm_cache, cache_code_modules())
    runner = InProcessRunner(views, preset, plan.device, resolved.metric, resolved.objective, plan.execution,
                             cache, progress, logs, plan.match)
    paired = compare_arms(plan.name, runner, *resolved.arms, seeds, metric=resolved.metric, tuner=plan.tuning,
                          allow_noop=plan.allow_noop, on_arm_done=on_arm_done)
    resolved, runs = replace(resolved, baseline=paired.baseline, method=paired.method), paired.runs
    body = assemble_artifact(resolved, preset, seeds, corpus, views, runs, plan.device,
                             plan.margin_percent, paired.learning_rates, plan.size, paired.equivalence,
                             flops=runner.flops)
    if paired.tuning is not None:
        body["tuning"] = Tuning.model_validate(paired.tuning)
    if init is not None:
        record_init_from(body, init, {"continued_pretraining": True})
    if cache is not None and cache.read:  # which runs were loaded, not trained
        body["cache"] = {
            arm.label: CachedRuns(
                report_seeds=[seed for seed in seeds if runs[arm.label][seed].cached],
                tuning=(paired.cached_tuning or {}).get(arm.label, []),
            )
            for arm in resolved.arms
        }
    return ReproductionOutcome(resolved, body, runs, implementation_objects(resolved),
                               corpus.tokenizer.tokenizer.to_str())


def record_init_from(body: dict[str, Any], checkpoint: LlamaCheckpoint, details: dict[str, Any]) -> None:
    """Record in the setup that both arms started from ``checkpoint`` (``--init-from``): its
    directory, the sha256 of its weights and of its tokenizer, the genome read from it."""
    setup = body["setup"]
    body["setup"] = type(setup).model_validate({
        **setup.model_dump(exclude_unset=True),
        "init_from": {**checkpoint.provenance(), "tokenizer": "the checkpoint's own", **details}})


def implementation_objects(comparison: Comparison) -> list[object]:
    """The component classes both arms are built from (for provenance file hashes)."""
    objects: list[object] = [comparison.spec.cls]
    return objects + [spec.cls for arm in comparison.arms for spec in _arm_specs(arm)]


def _arm_specs(arm: Arm) -> list[ComponentSpec]:
    registry = full_registry()
    specs = [registry.get(slot, getattr(arm.model, slot).name) for slot in MODEL_SLOTS]
    specs.append(registry.get("optimizer", arm.optimizer.name))
    if arm.post_training is not None:
        specs.append(registry.get("post_training", arm.post_training.name))
    specs.append(registry.get("data", arm.recipe.name))
    return specs


def _curve(losses_by_seed: dict[int, list[float]]) -> ArmCurve:
    length = min(len(losses) for losses in losses_by_seed.values())
    stride = max(1, math.ceil(length / CURVE_POINTS))
    steps = list(range(0, length, stride))
    return ArmCurve(
        steps=[step + 1 for step in steps],
        per_seed={str(seed): [losses[i] for i in steps] for seed, losses in losses_by_seed.items()},
    )


def _validation_curves(runs: dict[str, dict[int, ArmRun]], seeds: list[int]) -> dict[str, ValidationCurves]:
    """``{"validation_curves": ...}`` where every report run recorded a validation curve
    (``--val-every``), else nothing (the artifact as without the option)."""
    recorded = {label: {seed: runs[label][seed].train.validation_curve for seed in seeds} for label in runs}
    if any(curve is None for by_seed in recorded.values() for curve in by_seed.values()):
        return {}
    first = recorded["baseline"][seeds[0]]
    return {"validation_curves": ValidationCurves(
        every=first["every"], windows=first["windows"], window_tokens=first["window_tokens"],
        **{label: ArmCurve(steps=list(by_seed[seeds[0]]["steps"]),
                           per_seed={str(seed): [value if math.isfinite(value) else None for value in curve["losses"]]
                                     for seed, curve in by_seed.items()})
           for label, by_seed in recorded.items()})}


def _arm_block(
    arm: Arm, runs: dict[int, ArmRun], seeds: list[int], device: torch.device, objective: str,
    learning_rate: float | None,
) -> ArmResult:
    """One arm's validation means over its seeds (``learning_rate``: its tuned lr)."""
    measured = [runs[seed].validation for seed in seeds]
    keys = [k for k in measured[0] if all(k in m and m[k] is not None for m in measured)]
    means = {key: mean([m[key] for m in measured]) for key in keys}
    derived = derive_arm_metrics({k: means.get(k) for k in (
        "lm_loss", "instruction_loss", "preference_loss", "reasoning_nll",
        "bits_per_byte", "instruction_bpb") if means.get(k) is not None}, objective)
    first = runs[seeds[0]]
    optional = {key: derived[key] for key in ("bits_per_byte", "instruction_bpb", "composite_bpb")
                if key in derived}
    optional.update({key: means[key] for key in (
        "preference_loss", "preference_accuracy", "hh_preference_loss", "hh_preference_accuracy",
        "reasoning_nll", "reasoning_accuracy") if key in means})
    tuned = {} if learning_rate is None else {"learning_rate": learning_rate}
    settings = {runs[seed].train_config == first.train_config for seed in seeds}
    assert settings == {True}, "an arm's report runs share its training settings"
    explicit = {"lm_loss", "perplexity", "instruction_loss", "primary", "public_composite",
                "composite_loss", "fitness", "initial_loss", "final_loss", "post_training_loss",
                "reward_bearing_group_rate", *optional}
    measured = {m.name: means[m.name] for m in METRICS  # every other metric of the table
                if m.name in means and m.name not in explicit}
    return ArmResult(
        name=arm.name,
        lm_loss=derived["lm_loss"],
        perplexity=derived["perplexity"],
        instruction_loss=derived["instruction_loss"],
        primary=derived["primary"],
        public_composite=derived["public_composite"],
        composite_loss=derived["composite_loss"],
        fitness=derived["fitness"],
        initial_loss=means["initial_loss"],
        final_loss=means["final_loss"],
        post_training_loss=0.0,
        reward_bearing_group_rate=0.0,
        parameters=first.parameters,
        device=device.type,
        optimizer=arm.optimizer.name,
        architecture_stats=first.architecture_stats,
        muon_orthogonality_error=mean([runs[s].train.orthogonality_error for s in seeds]),
        seeds=list(seeds),
        **optional,
        status="complete",
        genome={"model": arm.model.model_dump(mode="json"),
                "optimizer": arm.optimizer.model_dump(mode="json"),
                **({} if arm.recipe == CONCAT else {"data": arm.recipe.model_dump(mode="json")})},
        train=dict(first.train_config),
        **measured,
        **tuned,
    )


def _combined_stream_hash(runs: dict[str, dict[int, ArmRun]], seeds: list[int]) -> str:
    """One digest over the per-seed stream hashes (equal for both arms, checked earlier)."""
    joined = ",".join(runs["method"][s].train.token_stream_sha256 for s in seeds)
    return hashlib.sha256(joined.encode()).hexdigest()


def _percent(before: float, after: float) -> float:
    return 100.0 * (after - before) / abs(before)


def _paper(spec: ComponentSpec) -> Paper:
    paper = spec.manifest.paper
    if paper is None:
        return Paper(arxiv_id="none", title=spec.name, url="", organization="")
    return Paper(**paper.model_dump())


def _data_recipes(comparison: Comparison, data: DataView) -> dict[str, Any]:
    """Each arm's data recipe when one is not ``concat``: its full config, the tokens it
    draws from and its data fingerprint (``recipe_fingerprint``); nothing otherwise."""
    if all(arm.recipe == CONCAT for arm in comparison.arms):
        return {}
    recipes = {}
    for arm in comparison.arms:
        recipe = build_recipe(arm.recipe)
        recipes[arm.label] = {**recipe.describe(data.train_sources()),
                              "fingerprint": recipe_fingerprint(data, recipe)}
    return {"data_recipes": recipes}


def _dataset(corpus: LMCorpus, data: DataView, preset: Preset, comparison: Comparison) -> DatasetInfo:
    suite_counts = data.suite_validation.counts
    return DatasetInfo(
        name="WikiText-2",
        train_tokens=corpus.n_tokens("train"),
        validation_tokens=int(data.validation.numel()),
        test_tokens=int(data.test.numel()),
        narrative_tokens=corpus.n_tokens("narrative"),
        instruction_train=320 if "instruction" in preset.train_on else 0,
        instruction_validation=suite_counts.get("instruction_validation", 0),
        # As the reference protocol records it: the preference set is built from the
        # instruction validation records (one per record) whether or not the suite
        # scores it; `scored_parts` says what was scored.
        preference_validation=suite_counts.get("preference_validation")
        or suite_counts.get("instruction_validation", 0),
        reasoning_validation=suite_counts.get("reasoning_validation", 0),
        benchmark_suite=preset.suite,
        vocab_size=corpus.tokenizer.vocab_size,
        tokenizer=str(corpus.tokenizer.path.name),
        variant=corpus.variant,
        fingerprint=data.fingerprint,
        hh_rlhf_validation=suite_counts.get("hh_rlhf_validation", 0),
        scored_parts=["lm", *data.suite_validation.parts],
        train_stream_tokens=int(data.stream.numel()),
        train_on=list(preset.train_on),
        tokenizer_sha256=corpus.tokenizer.sha256,
        train_bytes=corpus.n_bytes("train"),
        bytes_per_token=corpus.bytes_per_token("train"),
        **_data_recipes(comparison, data),
    )


def _size_fields(size: Size | None, tokens: int, stream_tokens: int) -> dict[str, Any]:
    """What a sized run records (none without the size dial): the rung, the rung's model
    size, the training tokens per arm, the epochs over the training stream and 6 N D."""
    if size is None:
        return {}
    return {"rung": size.rung, "parameters": size.parameters, "training_tokens": tokens,
            "epochs": tokens / stream_tokens, "compute_6nd": 6.0 * size.parameters * tokens}


def _setup(comparison: Comparison, preset: Preset, seeds: list[int], corpus: LMCorpus,
           data: DataView, runs: dict[str, dict[int, ArmRun]], size: Size | None,
           flops: FlopsBudget | None = None) -> Setup:
    """The setup block; ``flops``: compute-matched arms (the baseline's tokens are the budget's,
    and the block says how the method's steps were set)."""
    spec = comparison.spec
    against = {"against": comparison.against} if comparison.against is not None else {}
    tokens = runs["baseline" if flops is not None else "method"][seeds[0]].train.tokens_seen
    matched = {} if flops is None else {"match": "flops", "flops": FlopsMatch.model_validate(flops.block())}
    return Setup(
        seed=seeds[0],
        steps_per_variant=preset.train.steps,
        dimensions=comparison.method.model.d_model,
        layers=comparison.method.model.n_layers,
        sequence_length=preset.train.seq_len,
        same_tokens_optimizer_and_budget=flops is None,
        evolve_architecture=spec.name if spec.slot not in ("optimizer", "data") else "llama_modern",
        evolve_optimizer=comparison.method.optimizer.name,
        preset=preset.name,
        seeds=list(seeds),
        batch_size=preset.train.batch_size,
        learning_rate=preset.train.lr,
        schedule=preset.train.schedule,
        warmup_steps=preset.train.warmup_steps,
        weight_decay=preset.train.weight_decay,
        grad_clip=preset.train.grad_clip,
        tokens_per_arm=tokens,
        units_per_arm={
            label: {"units": runs[label][seeds[0]].train.tokens_seen, "view": arm.data,
                    "approx_text_bytes": round(runs[label][seeds[0]].train.tokens_seen * (
                        1.0 if arm.data == "bytes" else corpus.bytes_per_token("train")))}
            for label, arm in (("baseline", comparison.baseline), ("method", comparison.method))
        },
        verdict_metric=comparison.metric,
        **against,
        objective=comparison.objective,
        token_stream_sha256=_combined_stream_hash(runs, seeds),
        token_stream_sha256_per_seed={
            str(s): runs["method"][s].train.token_stream_sha256 for s in seeds},
        token_stream_sha256_by_arm={
            label: {str(s): runs[label][s].train.token_stream_sha256 for s in seeds}
            for label in ("baseline", "method")
        },
        wall_seconds={label: sum(runs[label][s].train.wall_seconds for s in seeds) for label in runs},
        training_path={label: {str(s): runs[label][s].path for s in seeds} for label in runs},
        **_size_fields(size, tokens, int(data.stream.numel())),
        **matched,
    )


def _relative(baseline: ArmResult, method: ArmResult) -> Relative:
    both_bpb = baseline.bits_per_byte is not None and method.bits_per_byte is not None
    return Relative(
        lm_loss_percent=_percent(baseline.lm_loss, method.lm_loss),
        perplexity_percent=_percent(baseline.perplexity, method.perplexity),
        **({"bits_per_byte_percent": _percent(baseline.bits_per_byte, method.bits_per_byte)}
           if both_bpb else {}),
        fitness_percent=_percent(baseline.fitness, method.fitness),
    )


def _verdict(comparison: Comparison, per_seed: list[SeedArms],
             statistics: dict[str, MetricStatistics], margin_percent: float,
             noop: Equivalence | None = None) -> Verdict:
    """The comparison's verdict (``eval.stats.decide``) on its metric, named as the artifact
    names the method."""
    spec, metric = comparison.spec, comparison.metric
    return Verdict(**decide(
        metric, [row.model_dump() for row in per_seed],
        {name: block.model_dump() for name, block in statistics.items()}, margin_percent,
        spec.name if comparison.against is None else f"{spec.name} (vs {comparison.against})",
        LOWER_IS_BETTER.get(metric, True), None if noop is None else noop.reason))


def assemble_artifact(
    comparison: Comparison,
    preset: Preset,
    seeds: list[int],
    corpus: LMCorpus,
    views: dict[str, DataView],
    runs: dict[str, dict[int, ArmRun]],
    device: torch.device,
    margin_percent: float,
    learning_rates: dict[str, float] | None = None,
    size: Size | None = None,
    equivalence: Equivalence | None = None,
    flops: FlopsBudget | None = None,
) -> dict[str, Any]:
    """Every block of the reproduction artifact but provenance (known only to the caller),
    each built as its typed schema block, in the artifact's key order (docs/ARTIFACTS.md).
    ``learning_rates``: each arm's tuned lr, recorded on its block; ``size``: the size dial,
    recorded in the setup; ``equivalence``: the no-op check's finding (a same-function
    finding classes the verdict no-op); ``flops``: compute-matched arms, recorded in the setup."""
    spec = comparison.spec
    data = views.get("bpe") or next(iter(views.values()))
    rates = learning_rates or {}
    arms = {arm.label: _arm_block(arm, runs[arm.label], seeds, device, comparison.objective,
                                  rates.get(arm.label)) for arm in comparison.arms}
    rows = paired_rows(runs, seeds)
    per_seed = [SeedArms(**row) for row in rows]
    statistics = {metric: MetricStatistics.model_validate(block) for metric, block in
                  paired_statistics([row.model_dump() for row in per_seed]).items()}
    formal, policy = claim_policy(len(seeds))
    test_means = {
        label: {
            key: mean([runs[label][s].test[key] for s in seeds])
            for key in runs[label][seeds[0]].test
            if all(runs[label][s].test.get(key) is not None for s in seeds)
        }
        for label in ("baseline", "method")
    }
    return {
        "paper": _paper(spec),
        "dataset": _dataset(corpus, data, preset, comparison),
        "setup": _setup(comparison, preset, seeds, corpus, data, runs, size, flops),
        "baseline": arms["baseline"],
        "method": arms["method"],
        "relative": _relative(arms["baseline"], arms["method"]),
        "paper_results": {"note": "the paper's own numbers are at a scale not reproduced here"},
        "scope": spec.manifest.scope if comparison.against is None else (
            f"{spec.manifest.scope} Here the baseline arm is {comparison.baseline.name} "
            f"(--against {comparison.against}) instead of the declared ablation "
            f"'{spec.manifest.ablation}'."),
        "schema_version": 2,
        "manifest_ref": spec.manifest.manifest_ref,
        "evaluation_protocol": EvaluationProtocol(
            tier="l2_public_dataset",
            seeds=list(seeds),
            formal_comparison=formal,
            claim_policy=policy,
            interval="paired Student t-interval, 95%, on per-seed relative change",
            selection_split="validation",
        ),
        "per_seed": per_seed,
        "statistics": statistics,
        "verdict": _verdict(comparison, per_seed, statistics, margin_percent,
                            equivalence if equivalence is not None and equivalence.same_function else None),
        **({} if equivalence is None else {
            "equivalence": EquivalenceCheck.model_validate(equivalence.block(allowed=True))}),
        "test": HeldOutTest(**test_means),
        "training_curves": TrainingCurves(**{
            label: _curve({s: runs[label][s].train.losses for s in seeds}) for label in runs}),
        **_validation_curves(runs, seeds),
    }
