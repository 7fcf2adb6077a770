"""Incremental decoding with a KV cache: prefill the prompt, then one token at a time.

Cached decoding gives the same logits as running the whole sequence at once (checked in
tests/integration/test_generate.py for every registered position x attention pair that
declares ``supports_kv_cache``). Sampling: temperature (0 = greedy), top-k, and a seeded
``torch.Generator`` so that a seed fixes the continuation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from pydantic import NonNegativeFloat, NonNegativeInt, PositiveInt
from torch import Tensor

from llmevo.errors import ConfigError
from llmevo.model.transformer import Transformer
from llmevo.registry import StrictModel


class SamplingConfig(StrictModel):
    temperature: NonNegativeFloat = 0.8  # 0: greedy
    top_k: NonNegativeInt = 40  # 0: the whole vocabulary
    max_tokens: PositiveInt = 64
    seed: int = 42


def require_cache_support(model: Transformer) -> None:
    """ConfigError naming the components whose manifest says ``supports_kv_cache=False``."""
    refusing = [
        f"{slot} '{spec.name}'"
        for slot, spec in model.specs.items()
        if not spec.manifest.supports_kv_cache
    ]
    if refusing:
        raise ConfigError(
            f"KV-cache decoding is not supported by {', '.join(refusing)}; "
            "choose components whose manifest has supports_kv_cache=True"
        )


def position_limit(model: Transformer) -> int | None:
    """The largest number of positions the encoding can represent (learned tables), or None."""
    limit = getattr(model.position, "max_positions", None)
    return int(limit) if limit is not None else None


def check_length(model: Transformer, prompt_length: int, new_tokens: int) -> None:
    """ConfigError before any work when prompt + continuation exceed a bounded encoding."""
    limit = position_limit(model)
    if limit is None:
        return
    if prompt_length > limit:
        raise ConfigError(
            f"prompt of {prompt_length} tokens is longer than the model's {limit} positions "
            f"(position '{model.specs['position'].name}'); shorten it or use a cache policy"
        )
    if prompt_length + new_tokens > limit:
        raise ConfigError(
            f"prompt ({prompt_length}) + max tokens ({new_tokens}) exceed the model's {limit} "
            f"positions; use at most {limit - prompt_length} new tokens"
        )


@torch.no_grad()
def cached_logits(model: Transformer, tokens: Tensor, prefill: int) -> Tensor:
    """Logits (B, T, V) from prefilling ``prefill`` tokens, then feeding the rest one by one."""
    require_cache_support(model)
    check_length(model, tokens.shape[1], 0)
    caches = model.new_caches()
    pieces = [model(tokens[:, :prefill], caches=caches)]
    for index in range(prefill, tokens.shape[1]):
        pieces.append(model(tokens[:, index : index + 1], caches=caches))
    return torch.cat(pieces, dim=1)


def sample_next(logits: Tensor, config: SamplingConfig, generator: torch.Generator) -> Tensor:
    """One token id per row of ``logits`` (B, V) -> (B,)."""
    if config.temperature == 0.0:
        return logits.argmax(dim=-1)
    scaled = logits.float() / config.temperature
    if 0 < config.top_k < scaled.shape[-1]:
        threshold = scaled.topk(config.top_k, dim=-1).values[..., -1:]  # (B, 1)
        scaled = scaled.masked_fill(scaled < threshold, float("-inf"))
    probabilities = scaled.softmax(dim=-1)
    return torch.multinomial(probabilities, 1, generator=generator).squeeze(-1)


@dataclass(frozen=True)
class Generation:
    prompt_tokens: list[int]
    new_tokens: list[int]


@torch.no_grad()
def generate(
    model: Transformer,
    prompt_tokens: Sequence[int],
    config: SamplingConfig,
    stop_token: int | None = None,
) -> Generation:
    """Prefill the prompt, then sample up to ``config.max_tokens`` tokens with the cache."""
    if not prompt_tokens:
        raise ConfigError("generate: the prompt encodes to no tokens; give a non-empty prompt")
    require_cache_support(model)
    check_length(model, len(prompt_tokens), config.max_tokens)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(config.seed)
    caches = model.new_caches()
    logits = model(torch.tensor([list(prompt_tokens)], device=device), caches=caches)
    new_tokens: list[int] = []
    for _ in range(config.max_tokens):
        token = sample_next(logits[:, -1], config, generator)  # (1,)
        new_tokens.append(int(token))
        if stop_token is not None and new_tokens[-1] == stop_token:
            break
        logits = model(token[:, None], caches=caches)  # (1, 1, V)
    model.train(was_training)
    return Generation(prompt_tokens=list(prompt_tokens), new_tokens=new_tokens)
