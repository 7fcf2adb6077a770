"""L1 diagnostic of RoPE (Su et al., arXiv 2104.09864) on synthetic q/k tensors.

Checks the property RoPE is built for: ``<R(m) q, R(n) k>`` depends on ``m - n`` only
(relative-position invariance under a common shift), that the rotation preserves norms,
that it agrees with an explicit block-diagonal rotation matrix built from the paper's
formula, and that gradients reach q and k.
"""

from __future__ import annotations

import torch
from pydantic import PositiveFloat, PositiveInt, model_validator
from torch import Tensor

from llmevo.components.position import rope
from llmevo.components.position.rope import apply_rotary, rotary_frequencies
from llmevo.diagnostics.harness import Diagnostic, SeedRow, register_diagnostic
from llmevo.registry import StrictModel


class RopeDiagnosticConfig(StrictModel):
    heads: PositiveInt = 4
    tokens: PositiveInt = 16
    head_dimension: PositiveInt = 16
    rotary_dimension: PositiveInt = 16
    theta: PositiveFloat = 10_000.0
    max_shift: PositiveInt = 512
    amplitude: PositiveFloat = 1.0

    @model_validator(mode="after")
    def _check(self) -> RopeDiagnosticConfig:
        if self.rotary_dimension % 2 or self.rotary_dimension > self.head_dimension:
            raise ValueError("rotary_dimension must be even and at most head_dimension")
        return self


def rotation_matrix(position: float, inv_freq: Tensor, dim: int) -> Tensor:
    """The paper's block-diagonal R(position) in float64: (dim, dim), identity on the tail."""
    matrix = torch.eye(dim, dtype=torch.float64)
    for i, frequency in enumerate(inv_freq.to(torch.float64)):
        angle = position * frequency
        cos, sin = torch.cos(angle), torch.sin(angle)
        matrix[2 * i, 2 * i], matrix[2 * i, 2 * i + 1] = cos, -sin
        matrix[2 * i + 1, 2 * i], matrix[2 * i + 1, 2 * i + 1] = sin, cos
    return matrix


def run_seed(config: RopeDiagnosticConfig, seed: int, device: torch.device) -> SeedRow:
    generator = torch.Generator().manual_seed(seed)  # draws on the CPU, for every device
    inv_freq = rotary_frequencies(config.rotary_dimension, config.theta)  # (D/2,) on the CPU
    shape = (config.heads, config.tokens, config.head_dimension)

    def randn(*size: int) -> Tensor:
        return torch.randn(*size, generator=generator).to(device)

    queries = (config.amplitude * randn(*shape)).requires_grad_(True)  # (H, T, D)
    keys = (config.amplitude * randn(*shape)).requires_grad_(True)
    positions = torch.randperm(4 * config.tokens, generator=generator)[: config.tokens]  # (T,)
    shift = int(torch.randint(1, config.max_shift + 1, (1,), generator=generator))
    device_freq, device_positions = inv_freq.to(device), positions.to(device)

    def scores(offset: int) -> Tensor:
        q = apply_rotary(queries, device_positions + offset, device_freq)
        k = apply_rotary(keys, device_positions + offset, device_freq)
        return q @ k.transpose(-1, -2)  # (H, T, T)

    base, shifted = scores(0), scores(shift)
    invariance_error = float((base - shifted).abs().max().detach())
    rotated = apply_rotary(queries, device_positions, device_freq)  # (H, T, D)
    norm_error = float((rotated.norm(dim=-1) - queries.norm(dim=-1)).abs().max().detach())

    # the reference: the paper's explicit matrices, in float64 on the CPU
    matrices = torch.stack(
        [rotation_matrix(float(p), inv_freq, config.head_dimension) for p in positions]
    )  # (T, D, D)
    explicit = torch.einsum("tij,htj->hti", matrices, queries.detach().cpu().to(torch.float64))
    matrix_error = float((rotated.detach().cpu().to(torch.float64) - explicit).abs().max())

    (base * randn(*base.shape)).sum().backward()
    tail = slice(config.rotary_dimension, None)
    tail_unchanged = torch.equal(rotated[..., tail], queries[..., tail])
    return {
        "relative_position_invariance_error": invariance_error,
        "norm_preservation_error": norm_error,
        "explicit_rotation_matrix_error": matrix_error,
        "relative_position_invariant": invariance_error <= 1e-3 * float(base.abs().max().detach()),
        "nonrotary_tail_unchanged": tail_unchanged,
        "gradient_norm_queries": float(queries.grad.norm()),  # type: ignore[union-attr]
        "gradient_norm_keys": float(keys.grad.norm()),  # type: ignore[union-attr]
    }


DIAGNOSTIC = register_diagnostic(
    Diagnostic(
        name="rope",
        component="rope",
        config_cls=RopeDiagnosticConfig,
        run_seed=run_seed,
        claim_policy=(
            "synthetic rotary-identity diagnostics (relative-position invariance, norm, explicit "
            "matrix, gradients); no model capability evidence"
        ),
        modules=(rope, run_seed),
    )
)
