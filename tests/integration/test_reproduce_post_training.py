"""`llmevo reproduce grpo --preset smoke` end to end: the artifact carries the stage's fields."""

from __future__ import annotations

import json
import math

from llmevo.artifacts import load_artifact
from llmevo.cli import main
from llmevo.reports.readme import write_report
from llmevo.train.trainer import TrainConfig


def test_grpo_smoke_records_its_stage(tmp_path, data_dir):
    out = tmp_path / "grpo.json"
    try:
        main(["reproduce", "grpo", "--preset", "smoke", "--seed", "42",
              "--device", "cpu", "--data-dir", str(data_dir), "--out", str(out), "--no-report",
              "--method-config", "group_size=4"])
    except SystemExit as exit_:
        assert not exit_.code
    load_artifact(out)  # valid against the schema
    artifact = json.loads(out.read_text())
    method, baseline = artifact["method"], artifact["baseline"]
    assert method["genome"]["post_training"]["name"] == "grpo"
    assert method["genome"]["post_training"]["config"]["group_size"] == 4
    assert baseline["genome"]["post_training"]["name"] == "sft"
    assert 0.0 <= method["reward_bearing_group_rate"] <= 1.0
    assert baseline["reward_bearing_group_rate"] == 0.0
    assert math.isfinite(method["post_training_loss"]) and baseline["post_training_loss"] > 0
    assert method["post_training_examples"] == baseline["post_training_examples"] == 16
    assert 0.0 <= method["arithmetic_exact_match"] <= 1.0
    assert len(artifact["post_training_curves"]["method"]["rewards"]["per_seed"]["42"]) == 2
    for block in (method, baseline):  # the shared pretraining's whole config, the stage, the method
        assert set(block["train"]) == {"pretrain", "post_training", "method"}
        assert set(block["train"]["pretrain"]) == set(TrainConfig.model_fields)
        assert block["train"]["method"] == block["genome"]["post_training"]
    # the report draws what issue 14 asks of GRPO: reward and reward-bearing rate per step,
    # besides the shared pretraining curve and each arm's stage loss
    readme = write_report(load_artifact(out), out, tmp_path / "report").read_text()
    for title, plot in (("Pretraining loss per step", "training_loss.png"),
                        ("Post-training loss per step", "post_training_loss.png"),
                        ("GRPO mean reward per step", "post_training_reward.png"),
                        ("Reward-bearing groups per step", "reward_bearing_rate.png")):
        assert f"![{title}" in readme and f"(plots/{plot})" in readme
        assert (tmp_path / "report" / "plots" / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pretraining = (tmp_path / "report" / "plots" / "training_loss.png").read_bytes()
    assert pretraining != (tmp_path / "report" / "plots" / "post_training_loss.png").read_bytes()


def test_self_consistency_is_recorded_per_k(tmp_path, data_dir, capsys):
    out = tmp_path / "sft.json"
    try:
        main(["reproduce", "sft", "--preset", "smoke", "--seed", "42", "--device", "cpu",
              "--data-dir", str(data_dir), "--out", str(out), "--no-report", "--self-consistency"])
    except SystemExit as exit_:
        assert not exit_.code
    artifact = json.loads(out.read_text())
    row = artifact["per_seed"][0]
    for arm in ("baseline", "method"):
        tokens = [row[arm][f"arithmetic_sc{k}_tokens"] for k in (1, 4, 8)]
        assert all(0.0 <= row[arm][f"arithmetic_sc{k}_exact_match"] <= 1.0 for k in (1, 4, 8))
        assert 0 < tokens[0] <= tokens[1] <= tokens[2]  # the first k samples are shared by larger k
    assert load_artifact(out).setup.post_training["self_consistency"] is True
    try:  # not a post-training method: refused, one line
        main(["reproduce", "rope", "--self-consistency", "--data-dir", str(data_dir)])
    except SystemExit as exit_:
        assert exit_.code == 2
    assert "only for a post-training method" in capsys.readouterr().err
