"""RoPE relay against independent references and the reference artifact's shape."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from llmevo.artifacts.schema import load_artifact
from llmevo.components.kvcache.rope_relay import SELECTION_RULES, relay_compact
from llmevo.components.position.rope import apply_rotary, rotary_frequencies
from llmevo.diagnostics.harness import aggregate, build_artifact, run_diagnostic, write_artifact

REPO = Path(__file__).resolve().parents[2]
REFERENCE = "2610.21126-rope-relay.component-cpu-seeds42-44.json"


def _rotation(position: float, inv_freq: torch.Tensor, dim: int) -> torch.Tensor:
    """The paper's block-diagonal rotation, built independently in float64."""
    matrix = torch.eye(dim, dtype=torch.float64)
    for i, frequency in enumerate(inv_freq.double().tolist()):
        c, s = math.cos(position * frequency), math.sin(position * frequency)
        matrix[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    return matrix


@pytest.mark.parametrize("seed", [42, 43, 44])
def test_relayed_keys_equal_fresh_rotation_matrix_at_new_positions(seed):
    generator = torch.Generator().manual_seed(seed)
    inv_freq = rotary_frequencies(8, 10_000.0)
    raw = 1.3 * torch.randn(1, 2, 8, 12, generator=generator)
    positions = torch.randperm(32, generator=generator)[:8].sort().values
    keys = apply_rotary(raw, positions, inv_freq)
    out = relay_compact(
        keys, keys.clone(), positions, [6, 3], inv_freq, SELECTION_RULES["random"], None, generator
    )
    for head, count in enumerate([6, 3]):
        for slot in range(count):
            original = raw[0, head, out.slots[head, slot]].double()
            expected = _rotation(float(slot), inv_freq, 12) @ original
            assert torch.allclose(out.keys[0, head, slot].double(), expected, atol=1e-6)


def test_diagnostic_meets_the_spec_over_seeds():
    run = run_diagnostic("rope-relay", [42, 43, 44])
    metrics = run.metrics
    for row in run.per_seed:
        assert row["max_reference_absolute_error"] <= 1e-6
        for name in ("gradient_norm_keys", "gradient_norm_values", "gradient_norm_queries"):
            assert math.isfinite(row[name]) and row[name] > 1e-3
        assert row["unsynchronized_query_mean_logit_error"] > 0.1
    for flag in (
        "values_unchanged",
        "nonrotary_tail_unchanged",
        "heterogeneous_endpoints_aligned",
        "query_and_answer_positions_synchronized",
    ):
        assert metrics[flag] is True


def test_homogeneous_budgets_do_not_claim_heterogeneous_alignment():
    run = run_diagnostic("rope-relay", [42], {"retained_counts": [4, 4, 4, 4]})
    assert run.metrics["heterogeneous_endpoints_aligned"] is False


def test_aggregate_uses_sample_std_like_the_reference(reference_dir):
    reference = json.loads((reference_dir / REFERENCE).read_text())
    rows = [{k: v for k, v in row.items() if k != "seed"} for row in reference["per_seed"]]
    metrics = aggregate(rows)
    for name, value in metrics.items():
        assert value["mean"] == pytest.approx(reference["metrics"][name]["mean"], rel=1e-12)
        assert value["std"] == pytest.approx(reference["metrics"][name]["std"], rel=1e-9)


def test_artifact_has_the_reference_shape(reference_dir, tmp_path):
    reference = json.loads((reference_dir / REFERENCE).read_text())
    run = run_diagnostic("rope-relay", [42, 43, 44])
    path = tmp_path / "component-cpu-seeds42-44.json"
    artifact = build_artifact(
        run, command="pytest", artifact_path=path, repo_root=REPO, runner_file=Path(__file__)
    )
    write_artifact(artifact, path)
    written = json.loads(path.read_text())
    assert list(written) == list(reference)
    assert list(written["metrics"]) == list(reference["metrics"])
    assert [list(row) for row in written["per_seed"]] == [list(r) for r in reference["per_seed"]]
    for key in reference["configuration"]:
        assert written["configuration"][key] == reference["configuration"][key]
    for key in ("method", "manifest_ref", "implementation_status", "evaluation_tier", "seeds"):
        assert written[key] == reference[key]
    assert written["dataset"]["id"] == reference["dataset"]["id"]
    assert written["provenance"]["implementation_files"]
    assert load_artifact(path).kind == "diagnostic"


@pytest.mark.parametrize("name", ["rope", "muon"])
def test_other_diagnostics(name):
    metrics = run_diagnostic(name, [42, 43]).metrics
    if name == "rope":
        assert metrics["relative_position_invariant"] and metrics["nonrotary_tail_unchanged"]
        assert metrics["explicit_rotation_matrix_error"]["mean"] < 1e-5
    else:
        assert metrics["orthogonality_improved"] and metrics["singular_values_bounded_above"]
        assert metrics["orthogonality_error"]["mean"] < metrics["input_orthogonality_error"]["mean"]
