"""Every option of ``evolve``, ``ladder``, ``bench`` and ``verdict`` against every mode of its
command: applied, or refused, never silently ignored (``test_option_walk.py`` walks
``reproduce`` the same way).

For each (command, option, mode) the command line is run in-process up to where work would
start, where a stand-in records what the run would read (nothing trains, no study is made):

- ``evolve``: the plan at ``workers.build_space`` (the first work of a search and of
  ``--explain``, after every refusal), projected on what the mode reads (a search without a
  report reads no final comparison; ``--explain --no-report`` reads the study's identity, the
  seeds and where the knockouts go), with the launch section a launched search reads; for
  ``--list-space`` what it prints (it is run for real: it only reads the registry).
- ``ladder``: the plan at ``run_ladder``, its rungs' reproduction plans whole and, of the
  ladder's own request, the fields ``run_ladder`` reads; ``--accuracy`` is run for real (it
  only reads published ladders) and its output compared.
- ``bench``: the calls the command makes into ``llmevo.bench`` (stand-ins answer with fixed
  figures), torch's threads and what it prints.
- ``verdict``: what it prints (it only reads artifacts).

An option is *applied* when that differs from the mode's own; *refused* when the command exits
2 with one line on stderr and nothing written; otherwise it was *ignored*, and the walk fails.
A value equal to the option's default is never tried: an explicit default asks for nothing
(``--no-publish``, ``--path auto``) and is accepted as harmless. ``FOUND_IGNORED`` pins what
this walk found ignored, each refused now with a line naming the option.

Not walked, with the reason: ``--device`` (only a CPU here, where ``cpu`` is what ``auto``
resolves to), ``--preset`` of evolve (it names the study: another study, tested in its own
files), ``ladder NAME``, ``--against`` and ``--genome`` (they choose the comparison),
``verdict ARTIFACT`` (the input itself).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import torch
from cli_runner import build_the_command_once, files_under, run_cli

import llmevo.bench as bench_library
import llmevo.evolve as evolve_package
import llmevo.experiments as experiments
from llmevo.evolve import pipeline, workers

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

ROOT = Path(__file__).resolve().parents[2]
ARTIFACT = ROOT / "docs" / "reproductions" / "2104.09864-rope" / "metrics" / "public-quick-tuned-seeds42-46.json"


class _Planned(Exception):  # noqa: N818  (a stand-in's way out, not an error)
    def __init__(self, what):
        super().__init__("planned")
        self.what = what


# --- evolve -------------------------------------------------------------------------------

# the published family promotes components (--promotion and --docs then change the space)
EVOLVE_BASE = ["--preset", "smoke", "--docs", str(ROOT / "docs"), "--threads", "1", "--storage",
               "sqlite:///walk.db", "--study", "walk"]
EVOLVE_MODES: dict[str, list[str]] = {
    "search with a report": [],
    "search, --no-report": ["--no-report"],
    "search, --no-final-tune": ["--no-final-tune"],
    "search by a proposer": ["--proposer", "{python} -c pass"],
    "search by launched jobs": ["--launcher", "local"],
    "explain, --no-report": ["--explain", "--no-report"],
    "list the space": ["--list-space"],
}

EVOLVE_OPTIONS: dict[str, list[list[str]]] = {
    "--trials": [["--trials", "3"]],
    "--workers": [["--workers", "2"]],
    "--threads": [["--threads", "2"]],
    "--storage": [["--storage", "sqlite:///other.db"]],
    "--study": [["--study", "other"]],
    "--sampler": [["--sampler", "random"]],
    "--seeds": [["--seeds", "7,8"]],
    "--population": [["--population", "4"]],
    "--tournament": [["--tournament", "2"]],
    "--rescore-seeds": [["--rescore-seeds", "1"]],
    "--score-k": [["--score-k", "2"]],
    "--data-dir": [["--data-dir", "other-data"]],
    "--trial-steps": [["--trial-steps", "3"]],
    "--rung": [["--rung", "-1"]],
    "--d-model": [["--d-model", "32"]],
    "--layers": [["--layers", "1"]],
    "--heads": [["--heads", "2"]],
    "--eval-windows": [["--eval-windows", "2"]],
    "--heartbeat": [["--heartbeat", "2"]],
    "--grace-period": [["--grace-period", "30"]],
    "--sampler-seed": [["--sampler-seed", "7"]],
    "--out": [["--out", "elsewhere"]],
    "--publish": [["--publish"]],
    "--allow-dirty": [["--allow-dirty"]],
    "--replace": [["--replace"]],
    "--report": [["--no-report"]],
    "--promotion": [["--promotion", "manifest"]],
    "--docs": [["--docs", "other-docs"]],
    "--replicas-max": [["--replicas-max", "2"]],
    "--sequential": [["--sequential"]],
    "--trial-lr-factors": [["--trial-lr-factors", "none"], ["--trial-lr-factors", "1,2"]],
    "--final-tune": [["--no-final-tune"]],
    "--tune-grid": [["--tune-grid", "1e-3,2e-3"]],
    "--tune-seeds": [["--tune-seeds", "2001"]],
    "--tune-confirm": [["--tune-confirm", "1"]],
    "--tune-noise": [["--tune-noise", "2"]],
    "--tune-probe": [["--no-tune-probe"]],
    "--explain": [["--explain"]],
    "--genes": [["--genes", "norm"]],
    "--tensorboard": [["--tensorboard", "tb"]],
    "--proposer": [["--proposer", "{python} -c pass"]],
    "--proposer-timeout": [["--proposer-timeout", "5"]],
    "--launcher": [["--launcher", "local"]],
    "--jobs": [["--jobs", "3"]],
    "--slurm-partition": [["--slurm-partition", "gpu"]],
    "--job-minutes": [["--job-minutes", "5"]],
    "--launcher-folder": [["--launcher-folder", "jobs"]],
    "--list-space": [["--list-space"]],
    # the section fields evolve does not read: refused by its declaration
    "--val-every": [["--val-every", "5"]],
    "--branches": [["--branches", "2"]],
    "--arm-cache": [["--no-arm-cache"]],
    "--tune": [["--no-tune"]],
    "--tune-space": [["--tune-space", "lr"]],
    "--tune-trials": [["--tune-trials", "4"]],
    "--tune-sampler": [["--tune-sampler", "tpe"]],
    "--tune-fidelity": [["--tune-fidelity", "halving"]],
    "--tokens-per-parameter": [["--tokens-per-parameter", "5"]],
    "--seq-len": [["--seq-len", "32"]],
    "--param": [["--param", "mup"]],
    "--match": [["--match", "flops"]],
    "--set": [["--set", "tuning.tune_confirm=1"]],
}
EVOLVE_NOT_WALKED = {"--device", "--preset", "--help",
                     "--tracker", "--tracker-dir"}  # generated from the run section; evolve refuses both (test_trackers)

# what each mode's run reads of the plan (the rest of the plan is there, unread)
REPORT_PART = {"seeds", "tuning", "threads", "report_folder", "final_preset", "report"}
EXPLAIN_READS = {"study_name", "storage_url", "trial_preset", "lr_factors", "promoted", "base_model", "rung",
                 "size", "seeds", "final_preset", "threads", "report_folder"}


def _evolve_reads(mode: str, plan, settings) -> str:
    fields = {field.name: getattr(plan, field.name) for field in dataclasses.fields(plan)}
    run = plan.run
    if mode.startswith("explain"):
        fields = {name: value for name, value in fields.items() if name in EXPLAIN_READS}
        fields["run"] = (run.data_dir, run.cache_dir, run.device, run.publish, run.allow_dirty)
        return repr(fields)
    if not plan.report:
        fields = {name: value for name, value in fields.items() if name not in REPORT_PART}
        fields["run"] = run.model_dump(exclude={"publish", "allow_dirty", "replace"})
    return repr((fields, settings.launch))


# --- ladder -------------------------------------------------------------------------------

LADDER_MODES: dict[str, list[str]] = {
    "ladder": ["rope", "--rungs", "-2,-1", "--seeds", "42,43"],
    "ladder, path batched": ["rope", "--rungs", "-2,-1", "--seeds", "42,43", "--path", "batched"],
    "shared ladder": ["rope", "--rungs", "-2,-1", "--seeds", "42,43", "--storage", "sqlite:///walk-ladder.db"],
    "launched ladder": ["rope", "--rungs", "-2,-1", "--seeds", "42,43", "--storage", "sqlite:///walk-ladder.db",
                        "--launcher", "local"],
    "decision accuracy": ["--accuracy", "--root", str(ROOT / "docs")],
}
LADDER_OPTIONS: dict[str, list[list[str]]] = {
    "--rungs": [["--rungs", "-3,-1"]],
    "--seeds": [["--seeds", "42,44"]],
    "--top-seeds": [["--top-seeds", "1"]],
    "--tune-seeds": [["--tune-seeds", "1001"]],
    "--tune-confirm": [["--tune-confirm", "1"]],
    "--tune-noise": [["--tune-noise", "2"]],
    "--tune-probe": [["--no-tune-probe"]],
    "--full-grid-rungs": [["--full-grid-rungs", "1"]],
    "--tokens-per-parameter": [["--tokens-per-parameter", "5"]],
    "--context": [["--context", "grow"]],
    "--margin": [["--margin", "2"]],
    "--param": [["--param", "mup"]],
    "--data-dir": [["--data-dir", "other-data"]],
    "--threads": [["--threads", "1"]],
    "--path": [["--path", "sequential"], ["--path", "batched"]],
    "--replicas-max": [["--replicas-max", "1"]],
    "--val-every": [["--val-every", "5"]],
    "--branches": [["--branches", "2"]],
    "--resamples": [["--resamples", "100"]],
    "--include-degenerate": [["--include-degenerate"]],
    "--publish": [["--publish"]],
    "--allow-dirty": [["--allow-dirty"]],
    "--replace": [["--replace"]],
    "--out": [["--out", "elsewhere"]],
    "--storage": [["--storage", "sqlite:///other.db"]],
    "--study": [["--study", "other"]],
    "--heartbeat": [["--heartbeat", "3"]],
    "--grace-period": [["--grace-period", "30"]],
    "--wait-timeout": [["--wait-timeout", "60"]],
    "--launcher": [["--launcher", "local"]],
    "--jobs": [["--jobs", "3"]],
    "--slurm-partition": [["--slurm-partition", "gpu"]],
    "--job-minutes": [["--job-minutes", "5"]],
    "--launcher-folder": [["--launcher-folder", "jobs"]],
    "--accuracy": [["--accuracy"]],
    "--root": [["--root", str(ROOT / "docs")], ["--root", "empty-root"]],
    "--match": [["--match", "flops"]],
    "--experiment": [["--experiment", str(ROOT / "examples" / "tiny_gpt" / "experiment.toml")]],
    "--baseline": [["--baseline", "norm=layernorm"]],
    "--method": [["--method", "norm=rmsnorm"]],
    "--timeout": [["--timeout", "60"]],
    "--tune-grid": [["--tune-grid", "1e-3,3e-3"]],
    # the training section (each rung's preset at these overrides) and the fields a ladder refuses
    "--lr": [["--lr", "0.002"]],
    "--warmup-steps": [["--warmup-steps", "1"]],
    "--weight-decay": [["--weight-decay", "0.05"]],
    "--schedule": [["--schedule", "constant"], ["--schedule", "cosine"]],
    "--wsd-decay": [["--schedule", "wsd", "--wsd-decay", "0.5"]],
    "--suite": [["--suite", "core"]],
    "--steps": [["--steps", "3"]],
    "--batch-size": [["--batch-size", "2"]],
    "--tune": [["--no-tune"]],
    "--tune-space": [["--tune-space", "lr"]],
    "--tune-trials": [["--tune-trials", "4"]],
    "--tune-sampler": [["--tune-sampler", "tpe"]],
    "--tune-fidelity": [["--tune-fidelity", "halving"]],
    "--rung": [["--rung", "0"]],
    "--d-model": [["--d-model", "32"]],
    "--layers": [["--layers", "1"]],
    "--heads": [["--heads", "2"]],
    "--seq-len": [["--seq-len", "32"]],
    "--arm-cache": [["--no-arm-cache"]],
    "--set": [["--set", "tuning.tune_confirm=1"]],
}
LADDER_NOT_WALKED = {"--device", "--against", "--genome", "--help",
                     "--publish-to", "--workers",  # --experiment only (tests/unit/test_external_checks.py)
                     "--tracker", "--tracker-dir"}  # the run section's, carried whole to every rung
LADDER_RUN_READS = ("name", "rungs", "seeds", "top_seeds", "margin", "context", "include_degenerate", "resamples",
                    "launch")


def _ladder_reads(plan) -> str:
    ask = plan.request
    run = ask.run
    return repr((plan.folder, plan.rungs, plan.against, plan.shared,
                 {name: getattr(ask, name) for name in LADDER_RUN_READS},
                 (ask.size.tokens_per_parameter, run.publish, run.allow_dirty, run.device)))


# --- bench and verdict ----------------------------------------------------------------------

BENCH_MODES: dict[str, list[str]] = {
    "one model": [],
    "replicas": ["--replicas", "1,2"],
    "profile": ["--profile"],
    "fixed costs": ["--fixed-costs"],
}
BENCH_OPTIONS: dict[str, list[list[str]]] = {
    "--batch-size": [["--batch-size", "4"]],
    "--seq-len": [["--seq-len", "16"]],
    "--steps": [["--steps", "3"]],
    "--warmup": [["--warmup", "1"]],
    "--precision": [["--precision", "bf16"]],
    "--threads": [["--threads", "2"]],
    "--json": [["--json"]],
    "--replicas": [["--replicas", "1,4"]],
    "--replicas-max": [["--replicas-max", "2"]],
    "--path": [["--path", "sequential"], ["--path", "batched"]],
    "--sequential": [["--sequential"]],
    "--workers": [["--workers", "2"]],
    "--profile": [["--profile"]],
    "--profile-top": [["--profile-top", "3"]],
    "--fixed-costs": [["--fixed-costs"]],
    "--repetitions": [["--repetitions", "2"]],
    "--data-dir": [["--data-dir", "other-data"]],
    "--bytecode-cache": [["--bytecode-cache"], ["--no-bytecode-cache"]],
}
BENCH_NOT_WALKED = {"--device", "--help"}

VERDICT_MODES: dict[str, list[str]] = {
    "table, the family": [str(ARTIFACT), "--docs", str(ROOT / "docs")],
    "table, no family": [str(ARTIFACT), "--no-family"],
    "json, the family": [str(ARTIFACT), "--json", "--docs", str(ROOT / "docs")],
    "json, no family": [str(ARTIFACT), "--json", "--no-family"],
}
VERDICT_OPTIONS: dict[str, list[list[str]]] = {
    "--json": [["--json"]],
    "--budget-seconds": [["--budget-seconds", "100000"]],
    "--docs": [["--docs", "other-docs"]],
    "--no-family": [["--no-family"]],
}
VERDICT_NOT_WALKED = {"--help"}

# (command, option, mode) found silently ignored by this walk, each refused now (the line names
# the option; "final-tune" for --no-final-tune) or, for verdict --budget-seconds, shown in the table
FOUND_IGNORED = [  # the 29 of the walk run against the tree before (f918b7a)
    *[("evolve", option, "search, --no-report", "refused")
      for option in ("--seeds", "--final-tune", "--tune-grid", "--tune-seeds", "--tune-confirm")],
    *[("evolve", option, "explain, --no-report", "refused")
      for option in ("--trials", "--workers", "--sampler", "--population", "--tournament", "--rescore-seeds",
                     "--score-k", "--heartbeat", "--grace-period", "--sampler-seed", "--replicas-max",
                     "--sequential", "--final-tune", "--tune-grid", "--tune-seeds", "--tune-confirm",
                     "--tensorboard")],
    *[("evolve", option, "list the space", "refused") for option in ("--data-dir", "--trial-steps", "--eval-windows")],
    ("verdict", "--budget-seconds", "table, the family", "applied"),
    ("verdict", "--budget-seconds", "table, no family", "applied"),
    ("verdict", "--docs", "table, no family", "refused"),
    ("verdict", "--docs", "json, no family", "refused"),
]


@dataclasses.dataclass
class Walk:
    counted: int = 0
    own: int = 0
    applied: int = 0
    refused: int = 0
    ignored: list = dataclasses.field(default_factory=list)
    bad_refusals: list = dataclasses.field(default_factory=list)
    outcome: dict = dataclasses.field(default_factory=dict)


def _within(option_args: list[str], mode_args: list[str]) -> bool:
    """Whether ``option_args`` stand in ``mode_args`` as they are (the mode's own option)."""
    size = len(option_args)
    return any(mode_args[i:i + size] == option_args for i in range(len(mode_args) - size + 1))


def _walk(command: str, modes: dict, options: dict, read, capsys, workdir: Path, walk: Walk) -> None:
    """Each option of ``command`` in each mode; ``read(args)`` -> (what the run reads or None,
    exit status, stderr)."""
    for mode, mode_args in modes.items():
        base, status, err = read(mode, mode_args)
        assert base is not None, f"{command} mode {mode}: {status} {err}"
        for option, values in options.items():
            if any(_within(option_args, mode_args) for option_args in values):
                walk.own += 1  # the mode's own option (--no-report in the --no-report mode)
                continue
            walk.counted += 1
            said = "same"
            for option_args in values:  # until one value is read (applied or refused)
                before = files_under(workdir)
                what, status, err = read(mode, [*mode_args, *option_args])
                if what is None:
                    lines = err.strip().splitlines()
                    if status != 2 or len(lines) != 1 or files_under(workdir) != before:
                        walk.bad_refusals.append((command, option_args, mode, status, err))
                    said = "refused: " + (lines[0] if lines else "")
                    break
                if what != base:
                    said = "applied"
                    break
            walk.outcome[(command, option, mode)] = said
            if said == "same":
                walk.ignored.append((command, option, mode))
            elif said == "applied":
                walk.applied += 1
            else:
                walk.refused += 1


def _runner(command: str, capsys, fingerprint):
    """``read(mode, args)`` for ``llmevo COMMAND ARGS``: a stand-in's ``_Planned`` is read by
    ``fingerprint(mode, what, stdout)``; a normal exit by ``fingerprint(mode, None, stdout)``."""
    def read(mode: str, args: list[str]):
        threads = torch.get_num_threads()
        try:
            status = run_cli([command, *args])
        except _Planned as planned:
            return fingerprint(mode, planned.what, capsys.readouterr().out), 0, ""
        finally:
            torch.set_num_threads(threads)
        out, err = capsys.readouterr()
        if status != 0:
            return None, status, err
        return fingerprint(mode, None, out), 0, ""
    return read


@contextlib.contextmanager
def _stand_ins(monkeypatch):
    """Every place where work would start raises ``_Planned`` with what it was handed."""
    settings_seen = []
    original_plan = pipeline.EvolutionSettings.plan

    def plan(self):
        settings_seen.append(self)
        return original_plan(self)

    def build_space(plan, *args, **kwargs):
        raise _Planned(("evolve", plan, settings_seen[-1]))

    monkeypatch.setattr(pipeline.EvolutionSettings, "plan", plan)
    # the published family is read once per folder, not once per command (it does not change here)
    read: dict = {}
    original_promotions = pipeline.promotions

    def promotions(registry, docs):
        key = (id(registry), str(Path(docs).resolve()))
        if key not in read:
            read[key] = original_promotions(registry, docs)
        return read[key]

    monkeypatch.setattr(pipeline, "promotions", promotions)
    build_the_command_once(monkeypatch)
    monkeypatch.setattr(workers, "build_space", build_space)

    def ladder(plan, *args, **kwargs):
        raise _Planned(("ladder", plan))

    monkeypatch.setattr(experiments, "run_ladder", ladder)

    calls: list = []

    def recorder(name, answer=None):
        def call(*args, **kwargs):
            calls.append((name, args, kwargs, torch.get_num_threads()))
            if answer is None:
                raise _Planned(("bench", list(calls)))
            return answer
        return call

    figures = {"train_tokens_per_second": 1.0, "peak_memory_mib": 1.0, "threads": 1}
    row = {"replicas": 2, "requested_path": "", "path": "sequential", "train_tokens_per_second": 1.0,
           "steady_tokens_per_second": 1.0, "setup_seconds": 0.0, "vs_sequential": 1.0,
           "steady_vs_sequential": 1.0, "speedup": 1.0, "peak_memory_mib": 1.0, "steps": 3}
    profile = {"ops": [], "step_ms": 1.0, "profiled_step_ms": 1.0, "threads": 1}
    fixed = {"import_torch_median": 1.0, "import_torch_seconds": [1.0], "command_median": 1.0,
             "command_seconds": [1.0], "ratio": 1.0}

    def answering(name, result):
        inner = recorder(name, SimpleNamespace(as_dict=lambda: dict(result)))
        return inner

    monkeypatch.setattr(bench_library, "benchmark", answering("benchmark", figures))
    monkeypatch.setattr(bench_library, "benchmark_replicas",
                        recorder("benchmark_replicas", [SimpleNamespace(as_dict=lambda: dict(row))]))
    monkeypatch.setattr(bench_library, "profile_step", answering("profile_step", profile))
    monkeypatch.setattr(bench_library, "benchmark_fixed_costs", answering("benchmark_fixed_costs", fixed))
    yield calls


def _strip(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_every_option_of_every_command_with_modes_is_applied_or_refused(monkeypatch, capsys, workdir, data_dir):
    monkeypatch.setenv("LLMEVO_DATA", str(data_dir))
    (workdir / "other-data").mkdir()  # another data folder, holding the same files
    for child in data_dir.iterdir():
        (workdir / "other-data" / child.name).symlink_to(child)
    (workdir / "other-docs").mkdir()  # a published family with nothing in it
    (workdir / "empty-root" / "ladders").mkdir(parents=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(study_name="walk", storage="sqlite:///walk.db")  # what --explain reads
    walk = Walk()
    entry: list[str] = []  # which pipeline reached the stand-in (a search or --explain) and its genes
    for name in ("run", "explain"):
        def entered(settings, *args, _name=name, _original=getattr(evolve_package, name), **kwargs):
            entry.append(f"{_name}{args!r}")
            return _original(settings, *args, **kwargs)
        monkeypatch.setattr(evolve_package, name, entered)
    with _stand_ins(monkeypatch) as calls:
        def evolve_reads(mode, what, out):
            if what is None:  # --list-space: what it prints
                return ("printed", out)
            _, plan, settings = what
            return (entry[-1], _evolve_reads(mode, plan, settings))

        modes = {mode: [*(EVOLVE_BASE if "--list-space" not in args else EVOLVE_BASE[:4]), *args]
                 for mode, args in EVOLVE_MODES.items()}
        _walk("evolve", modes, EVOLVE_OPTIONS,
              _runner("evolve", capsys, evolve_reads), capsys, workdir, walk)

        def ladder_reads(mode, what, out):
            return ("printed", out) if what is None else _ladder_reads(what[1])

        _walk("ladder", LADDER_MODES, LADDER_OPTIONS, _runner("ladder", capsys, ladder_reads), capsys, workdir, walk)

        def bench_reads(mode, what, out):
            recorded = list(calls)
            calls.clear()
            return repr((recorded, _strip(out)))

        _walk("bench", BENCH_MODES, BENCH_OPTIONS, _runner("bench", capsys, bench_reads), capsys, workdir, walk)
    _walk("verdict", VERDICT_MODES, VERDICT_OPTIONS,
          _runner("verdict", capsys, lambda mode, what, out: _strip(out)), capsys, workdir, walk)
    expected = sum(len(modes) * len(options) for modes, options in (
        (EVOLVE_MODES, EVOLVE_OPTIONS), (LADDER_MODES, LADDER_OPTIONS), (BENCH_MODES, BENCH_OPTIONS),
        (VERDICT_MODES, VERDICT_OPTIONS)))
    print(f"option walk: {walk.counted} (command, option, mode) triples; {walk.applied} applied, "
          f"{walk.refused} refused, {len(walk.ignored)} ignored ({walk.own} the modes' own options)")
    assert walk.counted + walk.own == expected and walk.counted >= 500
    assert not walk.bad_refusals, walk.bad_refusals
    assert not walk.ignored, f"accepted but ignored: {walk.ignored}"
    for command, option, mode, now in FOUND_IGNORED:
        said = walk.outcome[(command, option, mode)]
        assert said.startswith(now), (command, option, mode, said)
        assert now == "applied" or option.lstrip("-").split("-")[-1] in said, (command, option, mode, said)


@pytest.mark.parametrize(("command", "walked", "not_walked"), [
    ("evolve", EVOLVE_OPTIONS, EVOLVE_NOT_WALKED), ("ladder", LADDER_OPTIONS, LADDER_NOT_WALKED),
    ("bench", BENCH_OPTIONS, BENCH_NOT_WALKED), ("verdict", VERDICT_OPTIONS, VERDICT_NOT_WALKED)])
def test_the_walk_covers_every_option(command, walked, not_walked):
    """A new option of a walked command joins the walk (or the docstring's not-walked list)."""
    import typer

    from llmevo.cli import app

    params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    declared = {param.opts[0] for param in params if param.opts[0].startswith("--")}
    assert declared - set(walked) - not_walked == set()
    assert set(walked) - declared == set()


def test_an_explicit_default_is_accepted_where_the_option_does_not_apply(monkeypatch, capsys, workdir):
    """Issue 37: ``--no-publish`` or ``--path auto`` with ``ladder --accuracy``, ``evolve
    --list-space`` with ``--no-publish``, and ``reproduce --all --arm-cache`` (the table's own
    default) were refused as options that do not apply; an explicit default asks for nothing.
    A value other than the default is still refused, by the spelling given."""
    docs = str(ROOT / "docs")
    assert run_cli(["ladder", "--accuracy", "--root", docs, "--no-publish", "--path", "auto", "--margin", "1"]) == 0
    assert run_cli(["ladder", "--accuracy", "--root", docs, "--path", "batched", "--no-publish"]) == 2
    assert "--path does not apply to --accuracy" in capsys.readouterr().err
    assert run_cli(["evolve", "--list-space", "--preset", "smoke", "--no-publish", "--report"]) == 0
    assert run_cli(["evolve", "--list-space", "--preset", "smoke", "--no-report"]) == 2
    assert "--no-report does not apply to --list-space" in capsys.readouterr().err

    def table(plan, *args, **kwargs):
        raise _Planned(plan)

    monkeypatch.setattr(experiments, "run_evidence", table)
    with pytest.raises(_Planned):
        run_cli(["reproduce", "--all", "--only", "rope", "--preset", "smoke", "--arm-cache"])
    assert run_cli(["reproduce", "--all", "--only", "rope", "--preset", "smoke", "--no-arm-cache"]) == 2
    assert "--no-arm-cache applies to one comparison" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--checkpoint", "ck"], ["--data-dir", "other-data"], ["--eval-tokens", "512"]])
def test_diagnose_refuses_the_l2_options_without_the_l2_experiment(option, capsys, workdir):
    """Issue 37: ``llmevo diagnose rope --checkpoint DIR`` (or ``--data-dir``, ``--eval-tokens``)
    without ``--full-experiment`` ran the L1 diagnostic and ignored the option; refused before
    any work, naming it. ``--eval-tokens 1024`` (the default) is accepted."""
    (workdir / "other-data").mkdir()
    before = files_under(workdir)
    assert run_cli(["diagnose", "rope", "--seed", "42", "--device", "cpu", *option]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{option[0]} applies to --full-experiment" in err and len(err.splitlines()) == 1
    assert files_under(workdir) == before
