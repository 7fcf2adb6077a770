"""Adam-mini (2406.16793), AdEMAMix (2409.03137), NorMuon (2510.05491), SOAP (2409.11321) and
schedule-free AdamW (2405.15682) against their algorithms written out by hand in numpy (float64,
none of the implementations' helpers), against the optimizers they reduce to (AdamW, Muon) in
their special cases, schedule-free AdamW against the authors' ``schedulefree`` package, the
trainer's evaluation-point and run-length hooks, and each batched twin against its component's
own optimizer, replica by replica."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from llmevo.catalog import build_model, build_optimizer
from llmevo.components.optim.adam_mini import AdamMiniOptimizer, adam_mini_blocks
from llmevo.components.optim.ademamix import AdEMAMixOptimizer, alpha_at, beta3_at
from llmevo.components.optim.base import parameter_roles
from llmevo.components.optim.muon import MuonAdamW
from llmevo.components.optim.normuon import NorMuonAdamW
from llmevo.components.optim.optimizer import LambdaSchedule
from llmevo.components.optim.schedule_free_adamw import ScheduleFreeAdamWOptimizer
from llmevo.components.optim.soap import SOAPOptimizer
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.train.trainer import TrainConfig, train


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matrices: intra-op threads only add synchronisation (very slow on a busy CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _gradients(shape: tuple[int, ...], steps: int, seed: int = 0, rows: bool = True) -> list[np.ndarray]:
    """Random float32-representable gradients; with ``rows``, each row on its own scale (so a
    per-row or per-head normalisation differs from a per-tensor one)."""
    rng = np.random.default_rng(seed)
    scale = np.geomspace(0.1, 10.0, shape[0]).reshape(-1, *([1] * (len(shape) - 1))) if rows else 1.0
    return [(rng.standard_normal(shape) * scale).astype(np.float32).astype(np.float64)
            for _ in range(steps)]


def _start(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np.float32).astype(np.float64)


def _feed(optimizer, params: list[torch.Tensor], grads: list[list[np.ndarray]]) -> None:
    """One ``step`` per entry of ``grads`` (a gradient per parameter)."""
    for step in grads:
        for p, g in zip(params, step, strict=True):
            p.grad = torch.tensor(g, dtype=torch.float32)
        optimizer.step()


def _close(actual: torch.Tensor, expected: np.ndarray, atol: float, msg: str = "") -> None:
    torch.testing.assert_close(actual.detach().double(), torch.from_numpy(expected), rtol=0.0,
                               atol=atol, msg=msg)


# --- Adam-mini ------------------------------------------------------------------------------

def _adam_mini_by_hand(w, grads, blocks, lr, beta1, beta2, eps, wd):
    """Adam-mini (Algorithm 1): one v per block of the tensor's rows, m per entry."""
    m, v = np.zeros_like(w), np.zeros(blocks)
    for t, g in enumerate(grads, 1):
        w = w * (1 - lr * wd)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * (g.reshape(blocks, -1) ** 2).mean(axis=1)
        m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
        w = w - lr * (m_hat.reshape(blocks, -1) / (np.sqrt(v_hat)[:, None] + eps)).reshape(w.shape)
    return w


@pytest.mark.parametrize("blocks", [4, 2, 1], ids=["per-row", "per-head", "per-tensor"])
def test_adam_mini_matches_the_update_by_hand(blocks: int) -> None:
    start, grads = _start((4, 6)), _gradients((4, 6), 3)
    param = torch.nn.Parameter(torch.tensor(start, dtype=torch.float32))
    optimizer = AdamMiniOptimizer([param], [blocks], lr=1e-2, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.1)
    _feed(optimizer, [param], [[g] for g in grads])
    expected = _adam_mini_by_hand(start, grads, blocks, 1e-2, 0.9, 0.95, 1e-8, 0.1)
    _close(param, expected, atol=1e-6)
    assert optimizer.state[param]["exp_avg_sq"].shape == (blocks, 1)  # one v per block


def test_adam_mini_with_blocks_of_one_entry_is_adamw() -> None:
    torch.manual_seed(0)
    shapes = [(5, 3), (7,), (2, 3, 4)]
    ours = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    mini = AdamMiniOptimizer(ours, [p.numel() for p in ours], lr=3e-3, betas=(0.9, 0.95),
                             weight_decay=0.1)
    adamw = torch.optim.AdamW(theirs, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    grads = [[np.random.default_rng(s * 10 + i).standard_normal(shape) for i, shape in enumerate(shapes)]
             for s in range(10)]
    _feed(mini, ours, grads)
    _feed(adamw, theirs, grads)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=0.0, atol=1e-6)


def test_adam_mini_partition_follows_the_paper() -> None:
    """Query/key per head (grouped keys: per key head), other hidden matrices per output row,
    embedding and untied output per entry, norm gains one block each."""
    model = build_model(ModelConfig(n_layers=1, tie_embeddings=False,
                                    attention=ComponentChoice(name="mha", config={"kv_heads": 2})))
    blocks = adam_mini_blocks(model)
    assert blocks == {
        "embedding.weight": 512 * 64, "head.weight": 512 * 64,
        "blocks.0.attention.query.weight": 4, "blocks.0.attention.key.weight": 2,
        "blocks.0.attention.value.weight": 32, "blocks.0.attention.output.weight": 64,
        "blocks.0.feed_forward.gate.weight": 192, "blocks.0.feed_forward.up.weight": 192,
        "blocks.0.feed_forward.down.weight": 64,
        "blocks.0.attention_norm.weight": 1, "blocks.0.feed_forward_norm.weight": 1,
        "final_norm.weight": 1,
    }
    tied = adam_mini_blocks(build_model(ModelConfig(n_layers=1)))
    assert "head.weight" not in tied and tied["embedding.weight"] == 512 * 64


# --- AdEMAMix -------------------------------------------------------------------------------

def _ademamix_by_hand(w, grads, lr, beta1, beta2, beta3, alpha, span, eps, wd):
    """Algorithm 1 with the schedulers f_alpha and f_beta3 over ``span`` steps."""
    m1, m2, nu = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, 1):
        a = min(t * alpha / span, alpha)
        s = t / span
        b3 = min(math.exp(math.log(beta1) * math.log(beta3)
                          / ((1 - s) * math.log(beta3) + s * math.log(beta1))), beta3)
        m1 = beta1 * m1 + (1 - beta1) * g
        m2 = b3 * m2 + (1 - b3) * g
        nu = beta2 * nu + (1 - beta2) * g**2
        m1_hat, nu_hat = m1 / (1 - beta1**t), nu / (1 - beta2**t)
        w = w - lr * ((m1_hat + a * m2) / (np.sqrt(nu_hat) + eps) + wd * w)
    return w


def test_ademamix_matches_algorithm_1_by_hand() -> None:
    """Five steps with a four-step scheduler span: both schedulers ramping, then at their ends."""
    start, grads = _start((3, 2)), _gradients((3, 2), 5, rows=False)
    param = torch.nn.Parameter(torch.tensor(start, dtype=torch.float32))
    optimizer = AdEMAMixOptimizer([param], lr=1e-2, betas=(0.9, 0.99, 0.999), alpha=4.0,
                                  warmup_fraction=0.5, weight_decay=0.1)
    optimizer.set_run_steps(8)  # span ceil(0.5 * 8) = 4
    assert optimizer.param_groups[0]["span"] == 4
    _feed(optimizer, [param], [[g] for g in grads])
    _close(param, _ademamix_by_hand(start, grads, 1e-2, 0.9, 0.99, 0.999, 4.0, 4, 1e-8, 0.1), atol=1e-6)


def test_ademamix_schedulers_run_from_their_start_to_their_values() -> None:
    assert beta3_at(0, 0.9999, 0.9, 100) == pytest.approx(0.9)
    assert beta3_at(100, 0.9999, 0.9, 100) == 0.9999 and beta3_at(500, 0.9999, 0.9, 100) == 0.9999
    half_life = lambda beta: math.log(0.5) / math.log(beta)  # noqa: E731
    middle = (half_life(0.9) + half_life(0.9999)) / 2  # linear in the half-life (in 1 / ln beta)
    assert half_life(beta3_at(50, 0.9999, 0.9, 100)) == pytest.approx(middle)
    assert [alpha_at(t, 5.0, 10) for t in (1, 5, 10, 20)] == pytest.approx([0.5, 2.5, 5.0, 5.0])
    assert beta3_at(3, 0.9999, 0.9, 0) == 0.9999 and alpha_at(3, 5.0, 0) == 5.0  # no span: constant


def test_ademamix_with_alpha_zero_is_torch_adamw_bit_for_bit() -> None:
    torch.manual_seed(0)
    shapes = [(5, 3), (7,)]
    ours = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    ademamix = AdEMAMixOptimizer(ours, lr=3e-3, betas=(0.9, 0.95, 0.999), alpha=0.0, weight_decay=0.1)
    ademamix.set_run_steps(10)
    adamw = torch.optim.AdamW(theirs, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    grads = [[np.random.default_rng(s * 10 + i).standard_normal(shape) for i, shape in enumerate(shapes)]
             for s in range(10)]
    _feed(ademamix, ours, grads)
    _feed(adamw, theirs, grads)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)


def _captured(name: str, config: dict | None = None):
    """A component whose ``build`` records the optimizer it builds (the trainer builds its own)."""
    component = build_optimizer(ComponentChoice(name=name, config=config or {}))
    built = []
    build = component.build

    def recording_build(model, lr, weight_decay):
        built.append(build(model, lr=lr, weight_decay=weight_decay))
        return built[-1]

    component.build = recording_build
    return component, built


TINY = ModelConfig(n_layers=1, max_seq_len=16)
STREAM = torch.arange(3000) % 512


def test_the_trainer_tells_ademamix_the_run_length() -> None:
    component, built = _captured("ademamix", {"warmup_fraction": 0.5})
    config = TrainConfig(steps=6, batch_size=2, seq_len=8, lr=1e-3,
                         optimizer=ComponentChoice(name="ademamix", config={"warmup_fraction": 0.5}))
    torch.manual_seed(0)
    train(build_model(TINY), STREAM, config, seed=0, device=torch.device("cpu"), optimizer=component)
    assert built[0].param_groups[0]["span"] == 3


# --- NorMuon --------------------------------------------------------------------------------

def _newton_schulz_by_hand(g: np.ndarray, steps: int = 5) -> np.ndarray:
    """Muon's quintic iteration, X <- a X + (b A + c A^2) X, A = X X^T, on the wide orientation."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.T if g.shape[0] > g.shape[1] else g
    x = x / (np.linalg.norm(x) + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if g.shape[0] > g.shape[1] else x


def _normuon_by_hand(w, grads, lr, mu, beta2, eps, wd, rms_scale=0.2):
    """Algorithm 1: Nesterov momentum, O = NS(M), v per row, O' = O / (sqrt(v) + eps), RMS 0.2 lr."""
    buffer, v = np.zeros_like(w), np.zeros(w.shape[0])
    for g in grads:
        buffer = mu * buffer + (1 - mu) * g
        momentum = g + mu * (buffer - g)
        o = _newton_schulz_by_hand(momentum)
        v = beta2 * v + (1 - beta2) * (o**2).mean(axis=1)
        normalized = o / (np.sqrt(v)[:, None] + eps)
        scale = rms_scale * math.sqrt(w.size) / np.linalg.norm(normalized)
        w = w * (1 - lr * wd) - lr * scale * normalized
    return w


@pytest.mark.parametrize("shape", [(6, 4), (3, 5)], ids=["tall", "wide"])
def test_normuon_matches_algorithm_1_by_hand(shape: tuple[int, int]) -> None:
    start, grads = _start(shape), _gradients(shape, 3)
    param = torch.nn.Parameter(torch.tensor(start, dtype=torch.float32))
    optimizer = NorMuonAdamW([param], [], lr=1e-2, weight_decay=0.1, momentum=0.9, neuron_beta2=0.9)
    _feed(optimizer, [param], [[g] for g in grads])
    _close(param, _normuon_by_hand(start, grads, 1e-2, 0.9, 0.9, 1e-8, 0.1), atol=2e-6)
    assert 0.0 < optimizer.orthogonality_error() < 0.5  # measured on O, before the normalisation


def test_normuon_on_an_orthogonal_momentum_is_muon_at_rms_0_2() -> None:
    """An orthogonal gradient has rows of equal norm after Newton-Schulz, so the per-row
    normalisation (beta2 0: this step's rows alone) only rescales: the step is Muon's, set to an
    RMS of exactly 0.2 lr (Muon's own is 0.2 lr times Newton-Schulz's singular value)."""
    rotation, _ = torch.linalg.qr(torch.randn(8, 8, generator=torch.Generator().manual_seed(0)))
    start = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
    ours, muons = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    normuon = NorMuonAdamW([ours], [], lr=1e-2, weight_decay=0.0, neuron_beta2=0.0)
    muon = MuonAdamW([muons], [], lr=1e-2, weight_decay=0.0)
    for p, opt in ((ours, normuon), (muons, muon)):
        p.grad = 0.3 * rotation
        opt.step()
    step, muon_step = ours.detach() - start, muons.detach() - start
    assert step.square().mean().sqrt().item() == pytest.approx(0.2 * 1e-2, rel=1e-5)
    muon_rms = muon_step.square().mean().sqrt()
    torch.testing.assert_close(step, muon_step * (0.2 * 1e-2 / muon_rms), rtol=0.0, atol=1e-7)


# --- SOAP -----------------------------------------------------------------------------------

def _soap_by_hand(w, grads, lr, beta1, beta2, shampoo_beta, eps, wd, frequency):
    """Algorithm 3 (Adam in the eigenbasis of L and R) with Algorithm 4's refresh (sort by
    diag(Q^T P Q), permute V, one power iteration and a QR); the first gradient only starts L, R
    and their bases (numpy's eigh, eigenvalues descending)."""
    first = grads[0]
    left, right = (1 - shampoo_beta) * first @ first.T, (1 - shampoo_beta) * first.T @ first
    q_left, q_right = np.linalg.eigh(left)[1][:, ::-1], np.linalg.eigh(right)[1][:, ::-1]
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads[1:], 1):
        w = w * (1 - lr * wd)
        m = beta1 * m + (1 - beta1) * g
        g_rot, m_rot = q_left.T @ g @ q_right, q_left.T @ m @ q_right
        v = beta2 * v + (1 - beta2) * g_rot**2
        n_rot = (m_rot / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + eps)
        w = w - lr * q_left @ n_rot @ q_right.T
        left = shampoo_beta * left + (1 - shampoo_beta) * g @ g.T
        right = shampoo_beta * right + (1 - shampoo_beta) * g.T @ g
        if t % frequency == 0:
            order = np.argsort(-np.diag(q_left.T @ left @ q_left), kind="stable")
            v = v[order, :]
            q_left = np.linalg.qr(left @ q_left[:, order])[0]
            order = np.argsort(-np.diag(q_right.T @ right @ q_right), kind="stable")
            v = v[:, order]
            q_right = np.linalg.qr(right @ q_right[:, order])[0]
    return w


def test_soap_matches_algorithms_3_and_4_by_hand() -> None:
    """Seven gradients on a 4 x 3 matrix: the start, six updates, refreshes after the 2nd, 4th
    and 6th (the 1st update sees L of rank 3: its null direction is unique up to sign)."""
    start, grads = _start((4, 3)), _gradients((4, 3), 7, rows=False)
    param = torch.nn.Parameter(torch.tensor(start, dtype=torch.float32))
    optimizer = SOAPOptimizer([param], lr=1e-2, betas=(0.9, 0.95), shampoo_beta=0.8,
                              weight_decay=0.1, precondition_frequency=2)
    _feed(optimizer, [param], [[grads[0]]])
    _close(param, start, atol=0.0, msg="the first step moves nothing")
    _feed(optimizer, [param], [[g] for g in grads[1:]])
    _close(param, _soap_by_hand(start, grads, 1e-2, 0.9, 0.95, 0.8, 1e-8, 0.1, 2), atol=1e-5)
    state = optimizer.state[param]
    for key in ("q_left", "q_right"):  # the refreshed bases stay orthonormal
        basis = state[key]
        torch.testing.assert_close(basis.mT @ basis, torch.eye(len(basis)), rtol=0.0, atol=1e-5)


def test_soap_without_preconditioned_sides_is_adamw_one_step_late() -> None:
    torch.manual_seed(0)
    shapes = [(5, 3), (7,)]
    ours = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    soap = SOAPOptimizer(ours, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1, max_precond_dim=0)
    adamw = torch.optim.AdamW(theirs, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    grads = [[np.random.default_rng(s * 10 + i).standard_normal(shape) for i, shape in enumerate(shapes)]
             for s in range(10)]
    _feed(soap, ours, grads)
    _feed(adamw, theirs, grads[1:])
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=0.0, atol=1e-6)


# --- schedule-free AdamW --------------------------------------------------------------------

def _schedule_free_by_hand(w, grads, lrs, beta1, beta2, eps, wd, r, power):
    """Algorithm 1 with x, y and z kept explicitly; returns y after each step and the final x."""
    x, z, v = w.copy(), w.copy(), np.zeros_like(w)
    lr_max, weight_sum, ys = -1.0, 0.0, []
    for k, (g, lr) in enumerate(zip(grads, lrs, strict=True), 1):
        y = (1 - beta1) * z + beta1 * x  # where g is taken
        v = beta2 * v + (1 - beta2) * g**2
        u = g / (np.sqrt(v / (1 - beta2**k)) + eps) + wd * y
        z = z - lr * u
        lr_max = max(lr_max, lr)
        weight = k**r * lr_max**power
        weight_sum += weight
        c = weight / weight_sum
        x = (1 - c) * x + c * z
        ys.append((1 - beta1) * z + beta1 * x)  # the next gradient's point: what p holds
    return ys, x


@pytest.mark.parametrize(("r", "power"), [(0.0, 2.0), (1.0, 1.0)], ids=["default", "polynomial"])
def test_schedule_free_matches_algorithm_1_by_hand(r: float, power: float) -> None:
    start, grads = _start((3, 4)), _gradients((3, 4), 4, rows=False)
    lrs = [2e-3, 4e-3, 6e-3, 6e-3]  # a warmup: the averaging weights follow lr_max
    param = torch.nn.Parameter(torch.tensor(start, dtype=torch.float32))
    optimizer = ScheduleFreeAdamWOptimizer([param], lr=lrs[0], betas=(0.9, 0.95), weight_decay=0.1,
                                           r=r, weight_lr_power=power)
    ys, x = _schedule_free_by_hand(start, grads, lrs, 0.9, 0.95, 1e-8, 0.1, r, power)
    for g, lr, y in zip(grads, lrs, ys, strict=True):
        optimizer.param_groups[0]["lr"] = lr
        _feed(optimizer, [param], [[g]])
        _close(param, y, atol=1e-6, msg="the parameters hold y")
    optimizer.to_evaluation_point()
    _close(param, x, atol=1e-6, msg="the evaluation point is x")
    with optimizer.at_evaluation_point():  # already there: nothing moves, it stays there
        _close(param, x, atol=1e-6)
    assert not optimizer.param_groups[0]["train_mode"]
    _close(param, x, atol=1e-6)
    with pytest.raises(Exception, match="evaluation point"):
        _feed(optimizer, [param], [[grads[0]]])
    optimizer.to_training_point()
    _close(param, ys[-1], atol=1e-6)


def _tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(vocab_size=64, d_model=16, n_layers=1, n_heads=4, max_seq_len=16,
                                   feedforward=ComponentChoice(name="swiglu", config={"hidden": 32})))


def test_schedule_free_is_the_schedulefree_package() -> None:
    """20 steps on a tiny model (gradients at the parameters, y) with a 5-step warmup (ours: the
    trainer's LambdaSchedule; theirs: its own ``warmup_steps``), then ``eval()``'s x."""
    schedulefree = pytest.importorskip("schedulefree")
    ours_model, theirs_model = _tiny_model(), _tiny_model()
    ours = ScheduleFreeAdamWOptimizer(ours_model.parameters(), lr=3e-3, betas=(0.9, 0.99),
                                      weight_decay=0.05)
    schedule = LambdaSchedule(ours, lambda step: min(1.0, (step + 1) / 5))
    theirs = schedulefree.AdamWScheduleFree(theirs_model.parameters(), lr=3e-3, betas=(0.9, 0.99),
                                            weight_decay=0.05, warmup_steps=5, foreach=False)
    theirs.train()
    tokens = torch.randint(0, 64, (3, 13), generator=torch.Generator().manual_seed(2))
    for _ in range(20):
        for model, opt in ((ours_model, ours), (theirs_model, theirs)):
            opt.zero_grad()
            F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()).backward()
            opt.step()
        schedule.step()
        for a, b in zip(ours_model.parameters(), theirs_model.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    ours.to_evaluation_point()
    theirs.eval()
    for a, b in zip(ours_model.parameters(), theirs_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_trainer_leaves_schedule_free_at_x_and_its_hook_sees_x() -> None:
    """After ``train()`` the model holds x (computed from y and z by the optimizer, once); a
    per-step hook sees x too, and training with it is bit-for-bit training without it."""
    config = TrainConfig(steps=5, batch_size=2, seq_len=8, lr=3e-3, warmup_steps=2,
                         optimizer=ComponentChoice(name="schedule_free_adamw"))
    runs = []
    for hooked in (False, True):
        component, built = _captured("schedule_free_adamw")
        seen: list[list[torch.Tensor]] = []
        torch.manual_seed(0)
        model = build_model(TINY)

        def hook(step: int, loss: float, model=model, seen=seen) -> bool:
            seen.append([p.detach().clone() for p in model.parameters()])
            return True

        result = train(model, STREAM, config, seed=0, device=torch.device("cpu"), optimizer=component,
                       on_step=hook if hooked else None)
        runs.append((model, result, seen, built[0]))
    (plain, plain_result, _, optimizer), (hooked_model, hooked_result, seen, _) = runs
    assert hooked_result.losses == plain_result.losses and len(seen) == config.steps
    for p, q, at_hook in zip(plain.parameters(), hooked_model.parameters(), seen[-1], strict=True):
        assert torch.equal(p, q) and torch.equal(p, at_hook)  # the last hook saw the final x
    assert not optimizer.param_groups[0]["train_mode"]
    optimizer.to_training_point()  # back to y, then to x again: the model held x
    trained_at_y = [p.detach().clone() for p in plain.parameters()]
    optimizer.to_evaluation_point()
    for p, y in zip(plain.parameters(), trained_at_y, strict=True):
        assert not torch.allclose(p, y)
        z = optimizer.state[p]["z"]
        torch.testing.assert_close(p.detach(), (y - (1 - 0.9) * z) / 0.9, rtol=0.0, atol=1e-6)


# --- batched twins --------------------------------------------------------------------------

TWINS = [
    ("adam_mini", {"beta1": 0.8, "beta2": 0.95, "eps": 1e-6}),
    ("ademamix", {"beta1": 0.8, "beta2": 0.95, "beta3": 0.999, "alpha": 2.0, "warmup_fraction": 0.5}),
    ("normuon", {"momentum": 0.9, "rms_scale": 0.3, "neuron_beta2": 0.9, "neuron_eps": 1e-6,
                 "beta2": 0.95, "adamw_lr_ratio": 2.0}),
    ("schedule_free_adamw", {"beta1": 0.95, "beta2": 0.99, "r": 1.0, "weight_lr_power": 1.0}),
]


def _replicas(name: str, second: dict, steps: int):
    """Two replicas (own init, lr, weight decay, settings), each with its component's optimizer
    (told the run's length, under one warmup schedule), and the stacked twin bound to them."""
    lrs, decays = [3e-3, 1e-2], [0.1, 0.0]
    components = [build_optimizer(ComponentChoice(name=name)),
                  build_optimizer(ComponentChoice(name=name, config=second))]
    models = [build_model(ModelConfig(n_layers=1, max_seq_len=16)) for _ in components]
    optimizers = [c.build(m, lr=lr, weight_decay=d)
                  for c, m, lr, d in zip(components, models, lrs, decays, strict=True)]
    for optimizer in optimizers:
        optimizer.set_run_steps(steps)
    names = [n for n, _ in models[0].named_parameters()]
    stacked = {n: torch.stack([m.get_parameter(n).detach() for m in models]) for n in names}
    roles = parameter_roles(models[0])
    twin = components[0].batched([c.config for c in components], lrs, decays,
                                 {n: roles[n] for n in names}, torch.device("cpu"), steps)
    twin.bind(models[0])
    return components, models, optimizers, names, stacked, twin


@pytest.mark.parametrize(("name", "second"), TWINS, ids=[name for name, _ in TWINS])
def test_batched_twin_follows_its_optimizer_on_every_replica(name: str, second: dict) -> None:
    steps = 5
    torch.manual_seed(0)
    components, models, optimizers, names, stacked, twin = _replicas(name, second, steps)

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / 3)

    schedules = [LambdaSchedule(o, factor) for o in optimizers]
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        grads = {n: torch.randn(stacked[n].shape, generator=generator) * 0.1 for n in names}
        for replica, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            for n in names:
                model.get_parameter(n).grad = grads[n][replica].clone()
            optimizer.step()
        twin.step(stacked, grads, torch.full((2,), factor(step)))
        for schedule in schedules:
            schedule.step()
    for optimizer in optimizers:
        optimizer.to_evaluation_point()
    twin.to_evaluation_point(stacked)
    for replica, (model, component) in enumerate(zip(models, components, strict=True)):
        for n in names:
            torch.testing.assert_close(stacked[n][replica], model.get_parameter(n).detach(),
                                       rtol=1e-5, atol=1e-7, msg=f"{name} replica {replica}: {n}")
        error = 0.0 if twin.last_errors is None else float(twin.last_errors[replica])
        assert error == pytest.approx(component.orthogonality_error(), rel=1e-5)
    assert (twin.last_errors is not None) == (name == "normuon")


@pytest.mark.parametrize(("name", "second"), TWINS, ids=[name for name, _ in TWINS])
def test_a_frozen_replica_stays_bit_for_bit(name: str, second: dict) -> None:
    """The replica trainer freezes a diverged replica with lr 0 and zero gradients."""
    torch.manual_seed(0)
    *_, names, stacked, twin = _replicas(name, second, 4)
    generator = torch.Generator().manual_seed(1)
    for _ in range(2):
        twin.step(stacked, {n: torch.randn(stacked[n].shape, generator=generator) for n in names},
                  torch.ones(2))
    before = {n: p.clone() for n, p in stacked.items()}
    grads = {n: torch.randn(stacked[n].shape, generator=generator) for n in names}
    for g in grads.values():
        g[1] = 0.0
    twin.step(stacked, grads, torch.tensor([1.0, 0.0]))
    for n in names:
        assert torch.equal(stacked[n][1], before[n][1]), f"{name}: {n} moved"
        assert not torch.equal(stacked[n][0], before[n][0]), f"{name}: {n} did not move"
