"""``llmevo reproduce --experiment FILE``: an external experiment's two arms, paired over seeds.

Parses the options into a ``llmevo.experiments.external.ExternalRequest``, runs it and prints
one line per run and the comparison's table; the protocol lives in the library.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping

import typer

from llmevo.cli.common import console, parse_floats, parse_seeds, resolve_cache_dir
from llmevo.errors import ConfigError
from llmevo.registry import SectionedRequest


def _show_run(record: Mapping, labels: Mapping[str, str], tuned: str | None) -> None:
    from rich.markup import escape

    where = f"{record['arm']} ({labels[record['arm']]}) {record['phase']} seed {record['seed']}"
    if record["phase"] == "tune" and tuned is not None:
        where += f" {tuned}={record['params'][tuned]}"
    if record["status"] == "failed":
        console.print(f"[red]failed[/] {escape(where)}: {escape(record['error'])}", highlight=False, soft_wrap=True)
        return
    values = " ".join(f"{k}={v:.5g}" for k, v in sorted(record["metrics"].items()))
    how = ("run earlier in this comparison" if record.get("reused")
           else f"cached; took {record['wall_s']:.1f} s when it ran" if record["cached"] else f"{record['wall_s']:.1f} s")
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


def _given(ctx: typer.Context, request: type[SectionedRequest], converters: Mapping[str, Callable]) -> dict:
    """The options given on the command line (an explicit default too), as ``request``'s
    fields: each converted where the command line spells it as text (``converters``). An
    option that is no field of the request, nor of its sections, is refused here in one line;
    a section field the request does not read (``request.refused``) is refused by the request,
    with its reason, exactly as from Python."""
    fields = set(request.model_fields) | {name for section in request.sections().values()
                                          for name in section.model_fields}
    values, foreign = {}, []
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            continue
        value = ctx.params[param.name]
        if param.name in converters:
            values.update(converters[param.name](value))
        elif param.name in fields:
            values[param.name] = value
        else:
            foreign.append(param.name.upper() if param.param_type_name == "argument" else param.opts[0])
    if foreign:
        raise ConfigError(f"--experiment runs the file's command; {', '.join(foreign)} "
                          f"{'does' if len(foreign) == 1 else 'do'} not apply (the file and its command decide it)")
    return values


def _command() -> str:
    return " ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]])


def run_experiment(ctx: typer.Context) -> None:
    """The ``--experiment`` branch of ``llmevo reproduce``: its given options (``ctx``) become
    an ``ExternalRequest``; what it does not read is refused."""
    from rich.markup import escape

    from llmevo.experiments import ExternalRequest, plan_external, run_comparison
    from llmevo.train.tracking import track_external

    params = ctx.params
    if params.get("publish_to") is not None and not params.get("publish"):
        raise ConfigError("--publish-to is where --publish writes; add --publish (or leave --publish-to out)")
    if params.get("experiment") is None:
        raise ConfigError("--baseline, --method, --timeout, --publish-to and --workers apply with --experiment FILE only")
    seeds = {"seeds": parse_seeds(params.get("seed"), params.get("seeds"))} \
        if params.get("seed") is not None or params.get("seeds") is not None else {}
    given = _given(ctx, ExternalRequest, {
        "seed": lambda value: seeds, "seeds": lambda value: seeds,
        "tune_grid": lambda value: {"tune_grid": parse_floats(value, "--tune-grid")},
        "publish_to": lambda value: {"published_dir": value},
        "tune_seeds": lambda value: {"tune_seeds": parse_seeds(None, value, option="--tune-seeds")},
    })
    request = ExternalRequest(**{"baseline": "", "method": "", **{k: v for k, v in given.items() if v is not None}},
                              cache_dir=resolve_cache_dir(), command=_command())
    if params.get("baseline") is None and params.get("method") is None:
        raise ConfigError("--experiment needs --baseline and/or --method (e.g. --method 'norm=rmsnorm')")
    plan = plan_external(request)  # every check happens before the first run
    with track_external(request.run.tracker, request.run.tracker_dir, plan.artifact,
                        {"experiment": str(plan.experiment.path), **plan.labels}) as tracking:
        artifact = run_comparison(plan, base_env=dict(os.environ),
                                  on_run=lambda record: (_show_run(record, plan.labels, plan.param), tracking.run(record)))
        tracking.verdict(artifact)
    for arm in ("baseline", "method"):
        if artifact[arm]["tuning"] is not None:
            console.print(f"{arm}: tuned {plan.param} = {artifact[arm]['tuning']['chosen']:g}"
                          + (" (on its grid's edge)" if artifact[arm]["tuning"]["on_edge"] else ""))
    console.print(_table(artifact))
    if artifact["verdict"] is not None:
        from llmevo.eval.concordance import calibration_sentence

        said = f"{artifact['verdict']['summary']} {calibration_sentence(None, None, external=True)}"
        console.print(f"[bold]verdict:[/] {escape(said)}")
    else:
        console.print(f"[bold]verdict withheld:[/] {escape(artifact['verdict_withheld'])}")
    family = artifact.get("family")
    if family is not None:
        console.print(f"[bold]after Holm[/] over the {family['size']} published comparison(s) of "
                      f"{escape(artifact['name'])}: {family['classification']} (adjusted p {family['p_holm']:.3g}, "
                      f"[{family['ci_low']:+.2f}%, {family['ci_high']:+.2f}%])")
    console.print(f"artifact: {plan.artifact}")


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


def run_experiment_ladder(ctx: typer.Context) -> None:
    """``llmevo ladder --experiment FILE``: one external comparison at each declared size; its
    given options (``ctx``) become an ``ExternalLadderRequest``; what it does not read is refused."""
    from rich.markup import escape

    from llmevo.experiments import ExternalLadderRequest, plan_external_ladder, run_external_ladder

    params = ctx.params
    if params.get("publish_to") is not None and not params.get("publish"):
        raise ConfigError("--publish-to is where --publish writes; add --publish (or leave --publish-to out)")
    if params.get("experiment") is None:
        raise ConfigError("--baseline, --method, --timeout, --tune-grid, --publish-to and --workers apply with "
                          "--experiment FILE only")
    given = _given(ctx, ExternalLadderRequest, {
        "rungs": lambda value: {"rungs": parse_sizes(value)},
        "seeds": lambda value: {"seeds": parse_seeds(None, value)},
        "tune_grid": lambda value: {"tune_grid": parse_floats(value, "--tune-grid")},
        "publish_to": lambda value: {"published_dir": value},
        "tune_seeds": lambda value: {"tune_seeds": parse_seeds(None, value, option="--tune-seeds")},
    })
    request = ExternalLadderRequest(**{"baseline": "", "method": "", **{k: v for k, v in given.items() if v is not None}},
                                    cache_dir=resolve_cache_dir(), command=_command())
    if params.get("baseline") is None and params.get("method") is None:
        raise ConfigError("--experiment needs --baseline and/or --method (e.g. --method 'activation=relu2')")
    plan = plan_external_ladder(request)  # every rung checked before the first run
    tuned = plan.rungs[0].param

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
