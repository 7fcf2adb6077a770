"""`llmevo reproduce` end to end on the reference protocol (smoke preset)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli

from llmevo.artifacts import load_artifact
from llmevo.errors import ConfigError
from llmevo.experiments.plans import Comparison, check_distinct, plan_comparison
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.runner.arm import Arm


@pytest.fixture(scope="module")
def smoke_artifacts(tmp_path_factory, data_dir):
    folder = tmp_path_factory.mktemp("smoke")
    paths = [folder / "first.json", folder / "second.json"]
    for path in paths:
        code = run_cli(["reproduce", "rope", "--preset", "smoke", "--seed", "42", "--device", "cpu",
                        "--data-dir", str(data_dir), "--out", str(path), "--no-report"])
        assert code == 0
    return [json.loads(p.read_text()) for p in paths], paths


def test_smoke_lands_near_the_reference_protocol(smoke_artifacts):
    (artifact, _), _ = smoke_artifacts
    method = artifact["method"]  # llama_modern with RoPE, as in the reference artifacts
    assert method["parameters"] == 139_584
    assert abs(method["lm_loss"] - 6.04) < 0.15
    assert abs(method["initial_loss"] - 6.18) < 0.1
    assert artifact["dataset"]["train_tokens"] == 120_000
    assert artifact["dataset"]["benchmark_suite"] == "core"
    assert artifact["setup"]["steps_per_variant"] == 12


def test_the_two_arms_differ_and_consumed_the_same_tokens(smoke_artifacts):
    (artifact, _), _ = smoke_artifacts
    assert artifact["baseline"]["lm_loss"] != artifact["method"]["lm_loss"]
    assert artifact["baseline"]["genome"]["model"]["position"]["name"] == "learned"
    assert artifact["method"]["genome"]["model"]["position"]["name"] == "rope"
    assert artifact["setup"]["same_tokens_optimizer_and_budget"] is True


def test_same_command_same_numbers(smoke_artifacts):
    (first, second), _ = smoke_artifacts
    for arm in ("baseline", "method"):
        for key, value in first[arm].items():
            assert second[arm][key] == value, (arm, key)
    assert first["per_seed"] == second["per_seed"]


def test_primary_is_the_formula_of_the_stored_values(smoke_artifacts):
    (artifact, _), _ = smoke_artifacts
    for arm in ("baseline", "method"):
        block = artifact[arm]
        assert block["primary"] == -(block["lm_loss"] + 0.15 * block["instruction_loss"])
        assert block["public_composite"] == block["primary"]  # core suite


def test_artifact_validates_and_carries_full_provenance(smoke_artifacts):
    _, paths = smoke_artifacts
    artifact = load_artifact(paths[0]).to_json_dict()
    provenance = artifact["provenance"]
    for key in ("code_commit", "code_dirty", "implementation_sha256", "implementation_files",
                "runner_sha256", "command", "accelerator", "library_versions", "dataset_fingerprint"):
        assert provenance.get(key) not in (None, "", {}), key
    assert any("rope.py" in path for path in provenance["implementation_files"])
    assert artifact["evaluation_protocol"]["formal_comparison"] is False


def test_each_arm_records_its_whole_resolved_training_config(smoke_artifacts):
    """Every ``TrainConfig`` setting, a new one included, is in each arm's ``train`` block:
    the smoke preset's, with the arm's optimizer (``runner.run.arm_train_config``)."""
    from llmevo.runner.presets import get_preset
    from llmevo.train.trainer import TrainConfig

    (artifact, _), _ = smoke_artifacts
    for arm in ("baseline", "method"):
        recorded = artifact[arm]["train"]
        assert set(recorded) == set(TrainConfig.model_fields), arm
        expected = get_preset("smoke").train.model_copy(
            update={"optimizer": ComponentChoice.model_validate(artifact[arm]["genome"]["optimizer"])})
        assert TrainConfig.model_validate(recorded) == expected, arm


def test_identical_arms_are_refused():
    arm = Arm("baseline", "llama_modern", ModelConfig(), ComponentChoice(name="adamw"))
    comparison = Comparison(spec=plan_comparison("rope").spec, baseline=arm,
                            method=Arm("method", "rope", ModelConfig(), ComponentChoice(name="adamw")))
    with pytest.raises(ConfigError, match="build the same model"):
        check_distinct(comparison)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["reproduce", "ropex"], "unknown component 'ropex'"),
        (["reproduce", "rope", "--preset", "huge"], "'huge' is not one of"),
        (["reproduce", "rope", "--device", "tpu"], "'tpu' is not one of"),
        (["reproduce", "rope", "--seeds", "42,42"], "duplicate seeds"),
        (["reproduce", "rope", "--seeds", "42,x"], "'x' is not an integer"),
        (["reproduce", "rope", "--data-dir", "/nonexistent"], "does not exist"),
        (["reproduce", "rope", "--replicas-max", "0"], "--replicas-max 0: Input should be greater than or equal to 1"),
        (["reproduce", "rope", "--path", "warp"], "'warp' is not one of"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys, tmp_path):
    out = tmp_path / "never.json"
    code = run_cli([*args, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2
    assert message in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert not out.exists()


def test_altered_data_file_exits_2_and_writes_nothing(data_dir, tmp_path, capsys):
    from llmevo.data.pins import LM_FILE_SHA256

    mirror = tmp_path / "data"
    for relative in LM_FILE_SHA256:
        (mirror / relative).parent.mkdir(parents=True, exist_ok=True)
        (mirror / relative).symlink_to(data_dir / relative)
    (mirror / "wikitext-2/wiki.train.tokens").unlink()
    (mirror / "wikitext-2/wiki.train.tokens").write_text("not the real file\n")
    out = tmp_path / "a.json"
    code = run_cli(["reproduce", "rope", "--data-dir", str(mirror), "--out", str(out)])
    assert code == 2
    assert "wiki.train.tokens: sha256" in capsys.readouterr().err
    assert not out.exists()


def test_report_is_written_next_to_a_run(tmp_path, data_dir):
    out = tmp_path / "run" / "a.json"
    code = run_cli(["reproduce", "rope", "--preset", "smoke", "--seeds", "42,43", "--steps", "4",
                    "--device", "cpu", "--data-dir", str(data_dir), "--out", str(out)])
    assert code == 0
    readme = tmp_path / "run" / "report" / "README.md"
    assert readme.is_file()
    assert Path(readme.parent / "plots").is_dir()
    assert len(json.loads(out.read_text())["per_seed"]) == 2


def test_saved_checkpoints_generate_text(tmp_path, data_dir, capsys):
    code = run_cli(["reproduce", "rope", "--preset", "smoke", "--steps", "3", "--device", "cpu",
                    "--data-dir", str(data_dir), "--out", str(tmp_path / "a.json"), "--no-report",
                    "--save-checkpoints", str(tmp_path / "ckpt")])
    assert code == 0
    capsys.readouterr()
    code = run_cli(["generate", "--checkpoint", str(tmp_path / "ckpt" / "method"),
                    "--prompt", "The history of", "--max-tokens", "8", "--seed", "1"])
    assert code == 0
    assert capsys.readouterr().out.startswith("The history of")


def test_publish_with_checkpoints_writes_the_report_beside_the_artifact(tmp_path, data_dir, cache_dir,
                                                                         monkeypatch):
    """The report used to land in docs/reproductions/<checkpoint dir>/method (a reused variable)."""
    monkeypatch.setenv("LLMEVO_CACHE", str(cache_dir))
    monkeypatch.chdir(tmp_path)
    code = run_cli(["reproduce", "rope", "--preset", "smoke", "--seeds", "42,43", "--steps", "2",
                    "--device", "cpu", "--threads", "1", "--data-dir", str(data_dir), "--publish",
                    "--allow-dirty", "--save-checkpoints", "ck"])
    assert code == 0
    folder = Path("docs/reproductions/2104.09864-rope")
    assert (folder / "README.md").is_file()
    assert sorted(p.name for p in Path("ck").iterdir()) == ["baseline", "method"]
    assert not Path("docs/reproductions/ck").exists()
    artifact = load_artifact(folder / "metrics" / "public-seeds42-43.json").to_json_dict()
    assert artifact["provenance"]["allow_dirty"] is True
    streams = artifact["setup"]["token_stream_sha256_by_arm"]
    assert streams["baseline"] == streams["method"] == artifact["setup"]["token_stream_sha256_per_seed"]
    assert set(streams["method"]) == {"42", "43"} and streams["method"]["42"] != streams["method"]["43"]


def test_batched_seeds_equal_sequential_seeds(tmp_path, data_dir):
    """The same command trained batched and --sequential: per-seed metrics within 1e-4."""
    artifacts = {}
    for option in (["--path", "batched"], ["--sequential"]):
        out = tmp_path / f"{option[-1]}.json"
        code = run_cli(["reproduce", "rope", "--preset", "smoke", "--seeds", "42,43", "--steps", "6",
                        "--device", "cpu", "--data-dir", str(data_dir), "--out", str(out),
                        "--no-report", *option])
        assert code == 0
        artifacts[option[-1]] = json.loads(out.read_text())
    batched, sequential = artifacts["batched"], artifacts["--sequential"]
    assert set(batched["setup"]["training_path"]["method"].values()) == {"batched"}
    assert set(sequential["setup"]["training_path"]["method"].values()) == {"sequential"}
    for one, other in zip(batched["per_seed"], sequential["per_seed"], strict=True):
        for arm in ("baseline", "method"):
            assert one[arm]["lm_loss"] == pytest.approx(other[arm]["lm_loss"], rel=1e-4)
    assert batched["setup"]["token_stream_sha256"] == sequential["setup"]["token_stream_sha256"]


def test_against_llama_moderns_choice_end_to_end(smoke_artifacts, tmp_path, data_dir):
    """`reproduce alibi --against rope`: the baseline arm is llama_modern itself, so it
    trains exactly like the method arm of `reproduce rope` under the same seed."""
    out = tmp_path / "run" / "alibi.json"
    code = run_cli(["reproduce", "alibi", "--against", "rope", "--preset", "smoke", "--seed", "42",
                    "--threads", "1", "--device", "cpu", "--data-dir", str(data_dir),
                    "--out", str(out)])
    assert code == 0
    artifact = load_artifact(out).to_json_dict()
    assert artifact["setup"]["against"] == "rope"
    assert artifact["baseline"]["name"] == "llama_modern[position=rope]"
    assert artifact["baseline"]["genome"]["model"] == ModelConfig().model_dump(mode="json")
    assert artifact["method"]["genome"]["model"]["position"]["name"] == "alibi"
    assert "(vs rope)" in artifact["verdict"]["summary"]
    (rope, _), _ = smoke_artifacts
    assert artifact["baseline"]["lm_loss"] == rope["method"]["lm_loss"]
    assert artifact["per_seed"][0]["baseline"] == rope["per_seed"][0]["method"]
    readme = tmp_path / "run" / "report-vs-rope" / "README.md"
    assert "Baseline chosen with --against rope" in readme.read_text()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["alibi.json", "report-vs-rope"]
