"""R replicas of one architecture trained together, each with its own seed and settings.

The replicas' parameters are stacked along a leading replica dimension
(``torch.func.stack_module_state``); one forward runs every replica at once
(``torch.vmap`` over ``torch.func.functional_call``), one backward of the summed losses
gives each replica exactly its own gradient (replicas share no computation), and the
optimizer component's batched twin (its ``batched``, a ``BatchedOptimizer`` written beside
its ``Optimizer`` in ``components/optim/``) updates the stacked tensors with per-replica
hyperparameters held as (R,)-tensors. Nothing in the step reads a value back to the host,
so on CUDA the step never synchronises with the device (losses stay on the device until
the end). Nothing here names an optimizer: each replica's component comes from
``build_optimizer(config.optimizer)``, the factory the caller passes.

Each replica reproduces the sequential ``train()`` run with the same seed and settings:

- its model is built after ``torch.manual_seed(seed)`` and its windows come from its own
  ``windows_for(stream, B, T, seed, steps)`` (a bare stream's ``WindowSampler`` or the
  data recipe's sampler), so its ``token_stream_sha256`` is identical;
- learning rate at step s: the replica's optimizer group base lr (AdamW: lr; Lion:
  lr x lr_multiplier; Muon: lr for both roles) x ``lr_at(s, config) / config.lr`` — the
  ``LambdaLR`` semantics of the sequential trainer;
- gradient clipping by the norm over that replica's parameters only
  (``torch.nn.utils.clip_grad_norm_``'s formula: coefficient min(1, c / (norm + 1e-6)));
- a replica whose loss is non-finite is frozen from that step (its gradient is replaced by
  zeros and its learning rate by 0, so ``p * (1 - 0) + 0`` leaves it bit-for-bit
  unchanged) and reported ``diverged`` with the step's window included in its hash, as the
  sequential trainer reports it; the others continue.

A model with ``AuxiliaryLoss`` parts (a mixture of experts' load balancing) adds their terms
inside the vmapped step, as ``train()`` does: each replica's objective is its cross-entropy
plus its own terms, and the loss table records the cross-entropy. Without such parts the step
is the cross-entropy alone, as before.

What must be equal across replicas (``replica_group_key``): the training settings that
declare ``Replicas.SHARED`` on ``TrainConfig`` (steps, batch size, sequence length, loss
window, precision), the optimizer component and the settings its batched twin shares
(``BatchedOptimizer.shared``: Muon's ``nesterov`` and ``ns_steps``). The settings that
declare ``Replicas.PER_REPLICA`` (lr, warmup, schedule, minimum lr ratio, weight decay,
clipping, the optimizer's own betas, momentum, eps, multipliers) may differ. The step reads
both kinds: a shared setting from the first replica's config (the others equal it), a
per-replica one from each replica's.

A validation curve (``curve``, ``train.trainer.ValidationProbe``) is evaluated for every
replica at once, as ``train()`` evaluates it for one run: after the same steps, at the twin's
evaluation point (``BatchedOptimizer.at_evaluation_point``, the stacked parameters restored bit
for bit after), in eval mode, at full precision, without recording auxiliary terms and with
the global random state kept; one vmapped forward per batch of the probe's windows (the
windows shared, the parameters each replica's). A replica's curve ends where it diverged.

The twin's hooks (``BatchedOptimizer``): ``bind(template)`` before the first step (what its
update reads from the model's structure: Adam-mini's heads) and ``to_evaluation_point(params)``
after the last, before the replicas are unstacked (schedule-free AdamW's average x).

Components whose manifest says ``supports_replicas=False`` (and models that are not the
component ``Transformer``, e.g. BLT) are refused by name: ``replica_refusals``; so is an
optimizer component without a batched twin (``batched`` None).

Public API: ``train_replicas``, ``replica_group_key``, ``replica_refusals``,
``ReplicaRefused``.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state
from torch.nn.attention import SDPBackend, sdpa_kernel

from llmevo import interrupts
from llmevo.components.base import AuxiliaryLosses
from llmevo.components.data.base import TrainStream, windows_for
from llmevo.components.optim.base import OptimizerComponent, OptimizerFactory, parameter_roles
from llmevo.components.optim.optimizer import per_replica
from llmevo.errors import ConfigError
from llmevo.train.logging import StepLogger, StepRecord
from llmevo.train.trainer import (
    Progress,
    Replicas,
    TrainConfig,
    TrainResult,
    ValidationProbe,
    autocast,
    evaluation_kept,
    lr_at,
)

# torch warns on every vmapped call of CPU flash attention that it has no batching rule and
# loops over the replicas; expected here (the math backend, which does batch, measured
# slower: docs/LOG.md 2026-12-01), so this one warning is silenced inside train_replicas.
FLASH_LOOP_WARNING = (r"There is a performance drop because we have not yet implemented the batching "
                      r"rule for aten::_scaled_dot_product_flash_attention_for_cpu")


# On CUDA, the vmapped step's attention never uses the fused memory-efficient kernel: its
# backward under vmap fails on an H200 ("LSE is not correctly aligned (strideH)", torch 2.11,
# fp32 and bf16; scripts/gpu_sdpa_vmap_probe.py, docs/LOG.md 2026-12-04). cuDNN and flash
# attention survive vmap in bf16 (fastest there); in fp32 neither has a kernel, so the math
# backend runs, which batches over the replicas natively.
CUDA_REPLICA_ATTENTION = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]


def _replica_attention(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The attention backends of the vmapped step on ``device`` (every backend off CUDA)."""
    return sdpa_kernel(CUDA_REPLICA_ATTENTION) if device.type == "cuda" else contextlib.nullcontext()


class ReplicaRefused(ConfigError):
    """The model or its settings cannot be trained as batched replicas."""


def replica_refusals(model: nn.Module) -> list[str]:
    """Names of the model's parts that cannot run batched (empty: it can)."""
    specs = getattr(model, "specs", None)
    if specs is None:
        return [f"model {type(model).__name__}"]
    refused = [
        f"{spec.manifest.slot} component '{spec.manifest.name}'"
        for spec in specs.values()
        if not spec.manifest.supports_replicas
    ]
    if getattr(model, "lr_multipliers", None):  # a batched twin takes one lr per replica
        refused.append("the mup parametrization's per-parameter learning rates")
    return refused


def replica_group_key(config: TrainConfig, optimizer: OptimizerComponent) -> tuple[Any, ...] | None:
    """Runs with equal keys can share one batched run; None: this optimizer cannot batch.

    ``optimizer`` is the run's component (``build_optimizer(config.optimizer)``)."""
    batched = optimizer.batched
    if batched is None:
        return None
    shared = tuple(getattr(optimizer.config, field) for field in batched.shared)
    settings = tuple(getattr(config, name) for name in TrainConfig.replica_settings(Replicas.SHARED))
    return (*settings, type(optimizer), shared)


def _column(values: Sequence[float], device: torch.device) -> Tensor:
    return torch.tensor(values, dtype=torch.float32, device=device)  # (R,)


def _clip_coefficients(grads: list[Tensor], clip: Tensor, enabled: Tensor) -> tuple[Tensor, Tensor]:
    """Per-replica ``clip_grad_norm_`` coefficient (R,): min(1, c / (||g_r|| + 1e-6)), and the
    total norms ||g_r|| (R,) it read (the sequential trainer's ``train/grad_norm``)."""
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads])  # (P, R)
    total = torch.linalg.vector_norm(norms, dim=0)  # (R,)
    coefficient = torch.clamp(clip / (total + 1e-6), max=1.0)
    return torch.where(enabled, coefficient, torch.ones_like(coefficient)), total


def _check(configs: Sequence[TrainConfig], seeds: Sequence[int],
           optimizers: Sequence[OptimizerComponent]) -> None:
    if not configs:
        raise ConfigError("train_replicas needs at least one replica")
    if len(configs) != len(seeds):
        raise ConfigError(f"{len(seeds)} seeds for {len(configs)} replica settings; the counts must match")
    keys = {replica_group_key(c, o) for c, o in zip(configs, optimizers, strict=True)}
    if None in keys:
        raise ReplicaRefused(
            f"optimizer '{configs[0].optimizer.name}' has no batched implementation "
            f"(its component has no batched twin)")
    if len(keys) != 1:
        shared = TrainConfig.replica_settings(Replicas.SHARED)
        differ = [name for name in shared if len({repr(getattr(c, name)) for c in configs}) > 1]
        twin = "the optimizer with the settings its batched twin shares (e.g. Muon's nesterov/ns_steps)"
        raise ConfigError(
            f"replicas of one batched run must share {', '.join(differ) or twin}, which differ here; "
            f"every replica shares {', '.join(shared)} (Replicas.SHARED on TrainConfig) and {twin}")


@contextlib.contextmanager
def _expected_vmap_warnings() -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=FLASH_LOOP_WARNING, category=UserWarning)
        yield


@_expected_vmap_warnings()
def train_replicas(
    build: Callable[[], nn.Module],
    stream: Tensor | TrainStream,
    seeds: Sequence[int],
    configs: Sequence[TrainConfig],
    device: torch.device,
    progress: Progress | None = None,
    description: str = "train",
    *,
    build_optimizer: OptimizerFactory,
    curve: ValidationProbe | None = None,
    loggers: Sequence[StepLogger] | None = None,
) -> list[tuple[nn.Module, TrainResult]]:
    """Train one replica per (seed, config); each equals ``train(build(), ...)`` under its seed
    (``curve``: each replica's validation curve, as ``train()`` records it). ``loggers`` (one
    per replica) get each replica's per-step records once training ends, from tables kept on
    the device meanwhile (so the step still never waits for the host): its loss, gradient norm
    before clipping, and its scheduled learning rate ``lr_at(step, config)`` (the sequential
    trainer logs its first parameter group's, which is the same but where an optimizer or a
    parametrization scales a group's: Lion's multiplier, mup).

    ``build_optimizer`` gives each replica's optimizer component from its ``config.optimizer``
    (``llmevo.catalog.build_optimizer``); the component's batched twin does the updates."""
    optimizers = [build_optimizer(config.optimizer) for config in configs]
    _check(configs, seeds, optimizers)
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(build())
    refused = replica_refusals(models[0])
    if refused:
        raise ReplicaRefused(f"cannot train batched replicas of: {', '.join(refused)}")
    first = configs[0]
    count = len(models)
    for model in models:
        model.to(device).train()
    template = models[0]
    params, buffers = stack_module_state(models)  # name -> (R, ...); detached leaves
    params = {n: p.requires_grad_() for n, p in params.items()}
    roles = parameter_roles(template)
    optimizer = optimizers[0].batched(  # not None: _check refused a component without a twin
        [o.config for o in optimizers], [c.lr for c in configs], [c.weight_decay for c in configs],
        {name: roles[name] for name in params}, device, first.steps)
    optimizer.bind(template)
    clip = _column([c.grad_clip for c in configs], device)
    clip_enabled = clip > 0
    schedule = _column([0.0] * count, device).new_tensor(
        [[lr_at(step, c) / c.lr for c in configs] for step in range(first.steps)])  # (S, R)
    drawn = [windows_for(stream, first.batch_size, first.seq_len, s, first.steps) for s in seeds]
    samplers = [sampler for sampler, _ in drawn]
    digests = [hashlib.sha256(recipe) for _, recipe in drawn]
    snapshots: list[list[Any]] = [[] for _ in seeds]  # hash state after each step's window
    loss_table = torch.zeros(first.steps, count, device=device)  # (S, R)
    norm_table = torch.zeros(first.steps, count, device=device)  # (S, R): gradient norms, for loggers
    alive = torch.ones(count, dtype=torch.bool, device=device)
    diverged_at = torch.full((count,), first.steps, dtype=torch.long, device=device)
    last_errors = torch.zeros(count, device=device)

    auxiliary = AuxiliaryLosses(template)

    def replica_loss(p: dict[str, Tensor], b: dict[str, Tensor], inputs: Tensor,
                     targets: Tensor) -> tuple[Tensor, Tensor]:
        """(cross-entropy, objective) of one replica: the objective adds the auxiliary terms
        this replica's forward stored (inside the vmap); without any it is the cross-entropy."""
        logits = functional_call(template, (p, b), (inputs,))  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        extra = auxiliary.take()
        return loss, loss if extra is None else loss + extra.float()

    batched_loss = torch.vmap(replica_loss, in_dims=(0, 0, 0, 0))

    def replica_nll(p: dict[str, Tensor], b: dict[str, Tensor], inputs: Tensor, targets: Tensor) -> Tensor:
        logits = functional_call(template, (p, b), (inputs,))  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum")

    batched_nll = torch.vmap(replica_nll, in_dims=(0, 0, None, None))  # windows shared by every replica
    curve_steps: list[int] = []
    curve_points: list[Tensor] = []  # (R,) per point

    @torch.no_grad()
    def probe(step: int) -> None:
        """Each replica's point of the validation curve after ``step`` (see the module docstring)."""
        assert curve is not None
        windows = curve.windows.to(device)  # (K, T + 1)
        auxiliary.stop()
        template.eval()
        try:
            with optimizer.at_evaluation_point(params), evaluation_kept(device), _replica_attention(device):
                total = torch.zeros(count, device=device)
                for start in range(0, windows.shape[0], curve.batch_size):
                    batch = windows[start:start + curve.batch_size]  # (B, T + 1)
                    total += batched_nll(params, buffers, batch[:, :-1], batch[:, 1:])  # (R,)
        finally:
            template.train()
            auxiliary.start()
        curve_points.append(total / (windows.shape[0] * (windows.shape[1] - 1)))
        curve_steps.append(step + 1)
    sync_progress = progress is not None and device.type == "cpu"
    if progress:
        progress.start(first.steps, f"{description} ({count} replicas)")
    started = time.perf_counter()
    auxiliary.start()
    try:
        for step in range(first.steps):
            interrupts.stop_if_received()  # a Ctrl-C some finalizer swallowed stops here
            windows = []
            for index, sampler in enumerate(samplers):
                window = sampler.next()  # (B, T + 1)
                digests[index].update(window.numpy().tobytes())
                snapshots[index].append(digests[index].copy())
                windows.append(window)
            window = torch.stack(windows)  # (R, B, T + 1)
            if device.type == "cuda":  # an asynchronous copy: the host runs ahead of the device
                window = window.pin_memory().to(device, non_blocking=True)
            else:
                window = window.to(device)
            with autocast(device, first.precision), _replica_attention(device):
                losses, objectives = batched_loss(params, buffers, window[..., :-1], window[..., 1:])  # (R,)
            losses = losses.float()
            finite = torch.isfinite(objectives)
            newly = alive & ~finite
            diverged_at = torch.where(newly, step, diverged_at)
            alive = alive & finite
            loss_table[step] = losses.detach()
            for p in params.values():
                p.grad = None
            objectives.sum().backward()
            grads = {n: p.grad.masked_fill(~per_replica(alive, p.grad), 0.0) for n, p in params.items()}
            coefficient, norm_table[step] = _clip_coefficients(list(grads.values()), clip, clip_enabled)
            for g in grads.values():
                g.mul_(per_replica(coefficient, g))
            optimizer.step(params, grads, schedule[step] * alive)
            if optimizer.last_errors is not None:
                last_errors = torch.where(alive, optimizer.last_errors, last_errors)
            if curve is not None and curve.due(step, first.steps):
                probe(step)
            if sync_progress:
                elapsed = time.perf_counter() - started
                mean = float(losses[alive].detach().mean()) if bool(alive.any()) else float("nan")
                progress.update(step + 1, mean, (step + 1) * count * first.tokens_per_step / elapsed)
            elif progress and (step + 1) % 25 == 0:
                progress.update(step + 1, float("nan"), 0.0)
    finally:
        auxiliary.stop()
        if progress:
            progress.stop()
    wall = time.perf_counter() - started
    table = loss_table.cpu()
    if loggers is not None:
        _replay(loggers, table, norm_table.cpu(), diverged_at.cpu().tolist(), configs)
    stops = diverged_at.cpu().tolist()
    errors = last_errors.cpu().tolist()
    points = torch.stack(curve_points).cpu() if curve_points else torch.zeros(0, count)  # (P, R)
    outcomes = []
    optimizer.to_evaluation_point(params)  # e.g. schedule-free: each replica's average x
    with torch.no_grad():
        for index, (model, config, component) in enumerate(zip(models, configs, optimizers, strict=True)):
            for name, stacked in params.items():
                model.get_parameter(name).copy_(stacked[index])
            done = stops[index]
            losses = table[:done, index].tolist()
            status, message, digest = "complete", "", digests[index]
            if done < first.steps:
                value = float(table[done, index])
                status, message = "diverged", f"non-finite loss {value} at step {done}"
                digest = snapshots[index][done]
            component.build(model, lr=config.lr, weight_decay=config.weight_decay)  # for its statistics
            window_size = config.loss_window
            tokens_seen = len(losses) * config.tokens_per_step
            outcomes.append((model, TrainResult(
                status=status,
                losses=losses,
                initial_loss=_mean(losses[:window_size]),
                final_loss=_mean(losses[-window_size:]),
                steps_done=len(losses),
                tokens_seen=tokens_seen,
                token_stream_sha256=digest.hexdigest(),
                wall_seconds=wall,
                tokens_per_second=tokens_seen / wall if wall > 0 else 0.0,
                optimizer_statistics=component.statistics(),
                orthogonality_error=errors[index] if optimizer.last_errors is not None else 0.0,
                message=message,
                validation_curve=None if curve is None else curve.curve(
                    [s for s in curve_steps if s <= done],  # as train(): none after it diverged
                    [float(points[j, index]) for j, s in enumerate(curve_steps) if s <= done]),
            )))
    return outcomes


def _replay(loggers: Sequence[StepLogger], losses: Tensor, norms: Tensor, stops: list[int],
            configs: Sequence[TrainConfig]) -> None:
    """Each replica's steps (up to where it diverged, as ``train()`` logs them) to its logger."""
    for index, (logger, config) in enumerate(zip(loggers, configs, strict=True)):
        for step in range(stops[index]):
            logger.log_step(StepRecord(step, float(losses[step, index]), lr_at(step, config),
                                       float(norms[step, index]), (step + 1) * config.tokens_per_step))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
