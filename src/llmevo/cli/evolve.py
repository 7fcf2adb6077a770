"""``llmevo evolve``: regularized evolution over architecture x optimizer genomes (Optuna).

Parses the options into ``llmevo.evolve.EvolutionSettings``, runs ``llmevo.evolve.run`` and
prints what it reports; the search, champion, final test and report live in the library.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from llmevo.artifacts.io import check_output_dir
from llmevo.cli.common import (
    PresetName,
    SamplerName,
    app,
    changed_options,
    check_applies,
    console,
    err_console,
    parse_floats,
    parse_names,
    parse_seeds,
    request_values,
    resolve_cache_dir,
    resolve_data_dir,
    section_options,
)
from llmevo.errors import ConfigError
from llmevo.experiments.sections import (
    EVOLUTION_REFUSED,
    LaunchSection,
    RunSection,
    SizeSection,
    TuningSection,
)

if TYPE_CHECKING:
    from rich.table import Table

    from llmevo.evolve.space import SearchSpace
    from llmevo.promotion import Promotion


def promotion_table(decisions: dict[str, Promotion]) -> Table:
    from rich.table import Table

    table = Table(title="promotion into the search space (model slots, optimizers, post-training, data recipes)")
    for column in ("slot", "component", "promoted", "why"):
        table.add_column(column)
    for decision in sorted(decisions.values(), key=lambda d: (d.slot, d.name)):
        if decision.slot in ("kv_cache", "architecture"):
            continue
        table.add_row(decision.slot, decision.name, "yes" if decision.promoted else "no", decision.reason)
    return table


def space_table(space: SearchSpace) -> Table:
    from rich.table import Table

    table = Table(title=f"search space (promotion-eligible components; parameter budget "
                  f"{space.min_parameters:,}..{space.max_parameters:,}, baseline "
                  f"{space.baseline_parameters:,})")
    table.add_column("gene")
    table.add_column("values")
    for name, distribution in space.genes.items():
        choices = getattr(distribution, "choices", None)
        if choices is not None:
            values = ", ".join(str(c) for c in choices)
        else:
            values = (f"{distribution.low:g} .. {distribution.high:g}"
                      f"{' (log)' if getattr(distribution, 'log', False) else ''}")
        table.add_row(name, values)
    return table


# what the printed space depends on (``pipeline.search_space``: the preset's training genes, the
# size, the promoted components); it reads no data, and the trial steps and evaluation windows
# change no gene (each was accepted and ignored: the option walk)
LIST_SPACE_OPTIONS = frozenset({"list_space", "preset", "rung", "d_model", "layers", "heads", "promotion", "docs"})


def _given(context: typer.Context, name: str) -> bool:
    """Whether the option was given, not its default (typer vendors click: compared by name)."""
    source = context.get_parameter_source(name)
    return getattr(source, "name", "DEFAULT") != "DEFAULT"


@app.command()
@section_options(RunSection, TuningSection, SizeSection, LaunchSection, exclude={"path"}, refused=EVOLUTION_REFUSED)
def evolve(
    context: typer.Context,
    file: Annotated[Path | None, typer.Argument(metavar="[FILE.toml]", help=(
        "An experiment file: the study's fields, its sections as tables; the options and --set "
        "override it."))] = None,
    preset: Annotated[PresetName, typer.Option(help="Data, training and evaluation settings.")] = "quick",
    trials: Annotated[int, typer.Option(help="Finished trials the study should reach (resumes count).")] = 24,
    workers: Annotated[int, typer.Option(help="Local worker processes (CPU threads are shared out).")] = 1,
    storage: Annotated[str | None, typer.Option(help="SQLAlchemy URL (default sqlite:///runs/evolve/<study>.db).")] = None,
    study: Annotated[str | None, typer.Option(help="Study name (default evolve-<preset>[-s<steps>]).")] = None,
    sampler: Annotated[SamplerName, typer.Option(help="How new genomes are proposed.")] = "regularized",
    seeds: Annotated[str, typer.Option(help="Report seeds of the final champion/baseline evaluation and of --explain.")] = "42,43,44,45,46",
    population: Annotated[int, typer.Option(help="Alive population (regularized evolution).")] = 8,
    tournament: Annotated[int, typer.Option(help="Tournament size.")] = 3,
    rescore_seeds: Annotated[int, typer.Option(
        help="Extra seeds for a would-be champion (0: scored on its search seed alone).")] = 2,
    score_k: Annotated[float, typer.Option(help="Score = mean - k * standard error.")] = 1.0,
    list_space: Annotated[bool, typer.Option("--list-space", help="Print the search space and exit.")] = False,
    trial_steps: Annotated[int | None, typer.Option(help="Training steps per trial (default: the preset's).")] = None,
    eval_windows: Annotated[int | None, typer.Option(help="Validation LM windows per trial (default: whole split).")] = None,
    heartbeat: Annotated[int, typer.Option(help="Heartbeat interval of running trials, seconds.")] = 5,
    grace_period: Annotated[int, typer.Option(help="A trial silent this long is failed and retried.")] = 20,
    sampler_seed: Annotated[int, typer.Option(
        help="Seed of the sampler's random choices (fixed by default: the same one-worker command "
             "gives the same trials; recorded in the study and the summary).")] = 0,
    out: Annotated[Path | None, typer.Option(metavar="DIR", help="Report folder (default runs/evolve/<study>; with --publish docs/evolution/<study>).")] = None,
    report: Annotated[bool, typer.Option(help="Evaluate the champion on test and write the report.")] = True,
    promotion: Annotated[Literal["evidence", "manifest"], typer.Option(
        help="Which components enter the space: 'evidence' (declared, or a published formal "
             "reproduction that was not significantly worse) or 'manifest' (declared only).")] = "evidence",
    docs: Annotated[Path, typer.Option(help="Where published reproductions are found.")] = Path("docs"),
    sequential: Annotated[bool, typer.Option(
        "--sequential", help="Train rescoring and final seeds one after another.")] = False,
    trial_lr_factors: Annotated[str, typer.Option(
        help="Each trial trains at its lr times each factor (all at once) and is scored by the best; "
             "'none' trains one lr with hurdles.")] = "0.5,1,2",
    final_tune: Annotated[bool, typer.Option(
        help="Tune champion and baseline on one lr grid before the final comparison.")] = True,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Knock out each gene where the study's champion differs from llama_modern, "
                          "train under --seeds and add the table to the study report.")] = False,
    genes: Annotated[str | None, typer.Option(help="With --explain: only these genes (comma-separated).")] = None,
    tensorboard: Annotated[Path | None, typer.Option(
        help="Write TensorBoard event files here: per-step curves of every trial and seed, each trial's fitness and genome, the final runs.")] = None,
    proposer: Annotated[str | None, typer.Option(
        metavar="CMD",
        help="A command that chooses each trial's genome in place of the sampler: it gets the study's "
             "history as JSON on stdin ('{request}' in CMD: a file's path; '{python}': this "
             "interpreter) and prints the next genome or {\"stop\": true} (docs/guide/evolve.md); "
             "budget, training, hurdles, rescoring and the final comparison stay llmevo's.")] = None,
    proposer_timeout: Annotated[float | None, typer.Option(
        help="Seconds a --proposer call may take (default 600); its process group is then killed.")] = None,
    **fields: Any,
) -> None:
    """Evolve genomes (a component per slot, optimizer, training genes) on an Optuna study."""
    seed_list = parse_seeds(None, seeds)
    check_applies("--genes", genes is not None, explain, "--explain")
    check_applies("--proposer", proposer is not None, not explain, "a search (not --explain)")
    for key in LaunchSection.model_fields:
        check_applies("--" + key.replace("_", "-"), fields[key] is not None, not explain and not list_space,
                      "a search (not --explain)")
    gene_names = parse_names(genes, "--genes", "gene names") if genes is not None else None
    from llmevo.evolve import EvolutionSettings, run, search_space
    from llmevo.evolve import explain as explain_champion

    if sequential:
        fields["path"] = "sequential"
    # the study's own options given on the command line: --set may not give them again
    own = {key: "--" + key.replace("_", "-") for key in context.params
           if key in EvolutionSettings.model_fields and _given(context, key)}
    given = request_values(fields, EvolutionSettings, own)
    data_dir = given.pop("data_dir", None)
    # the sampler's settings only where given: the library refuses them beside --proposer
    sampling = {name: value for name, value in (
        ("sampler", sampler), ("population", population), ("tournament", tournament),
        ("sampler_seed", sampler_seed)) if _given(context, name)}
    # --docs only where given: the library refuses a given folder that is not there
    sampling.update({"docs": docs} if _given(context, "docs") else {})
    values = {
        **dict(preset=preset, trials=trials, workers=workers, storage=storage, study=study, **sampling,
               rescore_seeds=rescore_seeds, score_k=score_k, trial_steps=trial_steps,
               eval_windows=eval_windows, heartbeat=heartbeat, grace_period=grace_period,
               out=out, report=report, promotion=promotion, tensorboard=tensorboard, final_tune=final_tune,
               trial_lr_factors=[] if trial_lr_factors.strip().lower() == "none" else parse_floats(
                   trial_lr_factors, "--trial-lr-factors"), proposer=proposer, seeds=seed_list,
               **({} if proposer_timeout is None else {"proposer_timeout": proposer_timeout})),
        **given,  # --set over an option's default (never over an option given: refused above)
        "cache_dir": resolve_cache_dir(), "command": " ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]]),
    }
    if file is not None:  # the file's values over the options' defaults, never over an option given
        from llmevo.experiments.sections import read_experiment

        values.update({key: value for key, value in read_experiment(file, EvolutionSettings).items()
                       if key not in given and not (key in context.params and _given(context, key))})
        data_dir = values.pop("data_dir", data_dir)
    # every value is checked by the typed settings (the CLI only parses); names and paths first
    probe = EvolutionSettings(data_dir=Path("."), **values)
    if report and not list_space:
        check_output_dir(probe.report_folder())
    check_output_dir(tensorboard, "--tensorboard")
    if list_space:
        ignored = changed_options(context, LIST_SPACE_OPTIONS)  # an explicit default is harmless
        if ignored:  # each was silently ignored
            raise ConfigError(f"{', '.join(ignored)} {'does' if len(ignored) == 1 else 'do'} not apply to "
                              "--list-space, which prints the space and exits (the space depends on --preset, "
                              "the size options, --promotion and --docs)")
        space, decisions = search_space(probe)
        console.print(space_table(space))
        console.print(promotion_table(decisions))
        return
    settings = EvolutionSettings(data_dir=resolve_data_dir(data_dir), **values)
    if explain:
        explain_champion(settings, gene_names, notify=console.print)
        return
    try:
        summary = run(settings, notify=console.print)
    except KeyboardInterrupt:
        err_console.print("interrupted: the study is resumable; run the same command again")
        raise SystemExit(130) from None  # the entry point sets 130 or 143, adding no line
    if summary is not None:
        console.print(f"[bold]verdict of record (final-comparison.json):[/] {summary.verdict}")
