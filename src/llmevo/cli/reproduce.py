"""``llmevo reproduce NAME``: a baseline arm vs a method arm, paired over seeds."""

from __future__ import annotations

import importlib
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from llmevo.cli.common import app, console
from llmevo.cli.common import (
    DeviceOption,
    PresetName,
    ThreadsOption,
    apply_threads,
    check_count,
    check_output_dir,
    check_output_file,
    check_real,
    parse_seeds,
    resolve_cache_dir,
    resolve_data_dir,
)

if TYPE_CHECKING:
    from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parents[3]
IMPLEMENTATION_MODULES = (
    "llmevo.model.transformer", "llmevo.train.trainer", "llmevo.eval.lm", "llmevo.eval.suites",
    "llmevo.eval.metrics", "llmevo.eval.stats", "llmevo.data.lm", "llmevo.data.suites",
    "llmevo.experiments.presets", "llmevo.experiments.plans", "llmevo.experiments.arm_data",
)


def artifact_filename(preset: str, seeds: list[int]) -> str:
    prefix = "public" if preset == "smoke" else f"public-{preset}"
    if len(seeds) == 1:
        return f"{prefix}-seed{seeds[0]}.json"
    return f"{prefix}-seeds{seeds[0]}-{seeds[-1]}.json" if seeds == list(
        range(seeds[0], seeds[-1] + 1)) else f"{prefix}-seeds{'-'.join(map(str, seeds))}.json"


def summary_table(artifact: dict) -> Table:
    from rich.table import Table

    table = Table(title=f"{artifact['method']['name']} vs {artifact['baseline']['name']} "
                  f"(validation, {len(artifact['evaluation_protocol']['seeds'])} seed(s))")
    table.add_column("metric")
    table.add_column("baseline", justify="right")
    table.add_column("method", justify="right")
    table.add_column("Δ% (95% CI)", justify="right")
    stats = artifact.get("statistics", {})
    for metric in ("lm_loss", "bits_per_byte", "instruction_loss", "preference_loss",
                   "reasoning_nll", "primary", "fitness", "final_loss"):
        if metric not in artifact["baseline"] or metric not in artifact["method"]:
            continue
        change = stats.get(metric, {}).get("paired_relative_change_percent", {})
        if change.get("ci_low") is not None:
            delta = f"{change['mean']:+.2f}% ({change['ci_low']:+.2f}, {change['ci_high']:+.2f})"
        elif change:
            delta = f"{change['mean']:+.2f}%"
        else:
            delta = ""
        table.add_row(metric, f"{artifact['baseline'][metric]:.4f}",
                      f"{artifact['method'][metric]:.4f}", delta)
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
    publish: Annotated[bool, typer.Option(help="Write under docs/reproductions/ instead of runs/.")] = False,
    report: Annotated[bool, typer.Option(help="Write the README report and plots.")] = True,
    out: Annotated[Path | None, typer.Option(metavar="FILE", help="Artifact file (overrides the default).")] = None,
    threads: ThreadsOption = None,
    save_checkpoints: Annotated[Path | None, typer.Option(metavar="DIR",
        help="Save each arm's first-seed model here (DIR/baseline, DIR/method) for `llmevo generate`.")] = None,
    tensorboard: Annotated[Path | None, typer.Option(metavar="DIR",
        help="Write TensorBoard event files here: per-step loss, lr, grad norm and final metrics, one run per arm and seed.")] = None,
) -> None:
    """Train a baseline arm and a method arm on the same tokens and compare them."""
    check_count("--steps", steps)
    check_count("--batch-size", batch_size)
    check_count("--warmup-steps", warmup_steps, minimum=0)
    check_real("--lr", lr, strict=True)
    apply_threads(threads)
    from llmevo.experiments.plans import plan_comparison
    from llmevo.experiments.presets import get_preset
    from llmevo.train.device import resolve_device

    chosen = get_preset(preset).override({
        "steps": steps, "batch_size": batch_size, "lr": lr, "warmup_steps": warmup_steps,
        "schedule": schedule, "suite": suite,
    })
    seed_list = parse_seeds(seed, seeds)
    torch_device = resolve_device(device)
    data = resolve_data_dir(data_dir)
    comparison = plan_comparison(name)  # refuses unknown names and identical arms early
    paper = comparison.spec.manifest.paper
    folder = f"{paper.arxiv_id}-{comparison.spec.name}" if paper else comparison.spec.name
    filename = artifact_filename(chosen.name, seed_list)
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
    logs = None
    if tensorboard is not None:
        from llmevo.train.logging import TensorBoardLogs

        logs = TensorBoardLogs(tensorboard)
    run_and_write(name, chosen, seed_list, data, torch_device, out,
                  save_checkpoints, report_dir if report else None, logs)


def run_and_write(name, chosen, seed_list, data, torch_device, out, save_checkpoints,
                  report_dir, logs=None) -> None:
    """Run the comparison, then write artifact, checkpoints and report; when a later write
    fails, what this command wrote is removed again (no artifact without its checkpoints)."""
    from llmevo.artifacts import collect_provenance, module_files, save_artifact
    from llmevo.cli.progress import RichTrainingProgress
    from llmevo.experiments import reproduce as runner
    from llmevo.inference.checkpoint import save_checkpoint
    from llmevo.train.device import accelerator_name

    request = runner.ReproductionRequest(
        name=name, preset=chosen, seeds=seed_list, data_dir=data,
        cache_dir=resolve_cache_dir(), device=torch_device,
    )
    outcome = runner.run_reproduction(request, progress=RichTrainingProgress(console), logs=logs)
    artifact = outcome.artifact
    implementation = module_files(outcome.implementation_objects + [
        importlib.import_module(module) for module in IMPLEMENTATION_MODULES])
    artifact["provenance"] = collect_provenance(
        command=" ".join(shlex.quote(a) for a in ["llmevo", *sys.argv[1:]]),
        implementation_files=implementation,
        runner_file=Path(runner.__file__),
        dataset_fingerprint=artifact["dataset"]["fingerprint"],
        accelerator=accelerator_name(torch_device),
        artifact_path=str(out),
        repo_root=REPO_ROOT,
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
        save_artifact(artifact, out)
        console.print(summary_table(artifact))
        console.print(f"[bold]verdict:[/] {artifact['verdict']['summary']}")
        console.print(f"artifact: {out}")
        if save_checkpoints is not None:
            for arm in outcome.comparison.arms:
                run = outcome.runs[arm.label][seed_list[0]]
                target = save_checkpoints / arm.label
                track(target)
                saved = save_checkpoint(
                    target, run.model, arm.model,
                    tokenizer_json=outcome.tokenizer_json if arm.data == "bpe" else None,
                    metadata={"arm": arm.name, "seed": seed_list[0], "artifact": str(out),
                              "preset": chosen.name, "train": run.train_config},
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
