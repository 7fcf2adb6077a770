"""The patch-latent core shared by BLT and its token-level stand-in (arXiv 2412.09871, §3).

Given units (bytes, or BPE tokens for the stand-in) and the patch each unit belongs to,
the core runs

1. a local encoder: unit embeddings + hash n-gram embeddings (§3.2.1), causal local
   blocks, then cross-attention pooling of each patch's units into one patch vector
   (queries initialised from the patch mean, keys/values the patch's own units);
2. a latent transformer over patches, causal in patch order;
3. a local decoder: per layer, cross-attention from units to the latent states of
   *earlier* patches (plus a learned "no patch yet" state), then a causal local block;
   a tied head gives next-unit logits.

Causality (the one-patch shift): the latent state h_j summarises the units of patches
0..j. The logits at position t predict unit t + 1, which lies in patch ``ids[t + 1]``;
they may read h_j for j < ids[t + 1] only. ``ids[t + 1]`` depends on the boundary
decision at t + 1, which the caller must make from units <= t (entropy patching does).
So ``patch_index`` has T + 1 entries: one per unit plus the pseudo-position T.

Every block (local and latent) is built from registered components through the same
slot machinery as ``Transformer`` (``resolve``); this file never names a component.

Deviations from the paper: one pooling cross-attention after the encoder blocks (the paper
interleaves one per encoder layer); full causal local attention within the window (the
paper uses a sliding window); hash tables of 128 buckets instead of 500k.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt
from torch import Tensor, nn

from llmevo.components.base import AttentionContext, BlockParts, ModelDims, PositionEncoding
from llmevo.model.config import ModelConfig
from llmevo.model.transformer import _init_weights, resolve
from llmevo.registry import MODEL_SLOTS, ComponentChoice, StrictModel

HASH_PRIME = 1_000_000_007
HASH_BASE = 263


def ngram_hashes(units: Tensor, n: int, buckets: int, pad_id: int) -> Tensor:
    """Bucket of the n-gram ending at each position (rolling polynomial hash).  (B, T) long

    Positions before the window start are ``pad_id``, so a hash uses units <= t only.
    """
    padded = F.pad(units, (n - 1, 0), value=pad_id)  # (B, T + n - 1)
    value = torch.zeros_like(units)
    for offset in range(n):
        value = (value * HASH_BASE + padded[:, offset : offset + units.shape[1]]) % HASH_PRIME
    return value % buckets


class SlotFactory:
    """Builds registered components for given slot choices (the ``Transformer`` recipe)."""

    def __init__(self, choices: dict[str, ComponentChoice]):
        self.built = {slot: resolve(slot, choices[slot]) for slot in MODEL_SLOTS}

    def make(self, slot: str, *args: Any) -> nn.Module:
        spec, component_config = self.built[slot]
        return spec.cls(component_config, *args)

    def blocks(self, dims: ModelDims, count: int) -> nn.ModuleList:
        """``count`` blocks, the attention of block i built with ``layer_index`` i."""
        parts = BlockParts(
            make_attention=partial(self.make, "attention", dims),
            make_feedforward=partial(self.make, "feedforward", dims),
            make_norm=partial(self.make, "norm"),
        )
        return nn.ModuleList(self.make("block", dims, parts, index) for index in range(count))


def run_blocks(blocks: nn.ModuleList, x: Tensor, position: PositionEncoding) -> Tensor:
    """Causal blocks over (B, T, D) at positions 0..T-1."""
    positions = torch.arange(x.shape[1], device=x.device)
    x = position.embed(x, positions)
    shared: dict[str, Any] = {}
    for block in blocks:
        x = block(x, AttentionContext(positions=positions, position=position, shared=shared))
    return x


class CrossAttention(nn.Module):
    """Multi-head attention from queries (d_query) to keys/values (d_key) under a bool mask."""

    def __init__(self, d_query: int, d_key: int, d_out: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = d_query // heads
        self.query = nn.Linear(d_query, d_query, bias=False)
        self.key = nn.Linear(d_key, d_query, bias=False)
        self.value = nn.Linear(d_key, d_query, bias=False)
        self.output = nn.Linear(d_query, d_out, bias=False)

    def forward(self, queries: Tensor, keys: Tensor, allowed: Tensor) -> Tensor:
        """queries (B, Q, Dq), keys (B, K, Dk), allowed (B, Q, K) bool -> (B, Q, Dout)."""
        batch, n_queries, _ = queries.shape
        n_keys = keys.shape[1]
        q = self.query(queries).view(batch, n_queries, self.heads, self.head_dim).transpose(1, 2)
        k = self.key(keys).view(batch, n_keys, self.heads, self.head_dim).transpose(1, 2)
        v = self.value(keys).view(batch, n_keys, self.heads, self.head_dim).transpose(1, 2)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])
        return self.output(attended.transpose(1, 2).reshape(batch, n_queries, -1))


class LocalSettings(StrictModel):
    """The local encoder and decoder: the settings BLT and its stand-in share (the first fields
    of their ``ModelConfig.extra``)."""

    d_local: PositiveInt = 32
    local_heads: PositiveInt = 2
    local_attention: ComponentChoice = Field(
        default_factory=lambda: ComponentChoice(name="mha", config={"kv_heads": 2})
    )
    local_feedforward: ComponentChoice = Field(
        default_factory=lambda: ComponentChoice(name="swiglu", config={"hidden": 96})
    )
    encoder_layers: PositiveInt = 1
    decoder_layers: PositiveInt = 1


class LatentPatchCore(nn.Module):
    """Local encoder -> latent transformer over patches -> local decoder (see module doc).

    The local blocks take the latent's slot choices with ``local``'s attention and feed-forward."""

    def __init__(
        self,
        config: ModelConfig,
        local: LocalSettings,
        hash_ngrams: tuple[int, ...],
        hash_buckets: int,
        pad_id: int,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.hash_ngrams = hash_ngrams
        self.hash_buckets = hash_buckets
        d_local, local_heads = local.d_local, local.local_heads
        encoder_layers, decoder_layers = local.encoder_layers, local.decoder_layers
        local_dims = ModelDims(
            vocab_size=config.vocab_size,
            d_model=d_local,
            n_layers=encoder_layers + decoder_layers,
            n_heads=local_heads,
            max_seq_len=config.max_seq_len,
        )
        latent_dims = ModelDims(
            vocab_size=config.vocab_size,
            d_model=config.d_model,
            n_layers=config.n_layers,
            n_heads=config.n_heads,
            max_seq_len=config.max_seq_len,
        )
        self.latent_factory = SlotFactory({slot: getattr(config, slot) for slot in MODEL_SLOTS})
        self.local_factory = SlotFactory({slot: getattr(config, slot) for slot in MODEL_SLOTS} | {
            "attention": local.local_attention, "feedforward": local.local_feedforward})
        local, latent = self.local_factory, self.latent_factory
        # local encoder
        self.embedding = nn.Embedding(config.vocab_size, d_local)
        self.hash_embeddings = nn.ModuleList(
            nn.Embedding(hash_buckets, d_local) for _ in hash_ngrams
        )
        self.encoder_position = local.make("position", local_dims)
        self.encoder_blocks = local.blocks(local_dims, encoder_layers)
        self.pool_norm = local.make("norm", d_local)
        self.pool = CrossAttention(d_local, d_local, d_local, local_heads)
        self.to_latent = nn.Linear(d_local, config.d_model, bias=False)
        # latent transformer
        self.latent_position = latent.make("position", latent_dims)
        self.latent_blocks = latent.blocks(latent_dims, config.n_layers)
        self.latent_norm = latent.make("norm", config.d_model)
        # local decoder
        self.no_patch_yet = nn.Parameter(torch.zeros(1, 1, config.d_model))
        self.decoder_position = local.make("position", local_dims)
        self.decoder_norms = nn.ModuleList(
            local.make("norm", d_local) for _ in range(decoder_layers)
        )
        self.decoder_cross = nn.ModuleList(
            CrossAttention(d_local, config.d_model, d_local, local_heads)
            for _ in range(decoder_layers)
        )
        self.decoder_blocks = local.blocks(local_dims, decoder_layers)
        self.final_norm = local.make("norm", d_local)
        self.head = nn.Linear(d_local, config.vocab_size, bias=False)
        self.apply(_init_weights)
        self.head.weight = self.embedding.weight

    def encode_units(self, units: Tensor) -> Tensor:
        """Unit + hash n-gram embeddings through the causal encoder blocks.  (B, T, d_local)"""
        x = self.embedding(units)  # (B, T, d_local)
        for n, table in zip(self.hash_ngrams, self.hash_embeddings, strict=True):
            x = x + table(ngram_hashes(units, n, self.hash_buckets, self.pad_id))
        return run_blocks(self.encoder_blocks, x, self.encoder_position)

    def pool_patches(self, unit_states: Tensor, unit_patch: Tensor, n_patches: int) -> Tensor:
        """Each patch's units -> one latent-width vector.  (B, P, d_model)"""
        patch_range = torch.arange(n_patches, device=unit_states.device)
        member = unit_patch[:, None, :] == patch_range[None, :, None]  # (B, P, T)
        sizes = member.sum(dim=-1, keepdim=True)  # (B, P, 1)
        mean = (member.to(unit_states.dtype) @ unit_states) / sizes.clamp(min=1)  # (B, P, d_local)
        allowed = member.clone()
        allowed[..., 0] |= sizes[..., 0] == 0  # padding patches (no units): avoid an empty softmax
        normed = self.pool_norm(unit_states)
        pooled = mean + self.pool(self.pool_norm(mean), normed, allowed)  # (B, P, d_local)
        return self.to_latent(pooled)

    def forward(self, units: Tensor, patch_index: Tensor) -> Tensor:
        """units (B, T), patch_index (B, T + 1) -> logits (B, T, V)."""
        batch, length = units.shape
        unit_patch = patch_index[:, :length]  # (B, T)
        n_patches = int(unit_patch[:, -1].max()) + 1
        unit_states = self.encode_units(units)  # (B, T, d_local)
        patches = self.pool_patches(unit_states, unit_patch, n_patches)  # (B, P, d_model)
        latent = self.latent_norm(run_blocks(self.latent_blocks, patches, self.latent_position))
        memory = torch.cat((self.no_patch_yet.expand(batch, 1, -1), latent), dim=1)  # (B, P+1, D)
        # key k holds h_{k-1}; logits at t may read h_j for j < patch_index[t + 1]
        key_range = torch.arange(n_patches + 1, device=units.device)
        visible = key_range[None, None, :] <= patch_index[:, 1:, None]  # (B, T, P + 1)
        x = self.decoder_position.embed(unit_states, torch.arange(length, device=units.device))
        positions = torch.arange(length, device=units.device)
        for norm, cross, block in zip(
            self.decoder_norms, self.decoder_cross, self.decoder_blocks, strict=True
        ):
            x = x + cross(norm(x), memory, visible)
            x = block(x, AttentionContext(positions=positions, position=self.decoder_position))
        return self.head(self.final_norm(x))  # (B, T, V)


class LatentPatchModel(nn.Module):
    """What BLT and its stand-in share around the core: counting patches as they are made,
    the trainable parameters and their split."""

    supports_kv_cache = False
    core: LatentPatchCore
    units_seen = 0
    patches_seen = 0

    def run_core(self, units: Tensor, patch_index: Tensor) -> Tensor:
        """units (B, T), patch_index (B, T + 1) -> logits (B, T, V), counting units and patches."""
        self.units_seen += units.numel()
        self.patches_seen += int(patch_index[:, units.shape[1] - 1].sum()) + units.shape[0]
        return self.core(units, patch_index)

    def num_parameters(self) -> int:
        """Trainable parameters (a frozen entropy model is not a submodule, so not counted)."""
        return sum(p.numel() for p in self.parameters())

    def parameter_stats(self) -> dict[str, int]:
        """Trainable parameters of the local encoder, latent transformer and local decoder."""
        groups = {
            "local_encoder": ("embedding", "hash_embeddings", "encoder_", "pool", "to_latent"),
            "latent": ("latent_",),
            "local_decoder": ("no_patch_yet", "decoder_", "final_norm"),
        }
        split = dict.fromkeys(groups, 0)
        for name, parameter in self.core.named_parameters():  # the tied head appears once
            group = next(g for g, prefixes in groups.items() if name.startswith(prefixes))
            split[group] += parameter.numel()
        return {f"parameters_{group}": count for group, count in split.items()} | {
            "parameters_trainable": self.num_parameters()}
