"""``llmevo ladder NAME``: the tuned, paired comparison at each rung of the size dial.

Parses the options into a ``llmevo.experiments.LadderRequest`` (``--storage``: a ladder
shared by every worker running the same command against that storage), runs
``llmevo.experiments.run_ladder`` (one line per rung as it starts and ends, with the
ladder's ETA by compute; training bars under it) and prints the per-rung table and the
across-rung summary; the pipeline lives in the library. ``llmevo ladder --accuracy`` trains
nothing: it prints the decision accuracy over the published ladders
(``llmevo.reports.decisions.published_decision_accuracy``).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from llmevo.cli.common import (
    app,
    apply_threads,
    changed_options,
    console,
    parse_int_list,
    parse_seeds,
    request_values,
    resolve_cache_dir,
    resolve_data_dir,
    section_options,
)
from llmevo.errors import ConfigError
from llmevo.experiments.sections import (
    LADDER_REFUSED,
    LaunchSection,
    RunSection,
    SizeSection,
    TrainingSection,
    TuningSection,
)

# the request's own fields that are options of ladder (NAME apart)
OWN = ("against", "genome", "rungs", "seeds", "top_seeds", "full_grid_rungs", "context", "margin", "resamples",
       "include_degenerate", "out", "storage", "study", "heartbeat", "grace_period", "wait_timeout")


def _minutes(seconds: float | None) -> str:
    return "…" if seconds is None else f"{seconds / 60:.1f} min"


@app.command()
# listed: what the ladder takes, and --tune-grid, which a ladder of an external --experiment reads
@section_options(RunSection, TrainingSection, TuningSection, SizeSection, LaunchSection,
                 refused={field: why for field, why in LADDER_REFUSED.items() if field != "tune_grid"})
def ladder(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(
        help="Component to compare against its ablation at each rung, e.g. rope; with --genome, the "
             "comparison's name (default <study>-champion); or an experiment file, FILE.toml (the "
             "ladder's fields, its sections as tables), which the options and --set override.")] = None,
    against: Annotated[str | None, typer.Option(metavar="OTHER",
        help="Baseline arm: NAME's slot set to OTHER (e.g. swiglu) instead of the declared ablation.")] = None,
    genome: Annotated[Path | None, typer.Option(metavar="FILE",
        help="The method arm is this genome against llama_modern: an evolution report's summary.json "
             "(its champion, e.g. docs/evolution/evolve-quick-fair/summary.json) or a genome JSON.")] = None,
    rungs: Annotated[str, typer.Option(help="Comma-separated rungs of the size dial (see `llmevo ladder --help`; "
                                            "-3..7), e.g. -3,-2,-1,0,1.")] = "-3,-2,-1,0,1",
    seeds: Annotated[str, typer.Option(help="Report seeds at every rung.")] = "42,43,44,45,46",
    top_seeds: Annotated[int | None, typer.Option(
        help="Only the first K report seeds at the top rung (a CPU's budget; the ladder file says so).")] = None,
    full_grid_rungs: Annotated[int, typer.Option(
        help="Lowest rungs tuned on the full 5-point grid; above them a learning-rate rule fitted on the "
             "rungs done centres a smaller grid (both arms alike); 0: the full grid everywhere.")] = 2,
    context: Annotated[Literal["fixed", "grow"], typer.Option(
        help="The training/evaluation window: quick's 64 tokens at every rung, or growing with the rung "
             "(64 up to rung 0, x sqrt(2) per rung: 96, 128, 176, ...).")] = "fixed",
    margin: Annotated[float, typer.Option(help="Non-inferiority margin of each rung's class, percent.")] = 1.0,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples for the across-rung intervals.")] = 2000,
    include_degenerate: Annotated[bool, typer.Option(
        help="Keep a one-head rung (rung -3) in the across-rung fits of a position or attention "
             "comparison (left out by default: one head cannot show what the slot does).")] = False,
    out: Annotated[Path | None, typer.Option(metavar="DIR", help="Ladder folder (overrides the default).")] = None,
    storage: Annotated[str | None, typer.Option(metavar="URL",
        help="Share the rungs with every worker running this command against this Optuna RDB storage "
             "(SQLAlchemy URL: sqlite:///FILE, postgresql+psycopg2://...); each rung runs once.")] = None,
    study: Annotated[str | None, typer.Option(metavar="NAME",
        help="With --storage: the study's name (default: derived from the ladder's settings).")] = None,
    heartbeat: Annotated[int | None, typer.Option(metavar="SECONDS",
        help="With --storage: seconds between a running rung's heartbeats (default 5).")] = None,
    grace_period: Annotated[int | None, typer.Option(metavar="SECONDS",
        help="With --storage: a rung silent this long is failed and run again (default 20).")] = None,
    wait_timeout: Annotated[float | None, typer.Option(metavar="SECONDS",
        help="With --storage: the longest a worker waits for other workers' rungs (default 86400).")] = None,
    accuracy: Annotated[bool, typer.Option(
        "--accuracy", help="Train nothing: print the decision accuracy over the published ladders (how often "
                           "rung k's class is rung k+1's and the top rung's, by slot, with and without the "
                           "ladders that share an arm).")] = False,
    root: Annotated[list[Path] | None, typer.Option(
        "--root", metavar="DIR", help="With --accuracy: read the ladders under DIR/ladders/ (repeatable; "
                                      "default docs).")] = None,
    experiment: Annotated[Path | None, typer.Option(metavar="FILE", help=(
        "Climb an external experiment's declared size ([ladder] in this TOML file) instead of the "
        "size dial; its arms by --baseline/--method 'k=v,...', --rungs the sizes (default the file's)."))] = None,
    baseline: Annotated[str | None, typer.Option(help="With --experiment: the baseline's parameters, k=v,...")] = None,
    method: Annotated[str | None, typer.Option(help="With --experiment: the method's parameters, k=v,...")] = None,
    timeout: Annotated[float | None, typer.Option(
        metavar="SECONDS", help="With --experiment: a run still going after this long is killed and recorded as failed.")] = None,
    publish_to: Annotated[Path | None, typer.Option(metavar="DIR", help=(
        "With --experiment --publish: publish under DIR/<name>/ instead of docs/external/ of the "
        "experiment's own git repository (never into llmevo's checkout)."))] = None,
    workers: Annotated[int | None, typer.Option(min=1, help=(
        "With --experiment: run this many of the command's runs at once (each one subprocess)."))] = None,
    **fields: Any,
) -> None:
    """Compare NAME with its baseline, tuned and paired, at each rung; fit and classify across rungs."""
    tune_grid = fields["tune_grid"]
    if experiment is not None or baseline is not None or method is not None or timeout is not None \
            or tune_grid is not None or publish_to is not None or workers is not None:
        from llmevo.cli.external import run_experiment_ladder

        run_experiment_ladder(ctx)  # the options it reads, the rest refused by declaration
        return
    if accuracy:
        if name is not None or genome is not None:
            raise ConfigError("--accuracy reads the published ladders and trains nothing: give no NAME "
                              "or --genome with it")
        given = changed_options(ctx, {"accuracy", "root", "name"})  # an explicit default is harmless
        if given:  # each was silently ignored
            raise ConfigError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --accuracy, "
                              "which reads the published ladders and trains nothing (only --root does)")
        _print_accuracy(root or [Path("docs")], given_root=root is not None)
        return
    if root is not None:
        raise ConfigError("--root applies with --accuracy only")
    from rich.markup import escape

    from llmevo.cli.progress import RichTrainingProgress
    from llmevo.experiments import LadderRequest, RungEvent, run_ladder
    from llmevo.experiments.sections import read_experiment
    from llmevo.reports.ladder import ladder_summary, rung_table

    is_file = name is not None and name.endswith(".toml")
    file = read_experiment(Path(name), LadderRequest) if is_file else {}
    # the ladder's own options given (over the file's; --set may not give them again)
    given = {key: ctx.params[key] for key in OWN if ctx.params[key] is not None
             and getattr(ctx.get_parameter_source(key), "name", "DEFAULT") != "DEFAULT"}
    spelled = {key: "--" + key.replace("_", "-") for key in given}
    if name is not None and not is_file:
        given["name"], spelled["name"] = name, "NAME"
    values = request_values(fields, LadderRequest, spelled)
    if "name" not in given and "name" not in file and "name" not in values and genome is None:
        raise ConfigError("give a component NAME (e.g. `llmevo ladder rope`), an experiment FILE.toml or --genome FILE")
    if "name" not in given and "name" not in file and genome is not None:
        from llmevo.experiments import read_genome

        given["name"] = read_genome(genome)[1]
    values.update(data_dir=resolve_data_dir(values.get("data_dir")), cache_dir=resolve_cache_dir(),
                  command=" ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]]))
    if "rungs" in given:
        given["rungs"] = parse_int_list(rungs, "--rungs")
    if "seeds" in given:
        given["seeds"] = parse_seeds(None, seeds)
    request = LadderRequest(**{**file, **given, **values})
    apply_threads(request.run.threads)
    plan = request.plan()  # every rung checked before the first trains

    def show(event: RungEvent) -> None:
        where = f"rung {event.rung} ({event.index + 1}/{event.total}, {event.parameters:,} parameters, " \
                f"6ND {event.compute:.2e})"
        if event.waiting_for:
            console.print(f"[bold]{where}[/]: waiting for rung(s) {', '.join(map(str, event.waiting_for))} "
                          "in other workers")
        elif event.artifact is None:
            console.print(f"[bold]{where}[/]: starting; elapsed {_minutes(event.elapsed_seconds)}, "
                          f"ladder ETA {_minutes(event.eta_seconds)}")
        else:
            from llmevo.reports.sections import calibration

            verdict = event.artifact.verdict
            said = f"{verdict.summary} {calibration(event.artifact)}" if verdict else "done"
            console.print(f"[bold]{where}[/]: {escape(said)}; "
                          f"ladder ETA {_minutes(event.eta_seconds)}")

    built = run_ladder(plan, progress=RichTrainingProgress(console), on_rung=show,
                       on_status=lambda line: console.print(escape(line)))
    console.print(rung_table(built), markup=False)
    console.print(ladder_summary(built).replace("**", ""), markup=False)
    if plan.shared is not None:
        console.print(f"study: {plan.shared.study_name}")
    console.print(f"ladder: {plan.folder / 'ladder.json'}")
    console.print(f"report: {plan.folder / 'README.md'}")


def _print_accuracy(roots: list[Path], given_root: bool = True) -> None:
    from rich.table import Table

    from llmevo.reports.decisions import accuracy_lines, published_decision_accuracy, table_cells
    from llmevo.reports.ladder import LADDER_FILE

    for folder in roots:
        where = f"--root {folder}" if given_root else f"no published ladders here ({folder}/ladders/, the default --root)"
        if not (folder / "ladders").is_dir():
            raise ConfigError(f"--root {folder}: no ladders/ folder in it" if given_root else
                              f"{where}: run it in the repository, or pass --root DIR")
        if not any((folder / "ladders").glob(f"*/{LADDER_FILE}")):  # "0 ladders" read as a result
            raise ConfigError(f"{where}: no ladder file (ladders/*/{LADDER_FILE}) under {folder}")
    found = published_decision_accuracy(roots, Path.cwd())
    definition, _, _, _, sharing = accuracy_lines(found)
    header, *rows = table_cells(found)
    table = Table(title="Decision accuracy: agreed/pairs, rate [95% Wilson, percent]")
    for column in header:
        table.add_column(column, overflow="fold")
    for cells in rows:
        table.add_row(*cells)
    console.print(definition.replace("*", ""), markup=False)
    console.print(table)
    console.print(sharing, markup=False)
