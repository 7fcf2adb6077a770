"""``llmevo reproduce`` refuses a comparison whose arms compute the same function (the
no-op check, ``runner.equivalence``) and, on ``--allow-noop``, runs it classed no-op."""

from __future__ import annotations

from cli_runner import assert_refused, files_under, run_cli

from llmevo.artifacts import load_artifact
from llmevo.catalog import full_registry
from llmevo.promotion import promotion


def test_softcap_at_cap_50_is_refused_at_smoke(workdir, capsys):
    """At smoke the attention logits stay near 0.03: cap 50 is the identity there."""
    assert_refused(["reproduce", "softcap", "--method-config", "cap=50", "--no-arm-cache"],
                   "compute the same function", capsys, workdir)


def test_allow_noop_runs_it_classed_noop_and_it_never_promotes(workdir, capsys):
    out = workdir / "docs" / "reproductions" / "2408.00118-softcap" / "metrics" / "noop.json"
    status = run_cli(["reproduce", "softcap", "--method-config", "cap=50", "--allow-noop",
                      "--no-arm-cache", "--no-report", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    artifact = load_artifact(out)
    assert artifact.noop and artifact.verdict.classification == "no-op"
    assert artifact.equivalence.same_function and artifact.equivalence.allowed_noop
    assert artifact.method.genome["model"]["attention"]["config"]["cap"] == 50
    spec = full_registry().get("attention", "softcap")
    assert not promotion(spec, workdir / "docs").promoted


def test_allow_noop_is_refused_for_a_post_training_method(workdir, capsys):
    assert_refused(["reproduce", "sft", "--allow-noop"], "--allow-noop", capsys, workdir)
    assert not files_under(workdir)
