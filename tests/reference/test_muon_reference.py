"""Muon (Jordan et al. 2024; Liu et al., arXiv 2502.16982) against exact and library references."""

from __future__ import annotations

import pytest
import torch

from llmevo.catalog import build_model
from llmevo.components.optim.base import parameters_by_role
from llmevo.components.optim.muon import (
    Muon,
    MuonAdamW,
    MuonConfig,
    newton_schulz,
    orthogonality_error,
)
from llmevo.model.config import ModelConfig


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matrices: intra-op threads only add synchronisation (very slow on a busy CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("shape", [(64, 64), (64, 192), (192, 64), (16, 48)])
def test_newton_schulz_is_close_to_the_polar_factor(shape: tuple[int, int]) -> None:
    G = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    ortho = newton_schulz(G, steps=5)
    assert ortho.shape == G.shape and ortho.dtype == G.dtype
    singular = torch.linalg.svdvals(ortho.double())
    assert singular.min() > 0.6 and singular.max() < 1.25, singular
    U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
    polar = U @ Vh  # the exact orthogonal polar factor U V^T
    cosine = (ortho.double() * polar).sum() / (ortho.double().norm() * polar.norm())
    assert cosine > 0.97
    relative = (ortho.double() - polar).norm() / polar.norm()
    assert relative < 0.35  # not exact: 5 quintic steps stop in a band around 1


def test_newton_schulz_converges_towards_orthogonal_with_more_steps() -> None:
    G = torch.randn(32, 32, generator=torch.Generator().manual_seed(0))
    errors = [float(orthogonality_error(newton_schulz(G, steps))) for steps in (1, 3, 5)]
    assert errors[0] > errors[1] > errors[2] > 0.0


def test_orthogonality_error_definition() -> None:
    Q, _ = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64))
    assert float(orthogonality_error(Q[:, :5])) < 1e-6  # tall, orthonormal columns
    assert float(orthogonality_error(2.0 * Q[:5])) == pytest.approx(3.0, rel=1e-6)  # |4-1|


def test_muon_step_matches_torch_muon() -> None:
    """One step on one matrix against torch.optim.Muon (bfloat16 iteration, hence the tolerance)."""
    generator = torch.Generator().manual_seed(1)
    w0, g = torch.randn(48, 16, generator=generator), torch.randn(48, 16, generator=generator)
    ours, theirs = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    mine = MuonAdamW([ours], [], lr=0.01, weight_decay=0.1)
    ref = torch.optim.Muon([theirs], lr=0.01, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    for _ in range(2):
        ours.grad, theirs.grad = g.clone(), g.clone()
        mine.step()
        ref.step()
    ours_delta, theirs_delta = ours.detach() - w0, theirs.detach() - w0
    relative = (ours_delta - theirs_delta).norm() / theirs_delta.norm()
    assert relative < 0.03, relative


def test_muon_update_rms_matches_adamw_scale() -> None:
    """Liu et al. sec. 2.2: 0.2 * sqrt(max(A, B)) * O has RMS ~ 0.2 whatever the shape."""
    for rows, cols in ((48, 16), (16, 64), (32, 32)):
        w0 = torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows))
        param = torch.nn.Parameter(w0.clone())
        optimizer = MuonAdamW([param], [], lr=0.01, weight_decay=0.0)
        param.grad = torch.randn(rows, cols, generator=torch.Generator().manual_seed(cols))
        optimizer.step()
        rms = (param.detach() - w0).pow(2).mean().sqrt().item()
        assert rms == pytest.approx(0.01 * 0.2, rel=0.15), (rows, cols, rms)


def test_muon_only_touches_hidden_matrices_and_adamw_the_rest() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=1))
    component = Muon(MuonConfig())
    optimizer = component.build(model, lr=1e-3, weight_decay=0.0)
    roles = parameters_by_role(model)
    muon_group = next(g for g in optimizer.param_groups if g["use_muon"])
    adamw_group = next(g for g in optimizer.param_groups if not g["use_muon"])
    assert {id(p) for p in muon_group["params"]} == {id(p) for p in roles["hidden_matrix"]}
    assert id(model.embedding.weight) in {id(p) for p in adamw_group["params"]}
    stats = component.statistics()
    assert stats["muon_parameters"] + stats["adamw_parameters"] == model.num_parameters()
    assert stats["muon_tensors"] == 7  # q, k, v, o, gate, up, down
    assert stats["adamw_parameters"] == 512 * 64 + 3 * 64  # tied embedding + 3 RMSNorm gains

    assert component.orthogonality_error() == 0.0  # before any step
    model(torch.randint(0, 512, (2, 9))).logsumexp(-1).mean().backward()
    optimizer.step()
    error = component.orthogonality_error()
    # a first-step gradient is nearly low-rank: its small singular values stay far below 1
    assert 0.01 < error < 1.0
    # AdamW state only on AdamW parameters, momentum buffers only on Muon parameters
    assert "exp_avg" in optimizer.state[model.embedding.weight]
    assert set(optimizer.state[muon_group["params"][0]]) == {"momentum_buffer"}


def test_muon_adamw_groups_are_bit_identical_to_torch_adamw() -> None:
    """Embeddings and gains: the AdamW half of MuonAdamW is torch.optim.AdamW, exactly
    (hidden matrices left out of both, so both models see the same gradients)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=1, max_seq_len=16))
    reference = build_model(ModelConfig(n_layers=1, max_seq_len=16))
    reference.load_state_dict(model.state_dict())
    roles, reference_roles = parameters_by_role(model), parameters_by_role(reference)
    ours = MuonAdamW([], roles["embedding"] + roles["gain_or_bias"],
                     lr=2e-3, weight_decay=0.1, betas=(0.9, 0.95))
    theirs = torch.optim.AdamW(reference_roles["embedding"] + reference_roles["gain_or_bias"],
                               lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    tokens = torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(3))
    for _ in range(10):
        for net, opt in ((model, ours), (reference, theirs)):
            opt.zero_grad()
            net(tokens).logsumexp(-1).mean().backward()
            opt.step()
    for role in ("embedding", "gain_or_bias"):
        for a, b in zip(roles[role], reference_roles[role], strict=True):
            assert torch.equal(a, b), role


def test_muon_adamw_lr_ratio_gives_its_adamw_groups_torch_adamw_at_that_lr() -> None:
    """``adamw_lr_ratio`` (Muon's tuning axis ``adamw_lr``): the AdamW half of MuonAdamW is
    torch.optim.AdamW at lr x ratio (weight decay lr x ratio x wd, as a torch group's), exactly;
    the Muon group keeps the lr."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=1, max_seq_len=16))
    reference = build_model(ModelConfig(n_layers=1, max_seq_len=16))
    reference.load_state_dict(model.state_dict())
    roles, reference_roles = parameters_by_role(model), parameters_by_role(reference)
    ours = MuonAdamW(roles["hidden_matrix"], roles["embedding"] + roles["gain_or_bias"],
                     lr=2e-3, weight_decay=0.1, betas=(0.9, 0.95), adamw_lr_ratio=3.0)
    assert [g["lr"] for g in ours.param_groups] == [2e-3, 2e-3 * 3.0]
    for p in roles["hidden_matrix"]:
        p.requires_grad_(False)  # the AdamW half alone, as in the bit-identity test above
    theirs = torch.optim.AdamW(reference_roles["embedding"] + reference_roles["gain_or_bias"],
                               lr=2e-3 * 3.0, betas=(0.9, 0.95), weight_decay=0.1)
    for p in reference_roles["hidden_matrix"]:
        p.requires_grad_(False)
    tokens = torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(3))
    for _ in range(10):
        for net, opt in ((model, ours), (reference, theirs)):
            opt.zero_grad()
            net(tokens).logsumexp(-1).mean().backward()
            opt.step()
    for role in ("embedding", "gain_or_bias"):
        for a, b in zip(roles[role], reference_roles[role], strict=True):
            assert torch.equal(a, b), role
