"""Schema v2: strict validation, one-line errors naming the field, lossless extras."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from llmevo.artifacts import (
    DiagnosticArtifact,
    ReproductionArtifact,
    load_artifact,
    validate_artifact,
)
from llmevo.errors import ArtifactError

ROPE = "2104.09864-rope.public-seed42.json"
RELAY = "2610.21126-rope-relay.component-cpu-seeds42-44.json"


@pytest.fixture()
def reproduction(reference_dir: Path) -> dict[str, Any]:
    return json.loads((reference_dir / ROPE).read_text(encoding="utf-8"))


@pytest.fixture()
def diagnostic(reference_dir: Path) -> dict[str, Any]:
    return json.loads((reference_dir / RELAY).read_text(encoding="utf-8"))


def _write(tmp_path: Path, data: Any, name: str = "x.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_bad_number_names_file_and_field(tmp_path: Path, reproduction: dict[str, Any]) -> None:
    reproduction["baseline"]["lm_loss"] = "6.04"  # a string is never coerced to a number
    path = _write(tmp_path, reproduction)
    with pytest.raises(ArtifactError) as error:
        load_artifact(path)
    assert str(error.value) == f"{path}: baseline.lm_loss: Input should be a valid number"


@pytest.mark.parametrize(
    ("mutate", "field_path"),
    [
        (lambda d: d["dataset"].pop("vocab_size"), "dataset.vocab_size"),
        (lambda d: d["setup"].__setitem__("layers", True), "setup.layers"),
        (lambda d: d.__setitem__("schema_version", 3), "schema_version"),
        (lambda d: d["evaluation_protocol"]["seeds"].append("43"), "evaluation_protocol.seeds.1"),
        (lambda d: d["baseline"].__setitem__("status", "exploded"), "baseline.status"),
        (
            lambda d: d.__setitem__(
                "per_seed", [{"seed": 42, "baseline": {"lm_loss": "x"}, "method": {}}]
            ),
            "per_seed.0.baseline.lm_loss",
        ),
    ],
)
def test_reproduction_errors_name_the_field(
    reproduction: dict[str, Any], mutate: Any, field_path: str
) -> None:
    mutate(reproduction)
    with pytest.raises(ArtifactError) as error:
        validate_artifact(reproduction, "r.json")
    message = str(error.value)
    assert message.startswith(f"r.json: {field_path}: ")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("mutate", "field_path"),
    [
        (lambda d: d["metrics"].__setitem__("values_unchanged", "yes"), "metrics.values_unchanged"),
        (lambda d: d["metrics"]["gradient_norm_keys"].pop("n"), "metrics.gradient_norm_keys.n"),
        (lambda d: d["per_seed"][2].__setitem__("seed", "44"), "per_seed.2.seed"),
        (lambda d: d.__setitem__("implementation_status", "done"), "implementation_status"),
    ],
)
def test_diagnostic_errors_name_the_field(
    diagnostic: dict[str, Any], mutate: Any, field_path: str
) -> None:
    mutate(diagnostic)
    with pytest.raises(ArtifactError) as error:
        validate_artifact(diagnostic, "d.json")
    assert str(error.value).startswith(f"d.json: {field_path}: ")


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="cannot read artifact"):
        load_artifact(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"method": ', encoding="utf-8")
    with pytest.raises(ArtifactError, match=r"broken\.json: not valid JSON .* line 1"):
        load_artifact(broken)
    with pytest.raises(ArtifactError, match="top level"):
        load_artifact(_write(tmp_path, [1, 2]))
    with pytest.raises(ArtifactError, match="method: expected an object"):
        load_artifact(_write(tmp_path, {"method": 3}))


@pytest.mark.timeout(30)
def test_only_regular_files_are_read(tmp_path: Path) -> None:
    """A named pipe would block the reader forever and a device never ends: every reader
    (show, compare, report, leaderboard, promotion) refuses them before reading a byte."""
    import os

    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    (tmp_path / "folder.json").mkdir()
    for path, kind in ((pipe, "a named pipe"), (tmp_path / "folder.json", "a folder"),
                       (Path("/dev/zero"), "a device"), (Path("/dev/null"), "a device")):
        with pytest.raises(ArtifactError, match=f"{path}: not a regular file \\({kind}\\)"):
            load_artifact(path)
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    with pytest.raises(ArtifactError, match="empty.json: empty file"):
        load_artifact(empty)
    link = tmp_path / "link.json"
    link.symlink_to(_write(tmp_path, {"method": 3}, "target.json"))
    with pytest.raises(ArtifactError, match="method: expected an object"):
        load_artifact(link)  # a link to a regular file is read


def test_kind_is_detected_from_method(
    reproduction: dict[str, Any], diagnostic: dict[str, Any]
) -> None:
    assert isinstance(validate_artifact(reproduction), ReproductionArtifact)
    assert isinstance(validate_artifact(diagnostic), DiagnosticArtifact)


def test_unknown_fields_survive_in_place(reproduction: dict[str, Any]) -> None:
    data = {"future_block": {"a": [1, 2]}, **copy.deepcopy(reproduction)}
    data["baseline"]["some_new_metric"] = 1.5
    data["provenance"]["raw_result"] = "runs/x.json"
    dumped = validate_artifact(data).to_json_dict()
    assert dumped == data
    assert list(dumped) == list(data)
    assert list(dumped["baseline"]) == list(data["baseline"])


def test_new_optional_blocks_validate_and_round_trip(reproduction: dict[str, Any]) -> None:
    seeds = [42, 43, 44]
    stats = {
        "baseline": {"mean": 6.0, "std": 0.1, "n": 3},
        "method": {"mean": 5.9, "std": 0.1, "n": 3},
        "paired_relative_change_percent": {
            "mean": -1.6,
            "ci_low": -2.5,
            "ci_high": -0.7,
            "n": 3,
            "interval": "t 95%",
        },
        "significant": True,
    }
    data = copy.deepcopy(reproduction)
    data["setup"].update(
        seeds=seeds, preset="public", token_stream_sha256="ab" * 32, learning_rate=6e-4
    )
    data["dataset"].update(variant="raw", fingerprint="cd" * 32)
    data["baseline"].update(bits_per_byte=1.9, status="complete", genome={"position": "learned"})
    data["per_seed"] = [
        {"seed": s, "baseline": {"lm_loss": 6.0}, "method": {"lm_loss": 5.9}} for s in seeds
    ]
    data["statistics"] = {"lm_loss": stats}
    data["verdict"] = {
        "metric": "lm_loss",
        "lower_is_better": True,
        "significant": True,
        "noise_floor_percent": None,
        "summary": "lower",
    }
    data["test"] = {"baseline": {"lm_loss": 6.1}, "method": {"lm_loss": 6.0}}
    data["training_curves"] = {
        arm: {"steps": [1, 2], "per_seed": {"42": [6.2, 6.1]}} for arm in ("baseline", "method")
    }
    artifact = validate_artifact(data)
    assert isinstance(artifact, ReproductionArtifact)
    assert artifact.statistics is not None and artifact.statistics["lm_loss"].significant
    assert artifact.to_json_dict() == data
    data["statistics"]["lm_loss"]["paired_relative_change_percent"].pop("interval")
    with pytest.raises(
        ArtifactError, match="statistics.lm_loss.paired_relative_change_percent.interval"
    ):
        validate_artifact(data)


def test_absent_optionals_stay_absent_and_nulls_stay_null(diagnostic: dict[str, Any]) -> None:
    dumped = validate_artifact(diagnostic).to_json_dict()
    assert dumped["adapter"] is None and dumped["provenance"]["checkpoint"] is None
    assert "code_dirty" not in dumped["provenance"]
    assert "interval" not in dumped["evaluation_protocol"]


def _tuning_block() -> dict[str, Any]:
    def arm(chosen: float) -> dict[str, Any]:
        return {"settings": [
            {"lr": lr, "validation": {"1000": loss}, "mean": loss, "status": "complete"}
            for lr, loss in ((1e-3, 4.1), (3e-3, 3.9), (1e-2, 4.0))],
            "chosen": {"lr": chosen}, "extended": None, "chosen_on_edge": False}
    return {"parameter": "lr", "grid": [1e-3, 3e-3, 1e-2], "seeds": [1000], "metric": "lm_loss",
            "arms": {"baseline": arm(3e-3), "method": arm(3e-3)}}


def test_tuning_block_validates_and_round_trips(reproduction: dict[str, Any]) -> None:
    data = copy.deepcopy(reproduction)
    data["tuning"] = _tuning_block()
    artifact = validate_artifact(data)
    assert isinstance(artifact, ReproductionArtifact) and artifact.tuning is not None
    assert artifact.to_json_dict() == data


@pytest.mark.parametrize("change, message", [
    (lambda t: t["arms"]["method"].update(chosen={"lr": 5e-3}), "not one of the settings"),
    (lambda t: t["arms"]["method"].update(settings=t["arms"]["method"]["settings"][:1]), "at least 2"),
    (lambda t: t.update(seeds=[42]), "overlap evaluation_protocol.seeds"),
    (lambda t: t.update(confirm_seeds=[1001, 42]), r"seeds \[42\] overlap evaluation_protocol.seeds"),
    (lambda t: t["arms"]["baseline"]["settings"][0].update(mean="4.1"), "tuning.arms.baseline.settings.0.mean"),
])
def test_bad_tuning_blocks_are_one_line_errors(reproduction: dict[str, Any], change, message) -> None:
    data = copy.deepcopy(reproduction)
    data["tuning"] = _tuning_block()
    change(data["tuning"])
    with pytest.raises(ArtifactError, match=message):
        validate_artifact(data)


def test_post_training_fields_are_typed(reproduction: dict[str, Any]) -> None:
    """A post-training reproduction's arm metrics and stage curves are checked like any
    metric: NaN or a string is refused, naming the field; valid ones round-trip."""
    data = copy.deepcopy(reproduction)
    data["method"]["arithmetic_exact_match"] = 0.25
    data["method"]["post_training_examples"] = 16
    def curve() -> dict[str, Any]:
        return {"steps": [1, 2], "per_seed": {"42": [0.5, 0.25]}}

    data["pretraining_curve"] = curve()
    data["post_training_curves"] = {"baseline": {"losses": curve()}, "method": {"rewards": curve()}}
    artifact = validate_artifact(data, "r.json")
    assert isinstance(artifact, ReproductionArtifact)
    assert artifact.method.arithmetic_exact_match == 0.25
    assert artifact.to_json_dict() == data
    for mutate, field_path in (
        (lambda d: d["method"].__setitem__("heldout_preference_accuracy", float("nan")),
         "method.heldout_preference_accuracy"),
        (lambda d: d["method"].__setitem__("post_training_examples", "16"),
         "method.post_training_examples"),
        (lambda d: d["post_training_curves"]["method"]["rewards"]["per_seed"].__setitem__(
            "42", [float("inf")]), "post_training_curves.method.rewards.per_seed.42.0"),
    ):
        bad = copy.deepcopy(data)
        mutate(bad)
        with pytest.raises(ArtifactError) as error:
            validate_artifact(bad, "r.json")
        assert str(error.value).startswith(f"r.json: {field_path}: ")


def test_headline_change_reads_the_richest_block(reproduction: dict[str, Any]) -> None:
    """The verdict metric's change: its paired statistics (with the interval), else the
    ``relative`` block, else the arms' means; what the leaderboard and promotion read."""
    artifact = validate_artifact(reproduction)  # historical: no verdict, no statistics
    assert isinstance(artifact, ReproductionArtifact)
    assert artifact.verdict_metric == "lm_loss"
    assert artifact.headline_change == ("lm_loss", 0.0, None, None)  # relative.lm_loss_percent
    data = copy.deepcopy(reproduction)
    data["verdict"] = {"metric": "bits_per_byte", "lower_is_better": True,
                       "noise_floor_percent": None, "summary": "s"}
    data["baseline"]["bits_per_byte"], data["method"]["bits_per_byte"] = 2.0, 1.5
    assert validate_artifact(data).headline_change == ("bits_per_byte", -25.0, None, None)
    stats = {"mean": 1.0, "std": 0.0, "n": 3}
    change = {"mean": -20.0, "ci_low": -30.0, "ci_high": -10.0, "n": 3, "interval": "t"}
    data["statistics"] = {"bits_per_byte": {"baseline": stats, "method": stats,
                                            "paired_relative_change_percent": change}}
    assert validate_artifact(data).headline_change == ("bits_per_byte", -20.0, -30.0, -10.0)
    del data["statistics"]
    data["baseline"]["bits_per_byte"] = 0.0  # no relative change of a zero baseline
    assert validate_artifact(data).headline_change == ("bits_per_byte", None, None, None)


def test_paired_values_and_recorded_keys(reproduction: dict[str, Any]) -> None:
    """Per-seed pairs, or the arms' means as one pair; None when a value is missing. A kept
    unknown key reads like a field."""
    data = copy.deepcopy(reproduction)
    data["baseline"]["foo_loss"] = 3.0  # a metric this llmevo does not type
    artifact = validate_artifact(data)
    assert isinstance(artifact, ReproductionArtifact)
    assert artifact.paired_values("lm_loss") == ([data["baseline"]["lm_loss"]],
                                                 [data["method"]["lm_loss"]])
    assert artifact.paired_values("bits_per_byte") is None
    assert artifact.baseline.recorded("foo_loss") == 3.0 and artifact.method.recorded("foo_loss") is None
    data["per_seed"] = [{"seed": 42, "baseline": {"lm_loss": 4.0}, "method": {"lm_loss": 3.0}},
                        {"seed": 43, "baseline": {"lm_loss": 5.0}, "method": {}}]
    assert validate_artifact(data).paired_values("lm_loss") is None
    data["per_seed"][1]["method"]["lm_loss"] = 4.5
    assert validate_artifact(data).paired_values("lm_loss") == ([4.0, 5.0], [3.0, 4.5])
