"""Do the two arms of a comparison compute the same function? The no-op check, run before
anything trains.

A comparison whose method arm computes, in effect, the baseline's function (softcap at a cap
its logits never reach, a window longer than the context, a recipe that draws the same
windows) can only ever read "non-inferior"; published, that row would promote a component
that did nothing. This module measures it, cheaply, on the arms as the runner would build
them, instead of trusting the configs to differ in a way that matters.

**Token streams.** Arms whose data recipes differ (a data-slot comparison, a genome with its
own recipe) are first compared by the windows their runs would draw: the sha256 of every
window of the whole run at the report seed (indexing, no training). Different windows mean
different runs: the arms are distinct and no model is built. This is the decisive check for
a data recipe, whose two arms build the same model and optimizer by construction: a model
probe after a few steps would see only the first windows, while equal streams for the whole
run mean the two runs are identical step for step.

**Outputs.** Otherwise both arms are built from the same initialisation seed and their
output logits compared on one batch of validation windows: at initialisation, and after
``PROBE_STEPS`` training steps of each arm on the same windows (each arm's own optimizer and
data recipe, at the arm's peak learning rate held constant: warmup would shrink the steps
and hide a difference between optimizers). The after-steps comparison is the decisive one
for arms whose models are identical at initialisation by construction (an optimizer
comparison, ``--init-from``); requiring agreement at both points keeps a component that is
zero at initialisation (a zero-initialised gate) from being called a no-op.

**At trained scale.** A component that acts only on what training grows (softcap bounds
attention logits that start near 0.03 and reach 10-20 by the end of a quick run, docs/LOG.md
2026-12-04) computes the baseline's function at initialisation and after a few steps, whatever
its setting. When the two points agree and the arms' parameters are interchangeable (the same
state-dict names and shapes: softcap and mha, a sliding window and full attention), the
decisive point is a third: the baseline trained for the run's own steps and schedule, at the
probe's small batch, and the method's model given those same weights; both functions are
compared there. At smoke (12 steps) that probe costs as much as the few steps; at quick it
is about 1/12 of one arm's run (docs/LOG.md). Arms whose parameters differ cannot share
weights; for them the first two points decide.

**Tolerance.** Each difference is ``max |logits_method - logits_baseline|`` divided by the
RMS of the baseline's logits at that point (the logit scale), and the arms compute the same
function when every difference measured is at most ``TOLERANCE`` = 1e-4. Float32 arithmetic
that computes the same function in another order differs by a few 1e-6 of the scale
(``softcap`` at cap 1e6 against ``mha``: about 2e-6 at smoke, docs/LOG.md), so the tolerance
sits well above rounding; a change of 1e-4 of the logit scale moves the loss by about 1e-4 of
itself, two orders below the 1% margin of a non-inferiority class, so a difference under it
cannot be what a verdict reports.

**Where it does not apply.** Arms on different data views (``blt-bytes``: bytes against BPE
tokens) have different vocabularies and inputs: distinct by construction, recorded as not
applicable. External experiments (``reproduce --experiment``) run someone else's command and
build no llmevo model; post-training methods compare two stages on one shared pretraining
(``experiments.post_training``); neither reaches this check.

Public API: ``Equivalence``, ``check_equivalence``, ``refusal``, ``PROBE_STEPS``,
``TOLERANCE``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from llmevo.catalog import build_optimizer, build_recipe
from llmevo.components.data.base import windows_for
from llmevo.runner.arm import Arm
from llmevo.runner.cache import ArmCache
from llmevo.runner.presets import Preset
from llmevo.runner.run import arm_train_config, build_arm_model
from llmevo.runner.views import DataView, arm_stream
from llmevo.train.trainer import TrainConfig, train

PROBE_STEPS = 3  # training steps of each arm before the second comparison
PROBE_WINDOWS = 4  # validation windows compared, and the probe's batch size (at most the arm's)
TOLERANCE = 1e-4  # max |logit difference| / RMS of the baseline's logits (see the docstring)

How = Literal["outputs", "token streams", "metrics", "not applicable"]  # metrics: an external command's


@dataclass(frozen=True)
class Equivalence:
    """What the check found: how the arms were compared, the relative differences (None
    where not measured), and whether they compute the same function."""

    how: How
    same_function: bool
    reason: str  # one clause: why the arms are distinct, or that they are not
    init_difference: float | None = None
    trained_difference: float | None = None  # after PROBE_STEPS steps of each arm
    run_difference: float | None = None  # at the baseline's run-length weights (shared)
    logit_scale: float | None = None  # RMS of the baseline's logits at initialisation
    seconds: float = 0.0

    def block(self, allowed: bool) -> dict[str, Any]:
        """The artifact's ``equivalence`` block; ``allowed``: a no-op run on ``--allow-noop``."""
        return {"how": self.how, "same_function": self.same_function, "reason": self.reason,
                "tolerance": TOLERANCE, "probe_steps": PROBE_STEPS,
                "init_difference": self.init_difference,
                "trained_difference": self.trained_difference,
                "run_difference": self.run_difference,
                "logit_scale": self.logit_scale, "seconds": self.seconds,
                "allowed_noop": allowed and self.same_function}


def refusal(name: str, found: Equivalence) -> str:
    """The one-line refusal of a no-op comparison."""
    return (f"the arms of '{name}' compute the same function ({found.reason}); the comparison "
            "could only read non-inferior. Change the method's config (--method-config) so it acts "
            "at this scale, or pass --allow-noop to run it classed no-op (it never promotes)")


def relative_difference(baseline: Tensor, method: Tensor, scale: float) -> float:
    """``max |method - baseline| / scale``: the check's measure of two arms' logits."""
    return (method - baseline).abs().max().item() / scale


def stream_digest(arm: Arm, data: DataView, preset: Preset, seed: int) -> str:
    """sha256 of every window the arm's run at ``seed`` draws (its recipe over ``data``),
    without the recipe's name: equal digests mean the two runs see the same tokens."""
    config = arm_train_config(arm, data, preset)
    sampler, _ = windows_for(arm_stream(build_recipe(arm.recipe), data), config.batch_size,
                             config.seq_len, seed, config.steps)
    digest = hashlib.sha256()
    for _ in range(config.steps):
        digest.update(sampler.next().numpy().tobytes())  # (B, T + 1)
    return digest.hexdigest()


def _logits(model: nn.Module, windows: Tensor) -> Tensor:
    model.eval()
    with torch.no_grad():
        return model(windows).float()  # (B, T, V)


def _probe_config(arm: Arm, data: DataView, preset: Preset, steps: int | None) -> TrainConfig:
    """The arm's training settings at the probe's batch: ``steps`` steps at its peak lr held
    constant, or with ``steps`` None the run's own steps and schedule."""
    config = arm_train_config(arm, data, preset)
    update: dict[str, Any] = {"batch_size": min(PROBE_WINDOWS, config.batch_size)}
    if steps is not None:
        update.update(steps=steps, schedule="constant", warmup_steps=0)
    return config.model_copy(update=update)


def _built(arm: Arm, seed: int, device: torch.device) -> nn.Module:
    torch.manual_seed(seed)
    return build_arm_model(arm).to(device)


def _trained(arm: Arm, model: nn.Module, data: DataView, config: TrainConfig, seed: int,
             device: torch.device) -> nn.Module:
    train(model, arm_stream(build_recipe(arm.recipe), data), config, seed, device,
          build_optimizer(config.optimizer), description=f"no-op check {arm.label}")
    return model


def interchangeable(first: nn.Module, second: nn.Module) -> bool:
    """The two models hold parameters and buffers of the same names and shapes."""
    shapes = [{name: tuple(value.shape) for name, value in model.state_dict().items()}
              for model in (first, second)]
    return shapes[0] == shapes[1]


def _resolved(logits: Tensor) -> float:
    return logits.pow(2).mean().sqrt().item() or 1.0


def check_equivalence(baseline: Arm, method: Arm, views: dict[str, DataView], preset: Preset,
                      seed: int, device: torch.device, cache: ArmCache | None = None) -> Equivalence:
    """Compare the two arms (see the module docstring); the global RNG is left as found.
    ``cache``: the check's outcome is read from the arm cache when the same two arms, data,
    preset, seed, code and machine were checked before, and stored when it is computed (a
    hit's ``seconds`` are those of the check that computed it)."""
    entry = None if cache is None else cache.equivalence(
        baseline, method, views, preset, seed,
        {"probe_steps": PROBE_STEPS, "probe_windows": PROBE_WINDOWS, "tolerance": TOLERANCE,
         "device": str(device)})
    stored = None if entry is None else entry.load()
    if stored is not None:
        try:
            return Equivalence(**stored)
        except TypeError:  # an entry of another shape: a miss, computed again
            pass
    found = _check(baseline, method, views, preset, seed, device)
    if entry is not None:
        entry.store(dataclasses.asdict(found))
    return found


def _check(baseline: Arm, method: Arm, views: dict[str, DataView], preset: Preset,
           seed: int, device: torch.device) -> Equivalence:
    started = time.perf_counter()
    if baseline.data != method.data:
        return Equivalence("not applicable", False,
                           f"the arms read different data views ({baseline.data}, {method.data})")
    data = views[baseline.data]
    if baseline.recipe != method.recipe and (stream_digest(baseline, data, preset, seed)
                                             != stream_digest(method, data, preset, seed)):
        return Equivalence("token streams", False, "their data recipes draw different windows",
                           seconds=time.perf_counter() - started)
    seq_len = data.seq_len or preset.train.seq_len
    windows = data.validation[: PROBE_WINDOWS * seq_len].view(-1, seq_len).to(device)  # (B, T)
    devices = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        models = [_built(arm, seed, device) for arm in (baseline, method)]
        initial = [_logits(model, windows) for model in models]
        scale = _resolved(initial[0])
        init = relative_difference(*initial, scale)
        stepped = [_logits(_trained(arm, model, data, _probe_config(arm, data, preset, PROBE_STEPS),
                                    seed, device), windows)
                   for arm, model in zip((baseline, method), models, strict=True)]
        trained = relative_difference(*stepped, _resolved(stepped[0]))
        run = None
        if init <= TOLERANCE and trained <= TOLERANCE and interchangeable(*models):
            weights = _trained(baseline, _built(baseline, seed, device), data,
                               _probe_config(baseline, data, preset, None), seed, device)
            models[1].load_state_dict(weights.state_dict())
            at_run = [_logits(model, windows) for model in (weights, models[1])]
            run = relative_difference(*at_run, _resolved(at_run[0]))
    measured = {"at initialisation": init, f"after {PROBE_STEPS} steps": trained}
    if run is not None:
        measured["at the baseline's run-length weights"] = run
    over = {point: value for point, value in measured.items() if value > TOLERANCE}
    if over:
        point, value = next(iter(over.items()))
        reason = f"their logits differ by {value:.1e} of the logit scale {point}"
    else:
        reason = (f"their logits agree within {TOLERANCE:g} of the logit scale "
                  + ", ".join(f"{point} ({value:.1e})" for point, value in measured.items()))
    return Equivalence("outputs", not over, reason, init, trained, run, scale,
                       time.perf_counter() - started)
