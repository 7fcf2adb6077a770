"""The decoder-only transformer, assembled from registered components.

``llama_modern`` is this model with its default config: d_model 64, 2 layers, 4 heads,
4 KV heads, SwiGLU 192, RMSNorm, RoPE (theta 10,000), tied embeddings, no biases, vocab
512, context 64 — exactly 139,584 parameters. Which component fills each slot is read
from the config; this file never names a component. Registered as the architecture
``transformer``; build models by name with ``llmevo.catalog.build_model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from llmevo.components.base import (
    AdjustsInit,
    AttentionContext,
    BlockParts,
    KVCacheLayer,
    ModelDims,
)
from llmevo.model import parametrization as param
from llmevo.model.config import ModelConfig
from llmevo.registry import REGISTRY, ComponentChoice, ComponentSpec, EmptyConfig, register


def resolve(slot: str, choice: ComponentChoice) -> tuple[ComponentSpec, Any]:
    """The registered spec and validated config for one slot; errors name the slot."""
    spec = REGISTRY.get(slot, choice.name)
    return spec, spec.make_config(choice.config)


@register(
    slot="architecture",
    name="transformer",
    config=EmptyConfig,
    implementation_status="full",
    baseline=True,
    evolve_integrated=True,
    scope=(
        "The decoder assembled from the model slots; its default config is the baseline "
        "llama_modern: d_model 64, 2 layers, 4 heads, SwiGLU 192, RMSNorm, RoPE, tied embeddings."
    ),
)
class Transformer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.dims = ModelDims(
            vocab_size=config.vocab_size,
            d_model=config.d_model,
            n_layers=config.n_layers,
            n_heads=config.n_heads,
            max_seq_len=config.max_seq_len,
            attention_scale=param.attention_scale(config.parametrization,
                                                  config.d_model // config.n_heads),
            residual_scale=param.residual_scale(config.parametrization, config.n_layers),
        )
        self.specs: dict[str, ComponentSpec] = {}
        built: dict[str, tuple[ComponentSpec, Any]] = {}
        for slot in ("position", "attention", "feedforward", "norm", "block"):
            built[slot] = resolve(slot, getattr(config, slot))
            self.specs[slot] = built[slot][0]

        def make(slot: str, *args: Any) -> nn.Module:
            spec, component_config = built[slot]
            return spec.cls(component_config, *args)

        parts = BlockParts(
            make_attention=partial(make, "attention", self.dims),
            make_feedforward=partial(make, "feedforward", self.dims),
            make_norm=partial(make, "norm"),
        )
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position = make("position", self.dims)
        self.blocks = nn.ModuleList(
            make("block", self.dims, parts, index) for index in range(config.n_layers)
        )
        self.final_norm = make("norm", config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(_init_weights)
        if config.tie_embeddings:
            self.head.weight = self.embedding.weight
        # the parametrization (model/parametrization.py): standard changes nothing; mup (and
        # completep, whose depth rule the blocks read from dims) rescales the hidden weights'
        # init, multiplies the logits by 1/m and gives the optimizer each hidden weight's lr
        # multiplier (read by the trainer)
        param.apply_init(self, config.parametrization, config.d_model)
        self.output_multiplier = param.output_multiplier(config.parametrization, config.d_model)
        self.lr_multipliers = param.lr_multipliers(self, config.parametrization, config.d_model)

    @property
    def supports_kv_cache(self) -> bool:
        return all(getattr(spec.manifest, "supports_kv_cache", True) for spec in self.specs.values())

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        caches: Sequence[KVCacheLayer] | None = None,
    ) -> Tensor:
        """tokens (B, T) -> logits (B, T, V). With ``caches``, tokens continue the cache."""
        length = tokens.shape[1]
        if positions is None:
            start = len(caches[0]) if caches else 0
            positions = torch.arange(start, start + length, device=tokens.device)
        x = self.embedding(tokens)  # (B, T, D)
        x = self.position.embed(x, positions)
        shared: dict[str, Any] = {}
        for index, block in enumerate(self.blocks):
            context = AttentionContext(
                positions=positions,
                position=self.position,
                cache=caches[index] if caches else None,
                shared=shared,
            )
            x = block(x, context)
        logits = self.head(self.final_norm(x))  # (B, T, V)
        return logits if self.output_multiplier == 1.0 else logits * self.output_multiplier

    def new_caches(self) -> list[KVCacheLayer]:
        return [KVCacheLayer() for _ in self.blocks]


def _init_weights(module: nn.Module) -> None:
    """The default init, applied in post-order (``nn.Module.apply``): a part that adjusts
    its submodules' init (``AdjustsInit``) runs after they received this one."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, AdjustsInit):
        with torch.no_grad():
            module.adjust_init()


