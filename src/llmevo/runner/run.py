"""The one arm step: train an arm under each of its runs, post-train it when it has a stage,
evaluate the splits asked for, and record an ``ArmRun``.

Every pipeline calls this: a reproduction's report seeds, every tuner's runs (``score_arm``,
run_arm's tuning mode), an evolution trial (with its hurdles), its rescoring seeds and lr grid,
the final champion-versus-baseline comparison and the knockouts. What differs between them is
data: which ``RunSpec``s (seed, training settings), which splits, whether a diverged run
is an error or a record, whether runs come from the arm cache, and whether a run is scored by
one metric (tuning) or evaluated in full (a report run).

A run trains sequentially (``train()``, in this process) when it needs a per-step hook;
otherwise all its runs go through ``train_many`` at once (sequential, batched or parallel,
``execution``; per-step logs on every path), and with ``cache`` a run trained before under
identical settings is loaded instead (``runner.cache``: report entries here, tuning entries
in ``score_arm``).

Public API: ``SPLITS``, ``build_arm_model``, ``evaluate_split_lm``, ``evaluate_arm``,
``arm_train_config``, ``validation_probe``, ``seed_runs``, ``check_fits_data``, ``post_train_and_evaluate``,
``stage_metrics``, ``evaluate_trained``, ``run_arm``, ``score_arm``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import nn

from llmevo.catalog import build_model, build_optimizer, build_recipe, full_registry
from llmevo.components.post_training.evaluate import evaluate_post_training
from llmevo.components.post_training.stage import (
    PostTrainSettings,
    PretrainedModel,
    StageResult,
    run_post_training,
)
from llmevo.components.post_training.tasks import PostTrainData
from llmevo.errors import ConfigError, DivergedError
from llmevo.eval.lm import curve_windows, evaluate_lm
from llmevo.eval.metrics import derive_arm_metrics
from llmevo.eval.suites import evaluate_suite
from llmevo.hf.load import load_llama_weights
from llmevo.registry import ComponentChoice
from llmevo.runner.arm import Arm
from llmevo.runner.arm_run import ArmRun, Scores
from llmevo.runner.cache import ReportEntries, TuningEntries
from llmevo.runner.presets import Preset
from llmevo.runner.views import DataView, arm_stream
from llmevo.train.execution import Execution, RunSpec, train_many
from llmevo.train.logging import RunLogger, RunLogs
from llmevo.train.trainer import (
    Progress,
    TrainConfig,
    TrainResult,
    ValidationProbe,
    train,
    train_horizons,
)

SPLITS = ("validation", "test")  # validation decides; test is evaluated once and only reported
PostData = PostTrainData | Callable[[], PostTrainData] | None  # the data, or a loader called once
StepHook = Callable[[int, float], bool]  # (step, loss) -> keep training


def build_arm_model(arm: Arm) -> nn.Module:
    """The arm's model as training starts: built from its genome (initialised from the
    current torch seed), then, for an arm with ``init``, the checkpoint's weights loaded."""
    model = build_model(arm.model)
    return model if arm.init is None else load_llama_weights(model, arm.init)


def evaluate_split_lm(model: nn.Module, data: DataView, preset: Preset, split: str,
                      device: torch.device) -> dict[str, float]:
    """The language-model metrics on one split (``eval.lm.evaluate_lm``: lm_loss, perplexity,
    bits_per_byte) at the preset's evaluation settings."""
    tokens = data.validation if split == "validation" else data.test
    return evaluate_lm(model, tokens, data.seq_len or preset.train.seq_len, device, data.token_bytes,
                       batch_size=preset.eval_batch_size, max_windows=preset.eval_max_windows)


def validation_probe(data: DataView, preset: Preset, every: int) -> ValidationProbe:
    """A report run's validation curve (``--val-every``): the loss every ``every`` steps on
    ``eval.lm.curve_windows`` of the validation split (the windows ``evaluate_split_lm`` reads,
    32 of them evenly spaced), at the preset's evaluation batch."""
    windows = curve_windows(data.validation, data.seq_len or preset.train.seq_len, preset.eval_max_windows)
    return ValidationProbe(every, windows, preset.eval_batch_size)


def evaluate_arm(
    model: nn.Module,
    data: DataView,
    preset: Preset,
    split: str,
    device: torch.device,
    objective: str = "public_composite",
) -> dict[str, float]:
    """The language-model loss and the preset's suite on one split, with derived metrics."""
    suite = data.suite_validation if split == "validation" else data.suite_test
    lm = evaluate_split_lm(model, data, preset, split, device)
    scores = evaluate_suite(model, suite, batch_size=preset.eval_batch_size, device=device)
    raw = {"lm_loss": lm["lm_loss"], "bits_per_byte": lm.get("bits_per_byte"), **scores}
    return derive_arm_metrics(raw, objective)


def arm_train_config(arm: Arm, data: DataView, preset: Preset) -> TrainConfig:
    """The resolved training settings of one arm: the preset's, with the arm's optimizer."""
    return preset.train.model_copy(
        update={"optimizer": arm.optimizer, "seq_len": data.seq_len or preset.train.seq_len})


def check_fits_data(arm: Arm, data: DataView) -> None:
    """Refuse, before training, a data recipe that cannot draw from its sources (a source
    with a positive weight shorter than one window), and a transformer arm whose vocabulary
    or window is smaller than its data's (a token id past the embedding would fail deep
    inside the model)."""
    recipe = build_recipe(arm.recipe)
    recipe.check(data.train_sources(), data.seq_len)
    if arm.model.architecture != "transformer":
        return  # the BLT architectures size themselves from their data (runner.views views)
    largest = data.largest_token()
    if arm.model.vocab_size <= largest:
        raise ConfigError(f"{arm.label} arm '{arm.name}': vocab_size {arm.model.vocab_size} is too "
                          f"small for its data (token ids up to {largest}); use at least {largest + 1}")
    seq_len = data.seq_len
    if seq_len and arm.model.max_seq_len < seq_len:
        raise ConfigError(f"{arm.label} arm '{arm.name}': max_seq_len {arm.model.max_seq_len} is "
                          f"shorter than the training window {seq_len}")


def seed_runs(arm: Arm, data: DataView, preset: Preset, seeds: Sequence[int]) -> list[RunSpec]:
    """One run per seed at the arm's resolved training settings (``arm_train_config``)."""
    config = arm_train_config(arm, data, preset)
    return [RunSpec(seed, config) for seed in seeds]


def stage_metrics(stage: StageResult) -> dict[str, float]:
    """The stage's own numbers a run records with its validation metrics."""
    return {"post_training_loss": stage.post_training_loss,
            "reward_bearing_group_rate": stage.reward_bearing_group_rate, **stage.extra}


def post_train_and_evaluate(
    model: nn.Module,
    method: ComponentChoice,
    data: DataView,
    preset: Preset,
    post_data: PostTrainData,
    seed: int,
    steps_done: int,
    device: torch.device,
    splits: Sequence[str] = SPLITS,
    objective: str = "public_composite",
    settings: PostTrainSettings | None = None,
    task: str | None = None,
    from_checkpoint: bool = False,
) -> tuple[StageResult, dict[str, dict[str, float]]]:
    """The post-training step every pipeline shares: ``method``'s stage on ``model`` (trained
    for ``steps_done`` steps, or loaded: ``from_checkpoint``), its stage seed ``seed`` plus the
    settings' offset, then each split evaluated: the language-model metrics and the suite
    (``evaluate_arm``) and the stage's held-out metrics (preference accuracy and margin,
    arithmetic exact match; self-consistency when the settings ask). ``settings`` default to
    the preset's stage; ``task`` to the method's own (a reproduction gives both arms its
    method's task). A post-training reproduction's arms and an evolution's post-training
    genes record the same metrics."""
    settings = settings or preset.post_training
    task = task or full_registry().get("post_training", method.name).cls.task or "instruction"
    stage = run_post_training(PretrainedModel(model, steps_done, from_checkpoint=from_checkpoint), method,
                              post_data, task, settings, seed + settings.seed_offset, device)
    consistency = seed if settings.self_consistency else None
    metrics = {}
    for split in splits:
        metrics[split] = evaluate_arm(model, data, preset, split, device, objective)
        metrics[split].update(evaluate_post_training(model, post_data, split, device, settings.max_new_tokens,
                                                     consistency, settings.sampling_temperature))
    return stage, metrics


def evaluate_trained(
    model: nn.Module,
    arm: Arm,
    data: DataView,
    preset: Preset,
    seed: int,
    steps_done: int,
    device: torch.device,
    splits: Sequence[str] = SPLITS,
    objective: str = "public_composite",
    post_data: PostData = None,
) -> tuple[StageResult | None, dict[str, dict[str, float]]]:
    """Run the arm's post-training stage on a freshly trained ``model`` (if it has one:
    ``post_train_and_evaluate``, ``post_data`` a loader called once), then evaluate each
    split: (stage, {split: metrics})."""
    model = model.to(device)
    if arm.post_training is not None and arm.post_training.name != "none":
        if post_data is None:
            raise ConfigError(f"{arm.label} arm '{arm.name}' has a post-training stage "
                              f"({arm.post_training.name}) and no post-training data was given")
        loaded = post_data() if callable(post_data) else post_data
        return post_train_and_evaluate(model, arm.post_training, data, preset, loaded, seed, steps_done,
                                       device, splits, objective)
    return None, {split: evaluate_arm(model, data, preset, split, device, objective)
                  for split in splits}


def _finish(
    arm: Arm,
    data: DataView,
    preset: Preset,
    spec: RunSpec,
    model: nn.Module,
    result: TrainResult,
    device: torch.device,
    path: str,
    splits: Sequence[str],
    objective: str,
    on_diverged: Literal["raise", "record"],
    logger: RunLogger | None,
    post_data: PostData,
    score: str | None = None,
) -> ArmRun:
    """The ``ArmRun`` of one trained model: evaluated when its training completed; a
    diverged run raises ``DivergedError`` or is recorded unevaluated (``on_diverged``).
    With ``score`` (tuning) see ``run_arm``."""
    if result.status == "diverged" and on_diverged == "raise":
        raise DivergedError(f"{arm.label} arm '{arm.name}' seed {spec.seed}: {result.message}",
                            result.steps_done)
    run = ArmRun(seed=spec.seed, validation={}, test={}, train=result,
                 parameters=sum(p.numel() for p in model.parameters()), architecture_stats={},
                 model=model, train_config=spec.config.model_dump(mode="json"), path=path)
    if score is not None:  # tuning: one metric, no stage, no suite; a stopped run is scored too
        if result.status != "diverged":
            run.validation = {score: float(evaluate_split_lm(model.to(device), data, preset,
                                                             "validation", device)[score])}
        run.model = model.cpu()  # a tuner keeps numbers, not models: free the device
        return run
    if result.status != "complete":
        return run
    run.stage, metrics = evaluate_trained(model, arm, data, preset, spec.seed, result.steps_done,
                                          device, splits, objective, post_data)
    run.model = model.to(device)
    if "validation" in metrics:
        run.validation = metrics["validation"] | {"initial_loss": result.initial_loss,
                                                  "final_loss": result.final_loss}
        if run.stage is not None:
            run.validation |= stage_metrics(run.stage)
    run.test = metrics.get("test", {})
    if logger is not None:
        for split in splits:
            logger.log_metrics(split, run.validation if split == "validation" else metrics[split],
                               result.steps_done)
    stats = dict(getattr(model, "architecture_stats", lambda: {})())
    stats.update(result.optimizer_statistics)
    run.architecture_stats = stats
    return run


def run_arm(
    arm: Arm,
    data: DataView,
    preset: Preset,
    runs: Sequence[RunSpec],
    device: torch.device,
    *,
    splits: Sequence[str] = SPLITS,
    objective: str = "public_composite",
    on_diverged: Literal["raise", "record"] = "raise",
    execution: Execution = Execution(),
    workers: int | None = None,
    progress: Progress | None = None,
    description: str | None = None,
    logs: RunLogs | None = None,
    log_name: str | None = None,
    make_hook: Callable[[nn.Module], StepHook] | None = None,
    post_data: PostData = None,
    cache: ReportEntries | None = None,
    score: str | None = None,
    keep_branch: Callable[[RunSpec, ArmRun], None] | None = None,
) -> list[ArmRun]:
    """Train, post-train and evaluate ``arm`` once per ``RunSpec``; the runs in spec order.

    Every run draws its windows through the arm's data recipe (``arm.recipe`` over ``data``'s
    training sources, ``runner.views.arm_stream``). Each model is built after
    ``torch.manual_seed(spec.seed)`` (an arm with ``init`` then
    loads the checkpoint's weights over it). ``logs`` gets one logger per run,
    ``<log_name>-seed<seed>`` (every training step and the final metrics), on whichever path
    the runs train. With ``make_hook`` (``make_hook(model)`` gives the per-step callback that
    may stop a run) the runs train one after another in this process and ``cache`` is not
    used; otherwise they go through one ``train_many`` call (``execution``, ``workers``). With ``cache`` (this
    arm's report entries) a run found there is loaded (``ArmRun.cached``) instead of
    trained, and every run trained is stored. ``description`` names the runs on progress
    bars (default ``"<label> <name>"``).

    ``score`` is the tuning mode (``score_arm``): every run that did not diverge (one stopped
    early by ``RunSpec.stop_after`` too) is scored on the validation split by this one
    language-model metric (``evaluate_split_lm``: no post-training stage, no suite, so tuning
    costs what it always did), ``ArmRun.validation`` is ``{score: value}``, and the model is
    moved to the CPU.

    ``execution.val_every`` gives every report run (not a tuning run) its validation curve
    (``validation_probe``), on whichever path it trains; a cached run is a hit only where its
    entry holds the same curve (``ReportEntries.load``).

    ``execution.branches`` (shorter horizons, in steps): a missing run that trains to the end
    trains in this process as the trunk of its branches at those of them below its steps
    (``train.trainer.train_horizons``: each branch is, to the bit, the run of that many steps
    alone), and each branch run is stored in ``cache`` (or handed to ``keep_branch``, the
    tuning entries of ``score_arm``) under the key that run alone has, so a request at those
    steps loads it. Without either, nothing would keep them, and the runs train as usual."""
    if score is not None and cache is not None:  # a scored run is no report run: keep them apart
        raise ValueError("run_arm: a tuning run (score) is cached as a tuning entry, by score_arm")
    description = description or f"{arm.label} {arm.name}"
    stream = arm_stream(build_recipe(arm.recipe), data)
    probe = (validation_probe(data, preset, execution.val_every)
             if score is None and execution.val_every is not None else None)

    def build() -> nn.Module:
        return build_arm_model(arm)

    def finish(spec: RunSpec, model: nn.Module, result: TrainResult, path: str,
               logger: RunLogger | None = None) -> ArmRun:
        return _finish(arm, data, preset, spec, model, result, device, path, splits, objective,
                       on_diverged, logger, post_data, score)

    named = None if logs is None else _Prefixed(logs, log_name or arm.label)
    if make_hook is not None:
        finished = []
        for spec in runs:
            logger = None if named is None else named.run(f"seed{spec.seed}")
            try:
                torch.manual_seed(spec.seed)
                model = build()
                result = train(model, stream, spec.config, spec.seed, device,
                               build_optimizer(spec.config.optimizer), progress,
                               description=f"{description} seed {spec.seed}",
                               on_step=None if make_hook is None else make_hook(model),
                               logger=logger, curve=probe)
                finished.append(finish(spec, model, result, "sequential", logger))
            finally:
                if logger is not None:
                    logger.close()
        return finished
    curve = None if probe is None else probe.settings()
    found = {} if cache is None else cache.hits(runs, lambda spec: cache.load(spec, runs, build, curve))
    keep = keep_branch or (None if cache is None else lambda spec, run: cache.store(spec, [spec], run))

    def shorter(spec: RunSpec) -> list[int]:
        return ([] if keep is None or spec.stop_after is not None else
                sorted(steps for steps in set(execution.branches) if steps < spec.config.steps))

    trunks = {index: horizons for index in range(len(runs))
              if index not in found and (horizons := shorter(runs[index]))}
    missing = [index for index in range(len(runs)) if index not in found and index not in trunks]
    for index, horizons in trunks.items():
        spec = runs[index]
        torch.manual_seed(spec.seed)
        trained = train_horizons(build(), stream, spec.config, [*horizons, spec.config.steps], spec.seed,
                                 device, build_optimizer, probe)
        for steps, (model, result) in zip(horizons, trained, strict=False):
            branch = RunSpec(spec.seed, spec.config.model_copy(update={"steps": steps}), spec.label)
            run = _finish(arm, data, preset, branch, model, result, device, "sequential", splits, objective,
                          "record", None, post_data, score)  # its own decay may diverge where the trunk's did not
            if run.status == "complete":
                keep(branch, run)
        found[index] = finish(spec, *trained[-1], "sequential")
        if cache is not None and found[index].status == "complete":
            cache.store(spec, runs, found[index])
    outcomes = train_many(
        build, stream, [runs[index] for index in missing], device, progress,
        description=description, build_optimizer=build_optimizer, path=execution.path,
        replicas_max=execution.replicas_max, workers=workers, curve=probe, logs=named,
    ) if missing else []
    try:
        for index, outcome in zip(missing, outcomes, strict=True):
            found[index] = finish(outcome.spec, outcome.model, outcome.result, outcome.path, outcome.logger)
            if cache is not None and found[index].status == "complete":
                cache.store(outcome.spec, runs, found[index])
    finally:
        for outcome in outcomes:
            if outcome.logger is not None:
                outcome.logger.close()
    return [found[index] for index in range(len(runs))]


class _Prefixed:
    """``logs`` with each run named ``<prefix>-<name>`` (``baseline-seed42``)."""

    def __init__(self, logs: RunLogs, prefix: str):
        self.logs, self.prefix = logs, prefix

    def run(self, name: str) -> RunLogger:
        return self.logs.run(f"{self.prefix}-{name}")


def score_arm(
    arm: Arm,
    data: DataView,
    preset: Preset,
    runs: Sequence[RunSpec],
    device: torch.device,
    *,
    metric: str,
    execution: Execution = Execution(),
    progress: Progress | None = None,
    cache: TuningEntries | None = None,
) -> Scores:
    """Every tuner's scorer: each of ``runs`` (one call of an arm's tuning runs) by its
    validation ``metric``, a diverged run None. With ``cache`` (this arm's tuning entries) a run
    found there is not trained; the others train in one ``run_arm`` call in its tuning mode
    (``score``) and are stored, each with how it trained. Where a run's numbers depend on its
    call-mates (``ArmCache.independent``) one missing run trains the whole call."""
    hits = {} if cache is None else cache.hits(runs, lambda spec: cache.load(spec, runs))
    scores = Scores({index: hit.value for index, hit in hits.items()}, set(hits),
                    {index: hit.path for index, hit in hits.items() if hit.path is not None})
    missing = [index for index in range(len(runs)) if index not in hits]
    def keep_branch(spec: RunSpec, run: ArmRun) -> None:  # a decay branch (``Execution.branches``)
        cache.store(spec, [spec], run.validation.get(metric), run.path)

    trained = run_arm(arm, data, preset, [runs[index] for index in missing], device, score=metric,
                      on_diverged="record", execution=execution, progress=progress,
                      description=f"tune {arm.label}",
                      keep_branch=None if cache is None else keep_branch) if missing else []
    for index, run in zip(missing, trained, strict=True):
        scores.values[index] = run.validation.get(metric)  # {} when it diverged
        scores.paths[index] = run.path
        if cache is not None:
            cache.store(runs[index], runs, scores.values[index], run.path)
    return scores
