"""Reports, plots and the leaderboard on a synthetic 3-seed artifact and the reference ones."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
from pathlib import Path

import pytest

from llmevo.artifacts.schema import load_artifact, validate_artifact
from llmevo.cli import main
from llmevo.errors import ArtifactError, WriteError
from llmevo.eval.metrics import derive_arm_metrics
from llmevo.eval.stats import build_statistics, claim_policy, verdict
from llmevo.reports.leaderboard import (
    build_leaderboard,
    scan_artifacts,
    write_leaderboard,
)
from llmevo.reports.readme import default_report_dir, report_variant, write_report

REPO_ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SEEDS = [42, 43, 44]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def synthetic_artifact() -> dict:
    """A 3-seed reproduction whose method lowers lm_loss by about 2% on every seed."""
    per_seed = []
    for offset, seed in enumerate(SEEDS):
        baseline = derive_arm_metrics({"lm_loss": 5.0 + 0.01 * offset, "instruction_loss": 5.5})
        method = derive_arm_metrics(
            {"lm_loss": (5.0 + 0.01 * offset) * (0.98 - 0.002 * offset), "instruction_loss": 5.4}
        )
        per_seed.append({"seed": seed, "baseline": baseline, "method": method})
    metrics = ["lm_loss", "perplexity", "instruction_loss", "primary", "fitness"]
    statistics = build_statistics(per_seed, metrics)
    lm_verdict = verdict(
        "lm_loss",
        [row["baseline"]["lm_loss"] for row in per_seed],
        [row["method"]["lm_loss"] for row in per_seed],
        method_name="rope",
    )
    formal, policy = claim_policy(len(SEEDS))
    steps = list(range(1, 21))
    curves = {
        arm: {
            "steps": steps,
            "per_seed": {
                str(seed): [6.2 - scale * step / 20 + 0.01 * i for step in steps]
                for i, seed in enumerate(SEEDS)
            },
        }
        for arm, scale in (("baseline", 1.0), ("method", 1.1))
    }

    def arm(name: str, key: str) -> dict:
        means = {metric: statistics[metric][key]["mean"] for metric in metrics}
        return {
            "name": name,
            "parameters": 139584,
            "optimizer": "adamw",
            "device": "cpu",
            "architecture_stats": {},
            "seeds": SEEDS,
            **means,
            "public_composite": means["primary"],
            "composite_loss": -means["primary"],
            "initial_loss": 6.2,
            "final_loss": means["lm_loss"],
            "post_training_loss": 0.0,
            "reward_bearing_group_rate": 0.0,
            "muon_orthogonality_error": 0.0,
        }

    return {
        "paper": {
            "arxiv_id": "2104.09864",
            "title": "RoFormer",
            "url": "https://arxiv.org/abs/2104.09864",
            "organization": "Zhuiyi Technology",
        },
        "dataset": {
            "name": "WikiText-2",
            "train_tokens": 120000,
            "validation_tokens": 8000,
            "test_tokens": 8000,
            "narrative_tokens": 120000,
            "instruction_train": 0,
            "instruction_validation": 32,
            "preference_validation": 32,
            "reasoning_validation": 0,
            "benchmark_suite": "core",
            "vocab_size": 512,
            "tokenizer": "bpe-512.json",
        },
        "setup": {
            "seed": 42,
            "steps_per_variant": 20,
            "dimensions": 64,
            "layers": 2,
            "sequence_length": 64,
            "evolve_architecture": "rope",
            "evolve_optimizer": "adamw",
            "preset": "quick",
            "seeds": SEEDS,
            "same_tokens_optimizer_and_budget": True,
            "token_stream_sha256": "ab" * 32,
        },
        "baseline": arm("learned_absolute", "baseline"),
        "method": arm("rope", "method"),
        "relative": {
            "lm_loss_percent": statistics["lm_loss"]["paired_relative_change_percent"]["mean"],
            "perplexity_percent": statistics["perplexity"]["paired_relative_change_percent"]["mean"],
        },
        "paper_results": {},
        "scope": "RoPE against learned absolute positions at an equal budget.",
        "schema_version": 2,
        "manifest_ref": "reproduction:rope",
        "evaluation_protocol": {
            "tier": "l2_public_dataset",
            "seeds": SEEDS,
            "formal_comparison": formal,
            "claim_policy": policy,
            "interval": "95% paired t",
            "selection_split": "validation",
        },
        "provenance": {
            "artifact_path": "docs/reproductions/2104.09864-rope/metrics/core-seed42-44.json",
            "dataset_fingerprint": "f" * 64,
            "created_at": "2026-11-30T08:00:00+00:00",
            "code_commit": "0123abc",
            "code_dirty": False,
            "command": "llmevo reproduce rope",
        },
        "per_seed": per_seed,
        "statistics": statistics,
        "verdict": lm_verdict,
        "test": {"baseline": {"lm_loss": 5.1}, "method": {"lm_loss": 4.99}},
        "training_curves": curves,
    }


def test_synthetic_verdict_is_significant():
    artifact = synthetic_artifact()
    validate_artifact(artifact)  # the fixture is a valid schema-v2 reproduction artifact
    assert artifact["verdict"]["significant"] is True
    assert "significant improvement" in artifact["verdict"]["summary"]


def test_report_on_three_seed_artifact(tmp_path):
    artifact = synthetic_artifact()
    artifact_path = tmp_path / "docs" / "reproductions" / "x" / "metrics" / "core-seed42-44.json"
    artifact_path.parent.mkdir(parents=True)
    artifact_path.write_text(json.dumps(artifact))
    out_dir = artifact_path.parent.parent
    readme = write_report(load_artifact(artifact_path), artifact_path, out_dir)
    text = readme.read_text()
    assert text.startswith("# rope (arXiv 2104.09864)")
    assert "RoFormer" in text and "https://arxiv.org/abs/2104.09864" in text
    assert artifact["verdict"]["summary"] in text
    assert "| metric (validation) | baseline: learned_absolute | method: rope |" in text
    lm_row = next(line for line in text.splitlines() if line.startswith("| lm_loss"))
    cells = [cell.strip() for cell in lm_row.strip("|").split("|")]
    lm = artifact["statistics"]["lm_loss"]
    change = lm["paired_relative_change_percent"]
    assert cells[0] == "lm_loss ↓" and cells[4] == "yes"
    for cell, arm in zip(cells[1:3], ("baseline", "method"), strict=True):
        mean, std, n = re.fullmatch(r"(\S+) ± (\S+) \(n=(\d+)\)", cell).groups()
        assert float(mean) == pytest.approx(lm[arm]["mean"], abs=1e-4)
        assert float(std) == pytest.approx(lm[arm]["std"], rel=1e-3, abs=1e-4) and n == "3"
    numbers = [float(x) for x in re.findall(r"[-+]\d+\.\d+", cells[3])]
    assert numbers == pytest.approx(
        [change["mean"], change["ci_low"], change["ci_high"]], abs=0.005
    )
    test_row = next(line for line in text.splitlines() if line.startswith("| lm_loss | 5.1"))
    assert f"{100 * (4.99 - 5.1) / 5.1:+.2f}%" in test_row
    assert "test split, evaluated once" in text.lower() and "not used for selection" in text
    assert (
        "![" in text
        and "(plots/training_loss.png)" in text
        and "(plots/paired_lm_loss.png)" in text
    )
    assert "[`metrics/core-seed42-44.json`](metrics/core-seed42-44.json)" in text
    assert "| code commit | 0123abc (working tree dirty: no) |" in text
    assert "| command | llmevo reproduce rope |" in text
    for name in ("training_loss.png", "paired_lm_loss.png"):
        width, height = _png_size(out_dir / "plots" / name)
        assert width > 400 and height > 300


def test_report_without_optional_blocks(tmp_path):
    artifact = synthetic_artifact()
    for key in ("per_seed", "statistics", "verdict", "test", "training_curves"):
        artifact.pop(key)
    text = write_report(validate_artifact(artifact), tmp_path / "a.json", tmp_path / "out").read_text()
    assert "recomputed by the report" in text
    assert "records no test-split results" in text
    assert "No training curves" in text
    assert not (tmp_path / "out" / "plots").exists()


def test_report_takes_only_validated_artifacts(tmp_path):
    with pytest.raises(ArtifactError, match="validated artifact"):
        write_report(synthetic_artifact(), tmp_path / "a.json", tmp_path)  # a raw dict
    assert not (tmp_path / "README.md").exists()


def test_cli_report_refuses_what_show_refuses(tmp_path, capsys):
    """`llmevo report` used to write a README for this file while `show` refused it."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 2, "method": {}, "baseline": {}}')
    for command in (["show", str(bad)], ["report", str(bad), "--out", str(tmp_path / "out")]):
        with pytest.raises(SystemExit) as exit_info:
            main(command)
        assert exit_info.value.code == 2
        assert "paper: Field required" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["statistics", "arm", "per_seed", "curve"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_schema_refuses_nan_and_infinity_in_metrics_and_statistics(where, value):
    artifact = synthetic_artifact()
    if where == "statistics":
        artifact["statistics"]["lm_loss"]["paired_relative_change_percent"]["ci_low"] = value
    elif where == "arm":
        artifact["method"]["lm_loss"] = value
    elif where == "per_seed":
        artifact["per_seed"][0]["method"]["lm_loss"] = value
    else:
        artifact["training_curves"]["method"]["per_seed"]["42"][3] = value
    with pytest.raises(ArtifactError, match="finite number"):
        validate_artifact(json.loads(json.dumps(artifact)))  # NaN/Infinity survive json


def test_reports_on_reference_artifacts(reference_dir, tmp_path):
    reference = reference_dir
    paths = sorted(reference.glob("*.json"))
    assert len(paths) == 3
    texts = {}
    for path in paths:
        texts[path.name] = write_report(load_artifact(path), path, tmp_path / path.stem).read_text()
    rope = texts["2104.09864-rope.public-seed42.json"]
    assert "identical validation metrics" in rope and "vacuous" in rope
    assert "do not claim a stable improvement" in rope
    blt = texts["2412.09871-blt.public-seed42.json"]
    assert "blt lowers lm_loss by 0.36%" in blt and "identical" not in blt
    relay = texts["2610.21126-rope-relay.component-cpu-seeds42-44.json"]
    assert "not_reproduced_high_cost" in relay and "3.974e-07 ± 1.377e-07 (n=3)" in relay
    assert default_report_dir(load_artifact(paths[2])) == Path(
        "docs/foundation-models/2610.21126-rope-relay"
    )
    assert default_report_dir(load_artifact(paths[0])) == Path(
        "docs/reproductions/2104.09864-rope"
    )


def test_leaderboard_collects_and_skips(reference_dir, tmp_path):
    """Artifacts by location: the root's metrics/ folders and the reference folder; other
    JSON under the root is skipped because of where it is, even when it does not parse."""
    root = tmp_path / "docs"
    (root / "repro" / "metrics").mkdir(parents=True)
    (root / "repro" / "metrics" / "core-seed42-44.json").write_text(
        json.dumps(synthetic_artifact())
    )
    (root / "other.json").write_text('{"hello": 1}')
    (root / "broken.json").write_text("{not json")
    entries, skipped = scan_artifacts([root], references=[reference_dir])
    assert len(entries) == 4 and len(skipped) == 2
    assert len(scan_artifacts([root])[0]) == 1
    rows = build_leaderboard(entries, tmp_path)
    assert [row["kind"] for row in rows] == ["reproduction"] * 3 + ["diagnostic"]
    synthetic = next(row for row in rows if row["seeds"] == 3 and row["kind"] == "reproduction")
    assert synthetic["formal"] is True and synthetic["significant"] is True
    assert synthetic["ci_low"] < synthetic["change_percent"] < synthetic["ci_high"] < 0
    blt = next(row for row in rows if row["name"] == "blt")
    assert blt["change_percent"] == pytest.approx(-0.3561917816484779)
    assert blt["ci_low"] is None and blt["formal"] is False
    md_path, json_path = tmp_path / "LEADERBOARD.md", tmp_path / "LEADERBOARD.json"
    write_leaderboard(rows, md_path, json_path, tmp_path)
    markdown = md_path.read_text()
    assert "| blt | 2412.09871 | core | 1 | no |" in markdown
    assert "rope-relay" in markdown and "(docs/repro/metrics/core-seed42-44.json)" in markdown
    assert json.loads(json_path.read_text())["rows"] == json.loads(json.dumps(rows))


def test_leaderboard_missing_root(tmp_path):
    with pytest.raises(ArtifactError, match="does not exist"):
        scan_artifacts([tmp_path / "nope"])


def test_cli_report_and_leaderboard(reference_dir, tmp_path, capsys):
    """Run from the repository root, as a user would: a leaderboard of another --root leaves
    the repository's README (and its evidence table) alone."""
    readme = REPO_ROOT / "README.md"
    before = readme.read_bytes()
    reference = reference_dir
    out = tmp_path / "report"
    main(["report", str(reference / "2412.09871-blt.public-seed42.json"), "--out", str(out)])
    assert (out / "README.md").exists()
    (tmp_path / "docs" / "metrics").mkdir(parents=True)
    shutil.copyfile(reference / "2412.09871-blt.public-seed42.json",
                    tmp_path / "docs" / "metrics" / "a.json")
    main(["leaderboard", "--root", str(tmp_path / "docs"), "--reference", str(reference),
          "--out", str(tmp_path / "LB.md")])
    assert (tmp_path / "LB.json").exists()
    assert "rope-relay" in capsys.readouterr().out
    assert readme.read_bytes() == before
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(bad)])
    assert exit_info.value.code == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_leaderboard_refuses_an_artifact_that_does_not_validate(tmp_path):
    artifact = synthetic_artifact()
    artifact["statistics"]["lm_loss"]["paired_relative_change_percent"]["ci_high"] = float("nan")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "a.json").write_text(json.dumps(artifact))
    with pytest.raises(ArtifactError, match="a.json: statistics.lm_loss"):
        scan_artifacts([tmp_path])


def test_diagnostic_report_draws_the_full_experiment(tmp_path, reference_dir):
    from llmevo.reports.readme import write_report

    table = [
        {"arm": "full_cache", "retention_ratio": 1.0, "budget": "all", "lm_loss": 4.2},
        {"arm": "relay", "retention_ratio": 1.0, "budget": 63, "lm_loss": 4.4},
        {"arm": "relay", "retention_ratio": 0.5, "budget": 32, "lm_loss": 3.9},
        {"arm": "original_positions", "retention_ratio": 1.0, "budget": 63, "lm_loss": 4.3},
        {"arm": "original_positions", "retention_ratio": 0.5, "budget": 32, "lm_loss": 4.1},
    ]
    reference = reference_dir / "2610.21126-rope-relay.component-cpu-seeds42-44.json"
    artifact = json.loads(reference.read_text())
    artifact["full_experiment"] = {"status": "ran", "table": table}
    readme = write_report(validate_artifact(artifact), tmp_path / "a.json", tmp_path / "out")
    text = readme.read_text()
    assert "## Full experiment (L2)" in text and "| relay | 0.5000 | 32 | 3.9000 |" in text
    png = tmp_path / "out" / "plots" / "full_experiment.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_tuning_block(tmp_path):
    """Each arm's grid with its validation means, the chosen lr, and an edge warning."""
    artifact = synthetic_artifact()

    def arm(means, chosen, on_edge):
        settings = [
            {"lr": lr, "validation": {"1000": mean}, "mean": mean, "status": "complete"}
            for lr, mean in zip((1e-3, 3e-3, 1e-2), means, strict=True)
        ]
        return {"settings": settings, "chosen": {"lr": chosen}, "chosen_on_edge": on_edge}

    artifact["tuning"] = {
        "parameter": "lr",
        "grid": [1e-3, 3e-3, 1e-2],
        "seeds": [1000],
        "metric": "lm_loss",
        "arms": {"baseline": arm([5.3, 5.1, 5.2], 3e-3, False), "method": arm([5.2, 5.0, 4.9], 1e-2, True)},
    }
    text = write_report(validate_artifact(artifact), tmp_path / "a.json", tmp_path / "out").read_text()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if "0.001: " in line}
    assert "0.001: 5.3000, 0.003: 5.1000, 0.01: 5.2000 | 0.003 | not extended |" in rows["learned_absolute"]
    assert "| 0.01 | not extended; best still on the edge |" in rows["rope"]
    assert "tuning seed(s) 1000" in text and "untuned" not in text
    assert _png_size(tmp_path / "out" / "plots" / "tuning_loss_vs_lr.png")[0] > 400
    # a best at the stability edge confirmed on two more seeds: the row says which lrs and seeds
    method = artifact["tuning"]["arms"]["method"]
    method["settings"][2].update(validation={"1000": 4.9, "1001": 5.6, "1002": 5.7}, mean=5.4)
    method["settings"][1].update(validation={"1000": 5.0, "1001": 5.0, "1002": 5.0})
    method.update(chosen={"lr": 3e-3}, chosen_on_edge=False, confirmed=[3e-3, 1e-2])
    artifact["tuning"]["confirm_seeds"] = [1001, 1002]
    text = write_report(validate_artifact(artifact), tmp_path / "a.json", tmp_path / "out2").read_text()
    assert "| 0.003 | not extended; 0.003 and 0.01 confirmed on seeds 1001, 1002 |" in text
    # the re-scoring record (2026-12-05 on): which settings, on which seeds, under which noise
    noise = {"spread_percent": 1.42, "threshold_percent": 1.42, "source": "default", "seeds": 1, "why": "x"}
    method["rescoring"] = {"noise": noise, "top": 3, "seeds": [1001, 1002], "outcome": "chosen",
                           "settings": [{"lr": 1e-2, "gap_percent": 0.0, "why": "best"},
                                        {"lr": 3e-3, "gap_percent": 2.0, "why": "neighbour"}],
                           "next": {"lr": 1e-3, "gap_percent": 6.1}}
    artifact["tuning"]["arms"]["baseline"]["rescoring"] = {
        "noise": noise, "top": 3, "seeds": [], "outcome": "clear", "next": {"lr": 1e-2, "gap_percent": 1.96},
        "settings": [{"lr": 3e-3, "gap_percent": 0.0, "why": "best"}]}
    text = write_report(validate_artifact(artifact), tmp_path / "a.json", tmp_path / "out3").read_text()
    assert ("| 0.003 | not extended; 0.01 and 0.003 re-scored on seeds 1001, 1002 (seed noise 1.42%, default) |"
            in text)
    assert "not extended; a clear winner (seed noise 1.42%, default; the runner-up +1.96%): nothing re-scored |" in text
    assert "No adequacy probe" not in text  # an artifact from before the probe says nothing of it
    # the adequacy probe (eighteenth session): what it read, and whether the grid followed it
    probe = {"lr": 0.09, "steps_above_top": 2, "top": 1e-2, "validation": {"1000": 5.5}, "mean": 5.5,
             "status": "complete", "best_before": {"lr": 3e-3, "mean": 5.0}, "gap_percent": 10.0,
             "noise": noise, "moved": False, "added": [], "outcome": "kept"}
    artifact["tuning"]["arms"]["baseline"]["probe"] = probe
    method["probe"] = {**probe, "validation": {"1000": 4.5}, "mean": 4.5, "gap_percent": -10.0, "moved": True,
                       "added": [0.03, 0.27]}
    text = write_report(validate_artifact(artifact), tmp_path / "a.json", tmp_path / "out4").read_text()
    assert "not extended; probe 0.09 +10% of the best (1.42% noise): not taken; a clear winner" in text
    assert "not extended; probe 0.09 -10% of the best: grid extended to 0.03, 0.09, 0.27; 0.01 and 0.003" in text
    artifact["tuning"]["probe"] = False
    text = write_report(validate_artifact(artifact), tmp_path / "a.json", tmp_path / "out5").read_text()
    assert "No adequacy probe above the grid's top (--no-tune-probe)" in text


def test_an_against_artifact_says_its_baseline_everywhere(tmp_path, capsys):
    """`reproduce alibi --against rope`: leaderboard row, report, show and default report
    folder all say which baseline, apart from the declared ablation's artifact."""
    declared = synthetic_artifact()
    against = synthetic_artifact()
    against["setup"]["against"] = "rope:theta=500000"
    against["baseline"]["name"] = "llama_modern[position=rope:theta=500000]"
    root = tmp_path / "docs" / "reproductions" / "2104.09864-rope" / "metrics"
    root.mkdir(parents=True)
    (root / "public-quick-seeds42-44.json").write_text(json.dumps(declared))
    against_path = root / "public-quick-vs-rope-theta-500000-seeds42-44.json"
    against_path.write_text(json.dumps(against))
    rows = build_leaderboard(scan_artifacts([tmp_path / "docs"])[0], tmp_path)
    assert [row["against"] for row in rows] == [None, "rope:theta=500000"]
    write_leaderboard(rows, tmp_path / "LB.md", tmp_path / "LB.json", tmp_path)
    markdown = (tmp_path / "LB.md").read_text()
    assert "| lm_loss | learned_absolute | 5.0100 |" in markdown
    assert ("| lm_loss | llama_modern[position=rope:theta=500000] *(--against rope:theta=500000)* "
            "| 5.0100 |") in markdown
    typed = load_artifact(against_path)
    assert default_report_dir(typed) == Path("docs/reproductions/2104.09864-rope/vs-rope-theta-500000")
    assert default_report_dir(load_artifact(root / "public-quick-seeds42-44.json")) == Path(
        "docs/reproductions/2104.09864-rope")
    readme = write_report(typed, against_path, tmp_path / "report").read_text()
    assert "Arms: baseline llama_modern[position=rope:theta=500000] vs method rope." in readme
    assert "Baseline chosen with --against rope:theta=500000, not the declared ablation" in readme
    main(["show", str(against_path)])
    assert "Baseline chosen with --against rope:theta=500000" in " ".join(capsys.readouterr().out.split())


def test_a_variant_reports_beside_the_declared_comparison_never_over_it():
    """--against, space tuning and a rung each get their own report subfolder, in that
    order, and `llmevo report` finds the one `reproduce --publish` wrote (the published
    space-tuned muon artifact reports in tune-space/, not over the lr grid's report)."""
    assert report_variant() == Path()
    assert report_variant("rope:theta=5e5", True, "rung1") == Path("vs-rope-theta-5e5/tune-space/rung1")
    assert report_variant(space=True) == Path("tune-space")
    muon = REPO_ROOT / "docs/reproductions/2502.16982-muon/metrics/public-quick-tuned-space-seeds42-46.json"
    assert default_report_dir(load_artifact(muon)) == Path("docs/reproductions/2502.16982-muon/tune-space")
    rung = load_artifact(REPO_ROOT / "docs/ladders/2104.09864-rope/rung-1.json")
    assert default_report_dir(rung) == Path("docs/reproductions/2104.09864-rope/rung-1")
    explicit = rung.model_copy(update={"setup": rung.setup.model_copy(update={"rung": None})})
    with pytest.raises(ArtifactError, match="explicit sizes"):
        default_report_dir(explicit)


def test_a_tuned_report_gives_each_arms_chosen_learning_rate_not_the_presets():
    """A tuned artifact's arms never trained at the preset's lr: the protocol row names each
    arm's choice (the lion space artifact: AdamW 3.71e-3, Lion 1.13e-2, preset 3e-3)."""
    from llmevo.reports.sections import artifact_sections

    root = Path(__file__).resolve().parents[2] / "docs/reproductions/2302.06675-lion/metrics"

    def protocol_row(name: str) -> str:
        sections = artifact_sections(load_artifact(root / name))
        protocol = next(section for section in sections if section.key == "protocol")
        return next(" ".join(map(str, row)) for row in protocol.rows if "learning rate" in row[0])

    tuned = protocol_row("public-quick-tuned-space-seeds42-46.json")
    assert "baseline 0.0037" in tuned and "method 0.0113" in tuned and "preset's 0.0030" in tuned
    assert protocol_row("public-quick-seeds42-44.json").endswith("48 / 0.0030")


def test_the_leaderboard_pair_records_its_page_and_a_torn_pair_is_detected(tmp_path):
    from llmevo.reports.leaderboard import check_pair

    md_path, json_path = tmp_path / "LEADERBOARD.md", tmp_path / "LEADERBOARD.json"
    write_leaderboard([], md_path, json_path, tmp_path)
    recorded = json.loads(json_path.read_text())["markdown_sha256"]
    assert recorded == hashlib.sha256(md_path.read_bytes()).hexdigest()  # an independent digest
    check_pair(md_path, json_path)
    md_path.write_text(md_path.read_text() + "edited\n")
    with pytest.raises(ArtifactError, match="not the page .* was written with"):
        check_pair(md_path, json_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LEADERBOARD.json", "LEADERBOARD.md"]


def test_a_failed_leaderboard_json_leaves_both_files_as_they_were(tmp_path, monkeypatch):
    """The two files were written one after the other: a failure writing the JSON left a new
    page beside the old JSON."""
    from llmevo.reports import leaderboard

    md_path, json_path = tmp_path / "LEADERBOARD.md", tmp_path / "LEADERBOARD.json"
    md_path.write_text("the old page\n")
    json_path.write_text(json.dumps({"generated_by": "llmevo leaderboard", "rows": []}))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real = leaderboard.write_text_atomic

    def failing(path, text):
        if ".json" in Path(path).name:
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(leaderboard, "write_text_atomic", failing)
    with pytest.raises(OSError):
        write_leaderboard([], md_path, json_path, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_pair_torn_between_its_renames_is_detected(tmp_path, monkeypatch):
    from llmevo.reports import leaderboard

    md_path, json_path = tmp_path / "LB.md", tmp_path / "LB.json"
    leaderboard.write_pair(md_path, "page one\n", json_path, json.dumps({"markdown_sha256": hashlib.sha256(
        b"page one\n").hexdigest(), "rows": []}))
    leaderboard.check_pair(md_path, json_path)
    renames = []
    real = leaderboard.os.replace

    def second_fails(source, target):
        if Path(target).name.endswith(".pair.tmp"):  # a staged file's own atomic write
            return real(source, target)
        renames.append(target)
        if len(renames) == 2:
            raise OSError(5, "Input/output error")
        real(source, target)

    monkeypatch.setattr(leaderboard.os, "replace", second_fails)
    with pytest.raises(WriteError, match="LB.json"):
        leaderboard.write_pair(md_path, "page two\n", json_path, json.dumps({"markdown_sha256": hashlib.sha256(
            b"page two\n").hexdigest(), "rows": []}))
    assert md_path.read_text() == "page two\n"  # the page was renamed, its JSON was not
    with pytest.raises(ArtifactError, match="torn or edited pair"):
        leaderboard.check_pair(md_path, json_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LB.json", "LB.md"]  # no temporary left
