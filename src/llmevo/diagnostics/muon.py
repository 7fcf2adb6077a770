"""L1 diagnostic of Muon's Newton-Schulz orthogonalisation (arXiv 2502.16982; Jordan 2024).

For random Gaussian "momentum" matrices of the model's hidden shapes, ``newton_schulz``
should return an approximately orthogonal matrix close to the exact polar factor
``U V^T`` (``torch.linalg.svd`` in float64): its singular values lie in a band around 1
(the quintic coefficients trade exact convergence for speed, roughly [0.7, 1.2]), and it is
far more orthogonal than the normalised input it starts from. Square Gaussian matrices
have a few very small singular values that five steps cannot lift into the band, so the
diagnostic reports the fraction of singular values inside it rather than a pass/fail on
the minimum.
"""

from __future__ import annotations

import torch
from pydantic import Field, PositiveInt
from torch import Tensor

from llmevo.components.optim import muon
from llmevo.components.optim.muon import newton_schulz, orthogonality_error
from llmevo.diagnostics.harness import Diagnostic, SeedRow, register_diagnostic
from llmevo.registry import StrictModel


class MuonDiagnosticConfig(StrictModel):
    shapes: list[tuple[PositiveInt, PositiveInt]] = Field(
        default_factory=lambda: [(64, 64), (64, 192), (192, 64), (16, 64)]
    )
    steps: PositiveInt = 5
    band_low: float = 0.7  # the band Jordan (2024) gives for the quintic coefficients
    band_high: float = 1.2


def polar_factor(matrix: Tensor) -> Tensor:
    """The exact orthogonal polar factor ``U V^T`` (float64 SVD)."""
    u, _, vh = torch.linalg.svd(matrix.to(torch.float64), full_matrices=False)
    return u @ vh


def run_seed(config: MuonDiagnosticConfig, seed: int, device: torch.device) -> SeedRow:
    generator = torch.Generator().manual_seed(seed)  # draws on the CPU, for every device
    errors, raw_errors, polar_errors, lows, highs, singulars = [], [], [], [], [], []
    for rows, cols in config.shapes:
        momentum = torch.randn(rows, cols, generator=generator)  # (r, c) on the CPU
        update = newton_schulz(momentum.to(device), steps=config.steps)  # (r, c) on device
        errors.append(float(orthogonality_error(update)))
        # the references in float64 on the CPU (MPS has no float64)
        update64 = update.cpu().to(torch.float64)
        singular = torch.linalg.svdvals(update64)
        singulars.append(singular)
        lows.append(float(singular.min()))
        highs.append(float(singular.max()))
        raw_errors.append(float(orthogonality_error(momentum / momentum.norm())))
        exact = polar_factor(momentum)
        polar_errors.append(float((update64 - exact).norm() / exact.norm()))
    low, high = min(lows), max(highs)
    every = torch.cat(singulars)
    in_band = ((every >= config.band_low) & (every <= config.band_high)).double().mean()
    return {
        "orthogonality_error": sum(errors) / len(errors),
        "input_orthogonality_error": sum(raw_errors) / len(raw_errors),
        "singular_value_min": low,
        "singular_value_max": high,
        "polar_factor_relative_error": max(polar_errors),
        "singular_value_fraction_in_band": float(in_band),
        "singular_values_bounded_above": high <= config.band_high,
        "orthogonality_improved": all(e < r for e, r in zip(errors, raw_errors, strict=True)),
    }


DIAGNOSTIC = register_diagnostic(
    Diagnostic(
        name="muon",
        component="muon",
        config_cls=MuonDiagnosticConfig,
        run_seed=run_seed,
        claim_policy=(
            "synthetic Newton-Schulz orthogonalisation diagnostics (orthogonality error, "
            "singular-value band, distance to the exact polar factor); no training evidence"
        ),
        modules=(muon, run_seed),
    )
)
