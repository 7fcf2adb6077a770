"""``reproduce --match tokens|flops``: compute-matched arms.

Under ``flops`` the method arm trains the steps whose training FLOPs (counted per token,
``runner.flops``) equal the baseline's, in its tuning runs and its report runs alike; the
baseline trains exactly as under ``tokens`` (its runs are the same arm-cache entries); the
budget check compares FLOPs and still catches a real mismatch; files say ``-flops``. The
default (``tokens``) writes no new field. Comparisons with nothing to match, or no common
unit, are refused with one line.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from cache_support import fresh_cache
from cli_runner import assert_refused

from llmevo.artifacts import load_artifact
from llmevo.artifacts.schema import TrainingCurves
from llmevo.errors import ConfigError
from llmevo.eval.time_to_target import artifact_time_to_target, time_to_target
from llmevo.experiments import LadderRequest, ReproductionRequest, reproduce
from llmevo.model.config import ModelConfig
from llmevo.promotion import family_members
from llmevo.registry import ComponentChoice
from llmevo.reports.leaderboard import build_leaderboard, render_markdown
from llmevo.reports.readme import write_report
from llmevo.runner.arm import Arm
from llmevo.runner.arm_runner import FlopsBudget, check_equal_budget
from llmevo.runner.flops import FlopCount

MHA, MLA = 933_888.0, 983_040.0  # llama_modern's and mla's counted FLOPs per token (test_flops_reference)
REPO_ROOT = Path(__file__).resolve().parents[2]


def _request(tmp_path: Path, data_dir: Path, cache: Path, match: str, **changes) -> ReproductionRequest:
    settings = {"seeds": [42, 43, 44], "steps": 20, "tune_grid": [1e-3, 3e-3], "tune_confirm": 0, **changes}
    return ReproductionRequest(name="mla", preset="smoke", threads=1, device="cpu", path="sequential",
                               data_dir=data_dir, cache_dir=cache, report=False, match=match,
                               out=tmp_path / f"{match}.json", **settings)


def test_flops_matching_sets_the_method_steps_and_keeps_the_baseline(tmp_path, data_dir, cache_dir):
    cache = fresh_cache(tmp_path, cache_dir)
    tokens = reproduce(_request(tmp_path, data_dir, cache, "tokens")).to_json_dict()
    flops = reproduce(_request(tmp_path, data_dir, cache, "flops")).to_json_dict()

    # the default writes nothing new: no match, no flops block; both arms at the preset's steps
    assert "match" not in tokens["setup"] and "flops" not in tokens["setup"]
    assert tokens["setup"]["same_tokens_optimizer_and_budget"] is True
    assert tokens["baseline"]["train"]["steps"] == tokens["method"]["train"]["steps"] == 20

    block = flops["setup"]["flops"]
    assert flops["setup"]["match"] == "flops" and flops["setup"]["same_tokens_optimizer_and_budget"] is False
    assert block["flops_per_token"] == {"baseline": {"counted": MHA, "computed": MHA},
                                        "method": {"counted": MLA, "computed": MLA}}
    assert block["steps"] == {"baseline": 20, "method": 19}  # round(20 x 933,888 / 983,040) = round(19.0)
    assert flops["baseline"]["train"]["steps"] == 20 and flops["method"]["train"]["steps"] == 19
    assert block["tokens"] == {"baseline": 20 * 4 * 64, "method": 19 * 4 * 64}
    assert block["total_flops"]["method"] == MLA * 19 * 256 and block["total_flops"]["baseline"] == MHA * 20 * 256
    assert block["ratio"] == pytest.approx(19 * MLA / (20 * MHA))
    assert flops["setup"]["tokens_per_arm"] == 20 * 256  # the baseline's: the budget's
    # the tuning runs train at the matched steps too
    budget = {label: arm["budget"]["steps_per_run"] for label, arm in flops["tuning"]["arms"].items()}
    assert budget == {"baseline": 20, "method": 19}
    # the baseline trained as under tokens: every one of its runs came from the tokens run's cache entries
    assert flops["cache"]["baseline"]["report_seeds"] == [42, 43, 44]
    assert len(flops["cache"]["baseline"]["tuning"]) == tokens["tuning"]["arms"]["baseline"]["budget"]["runs"]
    assert flops["cache"]["method"]["report_seeds"] == []
    assert flops["baseline"]["lm_loss"] == tokens["baseline"]["lm_loss"]
    assert flops["method"]["lm_loss"] != tokens["method"]["lm_loss"]
    for seed in ("42", "43", "44"):  # the method's curve is its 19 steps
        assert len(flops["training_curves"]["method"]["per_seed"][seed]) == 19
    _the_report_and_the_leaderboard_say_which_matching(tmp_path)


def _the_report_and_the_leaderboard_say_which_matching(folder: Path) -> None:
    """The report's protocol and the leaderboard's row name the matching; a FLOP-matched
    artifact stays out of the Holm family (one claim is not tested twice), the tokens one is in."""
    entries = [(folder / f"{match}.json", load_artifact(folder / f"{match}.json")) for match in ("tokens", "flops")]
    write_report(entries[1][1], entries[1][0], folder / "report")
    text = (folder / "report" / "README.md").read_text()
    assert "| steps per arm | baseline 20, method 19 (FLOP-matched) |" in text
    assert "equal training FLOPs (--match flops): baseline 20 steps at 933,888 FLOPs per token, method 19" in text
    rows = build_leaderboard(entries, folder)
    by_source = {Path(row["source"]).name: row for row in rows}
    assert "match" not in by_source["tokens.json"] and by_source["flops.json"]["match"] == "flops"
    assert by_source["flops.json"]["flops_ratio_per_token"] == pytest.approx(MLA / MHA)
    assert by_source["flops.json"]["holm"] is None and by_source["tokens.json"]["holm"] is not None
    assert [path.name for path, _ in family_members(entries)] == ["tokens.json"]
    markdown = render_markdown(rows, folder / "LEADERBOARD.md", folder)
    assert "*(FLOP-matched: method at 1.053x the FLOPs per token, never promotes)*" in markdown
    # time to target: steps weighed by FLOPs per token (a share of the baseline's FLOPs)
    # curves made by hand: the baseline ends at 1.0 on step 20, the method gets there on step 10
    seeds = {str(seed): None for seed in (42, 43, 44)}
    curves = TrainingCurves.model_validate({
        "baseline": {"steps": list(range(1, 21)), "per_seed": {s: [20.0 - i for i in range(20)] for s in seeds}},
        "method": {"steps": list(range(1, 20)), "per_seed": {s: [10.0 - i for i in range(19)] for s in seeds}}})
    artifact = entries[1][1].model_copy(update={"training_curves": curves})
    assert time_to_target(curves.model_dump(), [42, 43, 44])["fraction"] == pytest.approx(0.5)  # in steps
    in_flops = artifact_time_to_target(artifact)
    assert in_flops["unit"] == "flops" and in_flops["fraction"] == pytest.approx(0.5 * MLA / MHA)
    assert "unit" not in (artifact_time_to_target(entries[0][1]) or {})
    write_report(artifact, entries[1][0], folder / "report-reached")
    assert ("reached the baseline's final training loss in 53% [53, 53] of the baseline's training FLOPs"
            in (folder / "report-reached" / "README.md").read_text())
    flat = TrainingCurves.model_validate({**curves.model_dump(), "method": {
        "steps": list(range(1, 20)), "per_seed": {s: [10.0] * 19 for s in seeds}}})
    write_report(artifact.model_copy(update={"training_curves": flat}), entries[1][0], folder / "report-never")
    assert ("Time to target: no seed of the method reached the baseline's final training loss within its budget."
            in (folder / "report-never" / "README.md").read_text())


def _runs(tokens: dict[str, int]) -> dict[str, dict[int, SimpleNamespace]]:
    return {label: {42: SimpleNamespace(train=SimpleNamespace(tokens_seen=seen, token_stream_sha256="same"))}
            for label, seen in tokens.items()}


def test_the_budget_check_compares_flops_and_catches_a_mismatch():
    arm = Arm("baseline", "b", ModelConfig(), ComponentChoice(name="adamw"))
    method = Arm("method", "m", ModelConfig().with_slot("attention", "mla"), ComponentChoice(name="adamw"))
    budget = FlopsBudget({"baseline": FlopCount(MHA, MHA), "method": FlopCount(MLA, MLA)},
                         {"baseline": 20, "method": 19}, tokens_per_step=256)
    check_equal_budget(arm, method, _runs({"baseline": 20 * 256, "method": 19 * 256}), [42], flops=budget)
    with pytest.raises(ConfigError, match="different training FLOPs"):  # one step short
        check_equal_budget(arm, method, _runs({"baseline": 20 * 256, "method": 18 * 256}), [42], flops=budget)
    with pytest.raises(ConfigError, match="different training FLOPs"):  # equal tokens are not equal FLOPs
        check_equal_budget(arm, method, _runs({"baseline": 20 * 256, "method": 20 * 256}), [42], flops=budget)
    with pytest.raises(ConfigError, match="different numbers of tokens"):  # tokens: the check as before
        check_equal_budget(arm, method, _runs({"baseline": 20 * 256, "method": 19 * 256}), [42])


def test_flops_files_never_replace_the_token_matched_ones(data_dir, cache_dir):
    def plan(match: str, **changes):
        return ReproductionRequest(name="mla", preset="quick", data_dir=data_dir, cache_dir=cache_dir,
                                   match=match, **changes).plan()

    assert plan("tokens").outputs.artifact.name == "public-quick-tuned-seeds42-46.json"
    assert plan("flops").outputs.artifact.name == "public-quick-flops-tuned-seeds42-46.json"
    assert plan("flops").outputs.report.name == "report-flops"
    assert plan("flops", rung=-1).outputs.artifact.name == "public-quick-rung-1-flops-tuned-seeds42-46.json"
    assert plan("flops").match == "flops" and plan("tokens").match == "tokens"
    ladder = LadderRequest(name="mla", rungs=[-2, -1], match="flops", data_dir=data_dir, cache_dir=cache_dir).plan()
    assert ladder.folder.name.endswith("-mla-flops")
    assert all(rung.plan.match == "flops" for rung in ladder.rungs)
    assert ladder.request.description(None)["match"] == "flops"
    plain = LadderRequest(name="mla", rungs=[-2, -1], data_dir=data_dir, cache_dir=cache_dir)
    assert "match" not in plain.description(None) and plain.plan().folder.name.endswith("-mla")


@pytest.mark.parametrize(("args", "message"), [
    (["muon"], "build the same model"),  # an optimizer: equal FLOPs per token
    (["mixture"], "build the same model"),  # a data recipe
    (["sft"], "post-training method"),
    (["blt-bytes"], "different tokenizations"),
    (["--all", "--only", "rope"], "--match applies to one comparison"),
    (["--experiment", str(REPO_ROOT / "examples" / "tiny_gpt" / "experiment.toml"), "--method", "norm=rmsnorm"],
     "--match does not apply"),
])
def test_match_flops_is_refused_where_it_cannot_apply(workdir, capsys, args, message):
    assert_refused(["reproduce", *args, "--match", "flops"], message, capsys, workdir)


def test_a_bad_match_is_refused(workdir, capsys):
    assert_refused(["reproduce", "mla", "--match", "params"], "--match", capsys, workdir)


def test_the_command_says_how_it_matched(workdir, capsys):
    from cli_runner import run_cli

    assert run_cli(["reproduce", "mla", "--match", "flops", "--steps", "4", "--no-report", "--threads", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps lines
    # 4 x 0.95 = 3.8 rounds to 4 steps: the ratio says what rounding left
    assert ("matched on training FLOPs: baseline 4 steps at 933,888 FLOPs per token, method 4 at 983,040 "
            "(total ratio 1.0526)") in out
    written = [path.name for path in (workdir / "runs").rglob("*.json")]
    assert written == ["public-flops-seed42.json"]
