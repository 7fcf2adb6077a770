"""Atomic writes: all or nothing, no temp files left behind; invalid artifacts never written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmevo.artifacts import (
    load_artifact,
    save_artifact,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from llmevo.errors import ArtifactError

RELAY = "2610.21126-rope-relay.component-cpu-seeds42-44.json"


class _Unserialisable:
    pass


def test_failed_serialisation_keeps_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "metrics.json"
    write_json_atomic(target, {"old": True})
    before = target.read_bytes()
    # Big enough that json streams chunks into the temp file before reaching the bad value.
    data = {"values": list(range(5000)), "bad": _Unserialisable()}
    with pytest.raises(TypeError):
        write_json_atomic(target, data)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_failed_first_write_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "new" / "metrics.json"
    with pytest.raises(TypeError):
        write_json_atomic(target, {"bad": {1, 2}})
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_writes_create_parents_and_replace_content(tmp_path: Path) -> None:
    text_target = tmp_path / "a" / "b" / "note.md"
    write_text_atomic(text_target, "first 位置\n")
    write_text_atomic(text_target, "second 位置\n")
    assert text_target.read_text(encoding="utf-8") == "second 位置\n"
    bytes_target = tmp_path / "c" / "blob.bin"
    write_bytes_atomic(bytes_target, b"\x00\xff")
    assert bytes_target.read_bytes() == b"\x00\xff"
    json_target = tmp_path / "d.json"
    write_json_atomic(json_target, {"k": [1, 2]})
    assert json_target.read_text(encoding="utf-8") == '{\n  "k": [\n    1,\n    2\n  ]\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "c", "d.json"]


def test_save_artifact_validates_first(reference_dir: Path, tmp_path: Path) -> None:
    data: dict[str, Any] = json.loads((reference_dir / RELAY).read_text(encoding="utf-8"))
    target = tmp_path / "component.json"
    save_artifact(data, target)
    text = target.read_text(encoding="utf-8")
    assert text.endswith("}\n") and text.startswith('{\n  "schema_version": 2,')
    assert load_artifact(target).to_json_dict() == data

    data["metrics"]["gradient_norm_keys"]["mean"] = "large"
    with pytest.raises(ArtifactError, match=r"component\.json: metrics\.gradient_norm_keys\.mean"):
        save_artifact(data, target)
    assert target.read_text(encoding="utf-8") == text
    with pytest.raises(ArtifactError):
        save_artifact(data, tmp_path / "never.json")
    assert not (tmp_path / "never.json").exists()


def test_save_artifact_revalidates_a_mutated_model(reference_dir: Path, tmp_path: Path) -> None:
    artifact = load_artifact(reference_dir / RELAY)
    artifact.seeds = ["forty-two"]  # type: ignore[list-item]  # assignment is not validated
    with pytest.raises(ArtifactError, match="seeds.0"):
        save_artifact(artifact, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
