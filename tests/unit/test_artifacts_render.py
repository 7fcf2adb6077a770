"""Rendering: statistics and verdicts appear, comparisons compute B-vs-A changes, CLI errors."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from llmevo.artifacts import validate_artifact
from llmevo.artifacts.render import relative_change_percent, render_artifact, render_comparison
from llmevo.cli import main

BLT = "2412.09871-blt.public-seed42.json"
RELAY = "2610.21126-rope-relay.component-cpu-seeds42-44.json"


def _text(renderables: list[Any]) -> str:
    console = Console(width=220, record=True, file=io.StringIO())
    for renderable in renderables:
        console.print(renderable)
    return console.export_text()


def _load(reference_dir: Path, name: str) -> dict[str, Any]:
    return json.loads((reference_dir / name).read_text(encoding="utf-8"))


def test_relative_change_percent() -> None:
    assert relative_change_percent(4.0, 3.0) == pytest.approx(-25.0)
    assert relative_change_percent(-2.0, -1.0) == pytest.approx(50.0)
    assert relative_change_percent(0.0, 1.0) is None
    assert relative_change_percent(None, 1.0) is None


def test_statistics_and_verdict_are_shown(reference_dir: Path) -> None:
    data = _load(reference_dir, BLT)
    data["statistics"] = {
        "lm_loss": {
            "baseline": {"mean": 6.043, "std": 0.012, "n": 3},
            "method": {"mean": 6.0215, "std": 0.011, "n": 3},
            "paired_relative_change_percent": {
                "mean": -0.356,
                "ci_low": -0.61,
                "ci_high": -0.1,
                "n": 3,
                "interval": "t 95%",
            },
            "significant": True,
        }
    }
    data["verdict"] = {
        "metric": "lm_loss",
        "lower_is_better": True,
        "significant": True,
        "noise_floor_percent": 0.2,
        "summary": "BLT lowers lm_loss by 0.36% (95% CI -0.61% to -0.10%)",
    }
    text = _text(render_artifact(validate_artifact(data)))
    assert "6.043 ± 0.012 (n=3)" in text
    assert "-0.356% [-0.610%, -0.100%] *" in text
    assert "BLT lowers lm_loss by 0.36%" in text
    assert "not recorded" in text  # historical provenance fields shown plainly


def test_diagnostic_comparison(reference_dir: Path) -> None:
    a = _load(reference_dir, RELAY)
    b = json.loads(json.dumps(a))
    b["metrics"]["gradient_norm_keys"]["mean"] = a["metrics"]["gradient_norm_keys"]["mean"] * 1.5
    b["metrics"]["values_unchanged"] = False
    text = _text(render_comparison(validate_artifact(a), validate_artifact(b)))
    rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("│")}
    assert "+50.000%" in rows["gradient_norm_keys"]
    assert "changed" in rows["values_unchanged"]
    assert "same" in rows["nonrotary_tail_unchanged"]


def test_show_broken_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference_dir: Path
) -> None:
    data = _load(reference_dir, BLT)
    data["baseline"]["lm_loss"] = None
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        main(["show", str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "broken.json: baseline.lm_loss:" in err
