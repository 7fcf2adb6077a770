"""RoPE relay: KV-cache compaction with rotary re-phasing.

Paper: arXiv 2610.21126 (not available to us; title unknown). The mechanism is the one the
reference artifact's metrics describe (SPEC, "RoPE relay"): a cache holds, per layer and per
physical KV head, S slots of post-RoPE keys ``k_j = R(p_j) k~_j`` (rotation on the first
``rotary_dim`` of ``key_dim`` channels) and values ``v_j``. Compaction keeps ``c_h`` entries
per (layer, head) — budgets may differ between heads — moves them to slots ``0..c_h-1`` in
their original order and re-rotates each kept key by ``R(new - old)``, so that it equals
``R(new) k~`` without recomputing anything from hidden states. Values and the non-rotary
tail are copied bit for bit. The tokens that follow are placed, per head, at positions
``c_h, c_h + 1, ...`` of that head's compacted cache.

Reference test (tests/reference/test_rope_relay_reference.py): the relayed attention equals
attention over the kept *pre-RoPE* keys rotated afresh at their new positions.

Deviations / choices of ours: the selection rule (which entries survive) is not specified
by the artifact; three are registered here by name (``recency``, ``attention_mass`` —
accumulated attention probability per entry, as in H2O, arXiv 2306.14048 — and ``random``,
a seeded subset). Inside the ``Transformer`` the policy uses one budget per model (all
layers and heads equal), because the model places every head's queries at one position;
the heterogeneous per-(layer, head) form lives in the pure functions and the L1 diagnostic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from pydantic import Field, PositiveInt, model_validator
from torch import Tensor

from llmevo.components.base import KVCacheLayer
from llmevo.components.position.rope import apply_rotary
from llmevo.errors import ConfigError
from llmevo.registry import Paper, SearchDimension, StrictModel, register

# --- selection rules: which entries of one head's cache survive --------------------------


@dataclass(frozen=True)
class SelectionInput:
    """What a selection rule may look at for one (layer, KV head)."""

    positions: Tensor  # (S,) positions of the cached entries
    attention_mass: Tensor | None  # (S,) accumulated attention probability, or None
    generator: torch.Generator | None


SelectionRule = Callable[[SelectionInput, int], Tensor]


def select_recency(state: SelectionInput, budget: int) -> Tensor:
    """The ``budget`` most recent slots (a sliding window)."""
    slots = state.positions.shape[0]
    return torch.arange(slots - budget, slots, device=state.positions.device)


def select_attention_mass(state: SelectionInput, budget: int) -> Tensor:
    """The ``budget`` entries with the largest accumulated attention probability (H2O).

    Ties break toward the more recent entry.
    """
    if state.attention_mass is None:
        raise ConfigError("rope-relay: selection 'attention_mass' needs accumulated attention mass")
    slots = state.attention_mass.shape[0]
    recency_tiebreak = torch.arange(slots, device=state.attention_mass.device) * 1e-12
    score = state.attention_mass.to(torch.float64) + recency_tiebreak
    return score.topk(budget).indices.sort().values


def select_random(state: SelectionInput, budget: int) -> Tensor:
    """A uniformly random subset of ``budget`` slots, from the given generator."""
    slots = state.positions.shape[0]
    order = torch.randperm(slots, generator=state.generator)
    return order[:budget].sort().values.to(state.positions.device)


SELECTION_RULES: dict[str, SelectionRule] = {
    "recency": select_recency,
    "attention_mass": select_attention_mass,
    "random": select_random,
}


def selection_rule(name: str) -> SelectionRule:
    try:
        return SELECTION_RULES[name]
    except KeyError:
        known = ", ".join(sorted(SELECTION_RULES))
        raise ConfigError(f"rope-relay: unknown selection '{name}'; known: {known}") from None


# --- pure math --------------------------------------------------------------------------


def check_rotary_dim(rotary_dim: int, key_dim: int) -> None:
    """ConfigError unless ``rotary_dim`` is positive, even and at most ``key_dim``."""
    if rotary_dim <= 0 or rotary_dim % 2:
        raise ConfigError(
            f"rope-relay: rotary_dim must be a positive even number, got {rotary_dim}"
        )
    if rotary_dim > key_dim:
        raise ConfigError(f"rope-relay: rotary_dim {rotary_dim} is larger than key_dim {key_dim}")


def rerotate_keys(
    keys: Tensor, old_positions: Tensor, new_positions: Tensor, inv_freq: Tensor
) -> Tensor:
    """``R(new - old) k``: moves post-RoPE keys from ``old`` to ``new`` positions.

    keys: (..., S, Dk); positions broadcastable to (..., S). Only the first
    ``2 * len(inv_freq)`` channels change; the tail is returned bit-identical.
    """
    check_rotary_dim(2 * inv_freq.shape[0], keys.shape[-1])
    shift = new_positions.to(torch.long) - old_positions.to(torch.long)  # exact integers
    return apply_rotary(keys, shift, inv_freq)


@dataclass
class CompactedCache:
    """One layer's cache after compaction, padded to the largest per-head budget.

    keys/values: (B, Hk, C, D) with zeros beyond each head's length; positions (Hk, C) new
    positions ``0..c_h-1`` (padding continues the count); original_positions (Hk, C);
    valid (Hk, C) bool; lengths (Hk,) the per-head budgets ``c_h``.
    """

    keys: Tensor
    values: Tensor
    positions: Tensor
    original_positions: Tensor
    valid: Tensor
    lengths: Tensor
    slots: Tensor  # (Hk, C) the kept entries' slot indices in the old cache (0 as padding)

    def query_positions(self, count: int) -> Tensor:
        """(Hk, count): positions ``c_h, c_h + 1, ...`` of the tokens that follow, per head."""
        steps = torch.arange(count, device=self.lengths.device)
        return self.lengths[:, None] + steps[None, :]


def check_budgets(budgets: Tensor | list[int], slots: int, heads: int) -> Tensor:
    """Budgets as a (Hk,) long tensor; ConfigError when one is out of ``1..slots``."""
    budget_tensor = torch.as_tensor(budgets, dtype=torch.long)
    if budget_tensor.shape != (heads,):
        raise ConfigError(
            f"rope-relay: expected {heads} per-head budgets, got shape {tuple(budget_tensor.shape)}"
        )
    if int(budget_tensor.max()) > slots or int(budget_tensor.min()) < 1:
        raise ConfigError(
            f"rope-relay: budgets {budget_tensor.tolist()} must lie in 1..{slots} "
            f"(the cache holds {slots} entries)"
        )
    return budget_tensor


def relay_compact(
    keys: Tensor,
    values: Tensor,
    positions: Tensor,
    budgets: Tensor | list[int],
    inv_freq: Tensor,
    select: SelectionRule = select_recency,
    attention_mass: Tensor | None = None,
    generator: torch.Generator | None = None,
    rephase: bool = True,
) -> CompactedCache:
    """Keep ``budgets[h]`` entries of head h, in order, at slots 0..c_h-1, re-rotated.

    keys/values: (B, Hk, S, D); positions: (S,) or (Hk, S); attention_mass: (Hk, S) or None.
    With ``rephase=False`` the kept keys and their positions stay as they were (the
    "keep original positions" ablation).
    """
    batch, heads, slots, key_dim = keys.shape
    check_rotary_dim(2 * inv_freq.shape[0], key_dim)
    budget_tensor = check_budgets(budgets, slots, heads)
    head_positions = positions.expand(heads, slots) if positions.dim() == 1 else positions
    width = int(budget_tensor.max())
    kept_keys = keys.new_zeros(batch, heads, width, key_dim)
    kept_values = values.new_zeros(batch, heads, width, values.shape[-1])
    original = torch.zeros(heads, width, dtype=torch.long, device=keys.device)
    kept_slots = torch.zeros(heads, width, dtype=torch.long, device=keys.device)
    valid = torch.zeros(heads, width, dtype=torch.bool, device=keys.device)
    for head in range(heads):
        budget = int(budget_tensor[head])
        state = SelectionInput(
            positions=head_positions[head],
            attention_mass=None if attention_mass is None else attention_mass[head],
            generator=generator,
        )
        index = select(state, budget)  # (c,) increasing slot indices
        kept_keys[:, head, :budget] = keys[:, head, index]
        kept_values[:, head, :budget] = values[:, head, index]
        original[head, :budget] = head_positions[head, index]
        kept_slots[head, :budget] = index
        valid[head, :budget] = True
    new_positions = torch.arange(width, device=keys.device).expand(heads, width)
    if rephase:
        kept_keys = torch.where(
            valid[None, :, :, None],
            rerotate_keys(kept_keys, original[None], new_positions[None], inv_freq),
            kept_keys,
        )
        positions_out = new_positions.clone()
    else:
        positions_out = original.clone()
    return CompactedCache(
        keys=kept_keys,
        values=kept_values,
        positions=positions_out,
        original_positions=original,
        valid=valid,
        lengths=budget_tensor.to(keys.device),
        slots=kept_slots,
    )


# --- the registered policy --------------------------------------------------------------


class RopeRelayConfig(StrictModel):
    """A bounded cache: when it reaches ``capacity`` entries, compact to ``budget``."""

    capacity: PositiveInt = 64
    budget: PositiveInt = 32
    selection: str = "attention_mass"
    rephase: bool = True  # False: keep original positions (the ablation)
    seed: int = Field(default=0, description="Generator seed for the 'random' selection.")

    @model_validator(mode="after")
    def _check(self) -> RopeRelayConfig:
        if self.budget > self.capacity:
            raise ValueError(f"budget {self.budget} is larger than capacity {self.capacity}")
        if self.selection not in SELECTION_RULES:
            raise ValueError(
                f"unknown selection '{self.selection}'; known: {sorted(SELECTION_RULES)}"
            )
        return self


@register(
    slot="kv_cache",
    name="rope-relay",
    config=RopeRelayConfig,
    manifest_ref="foundation-models:rope-relay",
    paper=Paper(
        arxiv_id="2610.21126",
        title="RoPE relay (KV-cache compaction with rotary re-phasing)",
        url="https://arxiv.org/abs/2610.21126",
        organization="unknown (paper not available)",
    ),
    ablation="rope-relay:rephase=false",
    implementation_status="component_only",
    baseline=False,
    evolve_integrated=False,
    scope=(
        "Per-(layer, head) compaction of a RoPE KV cache with re-rotation of kept keys and "
        "per-head synchronised query positions, checked on synthetic tensors (L1) and in a "
        "streaming WikiText-2 evaluation of a small trained model (L2); no serving overhead "
        "or long-context capability is measured."
    ),
    search_space={
        "budget": SearchDimension(choices=(16, 32, 48)),
        "selection": SearchDimension(choices=tuple(sorted(SELECTION_RULES))),
    },
)
class RopeRelayPolicy:
    """Applies relay compaction to a model's per-layer caches once they exceed ``capacity``.

    Needs a rotary position encoding (``position.rotary`` with ``inv_freq``) and attention
    whose cache is a ``KVCacheLayer``. ``attention_mass`` (per layer, (Hk, S)) must be kept
    by the caller for the ``attention_mass`` selection (see ``llmevo.inference.streaming``).
    """

    def __init__(self, config: RopeRelayConfig):
        self.config = config
        self.select = selection_rule(config.selection)
        self.generator = torch.Generator().manual_seed(config.seed)

    def needs_compaction(self, cache_length: int) -> bool:
        """Whether a cache of ``cache_length`` entries has reached ``capacity``."""
        return cache_length >= self.config.capacity

    def compact(
        self, cache: KVCacheLayer, inv_freq: Tensor, attention_mass: Tensor | None = None
    ) -> Tensor | None:
        """Compact one layer's cache in place to ``budget`` entries per head.

        Returns the kept entries' attention mass (Hk, budget), or None. With rephase, the
        cache's positions become ``0..budget-1`` and the next token goes to ``budget``;
        without, positions keep head 0's original values (for a rotary encoding they only
        serve the causal mask, which depends on counts alone) and the caller keeps
        placing tokens at their absolute positions.
        """
        if cache.keys is None or cache.values is None or cache.positions is None:
            return attention_mass
        heads = cache.keys.shape[1]
        compacted = relay_compact(
            cache.keys,
            cache.values,
            cache.positions,
            [self.config.budget] * heads,
            inv_freq,
            select=self.select,
            attention_mass=attention_mass,
            generator=self.generator,
            rephase=self.config.rephase,
        )
        cache.keys, cache.values = compacted.keys, compacted.values
        cache.positions = compacted.positions[0].clone()
        if attention_mass is None:
            return None
        return attention_mass.gather(1, compacted.slots)  # (Hk, budget)
