"""`llmevo ladder`: a tiny ladder end to end (files, statistics recomputed from the ladder
file, the learning-rate rule), a killed ladder resumed without retraining a finished run,
and bad input refused (one line, exit 2, nothing written)."""

from __future__ import annotations

import hashlib
import math

import pytest
from cli_runner import assert_refused, run_cli
from ladder_support import own_cache, tiny_request

from llmevo.artifacts.ladder import load_ladder
from llmevo.eval.scaling import ladder_statistics
from llmevo.experiments import ladder as ladder_module
from llmevo.experiments.ladder import lattice_lr, run_ladder, rung_result
from llmevo.runner import run as run_module
from llmevo.runner.tuning import default_grid


@pytest.fixture(scope="module")
def tiny_ladder(tmp_path_factory, data_dir, cache_dir):
    out = tmp_path_factory.mktemp("ladder") / "rope"
    return out, run_ladder(tiny_request(out, data_dir, cache_dir))


def test_a_ladder_writes_its_rungs_file_plots_and_readme(tiny_ladder):
    out, built = tiny_ladder
    assert {p.name for p in out.iterdir()} == {"rung-2.json", "rung-1.json", "ladder.json", "README.md",
                                               "loss-vs-compute.png", "delta-vs-compute.png"}
    loaded = load_ladder(out / "ladder.json")
    assert loaded.to_json_dict() == built.to_json_dict()
    for record in loaded.rungs:  # each rung's artifact is named with its digest
        assert hashlib.sha256((out / record.artifact).read_bytes()).hexdigest() == record.artifact_sha256
    assert [r.parameters for r in loaded.rungs] == [43_168, 84_720]
    assert loaded.arm_names["method"] == "rope" and loaded.arm_names["baseline"] != "rope"
    assert "extrapolation" in loaded.projection["label"]


def test_the_ladder_statistics_recompute_from_the_file(tiny_ladder):
    out, built = tiny_ladder
    again = ladder_statistics([rung_result(r) for r in built.rungs], resamples=built.bootstrap["resamples"],
                              seed=built.bootstrap["seed"])
    assert again.gap_slope.value == built.gap_slope_per_decade.value
    assert again.gap_slope.low == built.gap_slope_per_decade.low
    assert again.ladder_class == built.ladder_class and again.trend == built.trend
    assert [row["mean"] for row in again.delta] == [r.delta_percent for r in built.rungs]


def test_the_lr_rule_centres_the_upper_grid_on_the_lower_choice(tiny_ladder):
    _, built = tiny_ladder
    bottom, top = built.rungs
    assert len(bottom.grid) == 5 and bottom.grid_rule["rule"].startswith("full default grid")
    assert top.grid_rule["rule"] == "learning-rate rule"
    # one rung done: each arm's prediction is its choice, snapped to the lattice 3e-3 * 3^(k/2);
    # the grid runs a step below the lower to a step above the higher
    steps = sorted(round(2 * math.log(lr / 3e-3) / math.log(3)) for lr in bottom.chosen_lr.values())
    assert top.grid == [3e-3 * 3 ** (k / 2) for k in range(steps[0] - 1, steps[-1] + 2)]


def test_the_ladder_reports_the_lr_drift_and_what_the_rule_saved(tiny_ladder):
    """Each arm's chosen lr in lattice steps per rung, its drift (highest minus lowest) and
    the share of the full grid's compute the rule's grid did not spend (one ruled rung: its
    compute cancels, 1 - points/5), in the file and the README."""
    out, built = tiny_ladder
    record = built.lr_transfer
    assert record is not None and record.parametrization == "standard"
    for arm in ("baseline", "method"):
        steps = [round(2 * math.log(r.chosen_lr[arm] / 3e-3) / math.log(3)) for r in built.rungs]
        assert record.steps[arm] == steps and record.drift_steps[arm] == max(steps) - min(steps)
    assert record.ruled_rungs == [-1]
    assert record.saved_share == pytest.approx(1 - len(built.rungs[1].grid) / 5)
    assert "chosen lr across rungs under standard parametrization" in (out / "README.md").read_text()


def test_a_mup_ladder_transfers_the_tuned_lr_instead_of_fitting_it():
    """Under μP the rule predicts each arm's choice at the highest rung done, whatever the
    lower rungs say (a standard ladder fits log lr on log N and extrapolates)."""
    history = {"baseline": [(10_000, 3e-3), (20_000, 3e-3 * 3)], "method": [(10_000, 3e-3), (20_000, 3e-3)]}
    fitted, rule = ladder_module.lr_rule_grid(80_000, history, 3e-3)
    assert rule["rule"] == "learning-rate rule"
    # baseline's fit: log lr rises by log 3 per doubling -> two doublings later, step 2 + 4 = 6
    assert fitted == [lattice_lr(3e-3, k) for k in range(-1, 8)]
    transferred, rule = ladder_module.lr_rule_grid(80_000, history, 3e-3, transfer=True)
    assert rule["rule"] == "transferred learning rate"
    assert transferred == [lattice_lr(3e-3, k) for k in range(-1, 4)]  # steps 2 and 0, one either side
    assert rule["arms"]["baseline"]["predicted_lr"] == 3e-3 * 3


def test_the_lattice_holds_the_default_grid_bit_for_bit():
    # the arm cache keys runs by their exact lr: a ladder's rule grid shares runs with any
    # default-grid reproduction only if the floats are identical
    assert [lattice_lr(3e-3, k) for k in range(-2, 3)] == default_grid(3e-3)


def test_a_killed_ladder_resumes_without_retraining_a_finished_run(tmp_path, data_dir, cache_dir, monkeypatch):
    out = tmp_path / "killed"
    cache = own_cache(tmp_path / "cache", cache_dir)
    real = ladder_module.reproduce
    calls = []

    def killed_at_second_rung(plan, progress=None, code=None):
        calls.append(plan.size.rung)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(plan, progress, code=code)

    monkeypatch.setattr(ladder_module, "reproduce", killed_at_second_rung)
    with pytest.raises(KeyboardInterrupt):
        run_ladder(tiny_request(out, data_dir, cache, seeds=[42, 43]))
    monkeypatch.setattr(ladder_module, "reproduce", real)
    trained_batches = []
    original = run_module.train_many  # tuning runs train through run_arm too

    def counting(build, stream, specs, *args, **kwargs):
        trained_batches.extend(spec.config.batch_size for spec in specs)
        return original(build, stream, specs, *args, **kwargs)

    monkeypatch.setattr(run_module, "train_many", counting)
    built = run_ladder(tiny_request(out, data_dir, cache, seeds=[42, 43]))
    assert [r.rung for r in built.rungs] == [-2, -1]
    assert trained_batches and 24 not in trained_batches  # rung -2 (batch 24): all from the cache
    assert set(trained_batches) == {32}  # rung -1 trained: it had not finished


BAD = [
    (["ladder", "rope", "--rungs=9,1"], "--rungs: unknown rung 9"),
    (["ladder", "rope", "--rungs=1"], "at least 2 distinct rungs"),
    (["ladder", "rope", "--rungs=0,0"], "at least 2 distinct rungs"),
    (["ladder", "rope", "--rungs=x,1"], "--rungs: 'x' is not an integer"),
    (["ladder", "rope", "--tokens-per-parameter", "0.0001"], "less than one step"),
    (["ladder", "rope", "--tokens-per-parameter", "-1"], "tokens_per_parameter"),
    (["ladder", "sft"], "post-training method"),
    (["ladder", "nosuch"], "nosuch"),
    (["ladder", "rope", "--against", "swiglu"], "swiglu"),
    (["ladder", "rope", "--top-seeds", "9"], "--top-seeds 9"),
    (["ladder", "rope", "--seeds", "42,42"], "42"),
    (["ladder", "rope", "--tune-seeds", "42"], "42"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_ladders_are_one_line_exit_2_nothing_written(args, message, capsys, workdir):
    assert_refused(args, message, capsys, workdir)


def test_the_leaderboard_lists_ladders_and_their_decision_accuracy(tiny_ladder, tmp_path):
    import shutil

    from llmevo.errors import ArtifactError
    from llmevo.reports.decisions import published_decision_accuracy
    from llmevo.reports.ladder import scan_ladders
    from llmevo.reports.leaderboard import ladder_rows, render_markdown

    out, built = tiny_ladder
    docs = tmp_path / "docs"
    shutil.copytree(out, docs / "ladders" / "rope")
    rows = ladder_rows(scan_ladders([docs]), tmp_path)
    assert [row["source"] for row in rows] == ["docs/ladders/rope/ladder.json"]
    accuracy = published_decision_accuracy([docs], tmp_path)
    overall = accuracy.row()
    assert overall.ladders == ("rope",) and overall.next_same.total == len(built.rungs) - 1
    assert overall.next_better_worse.total == len(built.transfers)  # the ladder file's own record
    assert accuracy.ladders[0].components == {("position", "rope"), ("position", "learned")}  # from the genomes
    page = render_markdown([], tmp_path / "docs" / "LEADERBOARD.md", tmp_path, rows, accuracy)
    assert "## Scale ladders" in page and built.ladder_class in page and "## Decision accuracy" in page
    (docs / "ladders" / "rope" / "ladder.json").write_text("{\"kind\": \"ladder\"}")
    with pytest.raises(ArtifactError, match="ladder.json"):
        scan_ladders([docs])


def test_the_eta_fits_a_fixed_cost_plus_a_rate_from_two_rungs():
    from llmevo.experiments.ladder import remaining_seconds

    assert remaining_seconds([], [1.0]) is None
    assert remaining_seconds([(2.0, 10.0)], [4.0, 8.0]) is None  # one rung cannot split fixed from rate
    # seconds = 30 + 5 * compute, exactly: the rest is 30 + 5*c per rung
    assert remaining_seconds([(1.0, 35.0), (3.0, 45.0)], [10.0, 20.0]) == pytest.approx(80.0 + 130.0)


def test_report_rewrites_a_ladders_readme_and_plots(tiny_ladder, tmp_path):
    out, _ = tiny_ladder
    target = tmp_path / "again"
    assert run_cli(["report", str(out / "ladder.json"), "--out", str(target)]) == 0
    assert {p.name for p in target.iterdir()} == {"README.md", "loss-vs-compute.png", "delta-vs-compute.png"}
    assert (target / "README.md").read_text() == (out / "README.md").read_text()


def test_a_ladder_written_before_the_context_dial_still_loads(tiny_ladder, tmp_path):
    import json

    out, _ = tiny_ladder
    data = json.loads((out / "ladder.json").read_text())
    del data["context"]
    for rung in data["rungs"]:
        del rung["sequence_length"]
    (tmp_path / "ladder.json").write_text(json.dumps(data))
    loaded = load_ladder(tmp_path / "ladder.json")
    assert loaded.context == "fixed" and {r.sequence_length for r in loaded.rungs} == {64}


def test_the_transfer_rule_applies_where_both_arms_are_mup(tmp_path, data_dir, cache_dir):
    standard = tiny_request(tmp_path / "s", data_dir, cache_dir).plan()
    mup = tiny_request(tmp_path / "m", data_dir, cache_dir, param="mup").plan()
    assert not ladder_module.transfers_lr(standard.rungs[1].plan)
    assert ladder_module.transfers_lr(mup.rungs[1].plan)


def test_a_published_ladder_whose_code_changed_after_its_last_rung_writes_no_ladder_file(
        tmp_path, data_dir, cache_dir, monkeypatch):
    """Each rung and the ladder file are checked at their write (``check_code_unchanged``): an
    edit after the last rung keeps the rungs (checked when written) and refuses the ladder file.
    The code state is read from a temporary checkout (where the ladder reads it)."""
    import subprocess

    from llmevo.artifacts.provenance import capture_code_state
    from llmevo.errors import CodeChangedError

    repo = tmp_path / "repo"
    module = repo / "src" / "pkg" / "component.py"
    module.parent.mkdir(parents=True)
    module.write_text("SCALE = 1\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "i"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    monkeypatch.setattr(ladder_module, "code_state",
                        lambda plan: capture_code_state([module], module, repo, package_root=module.parent))
    real, rungs = ladder_module.reproduce, []

    def edited_after_the_last_rung(plan, progress=None, code=None):
        artifact = real(plan, progress, code=code)
        rungs.append(plan.size.rung)
        if len(rungs) == 2:
            module.write_text("SCALE = 2\n")
        return artifact

    monkeypatch.setattr(ladder_module, "reproduce", edited_after_the_last_rung)
    out = tmp_path / "published"
    with pytest.raises(CodeChangedError, match=r"ladder\.json: the code changed while the run trained"):
        run_ladder(tiny_request(out, data_dir, cache_dir, publish=True, repo_root=repo))
    assert rungs == [-2, -1] and sorted(p.name for p in out.iterdir()) == ["rung-1.json", "rung-2.json"]
