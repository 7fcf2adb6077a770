"""Rendering: statistics and verdicts appear, comparisons compute B-vs-A changes, CLI errors."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from llmevo.artifacts import validate_artifact
from llmevo.artifacts.schema import MeanStd, load_artifact
from llmevo.cli import main
from llmevo.reports.readme import write_report
from llmevo.reports.sections import (
    artifact_sections,
    format_mean_std,
    format_number,
    format_percent,
    relative_change_percent,
    verdict_sentence,
)
from llmevo.reports.terminal import artifact_view, comparison_view

REPO_ROOT = Path(__file__).resolve().parents[2]
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


def test_cell_formatters() -> None:
    assert [format_number(v) for v in (True, False, None, 1727, 0.0)] == [
        "yes", "no", "—", "1,727", "0"
    ]
    assert format_number(6.04349) == "6.0435" and format_number(3.974e-07) == "3.974e-07"
    assert format_percent(-0.356) == "-0.36%" and format_percent(None) == "—"
    assert format_mean_std(MeanStd(mean=6.043, std=0.012, n=3)) == "6.0430 ± 0.0120 (n=3)"


def _with_statistics(reference_dir: Path) -> dict[str, Any]:
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
    return data


def test_sections_carry_statistics_verdict_and_provenance(reference_dir: Path) -> None:
    data = _with_statistics(reference_dir)
    artifact = validate_artifact(data)
    sections = {s.key: s for s in artifact_sections(artifact)}
    # the summary, then the regime it was measured in and its class's transfer rate at scale
    from llmevo.reports.sections import calibration

    assert sections["verdict"].sentences == (data["verdict"]["summary"], calibration(artifact))
    assert sections["verdict"].sentences[1].startswith("Measured at 139,584 parameters")
    assert sections["verdict"].warnings == ()  # BLT's arms differ
    rows = {row[0]: row for row in sections["validation"].rows}
    # lm_loss has statistics: mean ± std (n) per arm, the paired change and its interval
    assert rows["lm_loss ↓"][1:] == (
        "6.0430 ± 0.0120 (n=3)", "6.0215 ± 0.0110 (n=3)", "-0.36% [-0.61%, -0.10%]", "yes"
    )
    # perplexity has none: the arms' means and their relative change, computed here
    base, method = data["baseline"]["perplexity"], data["method"]["perplexity"]
    expected = 100.0 * (method - base) / base
    assert rows["perplexity ↓"][3] == f"{expected:+.2f}% (means; no CI)"
    assert rows["primary ↑"][0] == "primary ↑"  # higher is better
    provenance = dict(sections["provenance"].rows)
    assert provenance["code commit"] == data["provenance"]["original_code_commit"]
    assert provenance["command"] == "not recorded"  # historical provenance said plainly
    assert "historical migration" in provenance and "allow dirty" not in provenance
    assert sections["tuning"].warnings[0].startswith("untuned, both arms")


def test_terminal_and_markdown_say_the_same(reference_dir: Path, tmp_path: Path) -> None:
    """Both writers lay out the same sections: every sentence and cell appears in each."""
    data = _with_statistics(reference_dir)
    data["baseline"]["name"] = "llama_modern[position=learned]"  # not rich markup
    artifact = validate_artifact(data)
    lines = _text(artifact_view(artifact)).splitlines()
    terminal = " ".join(" ".join(lines).split())
    table_rows = [line for line in lines if line.startswith("│")]
    assert any("│ llama_modern[position=learned] │" in line for line in table_rows)
    markdown = write_report(artifact, tmp_path / "a.json", tmp_path / "out").read_text()
    for section in artifact_sections(artifact):
        for text in (*section.sentences, *section.warnings, *(c for r in section.rows for c in r)):
            if "`" in text:  # the Markdown writer's artifact link
                continue
            assert " ".join(text.split()) in terminal, text
            assert text.replace("|", "\\|") in markdown, text


def test_recomputed_verdict_says_so(reference_dir: Path) -> None:
    """An artifact without a verdict block gets one from eval.stats.verdict, marked as such."""
    data = _load(reference_dir, BLT)
    data.pop("verdict", None)
    metric, sentence = verdict_sentence(validate_artifact(data))
    assert metric == "lm_loss"
    assert sentence.endswith("(recomputed by the report: the artifact has no verdict block)")
    change = relative_change_percent(data["baseline"]["lm_loss"], data["method"]["lm_loss"])
    assert f"{abs(change):.2f}%" in sentence


def test_identical_arms_warn(reference_dir: Path) -> None:
    data = _load(reference_dir, BLT)
    data["method"] = {**data["baseline"], "name": data["method"]["name"]}
    verdict_section = artifact_sections(validate_artifact(data))[1]
    assert verdict_section.key == "verdict" and "vacuous" in verdict_section.warnings[0]


def test_diagnostic_comparison(reference_dir: Path) -> None:
    a = _load(reference_dir, RELAY)
    b = json.loads(json.dumps(a))
    b["metrics"]["gradient_norm_keys"]["mean"] = a["metrics"]["gradient_norm_keys"]["mean"] * 1.5
    b["metrics"]["values_unchanged"] = False
    text = _text(comparison_view(validate_artifact(a), validate_artifact(b)))
    rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("│")}
    assert "+50.00%" in rows["gradient_norm_keys"]
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


STAGE_ROWS = ("post_training_loss", "reward_bearing_group_rate")


@pytest.mark.parametrize(("folder", "shown"), [
    ("2104.09864-rope", ()),  # a pretraining component: no stage ran (its arms record 0 for both)
    ("2305.18290-dpo", ("post_training_loss",)),  # a stage without sampled groups: no rate
    ("2402.03300-grpo", STAGE_ROWS),
])
def test_tables_show_only_the_metrics_that_apply(folder, shown):
    """A smoke reproduction of a pretraining component printed post_training_loss and
    reward_bearing_group_rate rows of zeros, which read as measurements."""
    from llmevo.cli.reproduce import summary_table
    from llmevo.reports.sections import artifact_sections

    path = sorted((REPO_ROOT / "docs" / "reproductions" / folder / "metrics").glob("public-*.json"))[0]
    artifact = load_artifact(path)
    if not shown:
        assert artifact.baseline.post_training_loss == 0.0 == artifact.method.reward_bearing_group_rate
    sections = {section.key: section for section in artifact_sections(artifact)}
    validation = {row[0].split()[0] for row in sections["validation"].rows}
    terminal = set(summary_table(artifact).columns[0]._cells)
    for metric in STAGE_ROWS:
        assert (metric in validation) == (metric in shown), (metric, validation)
        assert (metric in terminal) == (metric in shown), (metric, terminal)
    assert "lm_loss" in validation and "lm_loss" in terminal
