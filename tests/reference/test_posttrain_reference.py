"""Post-training math against hand-computed cases and independently written formulas.

- DPO: a hand-computed pair, and TRL's ``sigmoid`` loss (``DPOTrainer.dpo_loss``) written
  out here in its own grouping (log-ratio of policy minus log-ratio of reference, label
  smoothing 0). TRL itself is not a dependency: it pulls transformers/accelerate/datasets.
- GRPO: group advantages and the clipped objective with its KL term on hand-computed groups.
- NEFTune: the noise scale alpha / sqrt(L d) and its bound.
- SFT: prompt tokens and padding carry no loss.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from llmevo.components.post_training.objectives import (
    dpo_loss,
    group_advantages,
    grpo_loss,
    kl_estimate,
    masked_mean_nll,
    neftune_noise,
    neftune_scale,
    response_target_mask,
    reward_bearing,
)
from llmevo.components.post_training.stage import batch_sequences
from llmevo.data.codec import ByteCodec
from llmevo.data.suites import build_sequence


def test_dpo_loss_hand_computed_pair():
    loss, chosen, rejected = dpo_loss(
        torch.tensor([-10.0]), torch.tensor([-12.0]), torch.tensor([-11.0]), torch.tensor([-11.0]),
        beta=0.1)
    # logits = 0.1 * ((-10 + 11) - (-12 + 11)) = 0.2; loss = log(1 + e^-0.2)
    assert loss.item() == pytest.approx(math.log(1.0 + math.exp(-0.2)), abs=1e-7)
    assert loss.item() == pytest.approx(0.5981388693, abs=1e-7)
    assert chosen.item() == pytest.approx(0.1) and rejected.item() == pytest.approx(-0.1)


def _trl_sigmoid_loss(pc, pr, rc, rr, beta, label_smoothing=0.0):
    """TRL DPOTrainer.dpo_loss, loss_type='sigmoid' (its formula, written out independently)."""
    pi_logratios = pc - pr
    ref_logratios = rc - rr
    logits = pi_logratios - ref_logratios
    return (-F.logsigmoid(beta * logits) * (1 - label_smoothing)
            - F.logsigmoid(-beta * logits) * label_smoothing)


@pytest.mark.parametrize("beta", [0.05, 0.1, 0.5, 2.0])
def test_dpo_loss_matches_trl_sigmoid_formula(beta):
    generator = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (torch.randn(64, generator=generator, dtype=torch.float64) * 20 for _ in range(4))
    loss, _, _ = dpo_loss(pc, pr, rc, rr, beta)
    torch.testing.assert_close(loss, _trl_sigmoid_loss(pc, pr, rc, rr, beta))


def test_dpo_gradient_raises_chosen_and_lowers_rejected():
    pc = torch.tensor([-5.0], requires_grad=True)
    pr = torch.tensor([-5.0], requires_grad=True)
    loss, _, _ = dpo_loss(pc, pr, torch.tensor([-5.0]), torch.tensor([-5.0]), beta=0.5)
    loss.sum().backward()
    # d/dpc of -log sigmoid(beta (pc - pr)) at 0 = -beta * sigmoid(0) = -0.25
    assert pc.grad.item() == pytest.approx(-0.25) and pr.grad.item() == pytest.approx(0.25)


def test_dpo_refuses_non_positive_beta():
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.zeros(1), beta=0.0)


def test_group_advantages_hand_computed():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    advantages = group_advantages(rewards, eps=0.0 + 1e-12)
    # group 1: mean 0.5, sample std sqrt(1/3); group 2: mean 0.25, sample std 0.5
    expected = torch.tensor([
        [0.5 / math.sqrt(1 / 3), -0.5 / math.sqrt(1 / 3), -0.5 / math.sqrt(1 / 3), 0.5 / math.sqrt(1 / 3)],
        [1.5, -0.5, -0.5, -0.5],
        [0.0, 0.0, 0.0, 0.0],
    ])
    torch.testing.assert_close(advantages, expected)
    assert reward_bearing(rewards).tolist() == [True, True, False]


def test_group_of_one_is_refused():
    with pytest.raises(ValueError, match="at least 2"):
        group_advantages(torch.tensor([[1.0]]))


def test_clipped_objective_hand_computed():
    old = torch.log(torch.tensor([[0.2, 0.4]]))
    policy = torch.log(torch.tensor([[0.3, 0.2]])).requires_grad_(True)  # ratios 1.5 and 0.5
    mask = torch.tensor([[True, True]])
    # A = +1: min(1.5, 1.2) = 1.2, min(0.5, 0.8) = 0.5 -> objective 0.85
    loss, _ = grpo_loss(policy, old, policy.detach(), torch.tensor([1.0]), mask, 0.2, 0.0)
    assert loss.item() == pytest.approx(-0.85, abs=1e-6)
    loss.backward()
    # clipped token (ratio 1.5 > 1.2 with A > 0) has no gradient; the other d/dlogp = -0.5 / 2
    assert policy.grad[0, 0].item() == pytest.approx(0.0)
    assert policy.grad[0, 1].item() == pytest.approx(-0.25, abs=1e-6)
    # A = -1: min(-1.5, -1.2) = -1.5, min(-0.5, -0.8) = -0.8 -> objective -1.15
    loss, _ = grpo_loss(policy.detach(), old, policy.detach(), torch.tensor([-1.0]), mask, 0.2, 0.0)
    assert loss.item() == pytest.approx(1.15, abs=1e-6)


def test_kl_term_and_token_averaging_hand_computed():
    policy = torch.log(torch.tensor([[0.5, 0.5, 0.9]]))
    reference = torch.log(torch.tensor([[0.25, 0.5, 0.1]]))
    kl = kl_estimate(policy, reference)
    # pi_ref/pi - log(pi_ref/pi) - 1 = 0.5 + ln 2 - 1 for the first token, 0 for the second
    assert kl[0, 0].item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert kl[0, 1].item() == pytest.approx(0.0, abs=1e-7)
    mask = torch.tensor([[True, True, False]])  # the third token is padding
    loss, mean_kl = grpo_loss(policy, policy, reference, torch.tensor([2.0]), mask, 0.2, 0.1)
    expected_kl = (0.5 + math.log(2) - 1) / 2
    assert mean_kl.item() == pytest.approx(expected_kl, abs=1e-6)
    assert loss.item() == pytest.approx(-(2.0 - 0.1 * expected_kl), abs=1e-6)


def test_neftune_scale_and_bound():
    assert neftune_scale(5.0, 10, 64).item() == pytest.approx(5.0 / math.sqrt(640))
    embeddings = torch.zeros(2, 400, 64)
    lengths = torch.tensor([400, 100])
    noise = neftune_noise(embeddings, lengths, 10.0, torch.Generator().manual_seed(0))
    for row, length in enumerate(lengths.tolist()):
        scale = 10.0 / math.sqrt(length * 64)
        assert noise[row].abs().max().item() <= scale
        # Uniform(-s, s) has standard deviation s / sqrt(3)
        assert noise[row].std().item() == pytest.approx(scale / math.sqrt(3), rel=0.02)


def test_sft_mask_scores_response_tokens_only():
    codec = ByteCodec()
    sequence = build_sequence(codec, "ab", "cd", max_len=16)  # <bos> a b c d <eos>
    other = build_sequence(codec, "x", "y", max_len=16)  # <bos> x y <eos>
    batch = batch_sequences([sequence, other], codec.pad_id, torch.device("cpu"))
    # targets: a b c d <eos> | x y <eos> pad pad; responses: c d <eos> | y <eos>
    assert batch.mask.tolist() == [[False, False, True, True, True],
                                   [False, True, True, False, False]]
    mask = response_target_mask(torch.tensor([6]), torch.tensor([3]), 5)
    assert mask.tolist() == [[False, False, True, True, True]]
    logits = torch.randn(2, 5, codec.vocab_size, generator=torch.Generator().manual_seed(1))
    loss = masked_mean_nll(logits, batch.targets, batch.mask)
    changed = logits.clone()
    changed[~batch.mask] = torch.randn(int((~batch.mask).sum()), codec.vocab_size)
    assert masked_mean_nll(changed, batch.targets, batch.mask).item() == pytest.approx(loss.item())
    nll = F.cross_entropy(logits[batch.mask], batch.targets[batch.mask])
    assert loss.item() == pytest.approx(nll.item(), abs=1e-6)
