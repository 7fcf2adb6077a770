"""μP (``--param mup``) against Tensor Programs V's Table 8, computed by hand here.

Table 8 (arXiv 2203.03466, "alternative (equivalent) μP formulation for easier
implementation"), for Adam, in this model's terms with base width 64 (quick's d_model) and
today's N(0, 0.02²) init as the anchor, m = d_model / 64:

- input weights (the tied embedding), biases and gains: init var 1/fan_in with fan_in the
  vocabulary (or 1): constant in width, std 0.02; multiplier 1; Adam lr constant;
- output weights (the readout, tied to the embedding): init var 1 (constant), multiplier
  1/fan_in -> logits x 64/d_model; Adam lr constant;
- hidden weights (every projection in the blocks): init var 1/fan_in -> std
  0.02 * sqrt(base fan_in / fan_in); Adam lr 1/fan_in -> lr * base fan_in / fan_in.

Base fan_ins are written out from llama_modern's base shapes (d_model 64, SwiGLU 192), not
read from the library; the weight decay follows the ``mup`` package's ``MuAdam`` default
(``decoupled_wd=False``: decay x width_mult, so lr x decay is unchanged).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from llmevo.catalog import build_model, build_optimizer
from llmevo.components.base import AttentionContext
from llmevo.components.optim.base import scale_learning_rates
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.runner.size import Geometry, check_parametrization, resize_model
from llmevo.train.trainer import TrainConfig, train

LR, WD = 3e-3, 0.1
# llama_modern's hidden projections and their fan_in at the base width (d_model 64, SwiGLU 192)
BASE_FAN_IN = {"attention.query": 64, "attention.key": 64, "attention.value": 64, "attention.output": 64,
               "feed_forward.gate": 64, "feed_forward.up": 64, "feed_forward.down": 192}


def mup_model(d_model: int, heads: int, seed: int = 0, parametrization: str = "mup"):
    config = resize_model(ModelConfig(parametrization=parametrization), Geometry(d_model, 2, heads))
    torch.manual_seed(seed)
    return config, build_model(config)


def hidden_key(name: str) -> str | None:
    """``blocks.1.attention.query.weight`` -> ``attention.query``; None for a non-hidden weight."""
    parts = name.split(".")
    if parts[0] != "blocks" or parts[-1] != "weight":
        return None
    key = ".".join(parts[2:-1])
    return key if key in BASE_FAN_IN else None


def groups_of(model, optimizer):
    where = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            where[id(p)] = group
    return {name: where[id(p)] for name, p in model.named_parameters()}


@pytest.mark.parametrize("optimizer_name", ["adamw", "lion", "cautious_adamw", "ademamix"])
def test_learning_rates_and_decay_follow_table_8(optimizer_name):
    _, model = mup_model(128, 8)
    component = build_optimizer(ComponentChoice(name=optimizer_name))
    optimizer = component.build(model, lr=LR, weight_decay=WD)
    before = {name: (g["lr"], g["weight_decay"]) for name, g in groups_of(model, optimizer).items()}
    scale_learning_rates(optimizer, model, component, optimizer_name)
    after = groups_of(model, optimizer)
    hidden = 0
    for name, parameter in model.named_parameters():
        base_lr, base_wd = before[name]
        key = hidden_key(name)
        if key is None:  # embedding (tied readout), gains: Adam lr constant in width
            assert after[name]["lr"] == base_lr and after[name]["weight_decay"] == base_wd, name
            continue
        hidden += 1
        fan_in = parameter.shape[1]
        assert after[name]["lr"] == pytest.approx(base_lr * BASE_FAN_IN[key] / fan_in, rel=1e-12), name
        assert after[name]["lr"] * after[name]["weight_decay"] == pytest.approx(base_lr * base_wd, rel=1e-12)
    assert hidden == 2 * len(BASE_FAN_IN)


def test_init_stds_follow_table_8():
    _, standard = mup_model(256, 16, seed=3, parametrization="standard")
    _, mup = mup_model(256, 16, seed=3)
    reference = dict(standard.named_parameters())
    for name, parameter in mup.named_parameters():
        key = hidden_key(name)
        factor = 1.0 if key is None else math.sqrt(BASE_FAN_IN[key] / parameter.shape[1])
        # the same draw, rescaled: init variance proportional to 1/fan_in for hidden weights only
        torch.testing.assert_close(parameter, reference[name] * factor, rtol=0, atol=1e-7)
        if key is not None and parameter.numel() > 30_000:
            expected = 0.02 * factor
            assert parameter.std().item() == pytest.approx(expected, rel=0.03), name
    assert mup.embedding.weight.std().item() == pytest.approx(0.02, rel=0.03)


def test_logits_carry_the_output_multiplier():
    config, model = mup_model(192, 12)
    tokens = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    captured = {}
    model.final_norm.register_forward_hook(lambda m, i, o: captured.__setitem__("h", o))
    logits = model(tokens)
    expected = F.linear(captured["h"], model.embedding.weight) * (64 / 192)  # tied readout x 1/m
    torch.testing.assert_close(logits, expected, rtol=1e-6, atol=1e-6)


def test_attention_scale_is_one_over_head_dim_at_a_wider_head():
    # head dimension 32 (64 wide, 2 heads): mup scores q.k x sqrt(16)/32 = 1/8, standard x 1/sqrt(32)
    for parametrization, scale in (("mup", 4 / 32), ("standard", 1 / math.sqrt(32))):
        _, model = mup_model(64, 2, parametrization=parametrization)
        attention = model.blocks[0].attention
        x = torch.randn(2, 10, 64, generator=torch.Generator().manual_seed(1))
        positions = torch.arange(10)
        context = AttentionContext(positions=positions, position=model.position)
        q, k, v = attention.project(x, context)  # (B, H, T, Dh)
        scores = (q @ k.transpose(-1, -2)) * scale
        scores = scores.masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), -math.inf)
        mixed = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 10, 64)
        torch.testing.assert_close(attention(x, context), attention.output(mixed), rtol=1e-5, atol=1e-6)


def test_mup_at_the_base_width_is_the_standard_model_exactly():
    _, standard = mup_model(64, 4, seed=7, parametrization="standard")
    _, mup = mup_model(64, 4, seed=7)
    assert mup.lr_multipliers == {} and mup.output_multiplier == 1.0
    for (name, a), (_, b) in zip(standard.state_dict().items(), mup.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    stream = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0))
    config = TrainConfig(steps=6, batch_size=4, seq_len=16, lr=3e-3, warmup_steps=2)
    adamw = build_optimizer(ComponentChoice(name="adamw"))
    first = train(standard, stream, config, 42, torch.device("cpu"), adamw)
    second = train(mup, stream, config, 42, torch.device("cpu"), build_optimizer(ComponentChoice(name="adamw")))
    assert first.losses == second.losses  # bit for bit
    for a, b in zip(standard.parameters(), mup.parameters(), strict=True):
        assert torch.equal(a, b)


def test_standard_serialisation_and_hash_are_unchanged():
    """The field is left out when standard: every earlier fingerprint and cache key holds
    (``698caada53a1cbc5`` is llama_modern's fingerprint before the field existed)."""
    assert "parametrization" not in ModelConfig().canonical_json()
    assert ModelConfig().fingerprint() == "698caada53a1cbc5"
    mup = ModelConfig(parametrization="mup")
    assert mup.model_dump()["parametrization"] == "mup"
    assert ModelConfig.model_validate(mup.model_dump()) == mup


@pytest.mark.parametrize(("change", "message"), [
    ({"optimizer": "muon"}, "optimizer 'muon' does not take per-parameter learning rates"),
    ({"optimizer": "schedule_free_adamw"}, "does not take per-parameter learning rates"),
    ({"feedforward": "moe"}, "router.weight (8, 64) has a dimension that does not follow the width"),
    ({"attention": "mla"}, "does not follow the width"),
])
def test_what_cannot_honour_mup_is_refused(change, message):
    model = ModelConfig(parametrization="mup")
    for slot in ("feedforward", "attention"):
        if slot in change:
            model = model.with_slot(slot, change[slot])
    with pytest.raises(ConfigError) as refused:
        check_parametrization(model, ComponentChoice(name=change.get("optimizer", "adamw")))
    assert message in str(refused.value)


def test_trainer_refuses_an_optimizer_without_per_group_lr():
    _, model = mup_model(128, 8)
    stream = torch.randint(0, 512, (2000,))
    config = TrainConfig(steps=1, batch_size=2, seq_len=8, lr=1e-3, optimizer=ComponentChoice(name="soap"))
    with pytest.raises(ConfigError, match="optimizer 'soap' does not take per-parameter"):
        train(model, stream, config, 0, torch.device("cpu"), build_optimizer(config.optimizer))


# --- CompleteP (arXiv 2505.01618, Table 1 at alpha = 1; reference: EleutherAI/nanoGPT-mup,
# branch completep): mup plus x + (L_base / L) f(norm(x)) on every branch, base depth 2 --------


def test_completep_scales_each_residual_branch_by_base_depth_over_depth():
    config = resize_model(ModelConfig(parametrization="completep"), Geometry(128, 8, 8))
    torch.manual_seed(0)
    model = build_model(config)
    block = model.blocks[3]
    x = torch.randn(2, 12, 128, generator=torch.Generator().manual_seed(2))
    context = AttentionContext(positions=torch.arange(12), position=model.position)
    mid = x + (2 / 8) * block.attention(block.attention_norm(x), context)
    expected = mid + (2 / 8) * block.feed_forward(block.feed_forward_norm(mid))
    torch.testing.assert_close(block(x, context), expected, rtol=1e-6, atol=1e-6)
    # the width rule is mup's: hidden lr x 64/128, logits x 64/128, no depth term at alpha = 1
    assert set(model.lr_multipliers.values()) == {0.5} and model.output_multiplier == 0.5


def test_completep_at_the_base_depth_is_mup_exactly():
    for parametrization in ("mup", "completep"):
        config = resize_model(ModelConfig(parametrization=parametrization), Geometry(96, 2, 6))
        torch.manual_seed(5)
        model = build_model(config)
        tokens = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
        if parametrization == "mup":
            reference = model(tokens)
        else:
            assert torch.equal(model(tokens), reference)


def test_completep_refuses_a_block_that_does_not_scale_its_branches():
    model = resize_model(ModelConfig(parametrization="completep").with_slot("block", "peri_ln"),
                         Geometry(64, 4, 4))
    with pytest.raises(ConfigError, match="block 'peri_ln' does not scale its residual branches"):
        check_parametrization(model, ComponentChoice(name="adamw"))
    check_parametrization(resize_model(ModelConfig(parametrization="completep").with_slot("block", "peri_ln"),
                                       Geometry(128, 2, 8)), ComponentChoice(name="adamw"))  # base depth: mup


def test_the_arm_cache_key_and_the_file_names_carry_the_parametrization(tmp_path):
    from llmevo.experiments.pipeline import ReproductionRequest
    from llmevo.runner.arm import Arm
    from llmevo.runner.cache import arm_parts

    adamw = ComponentChoice(name="adamw")
    standard, mup = ModelConfig(), ModelConfig(parametrization="mup")
    assert "parametrization" not in arm_parts(Arm("baseline", "x", standard, adamw))["model"]
    assert arm_parts(Arm("baseline", "x", mup, adamw))["model"]["parametrization"] == "mup"
    plans = {param: ReproductionRequest(name="rope", preset="quick", rung=-2, param=param, seeds=[42],
                                        tune=False, data_dir=tmp_path, cache_dir=tmp_path).plan()
             for param in ("standard", "mup")}
    assert plans["standard"].outputs.artifact.name == "public-quick-rung-2-seed42.json"
    assert plans["mup"].outputs.artifact.name == "public-quick-rung-2-mup-seed42.json"
    assert {arm.model.parametrization for arm in plans["mup"].comparison.arms} == {"mup"}
