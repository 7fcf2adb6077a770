"""``llmevo reproduce --experiment FILE``: an external experiment's two arms, paired over seeds.

Parses the options into a ``llmevo.experiments.external.ExternalRequest``, runs it and prints
one line per run and the comparison's table; the protocol lives in the library.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from llmevo.cli.common import console, parse_floats, parse_seeds, resolve_cache_dir
from llmevo.errors import ConfigError


def _show_run(record: Mapping, labels: Mapping[str, str], tuned: str | None) -> None:
    from rich.markup import escape

    where = f"{record['arm']} ({labels[record['arm']]}) {record['phase']} seed {record['seed']}"
    if record["phase"] == "tune" and tuned is not None:
        where += f" {tuned}={record['params'][tuned]}"
    if record["status"] == "failed":
        console.print(f"[red]failed[/] {escape(where)}: {escape(record['error'])}", highlight=False, soft_wrap=True)
        return
    values = " ".join(f"{k}={v:.5g}" for k, v in sorted(record["metrics"].items()))
    how = "cached" if record["cached"] else f"{record['wall_s']:.1f} s"
    console.print(f"{escape(where)}: {escape(values)} ({how})", highlight=False, soft_wrap=True)


def _table(artifact: Mapping):
    from rich.markup import escape
    from rich.table import Table

    metric = artifact["experiment"]["metric"]
    table = Table(title=escape(f"{artifact['name']}: {artifact['method']['label']} vs "
                               f"{artifact['baseline']['label']} ({metric}, "
                               f"{artifact['experiment']['direction']} is better)"))
    table.add_column("seed", justify="right")
    table.add_column("baseline", justify="right")
    table.add_column("method", justify="right")
    reported = {(run["arm"], run["seed"]): run for run in artifact["runs"] if run["phase"] == "report"}
    for seed in artifact["protocol"]["report_seeds"]:
        cells = []
        for arm in ("baseline", "method"):
            run = reported.get((arm, seed))
            cells.append("—" if run is None else "failed" if run["metrics"] is None
                         else f"{run['metrics'][metric]:.4f}")
        table.add_row(str(seed), *cells)
    summaries = [artifact[arm]["report"] for arm in ("baseline", "method")]
    table.add_row("mean ± std", *("—" if s is None else f"{s['mean']:.4f} ± {s['std']:.4f}" for s in summaries))
    return table


DEFAULT_TUNE_SEEDS = "1000"  # reproduce's --tune-seeds default: here, the experiment file's seeds


def run_experiment(experiment: Path | None, baseline: str | None, method: str | None, seed: int | None,
                   seeds: str | None, tune: bool | None, tune_grid: str | None, tune_seeds: str | None,
                   timeout: float | None, margin: float | None, arm_cache: bool, out: Path | None,
                   report: bool, others: Mapping[str, object], publish: bool = False, allow_dirty: bool = False,
                   replace: bool = False, tracker: str = "none", tracker_dir: Path | None = None) -> None:
    """The ``--experiment`` branch of ``llmevo reproduce``; ``others``: options of a built-in
    reproduction that were given (refused here); ``tracker``: each report run's final metrics
    and the verdict go there (``train.tracking.track_external``)."""
    from rich.markup import escape

    from llmevo.experiments import ExternalRequest, plan_external, run_comparison
    from llmevo.train.tracking import track_external

    if experiment is None:
        raise ConfigError("--baseline, --method and --timeout apply with --experiment FILE only")
    given = [option for option, value in others.items() if value is not None]
    if given:
        raise ConfigError(f"--experiment runs the file's command; {', '.join(given)} does not apply")
    if baseline is None and method is None:
        raise ConfigError("--experiment needs --baseline and/or --method (e.g. --method 'norm=rmsnorm')")
    request = ExternalRequest(
        experiment=experiment, baseline=baseline or "", method=method or "",
        seeds=parse_seeds(seed, seeds, default="42,43,44"), tune=tune,
        tune_grid=parse_floats(tune_grid, "--tune-grid") if tune_grid is not None else None,
        tune_seeds=(parse_seeds(None, tune_seeds, option="--tune-seeds")
                    if tune_seeds not in (None, DEFAULT_TUNE_SEEDS) else None),
        timeout=timeout, **({} if margin is None else {"margin": margin}), cache="use" if arm_cache else "refresh",
        cache_dir=resolve_cache_dir(), out=out, report=report, publish=publish, allow_dirty=allow_dirty,
        replace=replace, command=" ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]]),
    )
    plan = plan_external(request)  # every check happens before the first run
    tuned = None if plan.tuning is None else plan.tuning.param
    with track_external(tracker, tracker_dir, plan.artifact, {"experiment": str(plan.experiment.path),
                                                              **plan.labels}) as tracking:
        artifact = run_comparison(plan, base_env=dict(os.environ),
                                  on_run=lambda record: (_show_run(record, plan.labels, tuned), tracking.run(record)))
        tracking.verdict(artifact)
    for arm in ("baseline", "method"):
        if artifact[arm]["tuning"] is not None:
            console.print(f"{arm}: tuned {tuned} = {artifact[arm]['tuning']['chosen']}")
    console.print(_table(artifact))
    if artifact["verdict"] is not None:
        console.print(f"[bold]verdict:[/] {escape(artifact['verdict']['summary'])}")
    else:
        console.print(f"[bold]verdict withheld:[/] {escape(artifact['verdict_withheld'])}")
    family = artifact.get("family")
    if family is not None:
        console.print(f"[bold]after Holm[/] over the {family['size']} published comparison(s) of "
                      f"{escape(artifact['name'])}: {family['classification']} (adjusted p {family['p_holm']:.3g}, "
                      f"[{family['ci_low']:+.2f}%, {family['ci_high']:+.2f}%])")
    console.print(f"artifact: {plan.artifact}")


# the ``llmevo ladder`` options that apply with --experiment (any other one given is refused)
EXTERNAL_LADDER_OPTIONS = frozenset({
    "experiment", "baseline", "method", "timeout", "tune_grid", "rungs", "seeds", "tune_seeds", "margin",
    "resamples", "publish", "allow_dirty", "replace", "out"})


def parse_sizes(text: str, option: str = "--rungs") -> list[int | float]:
    """``32,64,96`` (or ``0.5,1``) as numbers; the experiment checks their type and order."""
    import json

    sizes = []
    for item in text.split(","):
        try:
            value = json.loads(item.strip())
        except json.JSONDecodeError:
            value = None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{option}: {item.strip()!r} is not a number (expected sizes, e.g. 32,64,96)")
        sizes.append(value)
    return sizes


def run_experiment_ladder(experiment: Path | None, baseline: str | None, method: str | None, rungs: str | None,
                          seeds: str | None, tune_grid: str | None, tune_seeds: str | None, timeout: float | None,
                          margin: float, resamples: int, publish: bool, allow_dirty: bool, replace: bool,
                          out: Path | None) -> None:
    """``llmevo ladder --experiment FILE``: one external comparison at each declared size."""
    from rich.markup import escape

    from llmevo.experiments import ExternalLadderRequest, plan_external_ladder, run_external_ladder

    if experiment is None:
        raise ConfigError("--baseline, --method, --timeout and --tune-grid apply with --experiment FILE only")
    if baseline is None and method is None:
        raise ConfigError("--experiment needs --baseline and/or --method (e.g. --method 'activation=relu2')")
    request = ExternalLadderRequest(
        experiment=experiment, baseline=baseline or "", method=method or "",
        rungs=None if rungs is None else parse_sizes(rungs),
        seeds=parse_seeds(None, seeds, default="42,43,44"),
        tune_grid=parse_floats(tune_grid, "--tune-grid") if tune_grid is not None else None,
        tune_seeds=None if tune_seeds is None else parse_seeds(None, tune_seeds, option="--tune-seeds"),
        timeout=timeout, margin=margin, resamples=resamples, cache_dir=resolve_cache_dir(), out=out,
        publish=publish, allow_dirty=allow_dirty, replace=replace,
        command=" ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]]))
    plan = plan_external_ladder(request)  # every rung checked before the first run
    tuned = None if plan.rungs[0].tuning is None else plan.rungs[0].tuning.param

    def on_rung(size, artifact) -> None:
        where = f"{plan.param}={size}"
        if artifact is None:
            console.print(f"[bold]rung {escape(where)}[/]: starting")
        elif artifact["verdict"] is not None:
            console.print(f"[bold]rung {escape(where)}[/]: {escape(artifact['verdict']['summary'])}")

    ladder = run_external_ladder(plan, base_env=dict(os.environ),
                                 on_run=lambda record: _show_run(record, plan.labels, tuned), on_rung=on_rung)
    console.print(f"ladder class: {ladder['ladder_class']}; trend of record: {ladder['trend']} (Δ% per decade "
                  f"{ladder['trend_fit']['slope']['value']:+.2f})")
    console.print(f"ladder: {plan.folder / 'ladder.json'}")
    console.print(f"report: {plan.folder / 'README.md'}")
