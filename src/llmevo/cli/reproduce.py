"""``llmevo reproduce NAME``: a baseline arm vs a method arm, paired over seeds.

Parses the options into a ``llmevo.experiments.ReproductionRequest``, runs
``llmevo.experiments.reproduce`` and prints the result; the pipeline lives in the library.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmevo.cli.common import (
    PresetName,
    app,
    apply_threads,
    console,
    parse_seeds,
    request_values,
    resolve_cache_dir,
    resolve_data_dir,
    section_options,
)
from llmevo.errors import ConfigError
from llmevo.experiments.sections import (
    LaunchSection,
    PostTrainingSection,
    RunSection,
    SizeSection,
    TrainingSection,
    TuningSection,
)

if TYPE_CHECKING:
    from rich.table import Table

    from llmevo.artifacts.schema import ReproductionArtifact


def summary_table(artifact: ReproductionArtifact) -> Table:
    from rich.markup import escape
    from rich.table import Table

    from llmevo.eval.metrics import SUMMARY_METRICS
    from llmevo.reports.sections import applicable_metrics

    # escaped: arm names such as llama_modern[position=rope] are not rich markup
    table = Table(title=escape(f"{artifact.method.name} vs {artifact.baseline.name} "
                               f"(validation, {len(artifact.evaluation_protocol.seeds)} seed(s))"))
    table.add_column("metric")
    table.add_column("baseline", justify="right")
    table.add_column("method", justify="right")
    table.add_column("Δ% (95% CI)", justify="right")
    stats = artifact.statistics or {}
    for metric in applicable_metrics(artifact, SUMMARY_METRICS):
        baseline, method = artifact.baseline.recorded(metric), artifact.method.recorded(metric)
        if baseline is None or method is None:
            continue
        change = stats[metric].paired_relative_change_percent if metric in stats else None
        if change is not None and change.ci_low is not None and change.ci_high is not None:
            delta = f"{change.mean:+.2f}% ({change.ci_low:+.2f}, {change.ci_high:+.2f})"
        elif change is not None:
            delta = f"{change.mean:+.2f}%"
        else:
            delta = ""
        table.add_row(metric, f"{baseline:.4f}", f"{method:.4f}", delta)
    return table


# the external branch takes these section fields (``cli.external.run_experiment``)
EXTERNAL_FIELDS = frozenset({"tune", "tune_grid", "tune_seeds", "arm_cache", "publish", "allow_dirty", "replace"})


# the request's own fields that are options of reproduce (NAME and --seed/--seeds apart)
OWN = ("against", "preset", "init_from", "genome", "report", "out", "save_checkpoints", "method_config",
       "allow_noop", "margin")


def _given(ctx: typer.Context, name: str) -> bool:
    return getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"


def _spelled(name: str, value: object) -> str:
    option = "--" + name.replace("_", "-")
    return f"--no-{option[2:]}" if value is False else option


@app.command()
@section_options(RunSection, TrainingSection, TuningSection, SizeSection, PostTrainingSection, LaunchSection)
def reproduce(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(
        help="Component to reproduce against its ablation, e.g. rope, muon (default rope; none with --all); "
             "or an experiment file, FILE.toml (the request's fields, its sections as tables; e.g. "
             "experiments/rope.toml), which the options and --set override.")] = None,
    all_: Annotated[bool, typer.Option("--all", help=(
        "The whole evidence table: every registered component against its ablation plus the declared "
        "--against comparisons, each tuned; finished comparisons are not rerun (a state file in "
        "runs/evidence/<preset>/, or --out DIR); with --publish the leaderboard and README table are "
        "regenerated at the end."))] = False,
    only: Annotated[str | None, typer.Option(help="With --all: only these components, e.g. rope,muon.")] = None,
    time_limit: Annotated[float | None, typer.Option(
        metavar="MINUTES", help="With --all: stop a comparison still running after this many minutes.")] = None,
    storage: Annotated[str | None, typer.Option(
        help="With --all: share the table with other workers through this Optuna RDB URL.")] = None,
    study: Annotated[str | None, typer.Option(help="With --all --storage: the study's name.")] = None,
    against: Annotated[str | None, typer.Option(metavar="OTHER",
        help="Baseline arm: llama_modern with NAME's slot set to OTHER (a registered component of "
             "that slot, e.g. rope or 'swiglu:hidden=192') instead of NAME's declared ablation; "
             "extra evidence that never promotes.")] = None,
    preset: Annotated[PresetName, typer.Option(help="Data, training and evaluation settings.")] = "smoke",
    seed: Annotated[int | None, typer.Option(help="One seed (default 42).")] = None,
    seeds: Annotated[str | None, typer.Option(help="Comma-separated seeds, e.g. 42,43,44.")] = None,
    init_from: Annotated[Path | None, typer.Option(metavar="DIR",
        help="Start both arms from a transformers Llama directory (config.json, model.safetensors, "
             "tokenizer.json; e.g. SmolLM2-135M) instead of pretraining, with the data tokenized by its "
             "own tokenizer; post-training methods, and optimizers for continued pretraining.")] = None,
    genome: Annotated[Path | None, typer.Option(metavar="FILE",
        help="Compare llama_modern with this genome instead of a component: an evolution report's "
             "summary.json (its champion) or a genome JSON; NAME (default <study>-champion) names it.")] = None,
    report: Annotated[bool, typer.Option(help="Write the README report and plots.")] = True,
    out: Annotated[Path | None, typer.Option(metavar="FILE", help="Artifact file (overrides the default).")] = None,
    save_checkpoints: Annotated[Path | None, typer.Option(metavar="DIR",
        help="Save each arm's first-seed model here (DIR/baseline, DIR/method) for `llmevo generate`.")] = None,
    sequential: Annotated[bool, typer.Option(
        "--sequential", help="Train the seeds one after another (the single-model path).")] = False,
    margin: Annotated[float | None, typer.Option(
        help="Non-inferiority margin of the verdict class, percent (default 1).")] = None,
    method_config: Annotated[str | None, typer.Option(
        help="The method arm's component settings, e.g. 'cap=10' (a model slot or an optimizer), "
             "'beta=0.1', 'group_size=8,kl_beta=0.04' (post-training) or 'lm=0.5,narrative=0.5' "
             "(a data recipe).")] = None,
    allow_noop: Annotated[bool, typer.Option(
        "--allow-noop", help="Run a comparison whose arms compute the same function (the check before "
                             "training refuses it otherwise); its artifact is classed no-op and never "
                             "promotes.")] = False,
    experiment: Annotated[Path | None, typer.Option(metavar="FILE", help=(
        "Run an external experiment declared in this TOML file (a command that prints a JSON "
        "line of metrics) instead of a component; its arms by --baseline/--method 'k=v,...'."))] = None,
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
    """Train a baseline arm and a method arm on the same tokens and compare them. Every section
    field is an option (below, by section) and reachable by --set SECTION.FIELD=VALUE."""
    from llmevo.cli.progress import RichTrainingProgress
    from llmevo.experiments import EvidenceRequest, ReproductionRequest
    from llmevo.experiments import reproduce as run_reproduction

    if experiment is not None or baseline is not None or method is not None or timeout is not None \
            or publish_to is not None or workers is not None:
        from llmevo.cli.external import run_experiment

        run_experiment(ctx)  # the options it reads, the rest refused by declaration
        return
    if sequential and fields["path"] is not None:
        raise ConfigError("--sequential is --path sequential; give one of them")
    if sequential:
        fields["path"] = "sequential"
    request_type = EvidenceRequest if all_ else ReproductionRequest
    is_file = name is not None and name.endswith(".toml")
    # the request's own fields given by their own options: --set may not give them again
    spelled = {key: _spelled(key, ctx.params[key]) for key in OWN if _given(ctx, key)}
    spelled.update({"name": "NAME"} if name is not None and not is_file else {})
    spelled.update({"seeds": "--seed" if seed is not None else "--seeds"} if seed is not None or seeds is not None
                   else {})
    values = request_values(fields, request_type, spelled)
    values.update(data_dir=resolve_data_dir(values.get("data_dir")), cache_dir=resolve_cache_dir(),
                  command=" ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]]))
    if all_:
        # what is one comparison's own (the request's fields the table does not have) is refused
        # in the words the table's request refuses a section field it does not take
        own = {"NAME": name, "--against": against, "--seed": seed, "--init-from": init_from, "--genome": genome,
               "--no-report": (not report) or None, "--save-checkpoints": save_checkpoints, "--margin": margin,
               "--method-config": method_config, "--allow-noop": allow_noop or None}
        EvidenceRequest.refuse_untaken([option for option, value in own.items() if value is not None])
        _reproduce_all(preset, seeds, out, only, time_limit, storage, study, values)
        return
    table_only = {"--only": only, "--time-limit": time_limit, "--storage": storage, "--study": study,
                  **{_spelled(key, values[key]): values[key] for key in LaunchSection.model_fields if key in values}}
    given = [option for option, value in table_only.items() if value is not None]
    if given:
        raise ConfigError(f"{', '.join(given)} applies to --all only")
    from llmevo.experiments.sections import read_experiment

    file = read_experiment(Path(name), ReproductionRequest) if is_file else {}
    if is_file:
        name = None
    if name is None and genome is not None:
        from llmevo.experiments import read_genome

        name = read_genome(genome)[1]
    # the request's own fields given on the command line (over the file's; else the request's defaults)
    own = {key: ctx.params[key] for key in OWN if ctx.params[key] is not None and _given(ctx, key)}
    own.update({"name": name} if name is not None else {})
    if seed is not None or seeds is not None:
        own["seeds"] = parse_seeds(seed, seeds)
    request = ReproductionRequest(**{**file, **own, **values})
    apply_threads(request.run.threads)  # the request checked every value (the CLI only parses)
    # the library plans the request (every check, output paths included) before it loads any data
    artifact = run_reproduction(request, progress=RichTrainingProgress(console))
    outputs = request.outputs()  # the plan reproduce made, kept by the request
    console.print(summary_table(artifact))
    from rich.markup import escape

    from llmevo.reports.sections import calibration

    said = f"{artifact.verdict.summary} {calibration(artifact)}" if artifact.verdict else "—"
    console.print(f"[bold]verdict:[/] {escape(said)}")
    flops = artifact.setup.flops if artifact.setup.match == "flops" else None
    if flops is not None:
        per_token = flops.flops_per_token
        console.print(f"matched on training FLOPs: baseline {flops.steps['baseline']:,} steps at "
                      f"{per_token['baseline']['counted']:,.0f} FLOPs per token, method {flops.steps['method']:,} "
                      f"at {per_token['method']['counted']:,.0f} (total ratio {flops.ratio:.4f})")
    console.print(f"artifact: {outputs.artifact}")
    if outputs.checkpoints is not None:
        for label in ("baseline", "method"):
            console.print(f"checkpoint ({label}): {outputs.checkpoints / label}")
    if outputs.report is not None:
        console.print(f"report: {outputs.report / 'README.md'}")


def _reproduce_all(preset: str, seeds: str | None, out: Path | None, only: str | None,
                   time_limit: float | None, storage: str | None, study: str | None, values: dict[str, Any]) -> None:
    """``reproduce --all``: the evidence table (``llmevo.experiments.run_evidence``), one line
    per comparison as it starts and ends with the table's ETA, then a summary table."""
    from rich.markup import escape
    from rich.table import Table

    from llmevo.cli.common import parse_names
    from llmevo.cli.progress import RichTrainingProgress
    from llmevo.experiments import EntryEvent, EvidenceRequest, run_evidence

    if only is not None and not only.strip():
        raise ConfigError("--only: give at least one component, e.g. --only rope,muon (or drop --only "
                          "for the whole table)")
    if time_limit is not None and not time_limit > 0:
        raise ConfigError(f"--time-limit {time_limit:g}: give a positive number of minutes")
    request = EvidenceRequest(
        preset=preset, only=parse_names(only, "--only", "component") if only is not None else None,
        seeds=parse_seeds(None, seeds) if seeds else None, time_limit_minutes=time_limit, out=out,
        storage=storage, study=study, **values)
    apply_threads(request.run.threads)
    plan = request.plan()  # every comparison checked before the first trains

    def show(event: EntryEvent) -> None:
        eta = "…" if event.eta_seconds is None else f"{event.eta_seconds / 60:.1f} min"
        where = f"[{event.index + 1}/{event.total}] {escape(event.label)}"
        if event.outcome is None:
            console.print(f"[bold]{where}[/]: starting; elapsed {event.elapsed_seconds / 60:.1f} min, table ETA {eta}")
        else:
            outcome = event.outcome
            said = ("finished before, not rerun" if outcome.skipped else
                    f"{outcome.status} in {outcome.wall_seconds / 60:.1f} min")
            detail = f"{outcome.classification} ({outcome.change_percent:+.2f}%)" if outcome.change_percent is not None \
                else escape(outcome.message or "")
            console.print(f"[bold]{where}[/]: {said}; {detail}; table ETA {eta}")

    outcomes = run_evidence(plan, progress=RichTrainingProgress(console), on_entry=show,
                            on_status=lambda line: console.print(escape(line)))
    table = Table(title=f"Evidence table ({preset}, {len(outcomes)} comparisons)")
    for column in ("comparison", "status", "class", "Δ%", "minutes", "core-min", "artifact"):
        table.add_column(column)
    for outcome in outcomes:
        table.add_row(escape(outcome.label), outcome.status + (" (before)" if outcome.skipped else ""),
                      outcome.classification or "—",
                      "—" if outcome.change_percent is None else f"{outcome.change_percent:+.2f}",
                      f"{outcome.wall_seconds / 60:.1f}",
                      "—" if outcome.cpu_seconds is None else f"{outcome.cpu_seconds / 60:.1f}",
                      escape(outcome.artifact or outcome.message or ""))
    console.print(table)
    console.print(f"state: {plan.state_path}")
