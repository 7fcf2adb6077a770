"""L1 diagnostic of RoPE relay (arXiv 2610.21126) on synthetic fixed caches.

Per (layer, KV head) a cache of ``slots`` post-RoPE keys at increasing random positions is
compacted to that head's retained count (heterogeneous, e.g. 8/6/4/2 of 8) with a seeded
random selection (so kept entries are not contiguous and re-phasing matters). A question of
``question_length`` tokens and one answer token follow at positions ``c_h, c_h + 1, ...``.

Reference: the same attention with the kept *pre-RoPE* keys rotated afresh at their new
positions ``0..c_h-1`` (no relay). Negative control: the question and answer keep the
positions they would have had without compaction (after the last original position).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field, PositiveFloat, PositiveInt, model_validator
from torch import Tensor

from llmevo.components.kvcache import rope_relay
from llmevo.components.kvcache.rope_relay import check_rotary_dim, relay_compact, selection_rule
from llmevo.components.position.rope import apply_rotary, rotary_frequencies
from llmevo.diagnostics.harness import Diagnostic, SeedRow, register_diagnostic
from llmevo.errors import ConfigError
from llmevo.registry import StrictModel


class RelayDiagnosticConfig(StrictModel):
    """Defaults are the reference artifact's configuration."""

    layers: PositiveInt = 2
    physical_kv_heads: PositiveInt = 2
    slots: PositiveInt = 8
    retained_counts: list[PositiveInt] = Field(default_factory=lambda: [8, 6, 4, 2])
    key_dimension: PositiveInt = 12
    rotary_dimension: PositiveInt = 8
    amplitude: PositiveFloat = 1.3
    question_length: PositiveInt = 3
    theta: float = 10_000.0
    selection: str = "random"

    @model_validator(mode="after")
    def _check(self) -> RelayDiagnosticConfig:
        if len(self.retained_counts) != self.layers * self.physical_kv_heads:
            raise ValueError(
                f"retained_counts needs layers x physical_kv_heads = "
                f"{self.layers * self.physical_kv_heads} entries, got {len(self.retained_counts)}"
            )
        return self


def head_attention(
    queries: Tensor, keys: Tensor, values: Tensor, n_cache: int
) -> tuple[Tensor, Tensor]:
    """One head: queries (Q+1, D) over ``n_cache`` cached keys then Q question keys.

    Question token i sees the cache and question keys 0..i; the answer (last query) sees
    everything. Returns logits (Q+1, n_cache + Q) with -inf where masked, output (Q+1, Dv).
    """
    n_queries, n_keys = queries.shape[0], keys.shape[0]
    logits = queries @ keys.T / math.sqrt(queries.shape[-1])  # (Q+1, N)
    question = torch.arange(n_keys - n_cache, device=queries.device)
    allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=queries.device)
    answered = torch.arange(n_queries - 1, device=queries.device)
    allowed[: n_queries - 1, n_cache:] = question[None, :] <= answered[:, None]
    masked = logits.masked_fill(~allowed, -math.inf)
    return masked, masked.softmax(-1) @ values


def question_attention(
    cached_keys: Tensor,
    cached_values: Tensor,
    raw_queries: Tensor,
    raw_question_keys: Tensor,
    question_values: Tensor,
    positions: Tensor,
    inv_freq: Tensor,
) -> tuple[Tensor, Tensor]:
    """Question + answer queries at ``positions`` (Q+1,) over the cache then the question."""
    n_question = raw_question_keys.shape[0]
    queries = apply_rotary(raw_queries, positions, inv_freq)  # (Q+1, D)
    question_keys = apply_rotary(raw_question_keys, positions[:n_question], inv_freq)  # (Q, D)
    keys = torch.cat([cached_keys, question_keys])
    values = torch.cat([cached_values, question_values])
    return head_attention(queries, keys, values, cached_keys.shape[0])


def _increasing_positions(slots: int, generator: torch.Generator) -> Tensor:
    """``slots`` distinct increasing positions drawn from 0..4*slots-1."""
    return torch.randperm(4 * slots, generator=generator)[:slots].sort().values


def run_seed(config: RelayDiagnosticConfig, seed: int, device: torch.device) -> SeedRow:
    check_rotary_dim(config.rotary_dimension, config.key_dimension)
    if max(config.retained_counts) > config.slots:
        raise ConfigError(
            f"rope-relay: retained_counts {config.retained_counts} exceed the {config.slots} slots"
        )
    generator = torch.Generator().manual_seed(seed)  # draws on the CPU, for every device
    inv_freq = rotary_frequencies(config.rotary_dimension, config.theta).to(device)
    select = selection_rule(config.selection)
    heads, slots, dim, n_q = (
        config.physical_kv_heads,
        config.slots,
        config.key_dimension,
        config.question_length,
    )
    budgets = torch.tensor(config.retained_counts).view(config.layers, heads)

    max_error = 0.0
    control_errors: list[Tensor] = []
    values_same = tail_same = endpoints = synchronized = True
    key_grads, value_grads, query_grads = [], [], []
    for layer in range(config.layers):

        def randn(*shape: int) -> Tensor:
            return (config.amplitude * torch.randn(*shape, generator=generator)).to(device)

        raw_keys = randn(1, heads, slots, dim)  # (B, Hk, S, Dk) pre-RoPE
        values = randn(1, heads, slots, dim)
        positions = _increasing_positions(slots, generator).to(device)  # (S,)
        raw_queries = randn(heads, n_q + 1, dim)  # question + answer, pre-RoPE
        raw_question_keys = randn(heads, n_q, dim)
        question_values = randn(heads, n_q, dim)
        readout = torch.randn(heads, n_q + 1, dim, generator=generator).to(device)

        cache_keys = apply_rotary(raw_keys, positions, inv_freq).requires_grad_(True)
        values.requires_grad_(True)
        raw_queries.requires_grad_(True)
        compacted = relay_compact(
            cache_keys,
            values,
            positions,
            budgets[layer],
            inv_freq,
            select=select,
            generator=generator,
        )
        query_positions = compacted.query_positions(n_q + 1)  # (Hk, Q+1)
        loss = torch.zeros((), device=device)
        for head in range(heads):
            count = int(compacted.lengths[head])
            kept = compacted.slots[head, :count]
            new_positions = compacted.positions[head, :count]
            question_positions = query_positions[head]

            cached_values = compacted.values[0, head, :count]
            follow = (raw_queries[head], raw_question_keys[head], question_values[head])

            def attention(keys_before: Tensor, at: Tensor) -> tuple[Tensor, Tensor]:
                return question_attention(keys_before, cached_values, *follow, at, inv_freq)  # noqa: B023

            relay_logits, relay_out = attention(compacted.keys[0, head, :count], question_positions)
            reference_keys = apply_rotary(raw_keys[0, head, kept], new_positions, inv_freq)
            ref_logits, ref_out = attention(reference_keys, question_positions)
            finite = torch.isfinite(ref_logits)
            error = max(
                float((relay_logits - ref_logits)[finite].abs().max().detach()),
                float((relay_out - ref_out).abs().max().detach()),
            )
            max_error = max(max_error, error)
            loss = loss + (relay_out * readout[head]).sum()

            values_same &= torch.equal(compacted.values[0, head, :count], values[0, head, kept])
            tail_same &= torch.equal(
                compacted.keys[0, head, :count, config.rotary_dimension :],
                cache_keys[0, head, kept, config.rotary_dimension :],
            )
            endpoints &= bool(
                torch.equal(new_positions, torch.arange(count, device=device))
                and int(question_positions[0]) == count
                and bool((compacted.original_positions[head, :count].diff() > 0).all())
            )
            synchronized &= bool(
                torch.equal(question_positions, count + torch.arange(n_q + 1, device=device))
                and torch.allclose(relay_logits[finite], ref_logits[finite], atol=1e-5, rtol=0)
            )
            # negative control: the question keeps its uncompacted positions
            unsynchronized = int(positions[-1]) + 1 + torch.arange(n_q + 1, device=device)
            control_logits, _ = attention(compacted.keys[0, head, :count], unsynchronized)
            control_errors.append(
                (control_logits[:, :count] - ref_logits[:, :count]).abs().flatten()
            )

        loss.backward()
        key_grads.append(cache_keys.grad.flatten())  # type: ignore[union-attr]
        value_grads.append(values.grad.flatten())  # type: ignore[union-attr]
        query_grads.append(raw_queries.grad.flatten())  # type: ignore[union-attr]

    heterogeneous = len(set(config.retained_counts)) > 1
    return {
        "max_reference_absolute_error": max_error,
        "values_unchanged": values_same,
        "nonrotary_tail_unchanged": tail_same,
        "heterogeneous_endpoints_aligned": heterogeneous and endpoints,
        "query_and_answer_positions_synchronized": synchronized,
        "gradient_norm_keys": float(torch.cat(key_grads).norm()),
        "gradient_norm_values": float(torch.cat(value_grads).norm()),
        "gradient_norm_queries": float(torch.cat(query_grads).norm()),
        "unsynchronized_query_mean_logit_error": float(torch.cat(control_errors).detach().mean()),
    }


DIAGNOSTIC = register_diagnostic(
    Diagnostic(
        name="rope-relay",
        component="rope-relay",
        config_cls=RelayDiagnosticConfig,
        run_seed=run_seed,
        claim_policy=(
            "synthetic fixed-cache phase/attention/gradient diagnostics; no model capability "
            "or service overhead evidence"
        ),
        modules=(rope_relay, apply_rotary, run_seed),
    )
)
