"""``llmevo bench``: training/evaluation throughput and peak memory (never a timed test)."""

from __future__ import annotations

import json
import platform
from typing import Annotated

import torch
import typer
from rich.table import Table

from llmevo.bench import benchmark
from llmevo.cli.common import app, console
from llmevo.model.config import ModelConfig
from llmevo.train.device import accelerator_name, resolve_device


@app.command()
def bench(
    batch_size: Annotated[int, typer.Option(help="Sequences per step.")] = 48,
    seq_len: Annotated[int, typer.Option(help="Tokens per sequence.")] = 64,
    steps: Annotated[int, typer.Option(help="Timed steps.")] = 30,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up steps.")] = 5,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or mps.")] = "auto",
    precision: Annotated[str, typer.Option(help="fp32 or bf16 (autocast).")] = "fp32",
    threads: Annotated[int | None, typer.Option(help="CPU threads for torch.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Measure llama_modern's training and evaluation tokens/s and peak memory."""
    if threads:
        torch.set_num_threads(threads)
    torch_device = resolve_device(device)
    result = benchmark(ModelConfig(), torch_device, batch_size, seq_len, steps, warmup, precision).as_dict()
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
