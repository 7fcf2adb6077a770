"""The arm-runner interface: what ``runner.compare.compare_arms`` asks of whatever trains an
arm, and the in-process implementation for the built-in arms.

A comparison (``runner.compare``) is the same protocol whoever runs the arms: every check
before anything runs, each arm tuned by one tuner (``runner.tuner``), the report seeds, the
budget check, paired statistics and the verdict. What differs is how one arm runs, behind
``ArmRunner``:

- ``InProcessRunner`` (here): a built-in arm trained in this process through
  ``runner.run.run_arm`` (tuning runs scored by ``runner.run.score_arm``), checked against
  its data and the memory, the no-op check on the arms' logits (``runner.equivalence``),
  equal token streams or, with ``match="flops"``, equal training FLOPs;
- ``experiments.post_training.PostTrainingRunner``: one pretraining per seed shared by both
  arms, each arm's post-training stage on its own copy, equal example counts;
- ``experiments.external.SubprocessRunner``: anyone's training command, one subprocess per
  run, read from and written to its own run cache, the no-op and seed checks on the
  metrics the command reports.

A runner is made for one comparison and keeps what it resolved (an in-process arm's preset at
its tuned choice, a flops budget): ``check`` first, then ``tuning_start``/``at_choice`` per
arm (through ``runner.tuner.tune_arms``), ``report`` per arm, ``check_budget`` last.

Public API: ``ArmRunner``, ``InProcessRunner``, ``FlopsBudget``, ``match_flops``,
``check_equal_budget``, ``COUNTED_BY``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal, Protocol

import torch

from llmevo.errors import ConfigError
from llmevo.runner.arm import Arm, resolved_recipe
from llmevo.runner.arm_run import ArmRun
from llmevo.runner.cache import ArmCache
from llmevo.runner.equivalence import Equivalence, check_equivalence, refusal
from llmevo.runner.flops import FlopCount, count_flops_per_token, flops_ratio, matched_steps
from llmevo.runner.presets import Preset
from llmevo.runner.resources import check_memory, concurrent_runs
from llmevo.runner.run import (
    arm_train_config,
    build_arm_model,
    check_fits_data,
    run_arm,
    score_arm,
    seed_runs,
)
from llmevo.runner.tuner import ArmChoice, Tunable, Tuner, TuningStart, model_components
from llmevo.runner.views import DataView
from llmevo.train.execution import Execution, check_path
from llmevo.train.logging import RunLogs
from llmevo.train.trainer import Progress, TrainConfig


class ArmRunner(Tunable, Protocol):
    """How the arms of one comparison run (see the module docstring); ``tuning_start`` and
    ``at_choice`` are what tuning asks (``runner.tuner.Tunable``)."""

    def check(self, name: str, baseline: Any, method: Any, seeds: Sequence[int], tuner: Tuner | None,
              allow_noop: bool) -> Equivalence:
        """Every check before anything trains (or before the report runs, where a check must
        run something); arms that compute the same thing are refused here in the runner's own
        words unless ``allow_noop``. The no-op check's finding."""
        ...

    def report(self, arm: Any, seeds: Sequence[int]) -> Iterator[tuple[int, Any]]:
        """The arm's report runs at its choice, ``(seed, run)`` as each is done."""
        ...

    def check_budget(self, baseline: Any, method: Any, runs: dict[str, dict[int, Any]],
                     seeds: Sequence[int]) -> None:
        """Refuse report runs whose budgets differ (``ConfigError``)."""
        ...


@dataclass
class InProcessRunner:
    """Built-in arms trained in this process (``runner.run``), on ``views`` under ``preset``.
    ``cache`` (``runner.cache.ArmCache``, opened by the caller: its keys cover the caller's
    code) loads runs trained before under identical settings and stores every run trained;
    ``logs`` gets one run per arm and seed; ``match``: equal tokens, or equal training FLOPs
    (the method's steps set by ``match_flops``). ``presets``: each arm's preset, at its tuned
    choice once tuned; ``flops``: the budget under ``match="flops"``."""

    views: dict[str, DataView]
    preset: Preset
    device: torch.device
    metric: str
    objective: str
    execution: Execution = Execution()
    cache: ArmCache | None = None
    progress: Progress | None = None
    logs: RunLogs | None = None
    match: Literal["tokens", "flops"] = "tokens"
    presets: dict[str, Preset] = field(default_factory=dict)
    flops: FlopsBudget | None = None

    def check(self, name: str, baseline: Arm, method: Arm, seeds: Sequence[int], tuner: Tuner | None,
              allow_noop: bool) -> Equivalence:
        """Each arm fits its data and the memory (``runner.resources``); the no-op check
        (``runner.equivalence``) on the arms' functions; then, under ``match="flops"``, the
        method's matched steps."""
        check_path(self.execution.path, self.execution.replicas_max)
        most_runs = max(len(seeds), 0 if tuner is None else tuner.runs_at_once())
        for arm in (baseline, method):  # an invalid genome, or one that cannot fit, fails before training
            data = self.views[arm.data]
            check_fits_data(arm, data)
            check_memory(f"{arm.label} arm '{arm.name}'", arm.model, arm_train_config(arm, data, self.preset),
                         self.device, concurrent_runs(self.execution, self.device, most_runs))
        equivalence = check_equivalence(baseline, method, self.views, self.preset, seeds[0], self.device, self.cache)
        if equivalence.same_function and not allow_noop:
            raise ConfigError(refusal(name, equivalence))  # before anything is trained or written
        self.presets = {arm.label: self.preset for arm in (baseline, method)}
        if self.match == "flops":  # the method at the steps that spend the baseline's FLOPs
            self.flops = match_flops(baseline, method, self.views, self.preset)
            self.presets["method"] = self.preset.model_copy(update={"train": self.preset.train.model_copy(
                update={"steps": self.flops.steps["method"]})})
        return equivalence

    def tuning_start(self, arm: Arm) -> TuningStart:
        preset, data = self.presets[arm.label], self.views[arm.data]
        config = arm_train_config(arm, data, preset)
        entries = None if self.cache is None else self.cache.tuning(arm, data, preset, self.metric, self.objective)
        score = partial(score_arm, arm, data, preset, device=self.device, metric=self.metric,
                        execution=self.execution, progress=self.progress, cache=entries)
        return TuningStart(config, model_components(arm), score, config.steps)

    def at_choice(self, arm: Arm, start: TuningStart, choice: ArmChoice) -> Arm:
        """The arm with its optimizer at the choice; its preset with every training setting the
        tuner moved."""
        self.presets[arm.label] = _at_choice(self.presets[arm.label], start.config, choice.config)
        return replace(arm, optimizer=choice.config.optimizer)

    def report(self, arm: Arm, seeds: Sequence[int]) -> Iterator[tuple[int, ArmRun]]:
        """All seeds of the arm at once (one ``run_arm`` call); each model moved to the CPU
        once its run has been handed on."""
        data, preset = self.views[arm.data], self.presets[arm.label]
        entries = None if self.cache is None else self.cache.report(arm, data, preset, self.metric, self.objective)
        for run in run_arm(arm, data, preset, seed_runs(arm, data, preset, seeds), self.device,
                           objective=self.objective, execution=self.execution, progress=self.progress,
                           logs=self.logs, cache=entries):
            yield run.seed, run
            run.model = run.model.cpu()

    def check_budget(self, baseline: Arm, method: Arm, runs: dict[str, dict[int, ArmRun]],
                     seeds: Sequence[int]) -> None:
        check_equal_budget(baseline, method, runs, seeds, flops=self.flops)


def _at_choice(preset: Preset, config: TrainConfig, chosen: TrainConfig) -> Preset:
    """``preset`` with every training setting the tuner moved set to its chosen value (the
    optimizer's settings travel with the arm)."""
    moved = {name: getattr(chosen, name) for name in TrainConfig.model_fields
             if name != "optimizer" and getattr(chosen, name) != getattr(config, name)}
    return preset.model_copy(update={"train": preset.train.model_copy(update=moved)})


COUNTED_BY = ("torch.utils.flop_counter.FlopCounterMode over one forward and backward pass of the "
              "language-modelling loss on the first training batch (B x T tokens), attention on the "
              "math backend; matrix products only (no elementwise ops, no optimizer step); routed "
              "experts at their active share")


@dataclass(frozen=True)
class FlopsBudget:
    """Compute-matched arms (``match="flops"``): each arm's training FLOPs per token and its
    training steps; both arms train ``tokens_per_step`` tokens a step."""

    flops: dict[str, FlopCount]
    steps: dict[str, int]
    tokens_per_step: int

    @property
    def ratio(self) -> float:
        """The method's total training FLOPs over the baseline's."""
        return flops_ratio(self.steps["baseline"], self.flops["baseline"].counted,
                           self.steps["method"], self.flops["method"].counted)

    def block(self) -> dict[str, Any]:
        """The artifact's ``setup.flops`` block (``artifacts.schema.FlopsMatch``)."""
        labels = ("baseline", "method")
        return {"counted_by": COUNTED_BY,
                "flops_per_token": {label: {"counted": self.flops[label].counted,
                                            "computed": self.flops[label].computed} for label in labels},
                "steps": dict(self.steps),
                "tokens": {label: self.steps[label] * self.tokens_per_step for label in labels},
                "total_flops": {label: self.flops[label].counted * self.steps[label] * self.tokens_per_step
                                for label in labels},
                "ratio": self.ratio}


def match_flops(baseline: Arm, method: Arm, views: dict[str, DataView], preset: Preset) -> FlopsBudget:
    """Count each arm's training FLOPs per token (``runner.flops``) on the first training batch
    of its data view (the model built on the CPU, the torch seed left as it was) and set the
    method's steps so that its total equals the baseline's at ``preset``'s steps. The arms
    must share a data view: a FLOP per token of another tokenization is another unit."""
    if baseline.data != method.data:
        raise ConfigError(f"--match flops: the arms read different data views ({baseline.data}, {method.data}), "
                          "so a FLOP per token is not one unit across them; use --match tokens")
    data = views[baseline.data]
    train = arm_train_config(baseline, data, preset)  # the window is the data view's
    needed = train.batch_size * (train.seq_len + 1)
    if data.stream.numel() < needed:
        raise ConfigError(f"--match flops: the training stream holds {data.stream.numel():,} tokens, fewer "
                          f"than one batch ({needed:,})")
    batch = data.stream[:needed].reshape(train.batch_size, train.seq_len + 1).long()  # (B, T + 1)
    counts = {}
    for arm in (baseline, method):
        with torch.random.fork_rng(devices=[]):  # building a model draws from the global generator
            model = build_arm_model(arm).cpu()
        counts[arm.label] = count_flops_per_token(model, batch)
    steps = {"baseline": train.steps,
             "method": matched_steps(train.steps, counts["baseline"].counted, counts["method"].counted)}
    return FlopsBudget(counts, steps, train.batch_size * train.seq_len)


def check_equal_budget(baseline: Arm, method: Arm, runs: dict[str, dict[int, ArmRun]],
                       seeds: Sequence[int], flops: FlopsBudget | None = None) -> None:
    """Verify each seed's budget: arms of one data view and one data recipe consumed the same
    token stream (equal hashes); arms whose recipes differ (a data-slot comparison, whose
    hashes differ by design: each covers its recipe) consumed equally many tokens. With
    ``flops`` (compute-matched arms) each seed's training FLOPs (counted per token x tokens
    seen) must agree within half of one step of the method's."""
    if flops is not None:
        _check_equal_flops(runs, seeds, flops)
        return
    if baseline.data != method.data:
        return  # different tokenizations: equal text per window, checked by the data views
    same_recipe = resolved_recipe(baseline.recipe) == resolved_recipe(method.recipe)
    for seed in seeds:
        trained = [runs[label][seed].train for label in ("baseline", "method")]
        if same_recipe and len({t.token_stream_sha256 for t in trained}) != 1:
            raise ConfigError(f"seed {seed}: the arms consumed different token streams")
        if len({t.tokens_seen for t in trained}) != 1:
            raise ConfigError(f"seed {seed}: the arms consumed different numbers of tokens "
                              f"({trained[0].tokens_seen:,} and {trained[1].tokens_seen:,})")


def _check_equal_flops(runs: dict[str, dict[int, ArmRun]], seeds: Sequence[int], flops: FlopsBudget) -> None:
    """Compute-matched arms: equal training FLOPs per seed, to the rounding of one step."""
    per_token = {label: flops.flops[label].counted for label in ("baseline", "method")}
    tolerance = 0.5 * per_token["method"] * flops.tokens_per_step  # rounding to whole steps
    for seed in seeds:
        seen = {label: runs[label][seed].train.tokens_seen for label in ("baseline", "method")}
        total = {label: per_token[label] * seen[label] for label in seen}
        if abs(total["method"] - total["baseline"]) > tolerance:
            raise ConfigError(f"seed {seed}: the arms spent different training FLOPs ({total['baseline']:.4g} and "
                              f"{total['method']:.4g}: {seen['baseline']:,} and {seen['method']:,} tokens at "
                              f"{per_token['baseline']:,.0f} and {per_token['method']:,.0f} FLOPs per token)")


