"""The training loop: seeded random windows, AdamW-style optimizers, clipping, schedules.

Batches are drawn from a ``torch.Generator`` seeded by the run seed and nothing else, so
every arm of a comparison consumes exactly the same windows; the trainer hashes what it
consumed (``token_stream_sha256``) so "equal budget" can be verified rather than declared.
A non-finite loss stops the run and marks it ``diverged``.

The learning-rate rule (the replica trainer follows it too): each optimizer param group
keeps its own *base* learning rate, set by the optimizer component when it builds the
optimizer (Lion's ``lr * lr_multiplier``, Muon's per-role groups, AdamW's ``lr``). The
schedule only multiplies every base rate by the same factor ``lr_at(step, config) /
config.lr`` (warmup, then constant or cosine), through ``LambdaSchedule`` (``LambdaLR``'s rule;
the optimizers and the schedule avoid ``torch.optim``, whose first use imports ``torch._dynamo``).
So during step ``s`` a group whose base rate is ``b`` runs at ``b * lr_at(s) / config.lr``;
for AdamW (base ``config.lr``) that is exactly ``lr_at(s)``. ``schedule_factor`` is that
factor; ``lr_at`` stays the public formula.

The optimizer's hooks (``optim/optimizer.py``): ``set_run_steps`` before the first step,
``at_evaluation_point`` around ``on_step`` and ``to_evaluation_point`` after the last step, so
the model is left (and a hurdle evaluates it) where the optimizer says it is evaluated
(schedule-free AdamW's average x; every other optimizer: where it trained).

The trainer looks nothing up by name: it receives the run's optimizer component
(``llmevo.catalog.build_optimizer(config.optimizer)``), which builds the ``Optimizer`` for
the model; ``config.optimizer`` is the record of that choice.

The windows come from ``stream``: a bare token tensor (uniform windows, ``WindowSampler``)
or a ``TrainStream``, a data recipe bound to the training sources
(``llmevo.components.data``); the hash then starts with the recipe's identity, so it covers
the recipe as well as the windows (the ``concat`` recipe's identity is empty: a bare stream
and ``concat`` hash alike).

A run with a ``ValidationProbe`` (``curve``: a report run under ``--val-every N``) evaluates the
validation loss on the probe's fixed windows every N steps and after the last, at the
optimizer's evaluation point (``at_evaluation_point``), and records them
(``TrainResult.validation_curve``). The evaluation changes nothing of the training, to the
bit: it runs under ``torch.no_grad`` in eval mode (the mode restored), with the global random
state saved and restored around it (``torch.random.fork_rng``) and the auxiliary parts not
recording (their terms are taken before it), and the windows come from no training sampler.

The objective is the cross-entropy plus the auxiliary terms of the model's ``AuxiliaryLoss``
parts (a mixture of experts' load balancing, weighted in its own config; ``AuxiliaryLosses``
in ``components/base.py``); the recorded losses stay the cross-entropy. A model without such
parts adds nothing: its objective is the cross-entropy tensor itself.

Several horizons of one run (``train_horizons``; issue 48, item 3b): the longest trains once, and
each horizon continues from a copy of it (model, optimizer, schedule, random state: ``_Run.branch``)
taken at its ``branch_point``, the first step whose learning rate differs from the longest's
(under ``wsd``, its decay's start), with its own sampler advanced to that point. Each result is
``train()``'s at that horizon alone, to the bit on a CPU.

Public API: ``TrainConfig``, ``train(model, stream, config, seed, device, optimizer, ...)``,
``TrainResult``, ``ValidationProbe``, ``evaluation_kept``, ``WindowSampler`` (from ``components.data.base``), ``lr_at``,
``schedule_factor``, ``build_schedule``, ``branch_point``, ``train_horizons``.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

import torch
import torch.nn.functional as F
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from torch import Tensor, nn

from llmevo import interrupts
from llmevo.components.base import AuxiliaryLosses
from llmevo.components.data.base import TrainStream, Windows, windows_for
from llmevo.components.data.base import WindowSampler as WindowSampler  # re-exported
from llmevo.components.optim.base import OptimizerComponent, OptimizerFactory, scale_learning_rates
from llmevo.components.optim.optimizer import LambdaSchedule, Optimizer
from llmevo.errors import ConfigError
from llmevo.eval.lm import windows_loss
from llmevo.eval.stats import mean
from llmevo.registry import ComponentChoice, StrictModel
from llmevo.train.logging import StepLogger, StepRecord


class Replicas(enum.Enum):
    """How the batched path (``train.replicas``: R runs in one vmapped step) honours a
    training setting, declared on each ``TrainConfig`` field: ``SHARED``, equal across the
    replicas of one batched run (``replica_group_key`` reads these declarations, so runs
    that differ in one never batch together); ``PER_REPLICA``, each replica's own (an (R,)
    column of the step, or each replica's own optimizer settings). Either way the batched
    step must read it (``train.replicas``) as ``train()`` does. A new setting declares one and
    gets one other value in ``tests/unit/test_replicas.py``, which fails without it and checks
    the batched numbers against the sequential ones: two replicas that differ in a per-replica
    setting, or share another value of a shared one, each train as they do alone, and runs
    that differ in a shared setting are never batched together."""

    SHARED = "shared"
    PER_REPLICA = "per_replica"


class TrainConfig(StrictModel):
    """A run's training settings, each declaring how batched replicas honour it (``Replicas``)."""

    steps: Annotated[PositiveInt, Replicas.SHARED]
    batch_size: Annotated[PositiveInt, Replicas.SHARED]
    seq_len: Annotated[PositiveInt, Replicas.SHARED]
    lr: Annotated[PositiveFloat, Replicas.PER_REPLICA]
    weight_decay: Annotated[NonNegativeFloat, Replicas.PER_REPLICA] = 0.01  # AdamW's default in torch.optim
    grad_clip: Annotated[NonNegativeFloat, Replicas.PER_REPLICA] = 1.0  # 0 disables clipping
    schedule: Annotated[Literal["constant", "cosine", "wsd"], Replicas.PER_REPLICA] = "constant"
    # wsd (warmup-stable-decay): the last this fraction of the post-warmup steps decays linearly
    wsd_decay: Annotated[float, Field(gt=0, le=1), Replicas.PER_REPLICA] = 0.2
    warmup_steps: Annotated[NonNegativeInt, Replicas.PER_REPLICA] = 0
    min_lr_ratio: Annotated[NonNegativeFloat, Replicas.PER_REPLICA] = 0.1
    # per replica: each its own settings; the component and what its batched twin shares
    # (``BatchedOptimizer.shared``) are part of the group key
    optimizer: Annotated[ComponentChoice, Replicas.PER_REPLICA] = Field(
        default_factory=lambda: ComponentChoice(name="adamw"))
    loss_window: Annotated[PositiveInt, Replicas.SHARED] = 10  # initial/final loss = mean of the first/last this many steps
    precision: Annotated[Literal["fp32", "bf16"], Replicas.SHARED] = "fp32"  # bf16: autocast matmuls (AVX-512-BF16, AMX, GPUs)

    @classmethod
    def replica_settings(cls, kind: Replicas) -> tuple[str, ...]:
        """The settings that declare ``kind``, in declaration order."""
        return tuple(name for name, info in cls.model_fields.items() if kind in info.metadata)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate at ``step`` (0-based): linear warmup, then constant, cosine decay, or
    warmup-stable-decay (``wsd``: constant, then a linear decay to the floor over the last
    ``wsd_decay`` of the post-warmup steps; Hägele et al. 2024, arXiv:2405.18392)."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return config.lr
    span = max(1, config.steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    floor = config.lr * config.min_lr_ratio
    if config.schedule == "wsd":
        stable = 1.0 - config.wsd_decay
        return config.lr if progress <= stable else config.lr - (config.lr - floor) * (progress - stable) / config.wsd_decay
    return floor + (config.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def schedule_factor(step: int, config: TrainConfig) -> float:
    """The multiplier applied to every param group's base learning rate during ``step``."""
    return lr_at(step, config) / config.lr


def build_schedule(optimizer: Optimizer, config: TrainConfig) -> LambdaSchedule:
    """A schedule scaling each group's own base lr by ``schedule_factor`` (as ``LambdaLR``).

    Call ``scheduler.step()`` once after each ``optimizer.step()``; the factor for step 0 is
    applied on construction.
    """
    return LambdaSchedule(optimizer, lambda step: schedule_factor(step, config))


class Progress(Protocol):
    def start(self, total: int, description: str) -> None: ...
    def update(self, step: int, loss: float, tokens_per_second: float) -> None: ...
    def stop(self) -> None: ...


@dataclass(frozen=True)
class ValidationProbe:
    """A report run's validation curve (``--val-every``): the loss on ``windows`` (K, T + 1),
    a fixed subset of the validation split (``eval.lm.curve_windows``), after every ``every``-th
    step and after the last one (``due``)."""

    every: int
    windows: Tensor  # (K, T + 1)
    batch_size: int = 64

    def due(self, step: int, steps: int) -> bool:
        """Whether the curve has a point after ``step`` (0-based) of a ``steps``-step run."""
        return (step + 1) % self.every == 0 or step + 1 == steps

    def settings(self) -> dict[str, int]:
        """What defines the curve (a cached run's curve is reused only where these agree)."""
        return {"every": self.every, "windows": int(self.windows.shape[0]),
                "window_tokens": int(self.windows.shape[1])}

    def curve(self, steps: list[int], losses: list[float]) -> dict[str, Any]:
        """The recorded curve: ``steps`` (steps done at each point, 1-based) and ``losses``."""
        return {**self.settings(), "steps": steps, "losses": losses}


def evaluation_kept(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The global random state (CPU, and the device's) as it was after the block: an
    evaluation inside a run consumes none of the training's randomness."""
    if device.type == "cuda":
        return torch.random.fork_rng(devices=[device.index if device.index is not None
                                              else torch.cuda.current_device()])
    return torch.random.fork_rng(devices=[])


def _probe(curve: ValidationProbe, model: nn.Module, device: torch.device,
           auxiliary: AuxiliaryLosses) -> float:
    """One point of the validation curve, leaving the training as it was (module docstring)."""
    auxiliary.stop()
    try:
        with evaluation_kept(device):
            return windows_loss(model, curve.windows, device, curve.batch_size)
    finally:
        auxiliary.start()


@dataclass
class TrainResult:
    status: Literal["complete", "diverged", "stopped"]
    losses: list[float]
    initial_loss: float
    final_loss: float
    steps_done: int
    tokens_seen: int
    token_stream_sha256: str
    wall_seconds: float
    tokens_per_second: float
    optimizer_statistics: dict[str, Any] = field(default_factory=dict)
    orthogonality_error: float = 0.0
    message: str = ""
    # ``ValidationProbe.curve``: {every, windows, window_tokens, steps, losses}; None without a probe
    validation_curve: dict[str, Any] | None = None


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """Mixed precision for the forward pass; a no-op context for ``fp32``."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


@dataclass
class _Run:
    """One run's training state between two steps: what a decay branch copies (``_Run.branch``)."""

    model: nn.Module
    component: OptimizerComponent
    optimizer: Optimizer
    scheduler: LambdaSchedule
    config: TrainConfig
    losses: list[float] = field(default_factory=list)
    curve_steps: list[int] = field(default_factory=list)
    curve_losses: list[float] = field(default_factory=list)
    wall: float = 0.0  # seconds spent training so far

    @classmethod
    def start(cls, model: nn.Module, config: TrainConfig, device: torch.device,
              component: OptimizerComponent) -> _Run:
        model.to(device).train()
        optimizer = component.build(model, lr=config.lr, weight_decay=config.weight_decay)
        # a parametrization's per-parameter lrs (mup: hidden weights at lr/m); none: unchanged
        scale_learning_rates(optimizer, model, component, config.optimizer.name)
        optimizer.set_run_steps(config.steps)
        return cls(model, component, optimizer, build_schedule(optimizer, config), config)

    def branch(self, config: TrainConfig, sampler: Windows, digest: Any, device: torch.device,
               curve: ValidationProbe | None) -> tuple[nn.Module, TrainResult]:
        """A copy of this run (model, optimizer, its component and schedule copied together, so
        the copies refer to each other) trained on to ``config.steps`` on ``config``'s schedule,
        drawing from ``sampler`` (at this step); this run is left as it was."""
        parts = copy.deepcopy((self.model, self.component, self.optimizer, self.scheduler))
        run = _Run(*parts, config, list(self.losses), list(self.curve_steps), list(self.curve_losses), self.wall)
        run.optimizer.set_run_steps(config.steps)
        run.scheduler.refactor(lambda step: schedule_factor(step, config))
        status, message = run.advance(config.steps, sampler, digest, device, curve=curve)
        return run.model, run.result(status, message, digest, curve)

    def advance(self, until: int, sampler: Windows, digest: Any, device: torch.device,
                progress: Progress | None = None, on_step: Callable[[int, float], bool] | None = None,
                logger: StepLogger | None = None, curve: ValidationProbe | None = None,
                ) -> tuple[Literal["complete", "diverged", "stopped"], str]:
        """Train from the step after the last one done up to step ``until`` (exclusive); the
        status and, unless complete, why it ended."""
        model, optimizer, config = self.model, self.optimizer, self.config
        auxiliary = AuxiliaryLosses(model)  # parts adding to the objective (none: nothing added)
        started, done = time.perf_counter(), len(self.losses)
        auxiliary.start()
        try:
            for step in range(done, until):
                interrupts.stop_if_received()  # a Ctrl-C some finalizer swallowed stops here
                window = sampler.next()  # (B, T + 1)
                digest.update(window.numpy().tobytes())
                window = window.to(device)
                inputs, targets = window[:, :-1], window[:, 1:]
                with autocast(device, config.precision):
                    logits = model(inputs)  # (B, T, V)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
                extra = auxiliary.take()
                objective = loss if extra is None else loss + extra.float()
                loss_value = loss.item()
                objective_value = loss_value if extra is None else objective.item()
                if not math.isfinite(objective_value):
                    return "diverged", f"non-finite loss {objective_value} at step {step}"
                optimizer.zero_grad(set_to_none=True)
                objective.backward()
                if config.grad_clip > 0:
                    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                elif logger is not None:
                    grad_norm = torch.nn.utils.get_total_norm(
                        [p.grad for p in model.parameters() if p.grad is not None])
                applied_lr = optimizer.param_groups[0]["lr"]
                optimizer.step()
                self.scheduler.step()
                self.losses.append(loss_value)
                if logger is not None:
                    logger.log_step(StepRecord(step, loss_value, applied_lr, float(grad_norm),
                                               len(self.losses) * config.tokens_per_step))
                if progress:
                    elapsed = time.perf_counter() - started
                    progress.update(step + 1, loss_value, (step + 1 - done) * config.tokens_per_step / elapsed)
                due = curve is not None and curve.due(step, config.steps)
                if on_step is not None or due:
                    with optimizer.at_evaluation_point():
                        if curve is not None and due:
                            self.curve_losses.append(_probe(curve, model, device, auxiliary))
                            self.curve_steps.append(step + 1)
                        keep = on_step is None or on_step(step, loss_value)
                    if not keep:
                        return "stopped", f"stopped by a hurdle after step {step}"
            return "complete", ""
        finally:
            auxiliary.stop()
            self.wall += time.perf_counter() - started

    def result(self, status: Literal["complete", "diverged", "stopped"], message: str, digest: Any,
               curve: ValidationProbe | None) -> TrainResult:
        """The run's ``TrainResult``, the model moved to its evaluation point first."""
        self.optimizer.to_evaluation_point()
        losses, window_size = self.losses, self.config.loss_window
        tokens_seen = len(losses) * self.config.tokens_per_step
        return TrainResult(
            status=status,
            losses=losses,
            initial_loss=mean(losses[:window_size]) if losses else math.nan,
            final_loss=mean(losses[-window_size:]) if losses else math.nan,
            steps_done=len(losses),
            tokens_seen=tokens_seen,
            token_stream_sha256=digest.hexdigest(),
            wall_seconds=self.wall,
            tokens_per_second=tokens_seen / self.wall if self.wall > 0 else 0.0,
            optimizer_statistics=self.component.statistics(),
            orthogonality_error=self.component.orthogonality_error(),
            message=message,
            validation_curve=None if curve is None else curve.curve(self.curve_steps, self.curve_losses),
        )


def train(
    model: nn.Module,
    stream: Tensor | TrainStream,
    config: TrainConfig,
    seed: int,
    device: torch.device,
    optimizer: OptimizerComponent,
    progress: Progress | None = None,
    description: str = "train",
    on_step: Callable[[int, float], bool] | None = None,
    logger: StepLogger | None = None,
    curve: ValidationProbe | None = None,
) -> TrainResult:
    """Train ``model`` in place on random windows of ``stream`` (a token tensor, or a
    ``TrainStream``: a data recipe over the training sources).

    ``optimizer`` is the component ``config.optimizer`` names (``llmevo.catalog.build_optimizer``);
    it builds the run's ``Optimizer`` for ``model`` at ``config.lr`` and ``config.weight_decay``.
    ``on_step(step, loss)`` is called after each step; returning False stops training
    (used by evolution hurdles). ``curve``: the validation curve's probe (module docstring).
    ``logger.log_step`` receives each step's loss, learning
    rate and gradient norm (``train/logging.py``). The model's forward maps tokens (B, T) to logits (B, T, V).
    """
    run = _Run.start(model, config, device, optimizer)
    sampler, recipe = windows_for(stream, config.batch_size, config.seq_len, seed, config.steps)
    digest = hashlib.sha256(recipe)
    if progress:
        progress.start(config.steps, description)
    try:
        status, message = run.advance(config.steps, sampler, digest, device, progress, on_step, logger, curve)
    finally:
        if progress:
            progress.stop()
    return run.result(status, message, digest, curve)


def branch_point(config: TrainConfig, trunk: TrainConfig) -> int:
    """The step from which a run of ``config`` continues on its own branch of a run of
    ``trunk`` (the same settings, more steps): the first step whose learning rate differs from
    the trunk's, and at the latest its own last step (warmup-stable-decay: its decay's start)."""
    return next((step for step in range(config.steps) if lr_at(step, config) != lr_at(step, trunk)),
                config.steps - 1)


def _prefix(stream: Tensor | TrainStream, config: TrainConfig, seed: int, steps: int) -> tuple[Windows, Any]:
    """The sampler of a run of ``config`` and its token-stream hash after its first ``steps`` windows."""
    sampler, recipe = windows_for(stream, config.batch_size, config.seq_len, seed, config.steps)
    digest = hashlib.sha256(recipe)
    for _ in range(steps):
        digest.update(sampler.next().numpy().tobytes())
    return sampler, digest


def train_horizons(
    model: nn.Module,
    stream: Tensor | TrainStream,
    config: TrainConfig,
    horizons: Sequence[int],
    seed: int,
    device: torch.device,
    optimizer: OptimizerFactory,
    curve: ValidationProbe | None = None,
) -> list[tuple[nn.Module, TrainResult]]:
    """``train`` once per horizon (``config`` with ``steps`` = that horizon; ``model`` freshly
    built from ``seed``), from one trunk: the longest horizon trains once, and each horizon
    continues from a copy of the trunk taken at its ``branch_point`` (model, optimizer state,
    schedule and random state), so under ``wsd`` every horizon but the longest costs only its
    decay. The (model, result) pairs, in ``horizons``' order, are those ``train`` gives each
    horizon alone, to the bit on a CPU (tests/unit/test_decay_branches.py).

    Refused (ConfigError, before training): horizons that are not distinct positive step
    counts; data whose windows before a branch point depend on the run's length (a curriculum:
    the horizon's and the trunk's token-stream hashes are compared there); an optimizer whose
    settings depend on it (``set_run_steps``: AdEMAMix's schedulers span the run)."""
    if not horizons or min(horizons) < 1 or len(set(horizons)) != len(horizons):
        raise ConfigError(f"decay branches need distinct positive horizons, got {list(horizons)}")
    configs = [config.model_copy(update={"steps": steps}) for steps in horizons]
    longest = configs[max(range(len(configs)), key=lambda i: horizons[i])]
    points = [branch_point(branch, longest) for branch in configs]
    prefixes = [_prefix(stream, branch, seed, point) for branch, point in zip(configs, points, strict=True)]
    for index, point in enumerate(points):  # drawing windows costs little beside training on them
        if _prefix(stream, longest, seed, point)[1].hexdigest() != prefixes[index][1].hexdigest():
            raise ConfigError(f"the training windows of a {horizons[index]}-step run differ from the "
                              f"{longest.steps}-step trunk's before its branch point: its data depends on "
                              "the run's length, so it cannot branch")
    component = optimizer(config.optimizer)
    trunk = _Run.start(model, longest, device, component)
    groups = trunk.optimizer.param_groups
    settings = copy.deepcopy([{**group, "params": None} for group in groups])
    for branch in configs:
        trunk.optimizer.set_run_steps(branch.steps)
        if [{**group, "params": None} for group in groups] != settings:
            raise ConfigError(f"optimizer '{config.optimizer.name}' depends on the run's length "
                              "(its settings follow the steps), so its horizons cannot branch from one trunk")
    trunk.optimizer.set_run_steps(longest.steps)
    sampler, trunk_digest = _prefix(stream, longest, seed, 0)
    order = sorted(range(len(configs)), key=lambda i: points[i])
    trained: dict[int, tuple[nn.Module, TrainResult]] = {}
    for position, index in enumerate(order):
        status, message = trunk.advance(points[index], sampler, trunk_digest, device, curve=curve)
        if status != "complete":  # diverged before this branch point: so does every horizon left
            ended = trunk.result(status, message, trunk_digest, curve)
            trained |= {rest: (copy.deepcopy(trunk.model), copy.deepcopy(ended)) for rest in order[position:]}
            break
        with evaluation_kept(device):  # the branch draws its own randomness; the trunk's goes on as it was
            trained[index] = trunk.branch(configs[index], *prefixes[index], device, curve)
    return [trained[index] for index in range(len(configs))]
