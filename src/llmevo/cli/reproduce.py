"""``llmevo reproduce NAME``: a baseline arm vs a method arm, paired over seeds.

Parses the options into a ``llmevo.experiments.ReproductionRequest``, runs
``llmevo.experiments.reproduce`` and prints the result; the pipeline lives in the library.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from llmevo.cli.common import (
    DeviceOption,
    DModelOption,
    HeadsOption,
    JobMinutesOption,
    JobsOption,
    LauncherFolderOption,
    LauncherOption,
    LayersOption,
    MatchOption,
    ParamOption,
    PresetName,
    RungOption,
    SlurmPartitionOption,
    ThreadsOption,
    app,
    apply_threads,
    console,
    launch_options,
    parse_floats,
    parse_seeds,
    resolve_cache_dir,
    resolve_data_dir,
)
from llmevo.errors import ConfigError

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


@app.command()
def reproduce(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(
        help="Component to reproduce against its ablation, e.g. rope, muon (default rope; none with --all).")] = None,
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
    launcher: LauncherOption = None,
    jobs: JobsOption = None,
    slurm_partition: SlurmPartitionOption = None,
    job_minutes: JobMinutesOption = None,
    launcher_folder: LauncherFolderOption = None,
    against: Annotated[str | None, typer.Option(metavar="OTHER",
        help="Baseline arm: llama_modern with NAME's slot set to OTHER (a registered component of "
             "that slot, e.g. rope or 'swiglu:hidden=192') instead of NAME's declared ablation; "
             "extra evidence that never promotes.")] = None,
    preset: Annotated[PresetName, typer.Option(help="Data, training and evaluation settings.")] = "smoke",
    seed: Annotated[int | None, typer.Option(help="One seed (default 42).")] = None,
    seeds: Annotated[str | None, typer.Option(help="Comma-separated seeds, e.g. 42,43,44.")] = None,
    device: DeviceOption = "auto",
    data_dir: Annotated[Path | None, typer.Option(help="Data directory (else $LLMEVO_DATA).")] = None,
    steps: Annotated[int | None, typer.Option(help="Override the preset's training steps.")] = None,
    rung: RungOption = None,
    d_model: DModelOption = None,
    layers: LayersOption = None,
    heads: HeadsOption = None,
    param: ParamOption = "standard",
    match: MatchOption = "tokens",
    tokens_per_parameter: Annotated[float | None, typer.Option(
        help="With the size dial: training tokens per parameter (default quick's, about 7.26).")] = None,
    seq_len: Annotated[int | None, typer.Option(
        help="With the size dial: the training and evaluation window in tokens (default quick's 64).")] = None,
    init_from: Annotated[Path | None, typer.Option(metavar="DIR",
        help="Start both arms from a transformers Llama directory (config.json, model.safetensors, "
             "tokenizer.json; e.g. SmolLM2-135M) instead of pretraining, with the data tokenized by its "
             "own tokenizer; post-training methods, and optimizers for continued pretraining.")] = None,
    genome: Annotated[Path | None, typer.Option(metavar="FILE",
        help="Compare llama_modern with this genome instead of a component: an evolution report's "
             "summary.json (its champion) or a genome JSON; NAME (default <study>-champion) names it.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Override the batch size.")] = None,
    lr: Annotated[float | None, typer.Option(help="Override the learning rate.")] = None,
    warmup_steps: Annotated[int | None, typer.Option(help="Override the warmup steps.")] = None,
    weight_decay: Annotated[float | None, typer.Option(help="Override the weight decay.")] = None,
    schedule: Annotated[Literal["constant", "cosine"] | None, typer.Option(
        help="Override the learning-rate schedule.")] = None,
    suite: Annotated[Literal["core", "public"] | None, typer.Option(help="Override the benchmark suite.")] = None,
    publish: Annotated[bool, typer.Option(
        help="Write under docs/reproductions/ instead of runs/; refuses when llmevo's own git "
             "checkout (the code that runs, recorded in provenance) has uncommitted changes.")] = False,
    allow_dirty: Annotated[bool, typer.Option(
        help="With --publish: publish from a tree with uncommitted changes (recorded in provenance).")] = False,
    replace: Annotated[bool, typer.Option(
        help="Replace an artifact at the output path even when it holds more (blocks, seeds) than this run's.")] = False,
    report: Annotated[bool, typer.Option(help="Write the README report and plots.")] = True,
    out: Annotated[Path | None, typer.Option(metavar="FILE", help="Artifact file (overrides the default).")] = None,
    threads: ThreadsOption = None,
    save_checkpoints: Annotated[Path | None, typer.Option(metavar="DIR",
        help="Save each arm's first-seed model here (DIR/baseline, DIR/method) for `llmevo generate`.")] = None,
    replicas_max: Annotated[int | None, typer.Option(
        help="At most this many seeds of an arm train at once (memory).")] = None,
    sequential: Annotated[bool, typer.Option(
        "--sequential", help="Train the seeds one after another (the single-model path).")] = False,
    val_every: Annotated[int | None, typer.Option(
        metavar="N", help="Evaluate each report run's validation loss every N steps and at the last, on "
                          "32 fixed validation windows (a curve; time to target reads it); off by default.")] = None,
    path: Annotated[Literal["auto", "sequential", "batched", "parallel", "parallel-batched"], typer.Option(
        help="How an arm's seeds train.")] = "auto",
    tune: Annotated[bool | None, typer.Option(
        help="Tune each arm's learning rate on the same grid first (default: on for quick and "
             "standard, off for smoke; refused for post-training methods); report seeds default "
             "to 42..46.")] = None,
    tune_grid: Annotated[str | None, typer.Option(
        help="Learning rates to tune over, e.g. 1e-3,3e-3,1e-2 (default: 5 from lr/3 to 3*lr).")] = None,
    tune_seeds: Annotated[str | None, typer.Option(
        help="Tuning seeds, disjoint from the report seeds (default 1000).")] = None,
    tune_confirm: Annotated[int | None, typer.Option(
        help="With tuning (grid or space): extra tuning seeds (default 2, at most 16) on which the "
             "best and the settings within the seed noise of it (at most 3; a best lr at the stability "
             "edge with its lower neighbour) are re-scored, the lowest mean over all seeds chosen; "
             "0 turns this off.")] = None,
    tune_noise: Annotated[float | None, typer.Option(
        help="With tuning: the seed noise, percent of the best's mean, within which runners-up are "
             "re-scored on the --tune-confirm seeds (default: measured over two or more tuning seeds, "
             "else 1.42, the baseline's seed-to-seed spread at quick; 0: only a best at the stability "
             "edge).")] = None,
    tune_space: Annotated[str | None, typer.Option(
        help="Tune each arm over its components' declared tuning space instead of one lr grid: "
             "'full' (AdamW: lr, beta2, weight_decay, warmup; Muon: lr, momentum, adamw_lr; "
             "Lion: lr, beta2, weight_decay) or axes such as lr,beta2; Sobol trials (Optuna "
             "QMCSampler), the same number per arm; files say -tuned-space.")] = None,
    tune_trials: Annotated[int | None, typer.Option(
        help="With --tune-space, or with --all for its optimizer comparisons: trials per arm "
             "(default 8, at least 2), each under every tuning seed; the last quarter extends an "
             "axis whose best lies on its edge.")] = None,
    tune_sampler: Annotated[Literal["sobol", "tpe", "gp"] | None, typer.Option(
        help="With --tune-space (or --all): who chooses the declared trials. sobol (default): "
             "Sobol points; tpe or gp: the first half are the same Sobol points, the rest proposed "
             "two at a time by Optuna's TPESampler or GPSampler from the results so far.")] = None,
    tune_fidelity: Annotated[Literal["full", "halving"] | None, typer.Option(
        help="How far each tuning candidate trains. full (default): every grid point or trial to "
             "full length; halving: successive halving (factor 3), the worse candidates stopped at "
             "a third (a ninth, ...) of the steps by their validation there, the same schedule for "
             "every arm.")] = None,
    tune_probe: Annotated[bool | None, typer.Option(
        "--tune-probe/--no-tune-probe",
        help="With the lr grid: after it has chosen (and extended), train each arm once two grid steps "
             "above the grid's top (x3 on the default grid) on the tuning seeds; one that beats the best at "
             "all extends the grid toward it (default on; the artifact says when "
             "it was off).")] = None,
    margin: Annotated[float | None, typer.Option(
        help="Non-inferiority margin of the verdict class, percent (default 1).")] = None,
    post_steps: Annotated[int | None, typer.Option(help="Post-training methods: the stage's steps.")] = None,
    post_batch_size: Annotated[int | None, typer.Option(help="Post-training: examples per step.")] = None,
    post_lr: Annotated[float | None, typer.Option(help="Post-training: learning rate.")] = None,
    self_consistency: Annotated[bool, typer.Option(
        "--self-consistency", help="Post-training: also score held-out arithmetic by majority vote over "
                                   "k = 1, 4, 8 sampled answers (accuracy and generated tokens).")] = False,
    post_seed_offset: Annotated[int | None, typer.Option(
        help="Post-training: the stage's seed is the run seed plus this.")] = None,
    method_config: Annotated[str | None, typer.Option(
        help="The method arm's component settings, e.g. 'cap=10' (a model slot or an optimizer), "
             "'beta=0.1', 'group_size=8,kl_beta=0.04' (post-training) or 'lm=0.5,narrative=0.5' "
             "(a data recipe).")] = None,
    allow_noop: Annotated[bool, typer.Option(
        "--allow-noop", help="Run a comparison whose arms compute the same function (the check before "
                             "training refuses it otherwise); its artifact is classed no-op and never "
                             "promotes.")] = False,
    preference_file: Annotated[Path | None, typer.Option(
        help="DPO: a JSONL file of {\"chosen\", \"rejected\"} dialogues instead of HH-RLHF helpful-base.")] = None,
    arithmetic_max_operand: Annotated[int | None, typer.Option(
        help="GRPO: the arithmetic difficulty (operands 0..N).")] = None,
    tracker: Annotated[str, typer.Option(metavar="none|tensorboard|wandb|trackio", help=(
        "Log every report run (one per arm and seed: per-step loss, lr, grad norm, final metrics, the "
        "verdict as a summary) to TensorBoard, W&B (offline) or trackio (local), on every training path."))] = "none",
    tracker_dir: Annotated[Path | None, typer.Option(metavar="DIR", help=(
        "Where --tracker writes (default: runs/tensorboard, runs/wandb, or trackio's own folder)."))] = None,
    arm_cache: Annotated[bool | None, typer.Option(
        "--arm-cache/--no-arm-cache",
        help="Load tuning and report runs trained before with identical settings, code and data "
             "from $LLMEVO_CACHE/arms (default .cache/llmevo/arms) instead of retraining them (the artifact lists them); --no-arm-cache "
             "retrains everything. Not used with --tracker.")] = None,
    experiment: Annotated[Path | None, typer.Option(metavar="FILE", help=(
        "Run an external experiment declared in this TOML file (a command that prints a JSON "
        "line of metrics) instead of a component; its arms by --baseline/--method 'k=v,...'."))] = None,
    baseline: Annotated[str | None, typer.Option(help="With --experiment: the baseline's parameters, k=v,...")] = None,
    method: Annotated[str | None, typer.Option(help="With --experiment: the method's parameters, k=v,...")] = None,
    timeout: Annotated[float | None, typer.Option(
        metavar="SECONDS", help="With --experiment: a run still going after this long is killed and recorded as failed.")] = None,
) -> None:
    """Train a baseline arm and a method arm on the same tokens and compare them."""
    from llmevo.cli.progress import RichTrainingProgress
    from llmevo.experiments import ReproductionRequest
    from llmevo.experiments import reproduce as run_reproduction

    if experiment is not None or baseline is not None or method is not None or timeout is not None:
        from llmevo.cli.external import run_experiment

        run_experiment(ctx)  # the options it reads, the rest refused by declaration
        return
    launching = launch_options(launcher, jobs, slurm_partition, job_minutes, launcher_folder)
    table_only = {"--only": only, "--time-limit": time_limit, "--storage": storage, "--study": study,
                  **{"--" + key.replace("_", "-"): value for key, value in launching.items()}}
    if sequential and path != "auto":
        raise ConfigError("--sequential is --path sequential; give one of them")
    if sequential:
        path = "sequential"
    if all_:
        single = {"NAME": name, "--against": against, "--seed": seed, "--save-checkpoints": save_checkpoints,
                  "--tracker": None if tracker == "none" else tracker, "--tracker-dir": tracker_dir, "--rung": rung, "--d-model": d_model, "--layers": layers,
                  "--heads": heads, "--param": None if param == "standard" else param,
                  "--match": None if match == "tokens" else match, "--init-from": init_from, "--genome": genome, "--lr": lr, "--batch-size": batch_size,
                  "--method-config": method_config, "--allow-noop": allow_noop or None, "--post-steps": post_steps, "--replace": replace or None,
                  "--no-tune": tune is False or None, "--no-report": (not report) or None,
                  "--tokens-per-parameter": tokens_per_parameter, "--seq-len": seq_len,
                  "--warmup-steps": warmup_steps, "--weight-decay": weight_decay, "--schedule": schedule,
                  "--suite": suite, "--tune-seeds": tune_seeds, "--margin": margin,
                  "--replicas-max": replicas_max, "--val-every": val_every,
                  "--post-batch-size": post_batch_size, "--post-lr": post_lr,
                  "--self-consistency": self_consistency or None, "--post-seed-offset": post_seed_offset,
                  "--preference-file": preference_file, "--arithmetic-max-operand": arithmetic_max_operand,
                  "--no-arm-cache": arm_cache is False or None}  # --arm-cache: the table's default
        given = [option for option, value in single.items() if value is not None]
        if given:
            raise ConfigError(f"--all runs the whole table; {', '.join(given)} applies to one comparison")
        if tune_space is not None:
            raise ConfigError("--all tunes each comparison by its protocol of record (optimizers over "
                              "their declared space, the rest over the lr grid); --tune-space applies "
                              "to one comparison")
        _reproduce_all(preset, seeds, device, data_dir, threads, steps, path, tune_grid, tune_confirm, publish,
                       allow_dirty, out, only, time_limit, storage, study, tune_trials, tune_sampler, launching,
                       tune_fidelity, tune_noise, tune_probe)
        return
    given = [option for option, value in table_only.items() if value is not None]
    if given:
        raise ConfigError(f"{', '.join(given)} applies to --all only")
    if name is None and genome is not None:
        from llmevo.experiments import read_genome

        name = read_genome(genome)[1]
    name = name or "rope"

    given_only = {key: value for key, value in (  # the request's own default where not given
        ("tune_seeds", None if tune_seeds is None else parse_seeds(None, tune_seeds, option="--tune-seeds")),
        ("margin", margin), ("arm_cache", arm_cache)) if value is not None}
    request = ReproductionRequest(
        name=name, against=against, preset=preset, device=device,
        seeds=None if seed is None and seeds is None else parse_seeds(seed, seeds),
        data_dir=resolve_data_dir(data_dir), cache_dir=resolve_cache_dir(), threads=threads,
        rung=rung, d_model=d_model, layers=layers, heads=heads, param=param, match=match, init_from=init_from, genome=genome,
        tokens_per_parameter=tokens_per_parameter, seq_len=seq_len,
        steps=steps, batch_size=batch_size, lr=lr, warmup_steps=warmup_steps, weight_decay=weight_decay,
        schedule=schedule, suite=suite, publish=publish, allow_dirty=allow_dirty, replace=replace,
        report=report, out=out, save_checkpoints=save_checkpoints, tracker=tracker, tracker_dir=tracker_dir,
        path=path, replicas_max=replicas_max, val_every=val_every,
        tune=tune, tune_grid=parse_floats(tune_grid, "--tune-grid") if tune_grid is not None else None,
        tune_confirm=tune_confirm, tune_noise=tune_noise, tune_probe=tune_probe, tune_space=tune_space,
        tune_trials=tune_trials, tune_sampler=tune_sampler, tune_fidelity=tune_fidelity, post_steps=post_steps, post_batch_size=post_batch_size, post_lr=post_lr,
        post_seed_offset=post_seed_offset, self_consistency=self_consistency or None,
        method_config=method_config, allow_noop=allow_noop,
        preference_file=preference_file, arithmetic_max_operand=arithmetic_max_operand,
        command=" ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]]), **given_only,
    )
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


def _reproduce_all(preset: str, seeds: str | None, device: str, data_dir: Path | None, threads: int | None,
                   steps: int | None, path: str, tune_grid: str | None, tune_confirm: int | None, publish: bool,
                   allow_dirty: bool, out: Path | None, only: str | None, time_limit: float | None,
                   storage: str | None, study: str | None, tune_trials: int | None = None,
                   tune_sampler: str | None = None, launching: dict | None = None,
                   tune_fidelity: str | None = None, tune_noise: float | None = None,
                   tune_probe: bool | None = None) -> None:
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
        seeds=parse_seeds(None, seeds) if seeds else None,
        tune_grid=parse_floats(tune_grid, "--tune-grid") if tune_grid is not None else None, tune_confirm=tune_confirm,
        tune_noise=tune_noise, tune_probe=tune_probe, tune_trials=tune_trials, tune_sampler=tune_sampler,
        tune_fidelity=tune_fidelity, steps=steps, data_dir=resolve_data_dir(data_dir), cache_dir=resolve_cache_dir(), device=device,
        threads=threads, path=path, time_limit_minutes=time_limit, publish=publish, allow_dirty=allow_dirty,
        out=out, storage=storage, study=study, **(launching or {}),
        command=" ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]]))
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
