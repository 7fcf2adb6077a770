"""External experiments published, in their own Holm family, and laddered over a declared size
(``experiments.external_family``, ``experiments.external_ladder``): publishing refused from a
dirty checkout and allowed with ``--allow-dirty``; the family's adjustment against a hand Holm
computation over scipy's paired t-tests; the ladder's fits against ``eval.scaling`` on the same
numbers (and the power law against numpy's log-log line); bad size declarations as one line."""

from __future__ import annotations

import json
import math
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cli_runner import assert_refused, run_cli
from scipy import stats as scipy_stats

from llmevo.errors import ConfigError
from llmevo.eval.scaling import RungResult, ladder_statistics
from llmevo.eval.stats import classify_change
from llmevo.experiments import (
    ExternalLadderRequest,
    ExternalRequest,
    VerdictService,
    plan_external,
    plan_external_ladder,
    run_comparison,
    run_external_ladder,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "tiny_gpt"

# a paired noise that differs per arm (the offset enters it), so p-values are moderate
FAMILY_SCRIPT = """
    import json, os, random
    seed = int(os.environ["LLMEVO_PARAM_SEED"])
    offset = float(os.environ["LLMEVO_PARAM_OFFSET"])
    noise = random.Random(f"{seed}-{offset}").random() / 50.0  # a str seed: the same on every run
    print(json.dumps({"loss": 2.0 + offset + noise}))
"""
FAMILY_TOML = """
    name = "fam"
    command = ["{python}", "script.py"]
    metric = "loss"
    [params]
    offset = 0.0
"""
# loss falls with the size; the method's effect grows with it; "flops" is the compute
LADDER_SCRIPT = """
    import json, os
    seed = int(os.environ["LLMEVO_PARAM_SEED"])
    size = int(os.environ["LLMEVO_PARAM_SIZE"])
    effect = float(os.environ["LLMEVO_PARAM_EFFECT"])
    noise = ((seed * 7919 + size * 31 + int(round(effect * 1000)) * 7) % 23) / 2000.0
    print(json.dumps({"loss": 3.0 * size ** -0.3 * (1.0 + effect * size / 64.0) + noise, "flops": size * 1e6}))
"""
LADDER_TOML = """
    name = "lad"
    command = ["{python}", "script.py"]
    metric = "loss"
    [params]
    size = 16
    effect = 0.0
    [ladder]
    param = "size"
    values = [16, 32, 64, 128]
    compute = "flops"
"""


def git_repo(folder: Path, script: str, toml: str) -> Path:
    """A committed git checkout holding an experiment; returns its experiment file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "script.py").write_text(textwrap.dedent(script), encoding="utf-8")
    (folder / "experiment.toml").write_text(textwrap.dedent(toml), encoding="utf-8")
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "experiment"]):
        subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)
    return folder / "experiment.toml"


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMEVO_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def paired_t(per_seed: list[dict], metric: str) -> tuple[float, float, int]:
    """(mean relative change %, its standard error, n) and scipy's p: the independent reading."""
    changes = [100.0 * (row["method"][metric] - row["baseline"][metric]) / row["baseline"][metric]
               for row in per_seed]
    return float(np.mean(changes)), float(scipy_stats.sem(changes)), len(changes)


def hand_holm(p_values: list[float]) -> list[float]:
    """Holm (1979) by hand: sort, multiply the r-th smallest by m - r + 1, running maximum, cap 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, index in enumerate(order):
        running = max(running, (m - rank) * p_values[index])
        adjusted[index] = min(1.0, running)
    return adjusted


def test_publishing_needs_clean_checkouts_and_forms_the_experiments_own_family(workdir):
    repo = workdir / "repo"
    experiment = git_repo(repo, FAMILY_SCRIPT, FAMILY_TOML)
    docs = workdir / "docs" / "external"

    def request(method: str, seeds: list[int], **extra) -> ExternalRequest:
        return ExternalRequest(experiment=experiment, method=method, seeds=seeds, publish=True, repo_root=repo,
                               published_dir=docs, cache_dir=workdir / "cache", **extra)

    (repo / "notes.txt").write_text("uncommitted")  # an untracked file: the checkout is dirty
    with pytest.raises(ConfigError, match="cannot publish: the checkout at .* has uncommitted changes"):
        plan_external(request("offset=0.01", [1, 2, 3, 4, 5]))
    assert not docs.exists()
    dirty = run_comparison(plan_external(request("offset=0.01", [1, 2, 3, 4, 5], allow_dirty=True)), {})
    assert dirty["provenance"]["published"] == {"allow_dirty": True} and dirty["provenance"]["git"]["dirty"]
    (repo / "notes.txt").unlink()

    seeds = [1, 2, 3, 4, 5]
    artifacts = {offset: run_comparison(plan_external(request(f"offset={offset}", seeds, replace=True)), {})
                 for offset in ("0.01", "0.003", "0.02")}
    assert all(a["provenance"]["git"]["dirty"] is False for a in artifacts.values())
    assert all(a["provenance"]["llmevo"]["dirty"] is False for a in artifacts.values())
    folder = docs / "fam"
    index = json.loads((folder / "family.json").read_text())
    assert (folder / "FAMILY.md").is_file() and len(index["members"]) == 3  # a rerun replaced the dirty one
    # the hand computation: scipy's paired t-test per comparison, Holm by hand
    by_artifact = {m["artifact"]: m for m in index["members"]}
    p_alone, rows = [], []
    for offset, artifact in artifacts.items():
        name = f"offset-{offset}-vs-offset-0.0.json"
        p_alone.append(float(scipy_stats.ttest_1samp(
            [100.0 * (r["method"]["loss"] - r["baseline"]["loss"]) / r["baseline"]["loss"]
             for r in artifact["per_seed"]], 0.0).pvalue))
        rows.append(by_artifact[name])
    for row, p, adjusted in zip(rows, p_alone, hand_holm(p_alone), strict=True):
        assert row["p_value"] == pytest.approx(p, rel=1e-6)
        assert row["p_holm"] == pytest.approx(adjusted, rel=1e-6)
    # the widened interval of each comparison: scipy's t-interval at its step-down level, classed by the rules
    order = sorted(range(3), key=lambda i: p_alone[i])
    stopped = next((rank for rank, i in enumerate(order) if p_alone[i] > 0.05 / (3 - rank)), 3)
    for rank, i in enumerate(order):
        level = 0.05 / (3 - min(rank, stopped))
        mean, sem, n = paired_t(list(artifacts.values())[i]["per_seed"], "loss")
        low, high = scipy_stats.t.interval(1 - level, n - 1, loc=mean, scale=sem)
        assert (rows[i]["ci_low"], rows[i]["ci_high"]) == pytest.approx((low, high), rel=1e-6)
        assert rows[i]["classification"] == classify_change(low, high, 1.0, True)
    # the last published artifact carries the reading with all three in it
    last = artifacts["0.02"]["family"]
    assert last["size"] == 3 and last["p_holm"] == pytest.approx(hand_holm(p_alone)[2], rel=1e-6)
    assert "After Holm" in (folder / "offset-0.02-vs-offset-0.0.md").read_text()
    # llmevo verdict reads this experiment's family, not llmevo's table
    record = VerdictService(workdir / "docs").verdict(folder / "offset-0.003-vs-offset-0.0.json")
    assert record.family.size == 3 and "experiment 'fam'" in record.family.scope
    assert record.family.p_value == pytest.approx(hand_holm(p_alone)[1], rel=1e-6)
    with pytest.raises(ConfigError, match="family index .* not a comparison artifact"):
        VerdictService(workdir / "docs").verdict(folder / "family.json")
    # a rerun with fewer seeds would lose seeds 4 and 5: refused, nothing written
    before = (folder / "offset-0.01-vs-offset-0.0.json").read_bytes()
    with pytest.raises(ConfigError, match="holds seeds 4, 5 that the new artifact lacks"):
        plan_external(request("offset=0.01", [1, 2, 3]))
    assert (folder / "offset-0.01-vs-offset-0.0.json").read_bytes() == before


def test_publish_from_the_command_line(workdir, capsys):
    experiment = git_repo(workdir / "repo", FAMILY_SCRIPT, FAMILY_TOML)
    (workdir / "repo" / "script.py").write_text(textwrap.dedent(FAMILY_SCRIPT) + "\n# edited\n")
    args = ["reproduce", "--experiment", str(experiment), "--method", "offset=0.01", "--seeds", "1,2,3"]
    assert_refused([*args, "--publish"], "cannot publish", capsys, workdir)
    assert_refused([*args, "--allow-dirty"], "--allow-dirty applies to --publish only", capsys, workdir)
    assert run_cli([*args, "--publish", "--allow-dirty"]) == 0
    out = capsys.readouterr().out
    # into the experiment's own repository, not the working directory nor llmevo's checkout
    published = workdir / "repo" / "docs" / "external" / "fam" / "offset-0.01-vs-offset-0.0.json"
    assert not (workdir / "docs").exists()
    artifact = json.loads(published.read_text())
    assert artifact["provenance"]["git"]["files_dirty"] is True  # the script itself was edited
    assert artifact["family"]["size"] == 1 and "after Holm" in out
    assert (published.parent / "FAMILY.md").is_file()


def test_a_ladder_over_a_declared_size_fits_as_the_built_in_ladders_do(workdir):
    experiment = git_repo(workdir / "repo", LADDER_SCRIPT, LADDER_TOML)
    plan = plan_external_ladder(ExternalLadderRequest(
        experiment=experiment, method="effect=-0.02", seeds=[1, 2, 3, 4], resamples=300,
        cache_dir=workdir / "cache", repo_root=workdir / "repo"))
    assert plan.sizes == [16, 32, 64, 128] and plan.folder.name == "ladder-size-effect--0.02-vs-effect-0.0"
    ladder = run_external_ladder(plan, {})
    assert json.loads((plan.folder / "ladder.json").read_text()) == ladder
    assert [row["compute"] for row in ladder["rungs"]] == [16e6, 32e6, 64e6, 128e6]
    # the same numbers through eval.scaling give the same record
    results = [RungResult(i, row["compute"], tuple(row["baseline"]), tuple(row["method"]), row["classification"])
               for i, row in enumerate(ladder["rungs"])]
    again = ladder_statistics(results, resamples=300)
    assert ladder["trend_fit"]["slope"]["value"] == pytest.approx(again.trend_fit.slope, rel=1e-12)
    assert (ladder["trend_fit"]["slope"]["low"], ladder["trend_fit"]["slope"]["high"]) == pytest.approx(
        (again.trend_fit.low, again.trend_fit.high), rel=1e-12)
    assert ladder["trend_fit"]["df"] == 2 and ladder["trend"] == again.trend
    assert ladder["ladder_class"] == again.ladder_class
    assert ladder["gap_slope_per_decade"]["value"] == pytest.approx(again.gap_slope.value, rel=1e-12)
    # the power law, independently: a straight line of log mean loss on log compute (numpy)
    for arm in ("baseline", "method"):
        means = [np.mean(row[arm]) for row in ladder["rungs"]]
        slope, intercept = np.polyfit(np.log([row["compute"] for row in ladder["rungs"]]), np.log(means), 1)
        assert ladder["fits"][arm]["alpha"] == pytest.approx(-slope, rel=1e-9)
        assert ladder["fits"][arm]["a"] == pytest.approx(math.exp(intercept), rel=1e-9)
    # the method's advantage grows with the size, by construction: the trend says so
    assert ladder["trend_fit"]["slope"]["value"] < 0
    assert [row["artifact"] for row in ladder["rungs"]] == [f"rung-size-{s}.json" for s in (16, 32, 64, 128)]
    assert "Ladder class" in (plan.folder / "README.md").read_text()


def test_the_tiny_gpt_ladder_end_to_end(workdir, data_dir, monkeypatch, capsys):
    monkeypatch.setenv("LLMEVO_DATA", str(data_dir))
    # the example as it is, its lr fixed (no [tune] table: 12 runs, not 16, to stay near a minute)
    example = workdir / "tiny_gpt"
    example.mkdir()
    (example / "train.py").write_bytes((EXAMPLE / "train.py").read_bytes())
    toml = (EXAMPLE / "experiment.toml").read_text()
    (example / "experiment.toml").write_text(toml[:toml.index("[tune]")] + toml[toml.index("[ladder]"):])
    tiny = "steps=10,layers=1,seq_len=32,batch_size=8"
    assert run_cli(["ladder", "--experiment", str(example / "experiment.toml"),
                    "--baseline", f"activation=gelu,{tiny}", "--method", f"activation=relu2,{tiny}",
                    "--rungs", "16,24", "--seeds", "42,43,44", "--resamples", "200",
                    "--out", str(workdir / "ladder")]) == 0
    ladder = json.loads((workdir / "ladder" / "ladder.json").read_text())
    assert ladder["schema"] == "llmevo.external-ladder/1" and ladder["size"]["param"] == "d_model"
    for row in ladder["rungs"]:  # compute is 6 N D: the script's parameters times its tokens, times 6
        rung = json.loads((workdir / "ladder" / row["artifact"]).read_text())
        parameters = rung["per_seed"][0]["baseline"]["parameters"]
        assert row["compute"] == pytest.approx(6 * parameters * 10 * 8 * 32)
        assert rung["method"]["label"] == "activation=relu2" and rung["protocol"]["tuning"] is None
    results = [RungResult(i, row["compute"], tuple(row["baseline"]), tuple(row["method"]), row["classification"])
               for i, row in enumerate(ladder["rungs"])]
    again = ladder_statistics(results, resamples=200)
    assert ladder["fits"]["method"]["alpha"] == pytest.approx(again.fits["method"].alpha, rel=1e-12)
    assert ladder["ladder_class"] == again.ladder_class
    assert "ladder class:" in capsys.readouterr().out


@pytest.mark.parametrize("ladder, message", [
    ('[ladder]\nparam = "width"\nvalues = [1, 2]\n', "ladder.param 'width' is not a declared parameter"),
    ('[ladder]\nparam = "norm"\nvalues = [1, 2]\n', "a size must be a number"),
    ('[ladder]\nparam = "size"\nvalues = [16, "big"]\n', "ladder.values"),
    ('[ladder]\nparam = "size"\nvalues = [16, 16]\n', "at least 2 distinct sizes"),
    ('[ladder]\nparam = "size"\nvalues = [16]\n', "List should have at least 2 items"),
    ('[ladder]\nparam = "size"\nvalues = [16, 32.5]\n', "expected an integer like its default 16"),
    ('[ladder]\nparam = "size"\nvalues = [16, 32]\nsteps = 3\n', "steps: Extra inputs are not permitted"),
    ('[ladder]\nparam = "lr"\nvalues = [1, 2]\n[tune]\nparam = "lr"\ngrid = [1.0]\n', "also the tuned axis"),
    ('direction = "higher"\n[ladder]\nparam = "size"\nvalues = [16, 32]\n', "higher-is-better"),
])
def test_bad_size_declarations_are_one_line(workdir, capsys, ladder, message):
    path = workdir / "bad.toml"
    head, _, params = textwrap.dedent("""
        name = "x"
        command = ["a"]
        metric = "m"
        [params]
        size = 16
        lr = 1.0
        norm = "a"
    """).partition("[params]")
    top, tables = (ladder, "") if not ladder.startswith("[") else ("", ladder)
    path.write_text(head + top + "[params]" + params + tables)
    assert_refused(["ladder", "--experiment", str(path), "--method", "norm=b"], message, capsys, workdir)


@pytest.mark.parametrize("args, message", [
    (["--method", "activation=relu2", "--rungs", "16,big"], "--rungs: 'big' is not a number"),
    (["--method", "activation=relu2", "--rungs", "16"], "at least 2 distinct sizes"),
    (["--method", "activation=relu2,d_model=32"], "--method sets d_model, the ladder's size"),
    (["--method", "activation=relu2", "--context", "grow"], "--context does not apply"),
    (["rope", "--method", "activation=relu2"], "NAME does not apply"),
])
def test_bad_ladder_options_are_one_line(workdir, capsys, args, message):
    assert_refused(["ladder", "--experiment", str(EXAMPLE / "experiment.toml"), *args], message, capsys, workdir)


def test_a_ladder_needs_a_declared_size(workdir, capsys):
    path = workdir / "plain.toml"
    path.write_text('name = "x"\ncommand = ["a"]\nmetric = "m"\n[params]\nsize = 1\n')
    assert_refused(["ladder", "--experiment", str(path), "--method", "size=2"], "declares no [ladder] table",
                   capsys, workdir)
    assert_refused(["ladder", "rope", "--tune-grid", "1e-3"], "apply with --experiment FILE only", capsys, workdir)


def test_an_experiment_edited_while_it_runs_is_refused_publishing_and_recorded_otherwise(workdir):
    """Every run executes the script as it is on disk: one edited after the first run makes the
    artifact's file digests wrong, so publishing is refused with nothing written; an
    unpublished comparison records the change (``provenance.code_changed``)."""
    from llmevo.errors import CodeChangedError, CodeChangedWarning

    repo = workdir / "repo"
    experiment = git_repo(repo, FAMILY_SCRIPT, FAMILY_TOML)
    docs = workdir / "docs" / "external"

    def edit_once(record: dict) -> None:
        text = (repo / "script.py").read_text()
        if "# edited" not in text:
            (repo / "script.py").write_text(text + "# edited\n")

    def request(publish: bool) -> ExternalRequest:
        return ExternalRequest(experiment=experiment, method="offset=0.01", seeds=[1, 2], publish=publish,
                               repo_root=repo, published_dir=docs, runs_dir=workdir / "runs",
                               cache_dir=workdir / "cache", arm_cache=False)

    with pytest.raises(CodeChangedError, match=r"cannot publish .*changed: script.py\); nothing was written"):
        run_comparison(plan_external(request(publish=True)), {}, on_run=edit_once)
    assert not docs.exists()
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "script.py"], check=True)
    with pytest.warns(CodeChangedWarning):
        artifact = run_comparison(plan_external(request(publish=False)), {}, on_run=edit_once)
    assert artifact["provenance"]["code_changed"] == {"commit_now": None, "llmevo_commit_now": None,
                                                      "files": ["script.py"]}
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "script.py"], check=True)
    unchanged = run_comparison(plan_external(request(publish=True)), {})
    assert "code_changed" not in unchanged["provenance"]
