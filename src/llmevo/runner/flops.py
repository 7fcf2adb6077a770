"""Training FLOPs per token, counted, and the steps that match one arm's compute to another's
(``--match flops``).

``count_flops_per_token`` builds the arm's model on the CPU and runs one forward and backward
pass of the language-modelling loss on a real training batch under
``torch.utils.flop_counter.FlopCounterMode``, which counts every matrix product (``mm``,
``bmm``, ``addmm``, attention) forward and backward; it is divided by the batch's tokens.
Attention runs under the math backend of ``scaled_dot_product_attention`` while it is
counted: the fused CPU kernel is not counted by ``FlopCounterMode`` (0 FLOPs), and the math
path computes the same products (the full T x T scores, causal or not). Elementwise work
(norms, activations, the rotary embedding, the softmax) and the optimizer's step are not
counted, as in the standard ``6 N + 12 L d T`` per-token estimate (Kaplan et al. 2001.08361
section 2.1; PaLM 2204.02311 appendix B), which this count equals for a dense transformer
(tests/reference/test_flops_reference.py).

A part that evaluates every expert on every token though its paper sends each token to a
few (``components.base.RoutedExperts``: the mixture of experts) is counted at its *active*
compute: its idle experts' FLOPs, counted the same way on one expert, are taken off. Both
figures are returned (``computed``: what ran here; ``counted``: what matching uses).

``matched_steps`` is the method arm's step count whose total FLOPs equal the baseline's:
``round(steps * baseline / method)`` (at least 1); an arm with twice the FLOPs per token
trains half the steps.

Public API: ``FlopCount``, ``count_flops_per_token``, ``matched_steps``, ``flops_ratio``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from llmevo.components.base import RoutedExperts
from llmevo.errors import ConfigError


@dataclass(frozen=True)
class FlopCount:
    """Training (forward + backward) FLOPs per token of one model on one batch:
    ``computed`` as it ran, ``counted`` with routed experts at their active share."""

    computed: float
    counted: float


def _count(step: Callable[[], None]) -> float:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        step()
    return float(counter.get_total_flops())


def _idle_expert_flops(model: nn.Module, tokens: int) -> float:
    """The FLOPs of the experts a token does not use, over ``tokens`` tokens: for each
    ``RoutedExperts`` part, one expert's forward and backward on ``tokens`` rows (input
    requiring a gradient, as inside the model) times its idle experts."""
    idle = 0.0
    for part in model.modules():
        if not isinstance(part, RoutedExperts):
            continue
        expert = part.experts[0]
        width = next(p for p in expert.parameters() if p.dim() == 2).shape[1]
        rows = torch.randn(tokens, width, requires_grad=True)

        def step(expert: nn.Module = expert, rows: Tensor = rows) -> None:
            expert(rows).sum().backward()

        idle += (len(part.experts) - part.active_experts) * _count(step)
        expert.zero_grad(set_to_none=True)
    return idle


def count_flops_per_token(model: nn.Module, batch: Tensor) -> FlopCount:
    """Training FLOPs per token of ``model`` (a language model: token ids (B, T) -> logits
    (B, T, V)) on ``batch``, (B, T + 1) token ids whose first T are the inputs and last T the
    targets; the model is left with no gradients. Counted on the CPU, in float32."""
    if batch.dim() != 2 or batch.shape[1] < 2:
        raise ConfigError(f"a FLOP count needs a (batch, window + 1) batch of token ids; got {tuple(batch.shape)}")
    inputs, targets = batch[:, :-1], batch[:, 1:]  # (B, T) each

    def step() -> None:
        logits = model(inputs)  # (B, T, V)
        F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten()).backward()

    tokens = inputs.numel()
    computed = _count(step)
    model.zero_grad(set_to_none=True)
    counted = computed - _idle_expert_flops(model, tokens)
    return FlopCount(computed=computed / tokens, counted=counted / tokens)


def matched_steps(steps: int, baseline_flops: float, method_flops: float) -> int:
    """The method arm's steps whose training FLOPs equal ``steps`` of the baseline's (each
    argument per token, the two arms at equal tokens per step), rounded to whole steps."""
    if baseline_flops <= 0 or method_flops <= 0:
        raise ConfigError(f"FLOPs per token must be positive to match compute (baseline {baseline_flops:g}, "
                          f"method {method_flops:g})")
    return max(1, round(steps * baseline_flops / method_flops))


def flops_ratio(baseline_steps: int, baseline_flops: float, method_steps: int, method_flops: float) -> float:
    """The method's total training FLOPs over the baseline's (1.0 when matched exactly)."""
    return (method_steps * method_flops) / (baseline_steps * baseline_flops)
