"""Streaming evaluation with a bounded KV cache: one token at a time, next-token NLL.

Arms: the full (unbounded) cache, or a ``rope-relay`` policy that compacts the cache to
``budget`` entries whenever it reaches ``capacity``. With ``rephase`` the kept keys are
re-rotated to positions ``0..budget-1`` and the stream continues at ``budget``; without,
kept keys and new tokens keep their absolute positions (the ablation). The
``attention_mass`` selection needs each entry's accumulated attention probability: it is
recomputed here from the queries (captured by a forward hook on each layer's ``query``
projection) and the cached keys, so the attention module itself is unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from llmevo.components.kvcache.rope_relay import RopeRelayConfig, RopeRelayPolicy
from llmevo.errors import ConfigError
from llmevo.inference.generate import require_cache_support
from llmevo.model.transformer import Transformer


def _attention_modules(model: Transformer) -> list[torch.nn.Module]:
    modules = [getattr(block, "attention", None) for block in model.blocks]
    for module in modules:
        if module is None or not all(
            hasattr(module, name) for name in ("query", "n_heads", "kv_heads", "head_dim")
        ):
            raise ConfigError(
                "streaming attention-mass tracking needs attention with query/n_heads/kv_heads/"
                f"head_dim (like 'mha'); got '{model.specs['attention'].name}'"
            )
    return modules  # type: ignore[return-value]


def entry_attention_mass(queries: Tensor, keys: Tensor, n_heads: int, scale: float) -> Tensor:
    """Attention probability each cached entry receives from the new query tokens.

    queries: (1, H, T, Dh) position-encoded; keys: (1, Hk, S, Dh) with the T new entries
    last. Returns (Hk, S), summed over the query heads of each group and the T tokens.
    """
    kv_heads, slots = keys.shape[1], keys.shape[2]
    n_new = queries.shape[2]
    expanded = keys.repeat_interleave(n_heads // kv_heads, dim=1)  # (1, H, S, Dh)
    scores = queries @ expanded.transpose(-1, -2) * scale  # (1, H, T, S)
    allowed = torch.ones(n_new, slots, dtype=torch.bool, device=scores.device).tril(diagonal=slots - n_new)
    probabilities = scores.masked_fill(~allowed, -math.inf).softmax(-1)
    grouped = probabilities[0].sum(dim=1).view(kv_heads, n_heads // kv_heads, slots)
    return grouped.sum(dim=1)  # (Hk, S)


@torch.no_grad()
def stream_nll(model: Transformer, tokens: Tensor, policy: RopeRelayConfig | None) -> float:
    """Mean next-token NLL (nats) of ``tokens`` (N,), fed one at a time through the cache
    (on the device of ``tokens``, which must be the model's)."""
    require_cache_support(model)
    if tokens.numel() < 2:
        raise ConfigError("streaming evaluation needs at least 2 tokens")
    relay = RopeRelayPolicy(policy) if policy is not None else None
    if relay is not None:
        if not getattr(model.position, "rotary", False):
            raise ConfigError(
                f"rope-relay needs a rotary position encoding, not '{model.specs['position'].name}'"
            )
        if relay.config.capacity <= relay.config.budget:
            raise ConfigError(
                f"rope-relay: capacity {relay.config.capacity} must exceed budget "
                f"{relay.config.budget}"
            )
    track_mass = policy is not None and policy.selection == "attention_mass"
    attention = _attention_modules(model) if track_mass else []
    captured: list[Tensor | None] = [None] * len(attention)
    hooks = [
        module.query.register_forward_hook(
            lambda _m, _i, output, index=index: captured.__setitem__(index, output)
        )
        for index, module in enumerate(attention)
    ]
    model.eval()
    caches = model.new_caches()
    masses: list[Tensor | None] = [None] * len(caches)
    total = 0.0
    try:
        for step in range(tokens.numel() - 1):
            rephased = relay is not None and relay.config.rephase
            positions = torch.tensor([len(caches[0]) if rephased else step], device=tokens.device)
            logits = model(tokens[step].view(1, 1), positions=positions, caches=caches)
            total += float(F.cross_entropy(logits[0, -1:], tokens[step + 1 : step + 2]))
            if track_mass:
                for index, module in enumerate(attention):
                    query = captured[index]
                    assert query is not None and caches[index].keys is not None
                    heads, dim = module.n_heads, module.head_dim
                    q = query.view(1, 1, heads, dim).transpose(1, 2)  # (1, H, 1, Dh)
                    q = model.position.rotate(q, positions)
                    mass = entry_attention_mass(q, caches[index].keys, heads, dim**-0.5)
                    previous = masses[index]
                    if previous is not None:
                        mass[:, : previous.shape[1]] += previous
                    masses[index] = mass
            if relay is not None and relay.needs_compaction(len(caches[0])):
                inv_freq = model.position.inv_freq  # type: ignore[union-attr]
                for index, cache in enumerate(caches):
                    masses[index] = relay.compact(cache, inv_freq, masses[index])
    finally:
        for hook in hooks:
            hook.remove()
    return total / (tokens.numel() - 1)
