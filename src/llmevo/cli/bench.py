"""``llmevo bench``: training/evaluation throughput and peak memory (never a timed test)."""

from __future__ import annotations

import json
import platform
from typing import Annotated

import typer

from llmevo.cli.common import (
    DeviceOption,
    PrecisionName,
    ThreadsOption,
    app,
    apply_threads,
    check_count,
    console,
    parse_int_list,
)


@app.command()
def bench(
    batch_size: Annotated[int, typer.Option(help="Sequences per step.")] = 48,
    seq_len: Annotated[int, typer.Option(help="Tokens per sequence.")] = 64,
    steps: Annotated[int, typer.Option(help="Timed steps.")] = 30,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up steps.")] = 5,
    device: DeviceOption = "auto",
    precision: Annotated[PrecisionName, typer.Option(help="Matmul precision (bf16: autocast).")] = "fp32",
    threads: ThreadsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    replicas: Annotated[str | None, typer.Option(
        help="Replica counts, e.g. 1,2,4,8,16: aggregate tokens/s of R runs through train_many.")] = None,
    replicas_max: Annotated[int | None, typer.Option(help="Largest replica count allowed at once.")] = None,
    path: Annotated[str, typer.Option(
        help="How R runs execute: auto, sequential, batched, parallel, parallel-batched "
             "(comma-separated: each measured side by side).")] = "auto",
    sequential: Annotated[bool, typer.Option("--sequential", help="Same as --path sequential.")] = False,
    workers: Annotated[int | None, typer.Option(help="Worker processes for parallel paths.")] = None,
) -> None:
    """Measure llama_modern's training and evaluation tokens/s and peak memory."""
    check_count("--batch-size", batch_size)
    check_count("--seq-len", seq_len, minimum=2)
    check_count("--steps", steps)
    check_count("--warmup", warmup, minimum=0)
    check_count("--replicas-max", replicas_max)
    check_count("--workers", workers)
    counts = parse_int_list(replicas, "--replicas") if replicas else None
    apply_threads(threads)
    import torch
    from rich.table import Table

    from llmevo.bench import benchmark, benchmark_replicas, check_replica_counts
    from llmevo.model.config import ModelConfig
    from llmevo.train.device import accelerator_name, resolve_device
    from llmevo.train.many import check_path

    paths = ["sequential"] if sequential else [p.strip() for p in path.split(",")]
    if counts is not None:
        counts = check_replica_counts(counts, replicas_max)
        for chosen in paths:
            check_path(chosen, replicas_max, workers)
    torch_device = resolve_device(device)
    result = benchmark(ModelConfig(), torch_device, batch_size, seq_len, steps, warmup, precision).as_dict()
    if counts is not None:
        rows = [row.as_dict() | {"single_model_tokens_per_second": result["train_tokens_per_second"],
                                  "single_model_peak_memory_mib": result["peak_memory_mib"],
                                  "threads": torch.get_num_threads()}
                for row in benchmark_replicas(
                    ModelConfig(), torch_device, counts, batch_size, seq_len, steps,
                    paths, replicas_max, workers,
                    result["train_tokens_per_second"])]
        if as_json:
            console.print_json(json.dumps(rows))
            return
        table = Table(title=f"llama_modern, R runs at once, batch {batch_size} x {seq_len}, {steps} steps each")
        for column in ("replicas", "path", "train tok/s (aggregate)", "speedup vs 1 model", "peak MiB"):
            table.add_column(column, justify="right")
        for row in rows:
            table.add_row(str(row["replicas"]), row["path"], f"{row['train_tokens_per_second']:,.0f}",
                          f"{row['speedup']:.2f}x", f"{row['peak_memory_mib']:,.0f}")
        console.print(table)
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
