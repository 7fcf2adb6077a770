"""``llmevo reproduce NAME``: a baseline arm vs a method arm, paired over seeds."""

from __future__ import annotations

import importlib
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from llmevo.cli.common import (
    DeviceOption,
    PresetName,
    ThreadsOption,
    app,
    apply_threads,
    check_count,
    check_output_dir,
    check_output_file,
    check_real,
    console,
    parse_floats,
    parse_seeds,
    resolve_cache_dir,
    resolve_data_dir,
)
from llmevo.errors import ConfigError

if TYPE_CHECKING:
    from rich.table import Table

    from llmevo.artifacts.schema import ReproductionArtifact

REPO_ROOT = Path(__file__).resolve().parents[3]
IMPLEMENTATION_MODULES = (
    "llmevo.model.transformer", "llmevo.train.trainer", "llmevo.eval.lm", "llmevo.eval.suites",
    "llmevo.eval.metrics", "llmevo.eval.stats", "llmevo.data.lm", "llmevo.data.suites",
    "llmevo.experiments.presets", "llmevo.experiments.plans", "llmevo.experiments.arm_data",
    "llmevo.experiments.tuning", "llmevo.train.many",
)
TUNED_BY_DEFAULT = ("quick", "standard")


def artifact_filename(preset: str, seeds: list[int], tuned: bool = False) -> str:
    prefix = ("public" if preset == "smoke" else f"public-{preset}") + ("-tuned" if tuned else "")
    if len(seeds) == 1:
        return f"{prefix}-seed{seeds[0]}.json"
    return f"{prefix}-seeds{seeds[0]}-{seeds[-1]}.json" if seeds == list(
        range(seeds[0], seeds[-1] + 1)) else f"{prefix}-seeds{'-'.join(map(str, seeds))}.json"


def summary_table(artifact: ReproductionArtifact) -> Table:
    from rich.table import Table

    table = Table(title=f"{artifact.method.name} vs {artifact.baseline.name} "
                  f"(validation, {len(artifact.evaluation_protocol.seeds)} seed(s))")
    table.add_column("metric")
    table.add_column("baseline", justify="right")
    table.add_column("method", justify="right")
    table.add_column("Δ% (95% CI)", justify="right")
    stats = artifact.statistics or {}
    for metric in ("lm_loss", "bits_per_byte", "instruction_loss", "preference_loss",
                   "reasoning_nll", "primary", "fitness", "final_loss"):
        baseline, method = getattr(artifact.baseline, metric), getattr(artifact.method, metric)
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
    name: Annotated[str, typer.Argument(help="Component to reproduce against its ablation, e.g. rope, muon.")] = "rope",
    preset: Annotated[PresetName, typer.Option(help="Data, training and evaluation settings.")] = "smoke",
    seed: Annotated[int | None, typer.Option(help="One seed (default 42).")] = None,
    seeds: Annotated[str | None, typer.Option(help="Comma-separated seeds, e.g. 42,43,44.")] = None,
    device: DeviceOption = "auto",
    data_dir: Annotated[Path | None, typer.Option(help="Data directory (else $LLMEVO_DATA).")] = None,
    steps: Annotated[int | None, typer.Option(help="Override the preset's training steps.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Override the batch size.")] = None,
    lr: Annotated[float | None, typer.Option(help="Override the learning rate.")] = None,
    warmup_steps: Annotated[int | None, typer.Option(help="Override the warmup steps.")] = None,
    schedule: Annotated[Literal["constant", "cosine"] | None, typer.Option(
        help="Override the learning-rate schedule.")] = None,
    suite: Annotated[Literal["core", "public"] | None, typer.Option(help="Override the benchmark suite.")] = None,
    publish: Annotated[bool, typer.Option(
        help="Write under docs/reproductions/ instead of runs/; refuses a dirty git tree.")] = False,
    allow_dirty: Annotated[bool, typer.Option(
        help="With --publish: publish from a tree with uncommitted changes (recorded in provenance).")] = False,
    report: Annotated[bool, typer.Option(help="Write the README report and plots.")] = True,
    out: Annotated[Path | None, typer.Option(metavar="FILE", help="Artifact file (overrides the default).")] = None,
    threads: ThreadsOption = None,
    save_checkpoints: Annotated[Path | None, typer.Option(metavar="DIR",
        help="Save each arm's first-seed model here (DIR/baseline, DIR/method) for `llmevo generate`.")] = None,
    replicas_max: Annotated[int | None, typer.Option(
        help="At most this many seeds of an arm train at once (memory).")] = None,
    sequential: Annotated[bool, typer.Option(
        "--sequential", help="Train the seeds one after another (the single-model path).")] = False,
    path: Annotated[Literal["auto", "sequential", "batched", "parallel", "parallel-batched"], typer.Option(
        help="How an arm's seeds train.")] = "auto",
    tune: Annotated[bool | None, typer.Option(
        help="Tune each arm's learning rate on the same grid first (default: on for quick and "
             "standard, off for smoke); report seeds default to 42..46.")] = None,
    tune_grid: Annotated[str | None, typer.Option(
        help="Learning rates to tune over, e.g. 1e-3,3e-3,1e-2 (default: 5 from lr/3 to 3*lr).")] = None,
    tune_seeds: Annotated[str, typer.Option(help="Tuning seeds, disjoint from the report seeds.")] = "1000",
    margin: Annotated[float, typer.Option(help="Non-inferiority margin of the verdict class, percent.")] = 1.0,
    tensorboard: Annotated[Path | None, typer.Option(metavar="DIR",
        help="Write TensorBoard event files here: per-step loss, lr, grad norm and final metrics, one run per arm and seed.")] = None,
) -> None:
    """Train a baseline arm and a method arm on the same tokens and compare them."""
    check_count("--steps", steps)
    check_count("--batch-size", batch_size)
    check_count("--warmup-steps", warmup_steps, minimum=0)
    check_real("--lr", lr, strict=True)
    check_count("--replicas-max", replicas_max)
    check_real("--margin", margin, strict=True)
    apply_threads(threads)
    from llmevo.artifacts import module_files
    from llmevo.artifacts.provenance import capture_code_state, check_publishable
    from llmevo.eval.stats import check_margin
    from llmevo.experiments import reproduce as runner
    from llmevo.experiments import tuning
    from llmevo.experiments.plans import plan_comparison
    from llmevo.experiments.presets import get_preset
    from llmevo.train.device import resolve_device
    from llmevo.train.many import check_path

    chosen = get_preset(preset).override({
        "steps": steps, "batch_size": batch_size, "lr": lr, "warmup_steps": warmup_steps,
        "schedule": schedule, "suite": suite,
    })
    if tune is False and tune_grid is not None:
        raise ConfigError("--tune-grid needs tuning; drop --no-tune")
    tuned = tune if tune is not None else (chosen.name in TUNED_BY_DEFAULT or tune_grid is not None)
    if tuned and seed is None and seeds is None:
        seeds = ",".join(str(s) for s in tuning.DEFAULT_REPORT_SEEDS)
    seed_list = parse_seeds(seed, seeds)
    execution = runner.Execution("sequential" if sequential else path, replicas_max)
    check_path(execution.path, execution.replicas_max)
    plan = None
    if tuned:
        grid = parse_floats(tune_grid, "--tune-grid") if tune_grid else tuning.default_grid(chosen.train.lr)
        plan = tuning.check_plan(grid, parse_seeds(None, tune_seeds), seed_list)
    check_margin(margin)
    torch_device = resolve_device(device)
    data = resolve_data_dir(data_dir)
    comparison = plan_comparison(name)  # refuses unknown names and identical arms early
    if publish:
        check_publishable(REPO_ROOT, allow_dirty)  # before any work
    paper = comparison.spec.manifest.paper
    folder = f"{paper.arxiv_id}-{comparison.spec.name}" if paper else comparison.spec.name
    filename = artifact_filename(chosen.name, seed_list, tuned)
    if out is None:
        base = Path("docs/reproductions") / folder / "metrics" if publish else Path("runs") / folder
        out = base / filename
    report_dir = (Path("docs/reproductions") / folder) if publish else out.parent / "report"
    # every destination is checked before any training
    check_output_file(out)
    if save_checkpoints is not None:
        check_output_dir(save_checkpoints, "--save-checkpoints")
        for label in ("baseline", "method"):
            check_output_dir(save_checkpoints / label, "--save-checkpoints")
    if report:
        check_output_dir(report_dir, "report folder")
    check_output_dir(tensorboard, "--tensorboard")
    # the code that runs, read now: a commit or an edit during training must not reach provenance
    code = capture_code_state(
        module_files(runner.implementation_objects(comparison)
                     + [importlib.import_module(module) for module in IMPLEMENTATION_MODULES]),
        Path(runner.__file__), REPO_ROOT)
    request = runner.ReproductionRequest(
        name=name, preset=chosen, seeds=seed_list, data_dir=data,
        cache_dir=resolve_cache_dir(), device=torch_device, execution=execution,
        tuning=plan, margin_percent=margin,
    )
    logs = None
    if tensorboard is not None:
        from llmevo.train.logging import TensorBoardLogs

        logs = TensorBoardLogs(tensorboard)
    run_and_write(request, code, out, save_checkpoints, report_dir if report else None, logs,
                  allow_dirty if publish else None)


def run_and_write(request, code, out: Path, save_checkpoints: Path | None,
                  report_dir: Path | None, logs=None, allow_dirty: bool | None = None) -> None:
    """Run the comparison, then write artifact, checkpoints and report; when a later write
    fails, what this command wrote is removed again (no artifact without its checkpoints)."""
    from llmevo.artifacts import collect_provenance, save_artifact
    from llmevo.artifacts.schema import ReproductionArtifact
    from llmevo.cli.progress import RichTrainingProgress
    from llmevo.experiments import reproduce as runner
    from llmevo.inference.checkpoint import save_checkpoint
    from llmevo.train.device import accelerator_name

    outcome = runner.run_reproduction(request, progress=RichTrainingProgress(console), logs=logs)
    provenance = collect_provenance(
        command=" ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]]),
        code=code,
        dataset_fingerprint=outcome.body["dataset"]["fingerprint"],
        accelerator=accelerator_name(request.device),
        artifact_path=str(out),
        allow_dirty=allow_dirty,
    )
    written: list[Path] = []  # the topmost path each write creates, removed on failure

    def track(path: Path) -> None:
        new = None
        for candidate in (path, *path.parents):
            if candidate.exists():
                break
            new = candidate
        if new is not None:
            written.append(new)

    try:
        track(out)
        artifact = save_artifact(outcome.artifact(provenance, str(out)), out)
        assert isinstance(artifact, ReproductionArtifact)
        console.print(summary_table(artifact))
        console.print(f"[bold]verdict:[/] {artifact.verdict.summary if artifact.verdict else '—'}")
        console.print(f"artifact: {out}")
        if save_checkpoints is not None:
            for arm in outcome.comparison.arms:
                run = outcome.runs[arm.label][request.seeds[0]]
                target = save_checkpoints / arm.label
                track(target)
                saved = save_checkpoint(
                    target, run.model, arm.model,
                    tokenizer_json=outcome.tokenizer_json if arm.data == "bpe" else None,
                    metadata={"arm": arm.name, "seed": request.seeds[0], "artifact": str(out),
                              "preset": request.preset.name, "train": run.train_config},
                )
                console.print(f"checkpoint ({arm.label}): {saved}")
        if report_dir is not None:
            from llmevo.reports.report import write_report

            track(report_dir)
            readme = write_report(artifact, out, report_dir)
            console.print(f"report: {readme}")
    except BaseException:
        for path in reversed(written):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise
