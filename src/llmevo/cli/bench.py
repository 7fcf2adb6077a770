"""``llmevo bench``: training/evaluation throughput and peak memory (never a timed test)."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from llmevo.cli.common import (
    DeviceOption,
    PrecisionName,
    ThreadsOption,
    app,
    apply_threads,
    check_applies,
    check_count,
    console,
    parse_int_list,
    resolve_data_dir,
)
from llmevo.errors import ConfigError


@app.command()
def bench(
    batch_size: Annotated[int, typer.Option(help="Sequences per step.")] = 48,
    seq_len: Annotated[int, typer.Option(help="Tokens per sequence.")] = 64,
    steps: Annotated[int | None, typer.Option(
        help="Timed steps (default 30 for the single-model figure; with --replicas, steps per run, "
             "default 60, so that set-up does not dominate).")] = None,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up steps.")] = 5,
    device: DeviceOption = "auto",
    precision: Annotated[PrecisionName, typer.Option(help="Matmul precision (bf16: autocast).")] = "fp32",
    threads: ThreadsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    replicas: Annotated[str | None, typer.Option(
        help="Replica counts, e.g. 1,2,4,8,16: aggregate tokens/s of R runs through train_many.")] = None,
    replicas_max: Annotated[int | None, typer.Option(help="Largest replica count allowed at once.")] = None,
    path: Annotated[str | None, typer.Option(
        help="With --replicas: how R runs execute: auto, sequential, batched, parallel, "
             "parallel-batched (comma-separated: each measured side by side; default auto).")] = None,
    sequential: Annotated[bool, typer.Option("--sequential", help="Same as --path sequential.")] = False,
    workers: Annotated[int | None, typer.Option(help="Worker processes for parallel paths.")] = None,
    profile: Annotated[bool, typer.Option(
        "--profile", help="Profile one training step with torch.profiler: top ops by self CPU time.")] = False,
    profile_top: Annotated[int | None, typer.Option(
        help="Ops listed by --profile (the rest are summed; default 15).")] = None,
    fixed_costs: Annotated[bool, typer.Option(
        "--fixed-costs", help="Wall time of a warm smoke reproduction (rope, seed 42, --no-report) "
                              "beside `import torch`'s, fresh processes, medians and their ratio.")] = False,
    repetitions: Annotated[int | None, typer.Option(
        help="With --fixed-costs: timed runs of each command (default 5).")] = None,
    data_dir: Annotated[Path | None, typer.Option(
        help="With --fixed-costs: the reproduction's data directory (else $LLMEVO_DATA).")] = None,
    bytecode_cache: Annotated[bool | None, typer.Option(
        "--bytecode-cache/--no-bytecode-cache",
        help="With --fixed-costs: let the timed processes write and read Python's bytecode cache "
             "(__pycache__), as a default install does and as torch's wheel ships it (default on: "
             "PYTHONDONTWRITEBYTECODE is dropped from their environment); off: the environment as "
             "given.")] = None,
) -> None:
    """Measure llama_modern's training and evaluation tokens/s and peak memory."""
    check_count("--batch-size", batch_size)
    check_count("--seq-len", seq_len, minimum=2)
    check_count("--steps", steps)
    check_count("--profile-top", profile_top)
    check_count("--repetitions", repetitions)
    check_applies("--repetitions", repetitions is not None, fixed_costs, "--fixed-costs")
    check_applies("--data-dir", data_dir is not None, fixed_costs, "--fixed-costs")
    check_applies("--bytecode-cache", bytecode_cache is not None, fixed_costs, "--fixed-costs")
    if fixed_costs:
        if profile or replicas is not None:
            raise ConfigError("--fixed-costs times whole commands; it does not combine with "
                              "--profile or --replicas")
        env = None if bytecode_cache is False else {
            name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
        _fixed_costs(resolve_data_dir(data_dir), repetitions or 5, as_json, env)
        return
    if profile and replicas is not None:
        raise ConfigError("--profile measures one model's step; it does not combine with --replicas")
    check_count("--warmup", warmup, minimum=0)
    check_count("--replicas-max", replicas_max)
    check_count("--workers", workers)
    counts = parse_int_list(replicas, "--replicas") if replicas is not None else None
    for option, given in (("--path", path is not None), ("--sequential", sequential),
                          ("--workers", workers is not None), ("--replicas-max", replicas_max is not None)):
        check_applies(option, given, counts is not None, "--replicas")
    check_applies("--profile-top", profile_top is not None, profile, "--profile")
    if precision != "fp32" and counts is not None:
        raise ConfigError(f"--precision {precision} does not combine with --replicas: the replica "
                          "rows train in fp32, and their ratio to one model would mix precisions")
    if sequential and path is not None:
        raise ConfigError("--sequential is --path sequential; give one of them")
    apply_threads(threads)
    import torch
    from rich.table import Table

    from llmevo.bench import (
        benchmark,
        benchmark_replicas,
        check_paths,
        check_replica_counts,
        profile_step,
    )
    from llmevo.model.config import ModelConfig
    from llmevo.train.device import accelerator_name, resolve_device

    named = "auto" if path is None else path
    paths = ["sequential"] if sequential else [p.strip() for p in named.split(",")]
    if counts is not None:
        counts = check_replica_counts(counts, replicas_max)
        check_paths(paths, replicas_max, workers)
        if steps is not None:
            check_count("--steps", steps, minimum=2)
    torch_device = resolve_device(device)
    if profile:
        _print_profile(profile_step(ModelConfig(), torch_device, batch_size, seq_len, steps or 10, warmup,
                                    precision, profile_top or 15).as_dict(), batch_size, seq_len, as_json)
        return
    result = benchmark(ModelConfig(), torch_device, batch_size, seq_len, 30 if counts else steps or 30,
                       warmup, precision).as_dict()
    if counts is not None:
        rows = [row.as_dict() | {"single_model_tokens_per_second": result["train_tokens_per_second"],
                                  "single_model_peak_memory_mib": result["peak_memory_mib"],
                                  "threads": torch.get_num_threads()}
                for row in benchmark_replicas(
                    ModelConfig(), torch_device, counts, batch_size, seq_len, steps or 60,
                    paths, replicas_max, workers,
                    result["train_tokens_per_second"])]
        if as_json:  # NaN (a ratio with no denominator, a steady state hidden by noise) -> null
            console.print_json(json.dumps([{k: None if isinstance(v, float) and math.isnan(v) else v
                                            for k, v in row.items()} for row in rows]))
            return
        _print_replica_table(rows, result, batch_size, seq_len)
        return
    result["accelerator"] = accelerator_name(torch_device)
    result["machine"] = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    result["torch"] = torch.__version__
    if as_json:
        console.print_json(json.dumps(result))
        return
    table = Table(title=f"llama_modern throughput, batch {batch_size} x {seq_len}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, f"{value:,.1f}" if isinstance(value, float) else str(value))
    console.print(table)


SMOKE_TARGET = 1.5  # issue 34: a warm smoke reproduction within 1.5x an `import torch`


def _fixed_costs(data_dir: Path, repetitions: int, as_json: bool, env: dict[str, str] | None) -> None:
    """The warm smoke reproduction against ``import torch`` (``bench.benchmark_fixed_costs``);
    its artifact goes to a temporary folder, its arm results come from (or go to) the cache.
    ``env``: the timed processes' environment (None: this one's, bytecode cache as it says)."""
    from llmevo.bench import benchmark_fixed_costs

    with tempfile.TemporaryDirectory(prefix="llmevo-fixed-costs-") as folder:
        command = [sys.executable, "-m", "llmevo", "reproduce", "rope", "--preset", "smoke",
                   "--seed", "42", "--no-report", "--data-dir", str(data_dir),
                   "--out", str(Path(folder) / "smoke.json")]
        result = benchmark_fixed_costs(command, repetitions, env=env).as_dict()
    result["command"] = " ".join(["llmevo", *command[3:-2]])  # the temporary --out left out
    written = env is not None or not os.environ.get("PYTHONDONTWRITEBYTECODE")
    result["bytecode_cache"] = "on" if written else "off (PYTHONDONTWRITEBYTECODE)"
    if as_json:
        console.print_json(json.dumps(result))
        return
    console.print(f"import torch: median {result['import_torch_median']:.2f} s of "
                  f"{', '.join(f'{v:.2f}' for v in result['import_torch_seconds'])}")
    console.print(f"{result['command']} (warm): median {result['command_median']:.2f} s of "
                  f"{', '.join(f'{v:.2f}' for v in result['command_seconds'])}")
    console.print(f"ratio: {result['ratio']:.2f}x import torch (target <= {SMOKE_TARGET}x; "
                  f"{repetitions} repetitions each, alternating; bytecode cache {result['bytecode_cache']})")


def _print_replica_table(rows: list[dict], single: dict, batch_size: int, seq_len: int) -> None:
    from rich.table import Table

    table = Table(title=(
        f"llama_modern, R runs at once, batch {batch_size} x {seq_len}, {rows[0]['steps']} steps each; "
        f"one model: {single['train_tokens_per_second']:,.0f} tok/s ({single['threads']} threads)"))
    for column in ("R", "path (requested)", "tok/s", "steady tok/s", "set-up s",
                   "x seq", "steady x seq", "x 1 model", "peak MiB"):
        table.add_column(column, justify="right")
    for row in rows:
        requested = row["requested_path"]
        if row["replicas"] == 1:
            label = "one run (same on every path)"
        elif not requested:
            label = f"{row['path']} (baseline)"
        else:
            label = row["path"] if requested == row["path"] else f"{row['path']} ({requested})"
        table.add_row(str(row["replicas"]), label, f"{row['train_tokens_per_second']:,.0f}",
                      f"{row['steady_tokens_per_second']:,.0f}", f"{row['setup_seconds']:.2f}",
                      f"{row['vs_sequential']:.2f}x", f"{row['steady_vs_sequential']:.2f}x",
                      f"{row['speedup']:.2f}x", f"{row['peak_memory_mib']:,.0f}")
    console.print("tok/s: aggregate, wall clock incl. set-up; steady: set-up excluded (each R also "
                  "measured with 1 step); x seq: over the same R runs one after another in one process")
    console.print(table)


def _print_profile(profile: dict, batch_size: int, seq_len: int, as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps(profile))
        return
    from rich.table import Table

    table = Table(title=(
        f"llama_modern training step, batch {batch_size} x {seq_len}, {profile['threads']} threads: "
        f"{profile['step_ms']:.1f} ms (profiled: {profile['profiled_step_ms']:.1f} ms of self CPU time)"))
    for column in ("op", "self ms/step", "% of step", "calls/step"):
        table.add_column(column, justify="right" if column != "op" else "left")
    for op in profile["ops"]:
        table.add_row(op["op"], f"{op['self_ms_per_step']:.2f}", f"{100 * op['share_of_step']:.1f}",
                      f"{op['calls_per_step']:g}")
    console.print(table)
