"""A whole genome against llama_modern (`reproduce --genome`, `ladder --genome`): the fair
evolution's champion as the method arm, its arms sized by the dial, a tiny ladder end to end,
and bad genome files refused (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import assert_refused
from ladder_support import tiny_request

from llmevo.artifacts.ladder import load_ladder
from llmevo.errors import ConfigError
from llmevo.experiments.genome_comparison import genome_comparison, read_genome
from llmevo.experiments.ladder import run_ladder
from llmevo.experiments.plans import resize_comparison
from llmevo.model.config import ModelConfig
from llmevo.runner.genome import Genome
from llmevo.runner.size import size_at

REPO = Path(__file__).resolve().parents[2]
CHAMPION = REPO / "docs/evolution/evolve-quick-fair/summary.json"


def test_the_champion_is_read_from_its_study_and_is_the_method_arm():
    genome, name = read_genome(CHAMPION)
    summary = json.loads(CHAMPION.read_text())
    assert name == "evolve-quick-fair-champion"
    assert genome.hash() == summary["champion"]["genome_hash"]  # the genome the study ranked first
    comparison = genome_comparison(genome, name, CHAMPION)
    assert comparison.baseline.model == ModelConfig() and comparison.baseline.optimizer.name == "adamw"
    assert comparison.method.model == genome.model
    assert comparison.method.optimizer.config == {"momentum": 0.9, "ns_steps": 3}
    assert comparison.method.model.position.config["theta"] == 1000.0
    # the size dial scales the genome's own sizes with llama_modern's
    sized = resize_comparison(comparison, size_at(-2))
    assert sized.method.model.d_model == sized.baseline.model.d_model == 32
    assert sized.method.model.feedforward.config["hidden"] == 96
    # a genome file of its own (not a summary) is named by its hash
    plain = Genome.model_validate(summary["champion"]["genome"])
    assert plain.hash() == genome.hash()


def test_a_genome_that_is_llama_modern_or_post_trains_is_refused():
    genome, _ = read_genome(CHAMPION)
    llama = genome.model_copy(update={"model": ModelConfig(), "optimizer": genome.optimizer.model_copy(
        update={"name": "adamw", "config": {}})})
    with pytest.raises(ConfigError):
        genome_comparison(llama, "same", CHAMPION)
    staged = genome.model_copy(update={"post_training": genome.post_training.model_copy(update={"name": "sft"})})
    with pytest.raises(ConfigError, match="post-training stage"):
        genome_comparison(staged, "staged", CHAMPION)


def test_a_tiny_champion_ladder(tmp_path, data_dir, cache_dir):
    out = tmp_path / "champion"
    request = tiny_request(out, data_dir, cache_dir, name="evolve-quick-fair-champion", genome=CHAMPION,
                           seeds=[42, 43])
    assert "genome" in request.description(None)
    built = run_ladder(request)
    loaded = load_ladder(out / "ladder.json")
    assert loaded.arm_names == {"baseline": "llama_modern", "method": "evolve-quick-fair-champion"}
    assert [r.rung for r in built.rungs] == [-2, -1]
    rung = json.loads((out / "rung-2.json").read_text())
    assert rung["method"]["genome"]["optimizer"] == {"name": "muon", "config": {"momentum": 0.9, "ns_steps": 3}}
    assert rung["baseline"]["genome"]["optimizer"]["name"] == "adamw"


def test_bad_genome_files_are_refused(tmp_path, capsys):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "list.json").write_text("[1, 2]")
    (workdir / "broken.json").write_text("{not json")
    (workdir / "study.json").write_text(json.dumps({"kind": "evolution", "study": "s", "champion": None}))
    (workdir / "wrong.json").write_text(json.dumps({"model": {"d_model": "wide"}}))
    for args, message in [
        (["ladder", "--genome", str(workdir / "missing.json")], "no such file"),
        (["ladder", "--genome", str(workdir / "list.json")], "expected a JSON object"),
        (["reproduce", "--genome", str(workdir / "broken.json")], "not readable JSON"),
        (["reproduce", "--genome", str(workdir / "study.json")], "has no champion genome"),
        (["reproduce", "--genome", str(workdir / "wrong.json")], "not a genome"),
        (["reproduce", "champ", "--genome", str(CHAMPION), "--against", "rope"], "does not apply with --genome"),
        (["reproduce", "Champ!", "--genome", str(CHAMPION)], "use lower-case letters"),
        (["ladder"], "give a component NAME"),
    ]:
        assert_refused([*args, "--out", str(workdir / "out")], message, capsys, workdir)


def test_new_user_mistakes_are_refused_when_planned_not_once_training_starts(tmp_path, capsys):
    """Found by a bad-input pass: an empty --only ran the whole table; a size a component
    refuses only when built (diff_attn's even heads) started a rung first; a ledger decision
    naming no registered component was written."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    ledger = workdir / "papers.json"
    ledger.write_text((REPO / "docs" / "papers.json").read_text())
    for args, message in [
        (["reproduce", "--all", "--only="], "--only: give at least one component"),
        (["reproduce", "--all", "--time-limit", "-1"], "--time-limit -1: give a positive number"),
        (["ladder", "diff_attn", "--rungs=-1,0"], "heads 3 must be even"),
        (["reproduce", "gqa", "--preset", "quick", "--rung", "-3"], "does not divide the 1 head(s)"),
        (["papers", "decide", "2505.06708", "--decision", "implemented:nosuch", "--why", "y",
          "--ledger", str(ledger)], "'nosuch' is not a registered component"),
        (["papers", "decide", "2505.06708", "--decision", "implemented:gated_attn,,x", "--why", "y",
          "--ledger", str(ledger)], "an empty component name"),
        (["reproduce", "--genome", str(workdir)], "is a folder, not a file"),
    ]:
        assert_refused(args, message, capsys, workdir)
