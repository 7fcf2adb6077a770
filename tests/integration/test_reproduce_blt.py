"""`llmevo reproduce blt-bytes` end to end: byte arm vs BPE arm, judged in bits per byte."""

from __future__ import annotations

import json

from llmevo.cli import main


def test_blt_bytes_smoke_compares_in_bits_per_byte(tmp_path, data_dir, cache_dir, monkeypatch):
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    out = tmp_path / "blt.json"
    try:
        main(["reproduce", "blt-bytes", "--preset", "smoke", "--steps", "3", "--device", "cpu",
              "--data-dir", str(data_dir), "--out", str(out), "--no-report"])
    except SystemExit as exit_:
        assert exit_.code in (0, None)
    artifact = json.loads(out.read_text())
    assert artifact["verdict"]["metric"] == "bits_per_byte"
    assert artifact["setup"]["objective"] == "composite_bpb"
    stats = artifact["method"]["architecture_stats"]
    target = stats["target_mean_patch_size_bytes"]
    assert abs(stats["validation_mean_patch_size_bytes"] - target) / target < 0.15
    assert stats["entropy_model_validation_bpb"] < stats["unigram_validation_bpb"]
    units = artifact["setup"]["units_per_arm"]
    # equal training text: the byte arm consumes about as many bytes as the BPE arm's tokens cover
    ratio = units["method"]["approx_text_bytes"] / units["baseline"]["approx_text_bytes"]
    assert 0.9 < ratio < 1.1
    assert artifact["baseline"]["parameters"] == 139_584
    assert 0.75 * 139_584 <= artifact["method"]["parameters"] <= 1.25 * 139_584
