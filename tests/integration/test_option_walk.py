"""Every ``llmevo reproduce`` option against every mode: applied, or refused, never ignored.

A mode is what a run is (untuned or tuned, lr grid or declared space, pretraining component or
post-training method and which task, sized, each training path, the whole table). For each
(option, mode) the command line is parsed and planned in-process, with the run itself replaced
by a stand-in that plans the request as ``reproduce`` does first and records the plan
(nothing trains). The option is *applied* when the plan differs from the mode's plan
without it; *refused* when the command exits 2 with one line on
stderr and nothing written. An option accepted whose plan equals the plan without it was
silently ignored, and fails the walk. ``REFUSED`` pins the cases found ignored before (each
must be refused, the line naming the option).

Not walked, with the reason: ``--device`` (only the CPU here, where ``cpu`` is what ``auto``
resolves to: the same plan, not an ignored option), ``--preset`` (it chooses the mode), and
the options that choose the arms (``NAME``, ``--against``, ``--genome``, ``--init-from``:
each changes the comparison itself, tested in their own files).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from cli_runner import build_the_command_once, files_under, run_cli

import llmevo.experiments as experiments

MODES: dict[str, list[str]] = {
    "untuned": ["rope"],
    "tuned lr grid": ["rope", "--tune"],
    "tuned space": ["muon", "--tune-space", "lr"],
    "post-training sft (instruction)": ["sft"],
    "post-training dpo (preference)": ["dpo"],
    "post-training grpo (arithmetic)": ["grpo"],
    "sized (quick, rung 0)": ["rope", "--preset", "quick", "--no-tune", "--rung", "0"],
    "path sequential": ["rope", "--path", "sequential"],
    "path batched": ["rope", "--path", "batched"],
    "path parallel": ["rope", "--path", "parallel"],
    "path parallel-batched": ["rope", "--path", "parallel-batched"],
    "whole table": ["--all", "--only", "rope", "--preset", "smoke"],
}


def _options(data_dir: Path) -> dict[str, list[list[str]]]:
    """Each option with the values to try (what a user would type). A value may be a mode's
    own default (``--schedule constant`` on smoke, ``--arm-cache``): the option is ignored
    only when *every* value given here leaves the plan as it is."""
    preference = str(data_dir / "hh-rlhf" / "helpful-base" / "test.jsonl")
    given: dict[str, list] = {
        "--seed": ["--seed", "7"],
        "--seeds": ["--seeds", "7,8"],
        "--steps": ["--steps", "3"],
        "--batch-size": ["--batch-size", "2"],
        "--lr": ["--lr", "0.002"],
        "--warmup-steps": ["--warmup-steps", "1"],
        "--weight-decay": ["--weight-decay", "0.05"],
        "--schedule": [["--schedule", "constant"], ["--schedule", "cosine"]],
        "--wsd-decay": ["--schedule", "wsd", "--wsd-decay", "0.5"],
        "--set": ["--set", "train.lr=0.002"],
        "--suite": [["--suite", "public"], ["--suite", "core"]],
        "--rung": ["--rung", "-1"],
        "--d-model": ["--d-model", "32"],
        "--layers": ["--layers", "1"],
        "--heads": ["--heads", "2"],
        "--tokens-per-parameter": ["--tokens-per-parameter", "5"],
        "--seq-len": ["--seq-len", "32"],
        "--replicas-max": ["--replicas-max", "2"],
        "--val-every": ["--val-every", "5"],
        "--branches": ["--branches", "2"],
        "--sequential": ["--sequential"],
        "--path": ["--path", "batched"],
        "--tune": [["--tune"], ["--no-tune"]],
        "--no-tune": [["--no-tune"], ["--tune"]],
        "--tune-grid": ["--tune-grid", "1e-3,2e-3"],
        "--tune-seeds": ["--tune-seeds", "2000"],
        "--tune-confirm": ["--tune-confirm", "1"],
        "--tune-noise": ["--tune-noise", "2"],
        "--tune-probe": [["--tune-probe"], ["--no-tune-probe"]],
        "--no-tune-probe": [["--no-tune-probe"], ["--tune-probe"]],
        "--tune-space": ["--tune-space", "lr"],
        "--tune-trials": ["--tune-trials", "4"],
        "--tune-sampler": ["--tune-sampler", "tpe"],
        "--tune-fidelity": ["--tune-fidelity", "halving"],
        "--margin": ["--margin", "2"],
        "--post-steps": ["--post-steps", "3"],
        "--post-batch-size": ["--post-batch-size", "2"],
        "--post-lr": ["--post-lr", "0.002"],
        "--post-seed-offset": ["--post-seed-offset", "7"],
        "--self-consistency": ["--self-consistency"],
        "--method-config": ["--method-config", "beta=0.2"],
        "--preference-file": ["--preference-file", preference],
        "--arithmetic-max-operand": ["--arithmetic-max-operand", "9"],
        "--allow-noop": ["--allow-noop"],
        "--publish": ["--publish"],
        "--allow-dirty": ["--allow-dirty"],
        "--replace": ["--replace"],
        "--no-report": ["--no-report"],
        "--out": ["--out", "elsewhere/a.json"],
        "--save-checkpoints": ["--save-checkpoints", "checkpoints"],
        "--tracker": ["--tracker", "tensorboard"],
        "--tracker-dir": ["--tracker-dir", "tb"],
        "--arm-cache": [["--arm-cache"], ["--no-arm-cache"]],
        "--no-arm-cache": [["--no-arm-cache"], ["--arm-cache"]],
        "--threads": ["--threads", "1"],
        "--data-dir": ["--data-dir", "other-data"],
        "--only": ["--only", "alibi"],
        "--time-limit": ["--time-limit", "5"],
        "--storage": ["--storage", "sqlite:///walk.db"],
        "--study": ["--study", "walk"],
        "--param": ["--param", "mup"],
        "--match": ["--match", "flops"],
        "--launcher": ["--launcher", "local"],
        "--jobs": ["--jobs", "3"],
        "--slurm-partition": ["--slurm-partition", "gpu"],
        "--job-minutes": ["--job-minutes", "5"],
        "--launcher-folder": ["--launcher-folder", "jobs"],
    }
    return {option: values if isinstance(values[0], list) else [values] for option, values in given.items()}


# (option, mode) found silently ignored before, and what each does now: refused (the line
# names the option) or applied (--all passes --sequential on as --path sequential)
FOUND_IGNORED = [
    ("--replicas-max", "untuned", "refused"),  # --path auto on a CPU: parallel, no replicas
    ("--replicas-max", "path sequential", "refused"),
    ("--replicas-max", "path parallel", "refused"),
    ("--sequential", "path batched", "refused"),
    ("--sequential", "path parallel-batched", "refused"),
    ("--tune-seeds", "untuned", "refused"),
    ("--tune-seeds", "post-training sft (instruction)", "refused"),
    ("--tune-seeds", "sized (quick, rung 0)", "refused"),
    ("--arithmetic-max-operand", "post-training dpo (preference)", "refused"),
    ("--arithmetic-max-operand", "post-training sft (instruction)", "refused"),
    ("--preference-file", "post-training sft (instruction)", "refused"),
    ("--preference-file", "post-training grpo (arithmetic)", "refused"),
    ("--arm-cache", "post-training dpo (preference)", "refused"),
    ("--no-arm-cache", "post-training sft (instruction)", "refused"),
    ("--tracker", "path batched", "applied"),  # refused before (a tracker forced sequential training)
    ("--tracker-dir", "path batched", "refused"),  # without --tracker
    ("--tune-seeds", "whole table", "refused"),
    ("--margin", "whole table", "refused"),
    ("--replicas-max", "whole table", "refused"),
    ("--warmup-steps", "whole table", "refused"),
    ("--no-arm-cache", "whole table", "refused"),
    ("--self-consistency", "whole table", "refused"),
    ("--sequential", "whole table", "applied"),
]

# the same plan by design: the value given is the mode's own (not an ignored option)
SAME_BY_DESIGN = {
    ("--tune-space", "tuned space"),  # the mode is --tune-space lr
    ("--path", "path batched"),  # the mode is --path batched
}


class _Planned(Exception):  # noqa: N818  (a stand-in's way out, not an error)
    def __init__(self, plan):
        super().__init__("planned")
        self.plan = plan


def _fingerprint(plan) -> str:
    return repr(plan)


def _plan_of(args: list[str], capsys) -> tuple[str | None, int, str]:
    """(the plan's fingerprint or None, the exit status, stderr) of ``llmevo reproduce ARGS``."""
    threads = torch.get_num_threads()
    try:
        status = run_cli(["reproduce", *args])
    except _Planned as planned:
        capsys.readouterr()
        return _fingerprint(planned.plan), 0, ""
    finally:
        torch.set_num_threads(threads)
    return None, status, capsys.readouterr().err


@contextlib.contextmanager
def _stand_in(monkeypatch):
    def record(plan, *args, **kwargs):
        if isinstance(plan, experiments.ReproductionRequest):  # reproduce plans the request first
            plan = plan.plan()
        raise _Planned(plan)

    monkeypatch.setattr(experiments, "reproduce", record)
    monkeypatch.setattr(experiments, "run_evidence", record)
    build_the_command_once(monkeypatch)
    yield


def test_every_option_is_applied_or_refused_in_every_mode(monkeypatch, capsys, workdir, data_dir):
    options = _options(data_dir)
    ignored, bad_refusals, counted = [], [], 0
    outcome: dict[tuple[str, str], str] = {}
    with _stand_in(monkeypatch):
        for mode, mode_args in MODES.items():
            base, status, err = _plan_of(mode_args, capsys)
            assert base is not None, f"mode {mode}: {status} {err}"
            for option, values in options.items():
                counted += 1
                said = []
                for option_args in values:  # until one value is read (applied or refused)
                    before = files_under(workdir)
                    plan, status, err = _plan_of([*mode_args, *option_args], capsys)
                    if plan is None:
                        lines = err.strip().splitlines()
                        if status != 2 or len(lines) != 1 or files_under(workdir) != before:
                            bad_refusals.append((option_args, mode, status, err))
                        said.append("refused: " + (lines[0] if lines else ""))
                        break
                    if plan != base:
                        said.append("applied")
                        break
                    said.append("same")
                outcome[(option, mode)] = said[0] if said[0] != "same" else said[-1]
                if said[-1] == "same" and (option, mode) not in SAME_BY_DESIGN:
                    ignored.append((option, mode))
    refused = sum(said.startswith("refused") for said in outcome.values())
    print(f"option walk: {counted} (command, option, mode) triples; {counted - refused - len(ignored)} "
          f"applied, {refused} refused, {len(ignored)} ignored")
    assert counted == len(MODES) * len(options) >= 500
    assert not bad_refusals, bad_refusals
    assert not ignored, f"accepted but ignored: {ignored}"
    for option, mode, now in FOUND_IGNORED:
        said = outcome[(option, mode)]
        assert said.startswith(now), (option, mode, said)
        assert now == "applied" or option.lstrip("-").split("-")[-1] in said, (option, mode, said)


def test_the_walk_covers_every_option_of_reproduce(data_dir):
    """A new option of ``llmevo reproduce`` joins the walk (or the docstring's not-walked list)."""
    import typer

    from llmevo.cli import app

    command = typer.main.get_command(app).commands["reproduce"]  # type: ignore[attr-defined]
    declared = {name for param in command.params for name in param.opts if name.startswith("--")}
    walked = set(_options(data_dir))
    not_walked = {"--device", "--preset", "--against", "--genome", "--init-from", "--help", "--all",  # --all: a mode
                  "--publish-to", "--workers",  # --experiment only (tests/unit/test_external_checks.py)
                  "--tracker", "--tracker-dir"}  # tests/integration/test_trackers.py walks every path
    # the external-experiment options are walked with reproduce --experiment's own tests
    external = {"--experiment", "--baseline", "--method", "--timeout", "--report"}
    assert declared - walked - not_walked - external == set()
