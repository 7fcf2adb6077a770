"""``llmevo generate`` (sampling from a checkpoint) and ``llmevo diagnose`` (L1 diagnostics)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from llmevo.artifacts.io import describe_not_utf8
from llmevo.cli.common import (
    DEFAULT_SEED,
    DEFAULT_SEEDS,
    DeviceOption,
    ThreadsOption,
    app,
    apply_threads,
    check_count,
    check_real,
    console,
    parse_seeds,
    request_values,
    resolve_data_dir,
    section_options,
)
from llmevo.errors import ConfigError
from llmevo.experiments.sections import DIAGNOSE_TAKES, RunSection

if TYPE_CHECKING:
    from rich.table import Table


@app.command()
def generate(
    checkpoint: Path = typer.Option(
        ..., help="Checkpoint folder (model.safetensors, config.json)."
    ),
    prompt: str = typer.Option(..., help="Text to continue."),
    temperature: float = typer.Option(0.8, help="Sampling temperature; 0 is greedy."),
    top_k: int = typer.Option(40, help="Sample among the k most likely tokens; 0: all."),
    max_tokens: int = typer.Option(64, help="Number of tokens to generate."),
    seed: int = typer.Option(DEFAULT_SEED, help="Seed of the sampling generator."),
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
) -> None:
    """Print the prompt and a sampled continuation from a saved checkpoint."""
    check_real("--temperature", temperature)
    check_count("--top-k", top_k, minimum=0)
    check_count("--max-tokens", max_tokens)
    parse_seeds(seed, None)
    if not prompt:
        raise ConfigError("--prompt is empty; give some text to continue")
    try:  # bytes that are not UTF-8 reach sys.argv as lone surrogates, which no tokenizer takes
        prompt.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ConfigError(f"--prompt is not valid UTF-8 ({describe_not_utf8(error)} at character "
                          f"{error.start}); give the text in UTF-8") from None
    if not checkpoint.is_dir():
        raise ConfigError(f"--checkpoint {checkpoint}: not a checkpoint folder")
    apply_threads(threads)
    from tokenizers import Tokenizer

    from llmevo.inference.checkpoint import load_checkpoint
    from llmevo.inference.generate import SamplingConfig
    from llmevo.inference.generate import generate as run_generation
    from llmevo.train.device import resolve_device

    torch_device = resolve_device(device)
    loaded = load_checkpoint(checkpoint)
    if loaded.tokenizer_json is None:
        raise ConfigError(f"checkpoint {checkpoint} has no tokenizer.json; cannot encode a prompt")
    loaded.model.to(torch_device)
    tokenizer = Tokenizer.from_str(loaded.tokenizer_json)
    sampling = SamplingConfig(
        temperature=temperature, top_k=top_k, max_tokens=max_tokens, seed=seed
    )
    prompt_ids = tokenizer.encode(prompt).ids
    result = run_generation(
        loaded.model, prompt_ids, sampling, stop_token=tokenizer.token_to_id("<eos>")
    )
    continuation = tokenizer.decode(result.new_tokens)
    console.print(prompt + continuation, highlight=False, markup=False, soft_wrap=True)


def _metrics_table(name: str, metrics: dict[str, object]) -> Table:
    from rich.table import Table

    table = Table(title=f"{name}: L1 diagnostics")
    for column in ("metric", "mean", "std", "n"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for key, value in metrics.items():
        if isinstance(value, dict):
            table.add_row(key, f"{value['mean']:.6g}", f"{value['std']:.3g}", str(value["n"]))
        else:
            table.add_row(key, "[green]true[/]" if value else "[red]false[/]", "", "")
    return table


def _experiment_table(result: dict[str, object]) -> Table:
    from rich.table import Table

    table = Table(title="L2 streaming evaluation (lm_loss, mean over seeds)")
    rows = result["table"]
    assert isinstance(rows, list)
    for column in rows[0]:
        table.add_column(str(column), justify="right")
    for row in rows:
        table.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()))
    return table


@app.command()
@section_options(RunSection, takes=DIAGNOSE_TAKES)
def diagnose(
    name: str = typer.Argument(..., help="A registered diagnostic (rope-relay, rope, muon)."),
    seed: int | None = typer.Option(None, help="One seed (default: the three seeds 42,43,44)."),
    seeds: str | None = typer.Option(None, help="Comma-separated seeds (default 42,43,44)."),
    out: Path | None = typer.Option(
        None, metavar="FILE",
        help="Artifact file (default: runs/foundation-models/.../component-<device>-seeds....json; "
             "with --publish under docs/)."
    ),
    full_experiment: bool = typer.Option(
        False, help="Also run the L2 experiment (rope-relay: streaming WikiText-2 evaluation)."
    ),
    checkpoint: Path | None = typer.Option(None, help="Trained checkpoint for --full-experiment."),
    eval_tokens: int = typer.Option(1024, help="--full-experiment: validation tokens streamed."),
    **fields: Any,
) -> None:
    """Run an L1 mechanism diagnostic over seeds and write its component-diagnostic artifact
    (under runs/ unless --publish). The run section's options (below) are the ones diagnose takes."""
    from llmevo.diagnostics.pipeline import DiagnoseRequest
    from llmevo.diagnostics.pipeline import diagnose as run_diagnose

    seed_list = parse_seeds(seed, seeds, default=DEFAULT_SEEDS)
    given = {"name": "NAME", **({"seeds": "--seed/--seeds"} if seed is not None or seeds is not None else {})}
    values = request_values(fields, DiagnoseRequest, given)
    if full_experiment:  # the data folder only the L2 experiment reads (refused without it, by the request)
        values["data_dir"] = resolve_data_dir(values.get("data_dir"))
    own = {"name": name, "seeds": seed_list, "out": out, "full_experiment": full_experiment,
           "checkpoint": checkpoint, "eval_tokens": eval_tokens}
    outcome = run_diagnose(DiagnoseRequest(**{**own, **values}, command=shlex.join(["llmevo", *sys.argv[1:]])))
    console.print(_metrics_table(name, outcome.run.metrics))
    if full_experiment:
        console.print(_experiment_table(outcome.run.full_experiment))
    console.print(f"wrote {outcome.path}")
