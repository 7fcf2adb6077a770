"""Peri-LN (2502.02732) and DeepNorm (2203.00555) blocks against their formulas composed by
hand, DeepNorm's alpha/beta and init against the paper's formula; the mixture of experts
(2101.03961, 2401.04088) against a per-token loop over the chosen experts and Switch's
balancing loss against its closed form; ScaleNorm (1910.05895) against ``x * g / ||x||``."""

from __future__ import annotations

import math

import pytest
import torch

from llmevo.catalog import build_model, build_optimizer
from llmevo.components.base import AttentionContext, AuxiliaryLosses, ModelDims
from llmevo.components.block.deepnorm import deepnorm_constants
from llmevo.components.feedforward.moe import MixtureOfExperts, MoEConfig, balance_loss, route
from llmevo.components.norm.scalenorm import ScaleNorm, ScaleNormConfig
from llmevo.model.config import ModelConfig
from llmevo.runner.size import RUNGS, resize_model
from llmevo.train.replicas import train_replicas
from llmevo.train.trainer import TrainConfig, train

D = 64


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm written out: x / sqrt(mean(x^2) + eps) * weight."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def _model(slot: str, name: str, seed: int = 0, **sizes: int):
    torch.manual_seed(seed)
    model = build_model(ModelConfig(**sizes).with_slot(slot, name))
    with torch.no_grad():  # non-trivial gains so that every norm matters
        for param_name, param in model.named_parameters():
            if "norm" in param_name:
                param.uniform_(0.5, 1.5)
    context = AttentionContext(positions=torch.arange(6), position=model.position)
    return model, context


# --- Peri-LN ----------------------------------------------------------------------------


def test_peri_ln_block_formula_with_the_embedding_norm_in_the_first_block_only() -> None:
    model, context = _model("block", "peri_ln")
    first, second = model.blocks
    x = torch.randn(2, 6, D)
    h0 = rms(x, first.embedding_norm.weight)  # x_0 = Norm(embeddings)
    h = h0 + rms(first.attention(rms(h0, first.attention_norm.weight), context),
                 first.attention_output_norm.weight)
    expected = h + rms(first.feed_forward(rms(h, first.feed_forward_norm.weight)),
                       first.feed_forward_output_norm.weight)
    torch.testing.assert_close(first(x, context), expected)
    assert second.embedding_norm is None
    h = x + rms(second.attention(rms(x, second.attention_norm.weight), context),
                second.attention_output_norm.weight)
    expected = h + rms(second.feed_forward(rms(h, second.feed_forward_norm.weight)),
                       second.feed_forward_output_norm.weight)
    torch.testing.assert_close(second(x, context), expected)


def test_peri_ln_normalises_each_update_not_the_stream() -> None:
    """With unit gains every update added to the stream has RMS 1, whatever the input's scale,
    and the stream keeps the input (pre-norm's identity path)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig().with_slot("block", "peri_ln:embedding_norm=false"))
    block = model.blocks[0]
    context = AttentionContext(positions=torch.arange(6), position=model.position)
    x = torch.randn(2, 6, D) * 50.0
    update = block(x, context) - x
    assert update.pow(2).mean(-1).sqrt().max().item() < 2.0 + 1e-4  # two unit-RMS updates
    assert update.pow(2).mean(-1).sqrt().min().item() > 0.1


def test_peri_ln_without_the_embedding_norm_is_sandwich_and_counts_its_norms() -> None:
    tokens = torch.randint(0, 512, (2, 8), generator=torch.Generator().manual_seed(3))
    torch.manual_seed(0)
    peri = build_model(ModelConfig().with_slot("block", "peri_ln:embedding_norm=false"))
    torch.manual_seed(0)
    sandwich = build_model(ModelConfig().with_slot("block", "sandwich"))
    with torch.no_grad():
        torch.testing.assert_close(peri(tokens), sandwich(tokens), rtol=0, atol=0)
    base = build_model(ModelConfig()).num_parameters()
    full = build_model(ModelConfig().with_slot("block", "peri_ln")).num_parameters()
    assert full - base == 2 * 2 * D + D == 320  # two output norms per layer, one embedding norm


# --- DeepNorm ---------------------------------------------------------------------------


@pytest.mark.parametrize("layers", [1, 2, 6, 18, 1000])
def test_deepnorm_constants_are_the_decoder_only_formula(layers: int) -> None:
    alpha, beta = deepnorm_constants(layers)
    assert alpha == pytest.approx(math.sqrt(math.sqrt(2 * layers)), rel=1e-12)
    assert beta == pytest.approx(1 / math.sqrt(math.sqrt(8 * layers)), rel=1e-12)
    if layers == 2:  # llama_modern: (2 * 2)^(1/4) = sqrt(2), (8 * 2)^(-1/4) = 1/2
        assert (alpha, beta) == pytest.approx((2 ** 0.5, 0.5), rel=1e-12)


def test_deepnorm_block_formula() -> None:
    model, context = _model("block", "deepnorm")
    block = model.blocks[0]
    assert (block.alpha, block.beta) == pytest.approx((2 ** 0.5, 0.5))
    x = torch.randn(2, 6, D)
    alpha = math.sqrt(2.0)  # (2N)^(1/4) at N = 2
    h = rms(alpha * x + block.attention(x, context), block.attention_norm.weight)
    expected = rms(alpha * h + block.feed_forward(h), block.feed_forward_norm.weight)
    torch.testing.assert_close(block(x, context), expected)


@pytest.mark.parametrize("layers", [2, 3])
def test_deepnorm_init_is_beta_times_post_norms(layers: int) -> None:
    """Same seed, same draws: value, output and feed-forward weights are (8N)^(-1/4) times
    post-norm's; the query, key and embedding weights are post-norm's."""
    torch.manual_seed(0)
    deep = build_model(ModelConfig(n_layers=layers).with_slot("block", "deepnorm"))
    torch.manual_seed(0)
    post = build_model(ModelConfig(n_layers=layers).with_slot("block", "post_norm"))
    beta = (8 * layers) ** -0.25
    posts = dict(post.named_parameters())
    scaled = 0
    for name, weight in deep.named_parameters():
        if any(part in name for part in (".value.", ".output.", ".feed_forward.")):
            torch.testing.assert_close(weight, beta * posts[name], rtol=0, atol=0)
            scaled += 1
        else:
            assert torch.equal(weight, posts[name]), name
    assert scaled == layers * (2 + 3)  # value, output and SwiGLU's gate, up and down
    # the scaled weights' spread is beta * 0.02 (the default init's std)
    value = torch.cat([block.attention.value.weight.flatten() for block in deep.blocks])
    assert value.std().item() == pytest.approx(beta * 0.02, rel=0.1)


# --- mixture of experts -----------------------------------------------------------------


def _moe(experts: int, top_k: int, hidden: int = 8, d: int = 16, weight: float = 0.01,
         seed: int = 0) -> MixtureOfExperts:
    torch.manual_seed(seed)
    dims = ModelDims(vocab_size=32, d_model=d, n_layers=1, n_heads=1, max_seq_len=8)
    layer = MixtureOfExperts(MoEConfig(experts=experts, top_k=top_k, hidden=hidden,
                                       balance_weight=weight), dims)
    with torch.no_grad():  # spread-out router logits, so the routing differs per token
        for param in layer.parameters():
            param.normal_(0.0, 0.5)
    return layer


def _expert_by_hand(expert, x: torch.Tensor) -> torch.Tensor:
    """SwiGLU written out on one token (D,): W_down ((W_gate x) sigmoid(W_gate x) * W_up x)."""
    gate, up = expert.gate.weight @ x, expert.up.weight @ x
    return expert.down.weight @ (gate * torch.sigmoid(gate) * up)


@pytest.mark.parametrize(("experts", "top_k"), [(4, 2), (8, 2), (4, 1), (3, 3)])
def test_moe_output_is_a_per_token_loop_over_the_chosen_experts(experts: int, top_k: int) -> None:
    layer = _moe(experts, top_k)
    x = torch.randn(2, 5, 16)
    expected = torch.zeros(2, 5, 16)
    with torch.no_grad():
        for b in range(2):
            for t in range(5):
                token = x[b, t]
                logits = layer.router.weight @ token
                probs = torch.exp(logits - logits.max())
                probs = probs / probs.sum()
                chosen = sorted(range(experts), key=lambda e: -probs[e].item())[:top_k]
                total = sum(probs[e] for e in chosen)
                for e in chosen:  # top-1: Switch's gate p_i; top-k: renormalised over the k
                    gate = probs[e] if top_k == 1 else probs[e] / total
                    expected[b, t] += gate * _expert_by_hand(layer.experts[e], token)
        # float32 rounding of two summation orders reaches ~2e-6 on some machines' kernels
        # (seen at 1.8e-6 on [8-2]); a wrong gate or expert choice is off by ~1e-2
        torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=5e-6)


def test_switch_balancing_loss_closed_form_on_hand_made_routings() -> None:
    # top-1, 2 experts: tokens go to 0, 0, 1, 0 -> f = (3/4, 1/4); P = (0.65, 0.35)
    probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    index = probs.topk(1, dim=-1).indices
    assert balance_loss(probs, index).item() == pytest.approx(2 * (0.75 * 0.65 + 0.25 * 0.35))
    # top-2, 4 experts, both tokens choose experts 0 and 1: f = (1/2, 1/2, 0, 0); P = (.55, .25, .1, .1)
    probs = torch.tensor([[0.5, 0.3, 0.1, 0.1], [0.6, 0.2, 0.1, 0.1]])
    index = probs.topk(2, dim=-1).indices
    assert balance_loss(probs, index).item() == pytest.approx(4 * (0.5 * 0.55 + 0.5 * 0.25))
    # uniform routing is the minimum, 1 (Switch: alpha at uniform), for any k
    balanced = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]])
    assert balance_loss(balanced, balanced.topk(2, dim=-1).indices).item() == pytest.approx(1.0)
    flat = torch.full((6, 3), 1 / 3)
    assert balance_loss(flat, torch.tensor([[0], [1], [2], [0], [1], [2]])).item() == pytest.approx(1.0)


def test_balancing_loss_gradient_flows_through_p_only() -> None:
    """f_i carries no gradient: d/dp_ni of E * sum_i f_i * mean_n p_ni is E * f_i / N."""
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6], [0.7, 0.2, 0.1]],
                         requires_grad=True)
    index = torch.tensor([[0], [1], [2], [0]])
    (grad,) = torch.autograd.grad(balance_loss(probs, index), probs)
    fraction = torch.tensor([2 / 4, 1 / 4, 1 / 4])
    torch.testing.assert_close(grad, (3 * fraction / 4).expand(4, 3))


def test_route_gates_are_sparse_and_sum_to_one() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 0.5, 0.2]])
    probs, gates, index = route(logits, 2)
    assert index.tolist() == [[0, 1], [1, 2]]
    torch.testing.assert_close(gates.sum(-1), torch.ones(2))
    e = math.exp
    assert gates[0].tolist() == pytest.approx([e(2) / (e(2) + e(1)), e(1) / (e(2) + e(1)), 0, 0])
    _, top1, _ = route(logits, 1)  # Switch: the gate is the probability itself
    assert top1[1, 1].item() == pytest.approx(probs[1, 1].item()) and top1[1, 1].item() < 1


def test_the_model_collects_each_layers_weighted_balancing_loss() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig().with_slot("feedforward", "moe:balance_weight=0.3"))
    routers = []
    hooks = [block.feed_forward.router.register_forward_hook(
        lambda module, args, out: routers.append(out.detach())) for block in model.blocks]
    tokens = torch.randint(0, 512, (2, 10), generator=torch.Generator().manual_seed(1))
    auxiliary = AuxiliaryLosses(model)
    assert len(auxiliary.parts) == 2
    model(tokens)
    assert auxiliary.take() is None  # not recording: nothing stored, no graph kept
    auxiliary.start()
    model(tokens)
    total = auxiliary.take()
    assert auxiliary.take() is None  # taken once
    auxiliary.stop()
    expected = 0.0
    for logits in routers[-2:]:  # the recorded forward's router outputs, one per layer
        probs = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)  # (N, E)
        top = probs.topk(2, dim=-1).indices
        counts = torch.zeros(8)
        for row in top.tolist():
            for e in row:
                counts[e] += 1
        fraction = counts / (top.shape[0] * 2)
        expected += 0.3 * 8 * float((fraction * probs.mean(0)).sum())
    assert total.item() == pytest.approx(expected, rel=1e-5)
    for hook in hooks:
        hook.remove()


def _train_moe(weight: float, batched: bool = False):
    config = ModelConfig().with_slot("feedforward", f"moe:balance_weight={weight}")
    stream = torch.randint(0, 512, (800,), generator=torch.Generator().manual_seed(2))
    settings = TrainConfig(steps=3, batch_size=2, seq_len=12, lr=3e-3, grad_clip=0.5)
    configs = [settings, settings.model_copy(update={"lr": 1e-3})]
    if batched:
        trained = train_replicas(lambda: build_model(config), stream, [0, 1], configs,
                                 torch.device("cpu"), build_optimizer=build_optimizer)
        return [result.losses for _, result in trained]
    runs = []
    for seed, cfg in zip((0, 1), configs, strict=True):
        torch.manual_seed(seed)
        runs.append(train(build_model(config), stream, cfg, seed, torch.device("cpu"),
                          build_optimizer(cfg.optimizer)).losses)
    return runs


def test_training_optimises_the_balancing_loss_and_records_the_cross_entropy() -> None:
    """The first recorded loss is the initial cross-entropy whatever the weight (the term is
    not recorded); later ones move with the weight (the term is optimised); batched replicas
    add it too (they match the sequential runs at a weight large enough to matter)."""
    plain, heavy = _train_moe(0.0), _train_moe(2.0)
    for a, b in zip(plain, heavy, strict=True):
        assert a[0] == b[0]
        assert abs(a[2] - b[2]) > 1e-4
    torch.testing.assert_close(_train_moe(2.0, batched=True), heavy, rtol=1e-5, atol=0.0)


def test_moe_parameters_total_and_active() -> None:
    total = build_model(ModelConfig().with_slot("feedforward", "moe")).num_parameters()
    per_expert = 3 * D * 96
    assert total == 139_584 + 2 * (8 * per_expert + D * 8 - 3 * D * 192) == 361_792
    active = total - 2 * (8 - 2) * per_expert  # the router and 2 of 8 experts per token
    assert active == 140_608 and abs(active - 139_584) / 139_584 < 0.01


def test_the_size_dial_scales_the_expert_width_and_keeps_the_counts() -> None:
    config = ModelConfig().with_slot("feedforward", "moe:experts=4")
    scaled = resize_model(config, RUNGS[1])  # d_model 64 -> 96
    assert scaled.feedforward.config == {"experts": 4, "top_k": 2, "hidden": 144}


# --- ScaleNorm --------------------------------------------------------------------------


def test_scalenorm_is_x_times_g_over_its_norm() -> None:
    norm = ScaleNorm(ScaleNormConfig(), 8).double()
    assert norm.scale.shape == (1,) and norm.scale.item() == pytest.approx(math.sqrt(8))
    with torch.no_grad():
        norm.scale.fill_(3.7)
    x = torch.randn(3, 4, 8, dtype=torch.float64) * 5.0
    expected = x * 3.7 / torch.sqrt((x * x).sum(-1, keepdim=True))
    torch.testing.assert_close(norm(x), expected, rtol=1e-12, atol=1e-12)
    row = torch.tensor([3.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)  # ||row|| = 5
    assert norm(row).tolist()[:2] == pytest.approx([3.7 * 3 / 5, 3.7 * 4 / 5])
    assert torch.equal(norm(torch.zeros(8, dtype=torch.float64)), torch.zeros(8, dtype=torch.float64))


def test_scalenorm_at_init_is_unit_gain_rmsnorm_and_g_has_its_closed_form_gradient() -> None:
    norm = ScaleNorm(ScaleNormConfig(), D).double()
    x = torch.randn(5, D, dtype=torch.float64)
    torch.testing.assert_close(norm(x), x / torch.sqrt((x * x).mean(-1, keepdim=True)),
                               rtol=1e-9, atol=1e-9)  # sqrt(d) / ||x|| = 1 / rms(x)
    upstream = torch.randn(5, D, dtype=torch.float64)
    (norm(x) * upstream).sum().backward()
    expected = (upstream * x / torch.sqrt((x * x).sum(-1, keepdim=True))).sum()
    assert norm.scale.grad.item() == pytest.approx(expected.item(), rel=1e-12)


def test_scalenorm_fills_every_norm_of_the_model() -> None:
    model = build_model(ModelConfig().with_slot("norm", "scalenorm"))
    norms = [m for m in model.modules() if isinstance(m, ScaleNorm)]
    assert len(norms) == 2 * 2 + 1  # two per pre-norm block, and the final norm
    assert model.num_parameters() == 139_584 - len(norms) * (D - 1) == 139_269
    tokens = torch.randint(0, 512, (1, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        x = model.embedding(tokens)
        assert torch.isfinite(model(tokens)).all()
        torch.testing.assert_close(model.blocks[0].attention_norm(x),
                                   x * math.sqrt(D) / x.norm(dim=-1, keepdim=True))
