"""The reference artifacts (written by an earlier system) load, validate, re-serialise
without loss and print: the original JSON files are the independent reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmevo.artifacts import (
    DiagnosticArtifact,
    ReproductionArtifact,
    dump_artifact,
    load_artifact,
    save_artifact,
)
from llmevo.cli import main

REFERENCE_NAMES = {
    "2104.09864-rope.public-seed42.json": ReproductionArtifact,
    "2412.09871-blt.public-seed42.json": ReproductionArtifact,
    "2610.21126-rope-relay.component-cpu-seeds42-44.json": DiagnosticArtifact,
}
# Numbers each file must show when printed (rounded to the 6 significant digits shown).
KEY_NUMBERS = {  # as llmevo.reports.sections.format_number writes them (4 decimals)
    "2104.09864-rope.public-seed42.json": ["6.0431", "421.1791", "139,584", "reproduction:rope"],
    "2412.09871-blt.public-seed42.json": ["6.0215", "412.2101", "-0.36%", "139,649"],
    "2610.21126-rope-relay.component-cpu-seeds42-44.json": [
        "3.974e-07",
        "5.9009 ± 1.0084 (n=3)",
        "not_reproduced_high_cost",
        "9c6e01ebd163df0da294875448c1e2c207b9a3b4",
    ],
}


def _key_paths(value: Any, prefix: str = "") -> list[str]:
    """Every key of a JSON value in document order, as dotted paths (order-sensitive)."""
    if isinstance(value, dict):
        paths = []
        for key, item in value.items():
            paths.append(f"{prefix}{key}")
            paths.extend(_key_paths(item, f"{prefix}{key}."))
        return paths
    if isinstance(value, list):
        return [
            path
            for index, item in enumerate(value)
            for path in _key_paths(item, f"{prefix}{index}.")
        ]
    return []


@pytest.mark.parametrize("name", sorted(REFERENCE_NAMES))
def test_round_trip_is_lossless(reference_dir: Path, name: str) -> None:
    path = reference_dir / name
    original = json.loads(path.read_text(encoding="utf-8"))
    artifact = load_artifact(path)
    assert type(artifact) is REFERENCE_NAMES[name]
    dumped = artifact.to_json_dict()
    assert dumped == original
    assert dump_artifact(artifact) == original
    assert _key_paths(dumped) == _key_paths(original)
    # Serialised as the reference was (2-space indent, non-ASCII kept): byte for byte.
    assert json.dumps(dumped, indent=2, ensure_ascii=False) == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(REFERENCE_NAMES))
def test_save_then_load_is_lossless(reference_dir: Path, name: str, tmp_path: Path) -> None:
    original = json.loads((reference_dir / name).read_text(encoding="utf-8"))
    target = tmp_path / "copy" / name
    save_artifact(load_artifact(reference_dir / name), target)
    assert json.loads(target.read_text(encoding="utf-8")) == original
    assert load_artifact(target).to_json_dict() == original


@pytest.mark.parametrize("name", sorted(REFERENCE_NAMES))
def test_show_prints_key_numbers(
    reference_dir: Path,
    name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    try:
        main(["show", str(reference_dir / name)])
    except SystemExit as exit_:
        assert exit_.code in (0, None)
    out = capsys.readouterr().out
    for number in KEY_NUMBERS[name]:
        assert number in out, f"{number!r} missing from `llmevo show {name}`"


def test_rope_reference_is_flagged_as_vacuous(
    reference_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    main(["show", str(reference_dir / "2104.09864-rope.public-seed42.json")])
    assert "identical validation metrics" in capsys.readouterr().out
    main(["show", str(reference_dir / "2412.09871-blt.public-seed42.json")])
    assert "identical validation metrics" not in capsys.readouterr().out


def test_compare_references(
    reference_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    main(
        [
            "compare",
            str(reference_dir / "2104.09864-rope.public-seed42.json"),
            str(reference_dir / "2412.09871-blt.public-seed42.json"),
        ]
    )
    out = capsys.readouterr().out
    # BLT's method arm vs RoPE's method arm: (6.021533 - 6.043058) / 6.043058 = -0.356 %.
    lm_row = next(line for line in out.splitlines() if "lm_loss" in line)
    assert lm_row.rstrip(" │").endswith("-0.36%")


def test_compare_refuses_mixed_kinds(
    reference_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "compare",
                str(reference_dir / "2104.09864-rope.public-seed42.json"),
                str(reference_dir / "2610.21126-rope-relay.component-cpu-seeds42-44.json"),
            ]
        )
    assert exit_.value.code == 2
    assert "cannot compare a reproduction artifact" in capsys.readouterr().err
