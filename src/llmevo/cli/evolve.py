"""``llmevo evolve``: regularized evolution over architecture x optimizer genomes (Optuna)."""

from __future__ import annotations

import importlib
import os
import re
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from llmevo.cli.common import (
    DeviceOption,
    PresetName,
    SamplerName,
    app,
    apply_threads,
    check_count,
    check_output_dir,
    check_real,
    console,
    parse_floats,
    parse_seeds,
    resolve_cache_dir,
    resolve_data_dir,
)
from llmevo.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from rich.table import Table

    from llmevo.evolve import engine
    from llmevo.evolve.space import SearchSpace
    from llmevo.promotion import Promotion

REPO_ROOT = Path(__file__).resolve().parents[3]
IMPLEMENTATION_MODULES = (
    "llmevo.evolve.genome", "llmevo.evolve.space", "llmevo.evolve.sampler",
    "llmevo.evolve.pruner", "llmevo.evolve.objective", "llmevo.evolve.engine",
    "llmevo.evolve.champion", "llmevo.evolve.report", "llmevo.model.transformer",
    "llmevo.train.trainer", "llmevo.eval.lm", "llmevo.eval.suites", "llmevo.eval.metrics",
    "llmevo.eval.stats", "llmevo.experiments.presets", "llmevo.experiments.reproduce",
    "llmevo.experiments.arm_data",
)


STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_study_name(name: str) -> None:
    """A study name is a name (it becomes a file name), never a path."""
    if not STUDY_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(f"--study '{name[:60]}': expected a name of letters, digits, '.', '_' "
                          "or '-' (at most 100, no path separators)")


def masked(url: str) -> str:
    """The storage URL with any password replaced by ***."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


PROMOTION_RULES: dict[str, Callable[[dict[str, Promotion]], frozenset[str]]] = {
    "evidence": lambda decisions: frozenset(n for n, d in decisions.items() if d.promoted),
    "manifest": lambda decisions: frozenset(
        n for n, d in decisions.items() if d.reason.startswith("declared")),
}


def promotion_table(decisions: dict[str, Promotion]) -> Table:
    from rich.table import Table

    table = Table(title="promotion into the search space (model slots and optimizers)")
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


@app.command()
def evolve(
    preset: Annotated[PresetName, typer.Option(help="Data, training and evaluation settings.")] = "quick",
    trials: Annotated[int, typer.Option(help="Finished trials the study should reach (resumes count).")] = 24,
    workers: Annotated[int, typer.Option(help="Local worker processes (CPU threads are shared out).")] = 1,
    storage: Annotated[str | None, typer.Option(help="SQLAlchemy URL (default sqlite:///runs/evolve/<study>.db).")] = None,
    study: Annotated[str | None, typer.Option(help="Study name (default evolve-<preset>[-s<steps>]).")] = None,
    sampler: Annotated[SamplerName, typer.Option(help="How new genomes are proposed.")] = "regularized",
    seeds: Annotated[str, typer.Option(
        help="Report seeds of the final champion/baseline evaluation and of --explain.")] = "42,43,44,45,46",
    population: Annotated[int, typer.Option(help="Alive population (regularized evolution).")] = 8,
    tournament: Annotated[int, typer.Option(help="Tournament size.")] = 3,
    rescore_seeds: Annotated[int, typer.Option(help="Extra seeds for a would-be champion.")] = 2,
    score_k: Annotated[float, typer.Option(help="Score = mean - k * standard error.")] = 1.0,
    list_space: Annotated[bool, typer.Option("--list-space", help="Print the search space and exit.")] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Data directory (else $LLMEVO_DATA).")] = None,
    device: DeviceOption = "auto",
    trial_steps: Annotated[int | None, typer.Option(help="Training steps per trial (default: the preset's).")] = None,
    eval_windows: Annotated[int | None, typer.Option(help="Validation LM windows per trial (default: whole split).")] = None,
    heartbeat: Annotated[int, typer.Option(help="Heartbeat interval of running trials, seconds.")] = 5,
    grace_period: Annotated[int, typer.Option(help="A trial silent this long is failed and retried.")] = 20,
    sampler_seed: Annotated[int | None, typer.Option(help="Seed of the sampler's random choices.")] = None,
    out: Annotated[Path | None, typer.Option(metavar="DIR", help="Report folder (default docs/evolution/<study>).")] = None,
    report: Annotated[bool, typer.Option(help="Evaluate the champion on test and write the report.")] = True,
    threads: Annotated[int | None, typer.Option(help="CPU threads per worker (default: CPU cores / workers).")] = None,
    promotion: Annotated[Literal["evidence", "manifest"], typer.Option(
        help="Which components enter the space: 'evidence' (declared, or a published formal "
             "reproduction that was not significantly worse) or 'manifest' (declared only).")] = "evidence",
    docs: Annotated[Path, typer.Option(help="Where published reproductions are found.")] = Path("docs"),
    replicas_max: Annotated[int | None, typer.Option(
        help="At most this many seeds of a genome train at once (rescoring, final comparison).")] = None,
    sequential: Annotated[bool, typer.Option(
        "--sequential", help="Train rescoring and final seeds one after another.")] = False,
    trial_lr_factors: Annotated[str, typer.Option(
        help="Each trial trains at its lr times each factor (all at once) and is scored by the best; "
             "'none' trains one lr with hurdles.")] = "0.5,1,2",
    final_tune: Annotated[bool, typer.Option(
        help="Tune champion and baseline on one lr grid before the final comparison.")] = True,
    tune_grid: Annotated[str | None, typer.Option(
        help="The final comparison's lr grid (default: 5 from lr/3 to 3*lr of the preset).")] = None,
    tune_seeds: Annotated[str, typer.Option(help="Tuning seeds of the final comparison.")] = "2000",
    explain: Annotated[bool, typer.Option(
        "--explain", help="Knock out each gene where the study's champion differs from llama_modern, "
                          "train under --seeds and add the table to the study report.")] = False,
    genes: Annotated[str | None, typer.Option(help="With --explain: only these genes (comma-separated).")] = None,
    tensorboard: Annotated[Path | None, typer.Option(
        help="Write TensorBoard event files here: per-step curves of every trial and seed, each trial's fitness and genome, the final runs.")] = None,
) -> None:
    """Evolve genomes (a component per slot, optimizer, training genes) on an Optuna study."""
    check_count("--trials", trials)
    check_count("--workers", workers)
    check_count("--population", population, minimum=2)
    check_count("--tournament", tournament)
    if tournament > population:
        raise ConfigError(f"--tournament {tournament} exceeds --population {population}")
    check_count("--rescore-seeds", rescore_seeds, minimum=0)
    check_real("--score-k", score_k)
    check_count("--trial-steps", trial_steps)
    check_count("--eval-windows", eval_windows)
    check_count("--heartbeat", heartbeat)
    check_count("--grace-period", grace_period)
    check_count("--threads", threads)
    check_count("--sampler-seed", sampler_seed, minimum=0)
    check_count("--replicas-max", replicas_max)
    study_name = study if study is not None else f"evolve-{preset}" + (f"-s{trial_steps}" if trial_steps else "")
    check_study_name(study_name)
    if out is None:
        out = Path("docs/evolution") / study_name
    if report and not list_space:
        check_output_dir(out)
    check_output_dir(tensorboard, "--tensorboard")
    seed_list = parse_seeds(None, seeds)
    from llmevo.catalog import ensure_registered
    from llmevo.evolve import engine
    from llmevo.evolve.fair import trial_lr_grid
    from llmevo.experiments import tuning
    from llmevo.experiments.presets import get_preset
    from llmevo.promotion import promotions
    from llmevo.train.device import resolve_device
    from llmevo.train.many import Execution, check_path

    execution = Execution("sequential" if sequential else "auto", replicas_max)
    check_path(execution.path, execution.replicas_max)
    base = get_preset(preset)
    trial_preset = base.override({"steps": trial_steps, "eval_max_windows": eval_windows})
    final_preset = base.override({"steps": trial_steps})
    registry = ensure_registered()
    decisions = promotions(registry, docs)
    promoted = PROMOTION_RULES[promotion](decisions)
    from llmevo.evolve.space import build_search_space

    space = build_search_space(registry, trial_preset, promoted=promoted)
    if list_space:
        console.print(space_table(space))
        console.print(promotion_table(decisions))
        return
    factors = () if trial_lr_factors.strip().lower() == "none" else tuple(parse_floats(trial_lr_factors, "--trial-lr-factors"))
    if factors:
        trial_lr_grid(1.0, factors)  # refuses a bad grid before any work
    plan = tuning.check_plan(parse_floats(tune_grid, "--tune-grid") if tune_grid else tuning.default_grid(
        final_preset.train.lr), parse_seeds(None, tune_seeds), seed_list) if final_tune else None
    storage_url = storage or f"sqlite:///runs/evolve/{study_name}.db"
    data = resolve_data_dir(data_dir)
    torch_device = resolve_device(device)
    engine.check_storage_url(storage_url)
    settings = engine.EvolveSettings(
        study_name=study_name, storage_url=storage_url, preset=trial_preset, sampler=sampler,
        trials=trials, workers=workers, population=population, tournament=tournament,
        rescore_seeds=rescore_seeds, score_k=score_k, sampler_seed=sampler_seed,
        data_dir=data, cache_dir=resolve_cache_dir(), device=device,
        promoted=tuple(sorted(promoted)),
        threads_per_worker=threads or max(1, (os.cpu_count() or 1) // workers),
        heartbeat_interval=heartbeat, grace_period=grace_period, lr_factors=factors,
        execution_path=execution.path, replicas_max=execution.replicas_max,
        tensorboard_dir=tensorboard.resolve() if tensorboard is not None else None,
    )
    logs = None
    if tensorboard is not None:
        from llmevo.train.logging import TensorBoardLogs

        logs = TensorBoardLogs(tensorboard)  # checks that tensorboard is installed, before any work
    engine.quiet_optuna()
    if explain:
        _explain(settings, space, final_preset, seed_list, genes, torch_device, out)
        return
    engine.prepare_context(settings, space)  # data files verified before the study file exists
    opened = engine.open_study(settings, space, engine.open_storage(settings))  # errors before training
    already = len(engine.finished_trials(opened))
    console.print(f"study {study_name} at {masked(storage_url)}: {already} of {trials} trials "
                  f"finished; {workers} worker(s), {settings.threads_per_worker} thread(s) each")
    started = time.perf_counter()
    try:
        engine.run_workers(settings)
    except KeyboardInterrupt:
        console.print("interrupted: the study is resumable; run the same command again")
        # typer turns KeyboardInterrupt into a return value that the entry point drops
        raise SystemExit(130) from None
    search_seconds = time.perf_counter() - started
    finished = engine.finished_trials(opened)
    console.print(f"search: {len(finished)} finished trials, {search_seconds:.0f} s")
    if not report:
        return
    from llmevo.evolve.champion import baseline_trial, select_champion

    champion = select_champion(opened)
    baseline = baseline_trial(opened)
    console.print(f"champion: trial {champion.number} score {champion.user_attrs['score']:.4f}"
                  f" ({champion.user_attrs.get('label')})")
    apply_threads(threads or os.cpu_count() or 1)
    from llmevo.artifacts import collect_provenance, module_files
    from llmevo.evolve.champion import final_evaluation
    from llmevo.evolve.fair import tuned_final_evaluation
    from llmevo.evolve.genome import Genome
    from llmevo.evolve.report import build_summary, write_report
    from llmevo.train.device import accelerator_name

    context_settings = engine.EvolveSettings(**{**settings.__dict__, "preset": final_preset})
    context = engine.prepare_context(context_settings, space)
    champion_genome = Genome.from_json(champion.user_attrs.get("tuned_genome") or champion.user_attrs["genome"])
    final_tuning = None
    if plan is not None:
        final, final_tuning, _ = tuned_final_evaluation(champion_genome, space.baseline, context.data,
                                                        context.preset, seed_list, plan, torch_device,
                                                        logs=logs, execution=execution)
    else:
        final = final_evaluation(champion_genome, space.baseline, context.data, context.preset,
                                 seed_list, torch_device, logs=logs, execution=execution)
    folder = out
    command = " ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]])
    provenance = collect_provenance(
        command=command,
        implementation_files=module_files([importlib.import_module(m) for m in IMPLEMENTATION_MODULES]),
        runner_file=Path(engine.__file__), dataset_fingerprint=context.data.fingerprint,
        accelerator=accelerator_name(torch_device), artifact_path=str(folder / "summary.json"),
        repo_root=REPO_ROOT,
    )
    summary = build_summary(
        opened,
        settings={"sampler": sampler, "preset": preset, "trial_preset": trial_preset.model_dump(mode="json"),
                  "final_preset": context.preset.model_dump(mode="json"), "trials": trials,
                  "workers": workers, "population": population, "tournament": tournament,
                  "rescore_seeds": rescore_seeds, "score_k": score_k,
                  "search_seed": settings.search_seed, "final_seeds": seed_list,
                  "storage_display": masked(storage_url), "study": study_name,
                  "search_wall_seconds_this_invocation": search_seconds,
                  "trial_lr_factors": list(factors)},
        space=space.describe(), champion=champion, baseline=baseline, final=final,
        provenance=provenance,
        dataset={"fingerprint": context.data.fingerprint, "variant": final_preset.variant,
                 "train_stream_tokens": int(context.data.stream.numel()),
                 "validation_tokens": int(context.data.validation.numel()),
                 "test_tokens": int(context.data.test.numel())},
    )
    if final_tuning is not None:
        summary["final_tuning"] = final_tuning
    paths = write_report(summary, opened, folder)
    console.print(f"[bold]verdict (test fitness):[/] {summary['final_evaluation']['verdict']['test']['summary']}")
    console.print(f"report: {paths['readme']}")


def _explain(settings: engine.EvolveSettings, space: SearchSpace, final_preset, seed_list: list[int],
             genes: str | None, torch_device: torch.device, folder: Path) -> None:
    """``--explain``: knockouts of the study's champion, written into its report."""
    import json

    import optuna

    from llmevo.evolve import engine
    from llmevo.evolve.champion import select_champion
    from llmevo.evolve.fair import explain as explain_genes
    from llmevo.evolve.fair import knockout_variants
    from llmevo.evolve.genome import Genome
    from llmevo.evolve.report import write_report

    storage = engine.open_storage(settings, heartbeat=False)
    if settings.study_name not in optuna.get_all_study_names(storage=storage):
        raise ConfigError(f"no study '{settings.study_name}' in {masked(settings.storage_url)}; "
                          "run `llmevo evolve` first or pass --study/--storage")
    opened = engine.open_study(settings, space, storage)
    champion = select_champion(opened)
    genome = Genome.from_json(champion.user_attrs.get("tuned_genome") or champion.user_attrs["genome"])
    wanted = [g.strip() for g in genes.split(",")] if genes else None
    variants = knockout_variants(genome, space.baseline, space, wanted)  # unknown gene: exit 2 now
    console.print(f"explaining trial {champion.number}: {len(variants)} variant(s) x {len(seed_list)} seed(s)")
    context = engine.prepare_context(engine.EvolveSettings(**{**settings.__dict__, "preset": final_preset}), space)
    knockouts = explain_genes(genome, space.baseline, space, context.data, final_preset, seed_list,
                              torch_device, wanted)
    knockouts["champion_trial"] = champion.number
    folder.mkdir(parents=True, exist_ok=True)
    from llmevo.artifacts.io import write_json_atomic

    write_json_atomic(folder / "knockouts.json", knockouts)
    summary_path = folder / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        summary["knockouts"] = knockouts
        write_report(summary, opened, folder)
    from llmevo.evolve.fair import knockout_lines

    console.print("\n".join(knockout_lines(knockouts)))
    console.print(f"knockouts: {folder / 'knockouts.json'}")
