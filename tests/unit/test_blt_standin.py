"""The token-level BLT proxy: causal, learns boundaries after the output, reaches its target."""

from __future__ import annotations

import pytest
import torch

from llmevo.catalog import build_model
from llmevo.errors import ConfigError
from llmevo.model.blt import blt_standin_config


def skewed_tokens(generator: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """Tokens where some predecessors fix the next token (low surprisal) and others don't."""
    tokens = torch.randint(0, 64, (batch, length), generator=generator)
    tokens[:, 1:] = torch.where(tokens[:, :-1] < 32, (tokens[:, :-1] * 7) % 64, tokens[:, 1:])
    return tokens


def trained_standin() -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(blt_standin_config(vocab_size=64, seq_len=32)).train()
    generator = torch.Generator().manual_seed(0)
    for _ in range(4):
        model(skewed_tokens(generator, 8, 32))
    return model.eval()


def test_standin_is_causal_after_learning_boundaries() -> None:
    model = trained_standin()
    generator = torch.Generator().manual_seed(1)
    base = skewed_tokens(generator, 4, 32)
    reference = model(base)
    moved = 0
    for t in range(0, 31, 3):
        changed = base.clone()
        changed[:, t + 1 :] = torch.randint(0, 64, changed[:, t + 1 :].shape, generator=generator)
        torch.testing.assert_close(
            model(changed)[:, : t + 1], reference[:, : t + 1], atol=1e-5, rtol=1e-5
        )
        moved += int(not torch.equal(model.patch_index(changed), model.patch_index(base)))
    assert moved > 0


def test_boundaries_are_learned_and_hit_the_target() -> None:
    model = trained_standin()
    stats = model.architecture_stats()
    assert stats["proxy"].startswith("token-level stand-in")
    assert float(model.bigram_counts.sum()) == 4 * 8 * 31
    tokens = skewed_tokens(torch.Generator().manual_seed(2), 8, 32)
    index = model.patch_index(tokens)[:, :-1]
    tokens_per_patch = tokens.numel() / (index[:, -1] + 1).sum().item()
    assert tokens_per_patch == pytest.approx(2.0, rel=0.25)
    # low-surprisal successors (predecessor < 32) share the predecessor's patch more often
    starts = torch.diff(index, dim=1, prepend=index[:, :1] - 1) > 0
    predictable = tokens[:, :-1] < 32
    assert starts[:, 1:][predictable].float().mean() < starts[:, 1:][~predictable].float().mean()


def test_training_forward_uses_the_boundaries_from_before_the_batch() -> None:
    model = build_model(blt_standin_config(vocab_size=64, seq_len=16)).train()
    tokens = skewed_tokens(torch.Generator().manual_seed(3), 2, 16)
    before = model.patch_index(tokens)
    torch.manual_seed(0)
    model(tokens)
    assert torch.equal(before, torch.arange(17).expand(2, 17))  # untrained: every token a patch
    assert not torch.equal(model.patch_index(tokens), before)


def test_unreachable_target_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"expected a value in \[1, 8\]"):
        build_model(blt_standin_config(target_tokens_per_patch=9.0))
