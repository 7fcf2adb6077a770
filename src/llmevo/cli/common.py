"""What every command shares: the ``app`` they register on, the consoles, and options such
as where the data lives and which device to use."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console

from llmevo.errors import ConfigError

app = typer.Typer(
    name="llmevo",
    help="Reproduce LLM papers at small scale, with statistics and provenance; evolve designs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

DATA_ENV = "LLMEVO_DATA"
CACHE_ENV = "LLMEVO_CACHE"


def resolve_data_dir(option: Path | None) -> Path:
    """The data directory: ``--data-dir``, else ``$LLMEVO_DATA``, else ``../shared/data``."""
    if option is not None:
        candidate = option
    elif os.environ.get(DATA_ENV):
        candidate = Path(os.environ[DATA_ENV])
    else:
        candidate = Path("../shared/data")
    if not candidate.is_dir():
        raise ConfigError(
            f"data directory {candidate} does not exist; download it with: "
            f"llmevo data fetch --to {candidate} (or pass --data-dir / set {DATA_ENV})"
        )
    return candidate.resolve()


def resolve_cache_dir() -> Path:
    """Where tokenizers, token arrays and entropy models are cached (``$LLMEVO_CACHE``)."""
    return Path(os.environ.get(CACHE_ENV, ".cache/llmevo")).resolve()


def parse_seeds(seed: int | None, seeds: str | None) -> list[int]:
    """``--seed 42`` or ``--seeds 42,43,44``; duplicates and non-integers are errors."""
    if seed is not None and seeds is not None:
        raise ConfigError("give either --seed or --seeds, not both")
    if seeds is None:
        return [42 if seed is None else seed]
    values = []
    for item in seeds.split(","):
        item = item.strip()
        try:
            values.append(int(item))
        except ValueError:
            raise ConfigError(f"--seeds: '{item}' is not an integer (expected e.g. 42,43,44)") from None
    duplicates = sorted({s for s in values if values.count(s) > 1})
    if duplicates:
        raise ConfigError(f"duplicate seeds {duplicates}; each seed must appear once")
    return values


def parse_int_list(text: str, option: str) -> list[int]:
    """``1,2,4`` -> [1, 2, 4]; a non-integer item is a one-line error naming the option."""
    values = []
    for item in text.split(","):
        item = item.strip()
        try:
            values.append(int(item))
        except ValueError:
            raise ConfigError(f"{option}: '{item}' is not an integer (expected e.g. 1,2,4)") from None
    return values


def parse_floats(text: str, option: str) -> list[float]:
    """``1e-3,3e-3`` as floats; a non-number is a one-line error."""
    values = []
    for item in text.split(","):
        try:
            values.append(float(item.strip()))
        except ValueError:
            raise ConfigError(f"{option}: '{item.strip()}' is not a number (expected e.g. 1e-3,3e-3,1e-2)") from None
    return values
