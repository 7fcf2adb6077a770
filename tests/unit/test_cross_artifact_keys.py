"""``scripts/cross_artifact_keys.py`` (issue 34 item 1): which published runs share a key,
and what two records of one key say differently."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "cross_artifact_keys.py"


@pytest.fixture(scope="module")
def keys():
    spec = importlib.util.spec_from_file_location("cross_artifact_keys", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


GENOME = {"model": {"architecture": "transformer", "vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4,
                    "max_seq_len": 64, "tie_embeddings": True, "position": {"name": "rope", "config": {}},
                    "attention": {"name": "mha", "config": {"kv_heads": 4}},
                    "feedforward": {"name": "swiglu", "config": {"hidden": 192}},
                    "norm": {"name": "rmsnorm", "config": {}}, "block": {"name": "pre_norm", "config": {}},
                    "extra": {}},
          "optimizer": {"name": "adamw", "config": {}}}


def _artifact(commit: str, day: str, seed42: float, tuned: float, *, warmup: int = 30,
              attention: dict | None = None, cached_seeds: tuple[int, ...] = ()) -> dict:
    genome = copy.deepcopy(GENOME)
    if attention is not None:
        genome["model"]["attention"] = attention
    arm = {"name": "llama_modern", "genome": genome, "learning_rate": 0.009000000000000001}
    method = {"name": "other", "genome": copy.deepcopy(GENOME) | {"optimizer": {"name": "lion", "config": {}}},
              "learning_rate": 3e-4}
    return {
        "setup": {"preset": "quick", "steps_per_variant": 330, "batch_size": 48, "sequence_length": 64,
                  "schedule": "cosine", "warmup_steps": warmup, "weight_decay": 0.1, "grad_clip": 1.0,
                  "learning_rate": 3e-3, "seeds": [42], "verdict_metric": "lm_loss",
                  "training_path": {"baseline": {"42": "parallel"}, "method": {"42": "parallel"}}},
        "dataset": {"fingerprint": "f", "variant": "raw"},
        "baseline": arm, "method": method,
        "per_seed": [{"seed": 42, "baseline": {"lm_loss": seed42}, "method": {"lm_loss": seed42 + 1}}],
        "tuning": {"parameter": "lr", "grid": [0.003, 0.009], "seeds": [1000], "metric": "lm_loss",
                   "confirm_seeds": [], "arms": {
                       "baseline": {"settings": [{"lr": 0.009, "validation": {"1000": tuned}}], "confirmed": []},
                       "method": {"settings": [{"lr": 3e-4, "validation": {"1000": tuned + 1}}], "confirmed": []}}},
        "cache": {"baseline": {"report_seeds": list(cached_seeds), "tuning": []},
                  "method": {"report_seeds": [], "tuning": []}},
        "provenance": {"code_commit": commit, "created_at": f"{day}T08:00:00+00:00",
                       "command": "llmevo reproduce x --threads 1", "library_versions": {"torch": "2.13.0"},
                       "implementation_files": {"src/llmevo/train/trainer.py": commit}},
    }


def _write(folder: Path, name: str, artifact: dict) -> None:
    path = folder / "reproductions" / name / "metrics" / "a.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(artifact))


def test_one_run_in_two_artifacts_is_one_key_and_its_records_are_compared(keys, tmp_path):
    docs = tmp_path / "docs"
    # one arm spelled two ways (mha with kv_heads None and 4 at 4 heads) in two artifacts
    _write(docs, "one", _artifact("a" * 40, "2026-12-01", 4.305, 3.5))
    _write(docs, "two", _artifact("b" * 40, "2026-12-02", 4.557, 3.5, attention={"name": "mha", "config": {}}))
    # the same arm under another warmup: another key
    _write(docs, "three", _artifact("c" * 40, "2026-12-02", 9.0, 9.0, warmup=10))
    groups = keys.keyed(keys.collect(docs))
    shared = {k: g for k, g in groups.items() if len({r.artifact for r in g}) > 1}
    roles = sorted((g[0].parts["optimizer"]["name"], g[0].parts["role"]) for g in shared.values())
    assert roles == [("adamw", "report"), ("adamw", "tuning"), ("lion", "report"), ("lion", "tuning")]
    report = next(g for g in shared.values() if g[0].parts["role"] == "report"
                  and g[0].parts["optimizer"]["name"] == "adamw")
    assert sorted(r.value for r in report) == [4.305, 4.557]
    assert keys.relative_spread([r.value for r in report]) == pytest.approx((4.557 - 4.305) / 4.305)
    differences = keys.record_differences(*sorted(report, key=lambda r: r.value))
    assert differences["commit"] == ["a" * 40, "b" * 40]
    assert differences["day"] == ["2026-12-01", "2026-12-02"]
    assert differences["numeric_source_changed"] == ["src/llmevo/train/trainer.py"]
    assert "threads" not in differences and "path" not in differences
    tuned = [g for g in shared.values() if g[0].parts["optimizer"]["name"] == "adamw" and g[0].parts["role"] == "tuning"]
    assert [r.value for r in tuned[0]] == [3.5, 3.5]
    assert keys.main(["--docs", str(docs), "--threshold", "0.01"]) == 0


def test_machine_recorded_runs_are_keyed_by_it_and_cached_copies_join_no_class(keys, tmp_path):
    docs = tmp_path / "docs"
    here = _artifact("a" * 40, "2026-12-05", 4.0, 3.5)
    there = _artifact("a" * 40, "2026-12-05", 4.1, 3.6)
    for artifact, model in ((here, "Intel Xeon"), (there, "AMD EPYC")):
        artifact["provenance"]["numerics"] = {"cpu": {"model": model}, "threads": 1,
                                              "float32_matmul_precision": "highest"}
    _write(docs, "here", here)
    _write(docs, "there", there)
    groups = keys.keyed(keys.collect(docs))
    assert all(len({r.artifact for r in g}) == 1 for g in groups.values() if g[0].parts["optimizer"]["name"] == "adamw")
    # without the record both are "not recorded" and share keys; a cached copy joins no class
    for artifact in (here, there):
        del artifact["provenance"]["numerics"]
    copy_of_here = _artifact("d" * 40, "2026-12-06", 4.0, 9.9, cached_seeds=(42,))
    copy_of_here["per_seed"][0]["method"]["lm_loss"] = 7.0  # its own method run, unlike here's
    docs2 = tmp_path / "docs2"
    _write(docs2, "here", here)
    _write(docs2, "there", there)
    _write(docs2, "copy", copy_of_here)
    groups = keys.keyed(keys.collect(docs2))
    classes, contradictions = keys.numeric_classes(groups)
    assert contradictions == []
    assert all(len(members) == 1 for members in classes)  # here and there differ; the copy is cached
    # were the copy's baseline run trained, not loaded, it would join the copy to `here`, and the
    # keys on which the two then read differently (tuning, the method's run) are contradictions
    copy_of_here["cache"]["baseline"]["report_seeds"] = []
    (docs2 / "reproductions" / "copy" / "metrics" / "a.json").write_text(json.dumps(copy_of_here))
    classes, contradictions = keys.numeric_classes(keys.keyed(keys.collect(docs2)))
    assert sorted(len(members) for members in classes) == [1, 2]
    assert len(contradictions) == 3 and {(a, b) for a, b, _ in contradictions} == {
        ("docs2/reproductions/copy/metrics/a.json", "docs2/reproductions/here/metrics/a.json")}
