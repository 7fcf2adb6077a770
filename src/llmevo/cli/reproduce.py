"""``llmevo reproduce NAME``: a baseline arm vs a method arm, paired over seeds."""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path
from typing import Annotated

import torch
import typer
from rich.table import Table

from llmevo.artifacts import collect_provenance, module_files, save_artifact
from llmevo.cli.common import app, console, parse_seeds, resolve_cache_dir, resolve_data_dir
from llmevo.cli.progress import RichTrainingProgress
from llmevo.experiments import presets as presets_module
from llmevo.experiments import reproduce as runner
from llmevo.experiments.plans import plan_comparison
from llmevo.experiments.presets import get_preset
from llmevo.inference.checkpoint import save_checkpoint
from llmevo.train.device import accelerator_name, resolve_device

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
    table = Table(title=f"{artifact['method']['name']} vs {artifact['baseline']['name']} "
                  f"(validation, {len(artifact['evaluation_protocol']['seeds'])} seed(s))")
    table.add_column("metric")
    table.add_column("baseline", justify="right")
    table.add_column("method", justify="right")
    table.add_column("Δ% (95% CI)", justify="right")
    stats = artifact.get("statistics", {})
    for metric in ("lm_loss", "bits_per_byte", "instruction_loss", "preference_loss",
                   "reasoning_nll", "primary", "fitness", "final_loss",
                   "heldout_preference_accuracy", "arithmetic_exact_match",
                   "post_training_loss", "reward_bearing_group_rate"):
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
    preset: Annotated[str, typer.Option(help=f"Preset: {', '.join(presets_module.PRESETS)}.")] = "smoke",
    seed: Annotated[int | None, typer.Option(help="One seed (default 42).")] = None,
    seeds: Annotated[str | None, typer.Option(help="Comma-separated seeds, e.g. 42,43,44.")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or mps.")] = "auto",
    data_dir: Annotated[Path | None, typer.Option(help="Data directory (else $LLMEVO_DATA).")] = None,
    steps: Annotated[int | None, typer.Option(help="Override the preset's training steps.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Override the batch size.")] = None,
    lr: Annotated[float | None, typer.Option(help="Override the learning rate.")] = None,
    warmup_steps: Annotated[int | None, typer.Option(help="Override the warmup steps.")] = None,
    schedule: Annotated[str | None, typer.Option(help="constant or cosine.")] = None,
    suite: Annotated[str | None, typer.Option(help="Benchmark suite: core or public.")] = None,
    publish: Annotated[bool, typer.Option(help="Write under docs/reproductions/ instead of runs/.")] = False,
    report: Annotated[bool, typer.Option(help="Write the README report and plots.")] = True,
    out: Annotated[Path | None, typer.Option(help="Artifact path (overrides the default).")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads for torch.")] = None,
    save_checkpoints: Annotated[Path | None, typer.Option(
        help="Save each arm's first-seed model here (DIR/baseline, DIR/method) for `llmevo generate`.")] = None,
    post_steps: Annotated[int | None, typer.Option(help="Post-training methods: the stage's steps.")] = None,
    post_batch_size: Annotated[int | None, typer.Option(help="Post-training: examples per step.")] = None,
    post_lr: Annotated[float | None, typer.Option(help="Post-training: learning rate.")] = None,
    post_seed_offset: Annotated[int | None, typer.Option(
        help="Post-training: the stage's seed is the run seed plus this.")] = None,
    method_config: Annotated[str | None, typer.Option(
        help="Post-training: the method's settings, e.g. 'beta=0.1' or 'group_size=8,kl_beta=0.04'.")] = None,
    preference_file: Annotated[Path | None, typer.Option(
        help="DPO: a JSONL file of {\"chosen\", \"rejected\"} dialogues instead of HH-RLHF helpful-base.")] = None,
    arithmetic_max_operand: Annotated[int | None, typer.Option(
        help="GRPO: the arithmetic difficulty (operands 0..N).")] = None,
    tensorboard: Annotated[Path | None, typer.Option(
        help="Write TensorBoard event files here: per-step loss, lr, grad norm and final metrics, one run per arm and seed.")] = None,
) -> None:
    """Train a baseline arm and a method arm on the same tokens and compare them."""
    chosen = get_preset(preset).override({
        "steps": steps, "batch_size": batch_size, "lr": lr, "warmup_steps": warmup_steps,
        "schedule": schedule, "suite": suite,
    })
    seed_list = parse_seeds(seed, seeds)
    torch_device = resolve_device(device)
    data = resolve_data_dir(data_dir)
    if threads:
        torch.set_num_threads(threads)
    comparison = plan_comparison(name)  # refuses unknown names and identical arms early
    post_request = None
    if comparison.spec.slot == "post_training":
        from llmevo.model.config import ComponentChoice
        from llmevo.posttrain.reproduce import post_training_request

        post_request = post_training_request(
            comparison, chosen.name,
            {"steps": post_steps, "batch_size": post_batch_size, "lr": post_lr,
             "seed_offset": post_seed_offset, "arithmetic.max_operand": arithmetic_max_operand},
            ComponentChoice.parse(f"{name}:{method_config or ''}").config, preference_file)
    paper = comparison.spec.manifest.paper
    folder = f"{paper.arxiv_id}-{comparison.spec.name}" if paper else comparison.spec.name
    filename = artifact_filename(chosen.name, seed_list)
    if out is None:
        base = Path("docs/reproductions") / folder / "metrics" if publish else Path("runs") / folder
        out = base / filename
    request = runner.ReproductionRequest(
        name=name, preset=chosen, seeds=seed_list, data_dir=data,
        cache_dir=resolve_cache_dir(), device=torch_device, post_training=post_request,
    )
    logs = None
    if tensorboard is not None:
        from llmevo.train.logging import TensorBoardLogs

        logs = TensorBoardLogs(tensorboard)
    if post_request is not None:  # a post-training method: its own pipeline
        from llmevo.posttrain.reproduce import run_post_training_reproduction

        outcome = run_post_training_reproduction(request, comparison,
                                                 progress=RichTrainingProgress(console))
    else:
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
    save_artifact(artifact, out)
    console.print(summary_table(artifact))
    console.print(f"[bold]verdict:[/] {artifact['verdict']['summary']}")
    console.print(f"artifact: {out}")
    if save_checkpoints is not None:
        for arm in outcome.comparison.arms:
            run = outcome.runs[arm.label][seed_list[0]]
            folder = save_checkpoint(
                save_checkpoints / arm.label, run.model, arm.model,
                tokenizer_json=outcome.tokenizer_json if arm.data == "bpe" else None,
                metadata={"arm": arm.name, "seed": seed_list[0], "artifact": str(out),
                          "preset": chosen.name, "train": run.train_config},
            )
            console.print(f"checkpoint ({arm.label}): {folder}")
    if report:
        from llmevo.reports.report import write_report

        report_dir = (Path("docs/reproductions") / folder) if publish else out.parent / "report"
        readme = write_report(artifact, out, report_dir)
        console.print(f"report: {readme}")
