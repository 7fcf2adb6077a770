"""``llmevo export``: a checkpoint in another tool's format (Hugging Face ``transformers``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmevo.artifacts.io import check_output_dir
from llmevo.cli.common import app, console
from llmevo.errors import ConfigError

FORMATS = ("hf",)


@app.command()
def export(
    checkpoint: Annotated[Path, typer.Argument(help="Checkpoint folder (model.safetensors, config.json).")],
    out: Annotated[Path, typer.Option(help="Directory to write (must not exist or be empty).")],
    format: Annotated[str, typer.Option("--format", help="Target format: hf (transformers LlamaForCausalLM).")] = "hf",
) -> None:
    """Export a checkpoint; genomes the target cannot represent are refused by name."""
    if format not in FORMATS:
        raise ConfigError(f"unknown export format '{format}'; known: {', '.join(FORMATS)}")
    check_output_dir(out)
    from llmevo.hf.export import export_hf

    written = export_hf(checkpoint, out)
    console.print(
        f"exported {checkpoint} -> {written} (LlamaForCausalLM; load with "
        f"transformers.AutoModelForCausalLM.from_pretrained('{written}'))",
        highlight=False, soft_wrap=True,
    )
