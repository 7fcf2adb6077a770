"""Bad input and faults, everywhere: one line on stderr, exit status 2, nothing written.

Every case runs the command line in-process (``llmevo.cli.main``) from an empty working
folder, so that a default output (``runs/``, ``docs/``) written by mistake is caught too.
No case trains for real where validation should refuse first; the few that need a trained
model use a two-step smoke run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path

import pytest
from cli_runner import files_under, run_cli

REPO_ROOT = Path(__file__).resolve().parents[2]
READ_ONLY = "/proc/llmevo-cannot-write-here"  # read-only for every user, root included




def assert_refused(args: list[str], capsys, work: Path, *, message: str | None = None,
                   code: int = 2) -> str:
    before = files_under(work)
    status = run_cli(args)
    err = capsys.readouterr().err
    assert status == code, f"{args}: exit {status}, stderr {err!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"{args}: expected one line on stderr, got {err!r}"
    assert "Traceback" not in err
    if message is not None:
        assert message in err, err
    assert files_under(work) == before, f"{args}: wrote {files_under(work) - before}"
    return err


# --- usage errors -------------------------------------------------------------------------

USAGE = [
    (["nosuchcmd"], "No such command"),
    (["reproduce", "rope", "--steps", "abc"], "--steps"),
    (["reproduce", "--nosuch-option"], "No such option"),
    (["generate", "--prompt", "x"], "--checkpoint"),
    (["generate", "--checkpoint"], "requires an argument"),
    (["show"], "Missing argument"),
    (["compare", "a.json"], "Missing argument"),
    (["evolve", "--trials", "1.5"], "--trials"),
    (["bench", "--batch-size", "x"], "--batch-size"),
    (["reproduce", "rope", "--preset", "huge"], "'huge' is not one of"),
    (["reproduce", "rope", "--device", "tpu"], "'tpu' is not one of"),
    (["reproduce", "rope", "--schedule", "linear"], "--schedule"),
    (["evolve", "--sampler", "annealing"], "--sampler"),
    (["evolve", "--promotion", "vibes"], "--promotion"),
    (["bench", "--precision", "fp8"], "--precision"),
    (["reproduce", "rope", "extra-argument"], "unexpected extra argument"),
    # --against OTHER: unknown, another slot, the method itself, its declared ablation, bad
    # config, where it makes no sense (post-training, whole architectures)
    (["reproduce", "alibi", "--against", "nosuch"], "--against nosuch: unknown position component"),
    (["reproduce", "alibi", "--against", "swiglu"], "it fills the feedforward slot"),
    (["reproduce", "alibi", "--against", "alibi"], "that is the method itself"),
    (["reproduce", "alibi", "--against", "sinusoidal"], "already the declared ablation"),
    (["reproduce", "relu2", "--against", "swiglu:hiden=192"], "hiden: Extra inputs are not permitted"),
    (["reproduce", "muon", "--against", "rope"], "it fills the position slot"),
    (["reproduce", "grpo", "--against", "dpo"], "'grpo' is a post-training method"),
    (["reproduce", "blt-bytes", "--against", "rope"], "is a whole architecture"),
    (["reproduce", "alibi", "--against"], "requires an argument"),
    # --param: a parametrization that cannot apply is refused before any work
    (["reproduce", "rope", "--param", "sp"], "'sp' is not one of"),
    (["reproduce", "muon", "--param", "mup"], "optimizer 'muon' does not take per-parameter learning rates"),
    (["reproduce", "moe", "--param", "mup", "--preset", "quick", "--rung", "1"], "router.weight (8, 96) has a dimension that does not follow"),
    (["reproduce", "mla", "--param", "mup"], "does not follow the width"),
    (["reproduce", "blt-bytes", "--param", "mup"], "has no parametrization rule"),
    (["reproduce", "--all", "--param", "mup"], "--param applies to one comparison"),
    (["ladder", "soap", "--param", "mup", "--rungs=-2,-1"], "optimizer 'soap' does not take"),
    (["evolve", "--param", "mup"], "--param does not apply here: a study's genomes train under the standard parametrization"),
    # --match flops: refused where there is nothing to match (tests/integration/test_reproduce_match.py)
    (["ladder", "muon", "--match", "flops", "--rungs=-2,-1"], "build the same model"),
    (["ladder", "rope", "--match", "macs", "--rungs=-2,-1"], "'macs' is not one of"),
    (["evolve", "--match", "flops"], "--match does not apply here: a study's trials"),
    (["reproduce", "peri_ln", "--param", "completep", "--preset", "quick", "--layers", "4"],
     "block 'peri_ln' does not scale its residual branches"),
]


@pytest.mark.parametrize(("args", "message"), USAGE, ids=[" ".join(a) for a, _ in USAGE])
def test_usage_errors(args, message, capsys, workdir):
    assert_refused(args, capsys, workdir, message=message)


# --- every numeric option -----------------------------------------------------------------

def _numeric_cases() -> list[list[str]]:
    bad_count = ("0", "-1")
    bad_real = ("nan", "inf", "-inf", "-1")
    cases: list[list[str]] = []
    for option in ("--steps", "--batch-size", "--threads"):
        cases += [["reproduce", "rope", option, v] for v in bad_count]
    cases += [["reproduce", "rope", "--warmup-steps", "-1"], ["reproduce", "rope", "--seed", "-1"],
              ["reproduce", "rope", "--seeds", "42,-3"], ["reproduce", "rope", "--seeds", "42,42"]]
    cases += [["reproduce", "rope", "--lr", v] for v in ("0", *bad_real)]
    for option in ("--trials", "--workers", "--tournament", "--trial-steps", "--eval-windows",
                   "--heartbeat", "--grace-period", "--threads"):
        cases += [["evolve", option, v] for v in bad_count]
    cases += [["evolve", "--population", v] for v in ("0", "1", "-1")]
    cases += [["evolve", "--population", "3", "--tournament", "4"],
              ["evolve", "--rescore-seeds", "-1"], ["evolve", "--sampler-seed", "-1"],
              ["evolve", "--tune-confirm", "-1"], ["evolve", "--tune-confirm", "10000000000000"], ["reproduce", "rope", "--tune-confirm", "-1"],
              ["evolve", "--seeds", "42,x"], ["evolve", "--seeds", "42,42"]]
    cases += [["evolve", "--score-k", v] for v in bad_real]
    generate = ["generate", "--checkpoint", "nowhere", "--prompt", "x"]
    cases += [[*generate, "--temperature", v] for v in bad_real]
    cases += [[*generate, "--top-k", "-1"], [*generate, "--seed", "-1"], [*generate, "--threads", "0"]]
    cases += [[*generate, "--max-tokens", v] for v in bad_count]
    for option in ("--batch-size", "--seq-len", "--steps", "--threads"):
        cases += [["bench", option, v] for v in bad_count]
    cases += [["bench", "--warmup", "-1"]]
    cases += [["diagnose", "rope", "--eval-tokens", v] for v in bad_count]
    cases += [["diagnose", "rope", "--threads", "0"], ["diagnose", "rope", "--seeds", "1,1"],
              ["diagnose", "rope", "--seed", "-5"]]
    return cases


NUMERIC = _numeric_cases()


@pytest.mark.parametrize("args", NUMERIC, ids=[" ".join(a) for a in NUMERIC])
def test_numeric_options_are_checked_before_work(args, capsys, workdir):
    assert_refused(args, capsys, workdir)


def test_library_configs_refuse_non_finite_numbers():
    from llmevo.errors import ConfigError
    from llmevo.runner.presets import get_preset

    for value in (math.inf, math.nan, -1.0, 0.0):
        with pytest.raises(ConfigError):
            get_preset("smoke").override({"lr": value})
    with pytest.raises(ConfigError):
        get_preset("smoke").override({"weight_decay": math.inf})


# --- every output path ----------------------------------------------------------------------

def _output_cases(work: Path) -> list[tuple[list[str], str]]:
    folder = work / "a-folder"
    folder.mkdir()
    plain = work / "a-file"
    plain.write_text("x")
    reports_blocked = work / "blocked"
    reports_blocked.mkdir()
    (reports_blocked / "report").write_text("a file where the report folder goes")
    return [
        (["reproduce", "rope", "--out", str(folder)], "is a folder"),
        (["reproduce", "rope", "--out", str(plain / "x.json")], "is a file"),
        (["reproduce", "rope", "--out", f"{READ_ONLY}/x.json"], "cannot write"),
        (["reproduce", "rope", "--out", str(reports_blocked / "x.json")], "is a file"),
        (["reproduce", "rope", "--out", str(work / "ok.json"), "--save-checkpoints", str(plain)],
         "is a file"),
        (["reproduce", "rope", "--out", str(work / "ok.json"), "--save-checkpoints", READ_ONLY],
         "cannot write"),
        (["diagnose", "rope", "--out", str(folder)], "is a folder"),
        (["report", "x.json", "--out", str(plain)], "is a file"),
        (["leaderboard", "--out", str(folder)], "is a folder"),
        (["leaderboard", "--out", f"{READ_ONLY}/board.md"], "cannot write"),
        (["evolve", "--preset", "smoke", "--out", str(plain)], "is a file"),
        (["evolve", "--preset", "smoke", "--out", READ_ONLY], "cannot write"),
        (["evolve", "--preset", "smoke", "--storage", f"sqlite:///{folder}"], "is a folder"),
        (["evolve", "--preset", "smoke", "--storage", f"sqlite:///{plain}/s.db"], "is a file"),
        (["evolve", "--preset", "smoke", "--storage", f"sqlite:///{plain}"], "not a SQLite"),
        (["evolve", "--preset", "smoke", "--storage", f"sqlite:///{READ_ONLY}/s.db"], "cannot write"),
        (["evolve", "--preset", "smoke", "--storage", "not-a-url"], "not a SQLAlchemy URL"),
    ]


def test_output_paths_are_checked_before_training(capsys, workdir):
    cases = _output_cases(workdir)
    for args, message in cases:
        assert_refused(args, capsys, workdir, message=message)


@pytest.mark.parametrize("fault", ["checkpoint", "report", "artifact"])
def test_a_failing_later_write_leaves_no_artifact_behind(fault, capsys, workdir, monkeypatch):
    """The disk fills up while writing the checkpoint, the report or the artifact itself:
    one line, exit 2, and nothing of this command left on disk."""
    import errno

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    target = {"checkpoint": "llmevo.inference.checkpoint.save_checkpoint",
              "report": "llmevo.experiments.pipeline.write_report",
              "artifact": "llmevo.artifacts.io.write_json_atomic"}[fault]
    monkeypatch.setattr(target, full)
    args = ["reproduce", "rope", "--preset", "smoke", "--steps", "2", "--threads", "1",
            "--device", "cpu", "--out", str(workdir / "runs" / "a.json"),
            "--save-checkpoints", str(workdir / "ckpt")]
    err = assert_refused(args, capsys, workdir, message="No space left")
    assert "Traceback" not in err


# --- every file llmevo reads ----------------------------------------------------------------

def _artifact_example() -> dict:
    found = sorted((REPO_ROOT / "docs" / "reproductions").glob("*/metrics/*.json"))
    return json.loads(found[0].read_text())


def test_show_refuses_deep_nesting_in_one_line(capsys, workdir):
    deep = workdir / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    assert_refused(["show", str(deep)], capsys, workdir)
    deep_dict = workdir / "deep-dict.json"
    deep_dict.write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    assert_refused(["show", str(deep_dict)], capsys, workdir)


def test_show_prints_bounded_output_for_huge_fields(capsys, workdir):
    artifact = _artifact_example()
    artifact["scope"] = "x" * 2_000_000
    artifact["provenance"]["command"] = "y" * 2_000_000
    path = workdir / "huge.json"
    path.write_text(json.dumps(artifact))
    status = run_cli(["show", str(path)])
    out = capsys.readouterr().out
    if status == 0:
        assert len(out) < 100_000, f"show printed {len(out):,} characters"
    else:
        assert status == 2


def test_report_refuses_a_json_list_and_deep_nesting(capsys, workdir):
    (workdir / "list.json").write_text("[]")
    assert_refused(["report", "list.json", "--out", str(workdir / "r")], capsys, workdir)
    (workdir / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    assert_refused(["report", "deep.json", "--out", str(workdir / "r")], capsys, workdir)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A real (untrained) checkpoint of llama_modern with a tokenizer."""
    from llmevo.catalog import build_model
    from llmevo.data.tokenizer import train_bpe
    from llmevo.inference.checkpoint import save_checkpoint
    from llmevo.model.config import ModelConfig

    tokenizer = train_bpe(["The river runs to the sea. " * 50], 300, 2)
    config = ModelConfig()
    folder = tmp_path_factory.mktemp("ckpt") / "good"
    save_checkpoint(folder, build_model(config), config, tokenizer_json=tokenizer.to_str())
    return folder


def _altered_checkpoint(source: Path, work: Path, change) -> Path:
    target = work / "ckpt"
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    config = change(config)
    (target / "config.json").write_text(json.dumps(config))
    return target


def _drop(key):
    def change(config):
        config.pop(key)
        return config
    return change


def _set(path: tuple[str, ...], value):
    def change(config):
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return config
    return change


CHECKPOINT_CASES = {
    "config is a list": lambda c: [],
    "config is a string": lambda c: "hello",
    "unknown version": _set(("version",), 99),
    "version missing": _drop("version"),
    "integrity hash missing": _drop("weights_sha256"),
    "integrity hash null": _set(("weights_sha256",), None),
    "model not an object": _set(("model",), [1, 2]),
    "model field unknown": _set(("model", "no_such_field"), 1),
    "absurd width": _set(("model", "d_model"), 1_000_000_000),
    "absurd depth": _set(("model", "n_layers"), 10_000_000),
    "tokenizer outside the folder": _set(("tokenizer",), "../../../etc/passwd"),
    "tokenizer absolute path": _set(("tokenizer",), "/etc/passwd"),
    "tokenizer not a string": _set(("tokenizer",), {"a": 1}),
    "metadata not an object": _set(("metadata",), [1]),
}


@pytest.mark.parametrize("case", list(CHECKPOINT_CASES))
def test_generate_refuses_a_bad_checkpoint(case, checkpoint, capsys, workdir):
    folder = _altered_checkpoint(checkpoint, workdir, CHECKPOINT_CASES[case])
    assert_refused(["generate", "--checkpoint", str(folder), "--prompt", "The", "--threads", "1",
                    "--device", "cpu", "--max-tokens", "2"], capsys, workdir)


def test_generate_refuses_altered_weights_and_a_missing_folder(checkpoint, capsys, workdir):
    folder = workdir / "ckpt"
    shutil.copytree(checkpoint, folder)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert_refused(["generate", "--checkpoint", str(folder), "--prompt", "The"], capsys, workdir,
                   message="sha256")
    assert_refused(["generate", "--checkpoint", str(workdir / "missing"), "--prompt", "The"],
                   capsys, workdir)
    (folder / "config.json").write_text("{not json")
    assert_refused(["generate", "--checkpoint", str(folder), "--prompt", "The"], capsys, workdir)
    (folder / "config.json").write_bytes(b"\xff\xfe\x00garbage")
    assert_refused(["generate", "--checkpoint", str(folder), "--prompt", "The"], capsys, workdir)


def test_a_good_checkpoint_still_generates(checkpoint, capsys, workdir):
    assert run_cli(["generate", "--checkpoint", str(checkpoint), "--prompt", "The", "--threads",
                    "1", "--device", "cpu", "--max-tokens", "2"]) == 0


# --- caches -----------------------------------------------------------------------------------

def _token_cache_setup(tmp_path, data_dir, cache_dir):
    """A private copy of the test cache's tokenizer, and a fresh token-array cache."""
    from llmevo.data.lm import load_lm_corpus
    from llmevo.runner.presets import get_preset

    load_lm_corpus(data_dir, "tokens", get_preset("smoke").budgets, cache_dir)  # trained once
    private = tmp_path / "cache"
    shutil.copytree(cache_dir / "tokenizers", private / "tokenizers")
    budgets = get_preset("smoke").budgets
    first = load_lm_corpus(data_dir, "tokens", budgets, private)
    entries = sorted((private / "tokens").glob("*.npz"))
    assert entries
    return private, budgets, first, entries


def test_a_corrupted_or_altered_token_cache_entry_is_detected_and_rebuilt(tmp_path, data_dir,
                                                                         cache_dir):
    import numpy as np
    import torch

    from llmevo.data.lm import load_lm_corpus

    private, budgets, first, entries = _token_cache_setup(tmp_path, data_dir, cache_dir)
    # 1. corrupted: not an npz at all
    entries[0].write_bytes(b"garbage")
    # 2. altered: a valid npz whose ids were changed (same length)
    stored = dict(np.load(entries[1]))
    stored["ids"] = stored["ids"].copy()
    stored["ids"][:10] = 7
    np.savez(entries[1].with_suffix(".tmp.npz"), **stored)
    entries[1].with_suffix(".tmp.npz").replace(entries[1])
    # 3. truncated: fewer ids than the budget
    stored = dict(np.load(entries[2]))
    stored["ids"] = stored["ids"][:100]
    np.savez(entries[2].with_suffix(".tmp.npz"), **stored)
    entries[2].with_suffix(".tmp.npz").replace(entries[2])
    second = load_lm_corpus(data_dir, "tokens", budgets, private)
    for split in first.tokens:
        assert torch.equal(first.tokens[split], second.tokens[split]), split
    third = load_lm_corpus(data_dir, "tokens", budgets, private)  # the rebuilt entries are good
    for split in first.tokens:
        assert torch.equal(first.tokens[split], third.tokens[split]), split


def test_an_altered_tokenizer_cache_is_detected_and_rebuilt(tmp_path, data_dir, cache_dir):
    import torch

    from llmevo.data.lm import load_lm_corpus

    private, budgets, first, _ = _token_cache_setup(tmp_path, data_dir, cache_dir)
    # the smoke corpus's tokenizer (a long-lived test cache may hold others, for other inputs)
    (tokenizer_file,) = [p for p in (private / "tokenizers").rglob("*.json")
                         if hashlib.sha256(p.read_bytes()).hexdigest() == first.tokenizer.sha256]
    original = tokenizer_file.read_text()
    for altered in (original.replace('"the"', '"THE"', 1),):  # a subtle edit, still valid JSON
        tokenizer_file.write_text(altered)
        second = load_lm_corpus(data_dir, "tokens", budgets, private)
        assert second.tokenizer.sha256 == first.tokenizer.sha256
        assert torch.equal(first.tokens["validation"], second.tokens["validation"])
        assert tokenizer_file.read_text() == original  # rebuilt


# --- study names and evolution --------------------------------------------------------------

@pytest.mark.parametrize("name", ["../escape", "a/b", "/abs", "..", "", "x" * 200, "bad name",
                                  "a\\b"])
def test_study_names_are_names_never_paths(name, capsys, workdir):
    assert_refused(["evolve", "--preset", "smoke", "--study", name], capsys, workdir,
                   message="--study")


def test_evolve_validates_data_before_creating_the_study_file(capsys, workdir, data_dir):
    from llmevo.data.pins import LM_FILE_SHA256 as PINNED_SHA256

    mirror = workdir.parent / "data"
    for relative in PINNED_SHA256:
        (mirror / relative).parent.mkdir(parents=True, exist_ok=True)
        (mirror / relative).symlink_to(data_dir / relative)
    (mirror / "wikitext-2/wiki.train.tokens").unlink()
    (mirror / "wikitext-2/wiki.train.tokens").write_text("not the real file\n")
    assert_refused(["evolve", "--preset", "smoke", "--trial-steps", "2", "--threads", "1",
                    "--data-dir", str(mirror), "--study", "s"], capsys, workdir)
    assert_refused(["evolve", "--preset", "smoke", "--data-dir", str(workdir / "none"),
                    "--study", "s"], capsys, workdir)


def test_two_commands_opening_a_new_study_together_both_work(tmp_path):
    """Two processes open the same new study at once: both succeed, one baseline trial."""
    import multiprocessing

    from evolve_support import tiny_plan

    plan = tiny_plan(f"sqlite:///{tmp_path}/race.db", Path("."), Path("."))
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    processes = [context.Process(target=_open_together, args=(plan, start, results))
                 for _ in range(2)]
    for process in processes:
        process.start()
    start.set()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert outcomes == ["ok", "ok"], outcomes
    import optuna

    study = optuna.load_study(study_name=plan.study_name, storage=plan.storage_url)
    baselines = [t for t in study.get_trials()
                 if t.user_attrs.get("role") == "baseline" and t.state.name == "WAITING"]
    assert len(baselines) == 1


def _open_together(plan, start, results) -> None:
    from llmevo.evolve.study import open_storage, open_study
    from llmevo.evolve.workers import build_space

    space = build_space(plan)
    start.wait()
    try:
        open_study(plan, space, open_storage(plan, heartbeat=False))
        results.put("ok")
    except Exception as error:  # reported to the parent, which fails the test
        results.put(f"{type(error).__name__}: {error}")


def test_a_killed_worker_does_not_block_the_report_of_a_completed_study():
    from llmevo.errors import ConfigError
    from llmevo.evolve.workers import check_workers_outcome

    check_workers_outcome({"w0": 0, "w1": 0}, finished=4, target=4)
    check_workers_outcome({"w0": 0, "w1": -9}, finished=4, target=4)  # killed, study complete
    with pytest.raises(ConfigError, match="w1"):
        check_workers_outcome({"w0": 0, "w1": -9}, finished=3, target=4)


def test_ctrl_c_prints_no_traceback(capsys, workdir, monkeypatch):
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("llmevo.experiments.reproduction.run_reproduction", interrupted)
    status = run_cli(["reproduce", "rope", "--preset", "smoke", "--threads", "1", "--device",
                      "cpu", "--out", str(workdir / "a.json")])
    err = capsys.readouterr().err
    assert status == 130
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (workdir / "a.json").exists()


def test_help_does_not_import_torch():
    """``llmevo --help`` answers without torch, Optuna, scipy or matplotlib (a fresh
    interpreter, since this one has imported them already)."""
    import subprocess
    import sys

    code = ("import sys\nfrom llmevo.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('torch', 'optuna', 'scipy', 'matplotlib', 'numpy', "
            "'tokenizers') if m in sys.modules)\nprint('HEAVY', heavy)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert "HEAVY []" in out, out


def test_cli_choice_lists_match_the_library():
    from typing import get_args

    from llmevo.cli import common
    from llmevo.evolve.study import GENOME_SAMPLERS
    from llmevo.runner.presets import PRESETS
    from llmevo.train.device import DEVICES

    assert set(get_args(common.PresetName)) == set(PRESETS)
    assert set(get_args(common.SamplerName)) == set(GENOME_SAMPLERS)
    assert set(get_args(common.DeviceName)) == set(DEVICES)
    from llmevo.experiments.sections import Parametrization
    from llmevo.model.parametrization import PARAMETRIZATIONS

    assert set(get_args(Parametrization)) == set(PARAMETRIZATIONS)


def test_a_cache_path_that_is_a_file_is_refused_by_name(workdir, capsys, monkeypatch):
    (workdir / "cachefile").write_text("not a folder")
    monkeypatch.setenv("LLMEVO_CACHE", str(workdir / "cachefile"))
    assert_refused(["reproduce", "rope", "--steps", "2", "--out", "x.json"], capsys, workdir,
                   message="point LLMEVO_CACHE at a folder")
