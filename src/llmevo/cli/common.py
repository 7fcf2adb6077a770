"""Options shared by several commands, and the checks every command runs before work starts.

Policies, the same on every command:
- ``--device auto|cpu|cuda|mps`` (default ``auto``) and ``--threads N`` (default: torch's)
  on every command that trains or runs a model.
- Seeds: ``--seed N`` or ``--seeds A,B,C``; a single run defaults to seed 42, a command
  whose claim needs several seeds defaults to 42,43,44.
- ``--out``: an artifact or table is a FILE, a report is a DIR; both are checked (and the
  destination proven writable) before any training.

This module imports neither torch nor the model code: ``llmevo --help`` must answer at once.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console

from llmevo.errors import ConfigError
from llmevo.registry import check_seeds

app = typer.Typer(
    name="llmevo",
    help="Reproduce LLM papers at small scale, with statistics and provenance; evolve designs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _commands() -> None:
    # a group even while one command module is imported (``llmevo.cli.commands``): typer runs an
    # application with one command and no callback as that command, without its name
    pass


console = Console()
err_console = Console(stderr=True)

DATA_ENV = "LLMEVO_DATA"
DATA_URL_ENV = "LLMEVO_DATA_URL"  # the mirror the default data folder fetches from
CACHE_ENV = "LLMEVO_CACHE"
DEFAULT_SEED = 42
DEFAULT_SEEDS = "42,43,44"

# Choice lists shown in --help (typer checks them). They restate the library's own tables
# because those live in modules that import torch or Optuna, and --help must not: the
# presets (runner.presets, built on the trainer's TrainConfig), the samplers (evolve.study,
# Optuna's classes) and the devices (train.device). test_cli_choice_lists_match_the_library
# (tests/integration/test_bad_input.py) checks that they are equal.
PresetName = Literal["smoke", "quick", "standard"]
DeviceName = Literal["auto", "cpu", "cuda", "mps"]
SamplerName = Literal["regularized", "nsga2", "tpe", "random"]
PrecisionName = Literal["fp32", "bf16"]

DeviceOption = Annotated[DeviceName, typer.Option(help="Where to run the model.")]
ThreadsOption = Annotated[int | None, typer.Option(
    help="CPU threads for torch (default: torch's choice; pass 1 on a shared machine).")]
# the size dial (llmevo.runner.size), the same on every command that trains a model
RungOption = Annotated[int | None, typer.Option(
    help="Model size: rung 0 is quick's llama_modern (139,584 parameters); each rung about "
         "doubles it (-3..7), with the components' sizes, training tokens (7.26 per parameter), "
         "batch and warmup following. Quick preset only.")]
DModelOption = Annotated[int | None, typer.Option(
    help="Model width (replaces the rung's; components follow).")]
LayersOption = Annotated[int | None, typer.Option(help="Model depth (replaces the rung's).")]
HeadsOption = Annotated[int | None, typer.Option(
    help="Attention heads, dividing --d-model (replaces the rung's).")]
ParamName = Literal["standard", "mup", "completep"]  # llmevo.model.parametrization.PARAMETRIZATIONS (torch-free here)
ParamOption = Annotated[ParamName, typer.Option(
    "--param", help="Parametrization: standard; mup (Maximal Update Parametrization, Tensor Programs V "
    "Table 8: hidden weights at init std 0.02/sqrt(m) and lr/m, logits x 1/m, m = d_model/64; the "
    "standard model at rung 0); completep (mup plus residual branches x 2/layers, CompleteP alpha=1). "
    "Adam-family optimizers and the transformer's slots only.")]
MatchOption = Annotated[Literal["tokens", "flops"], typer.Option(
    "--match", help="What the two arms' budgets hold equal: tokens (default: the same steps on the same "
    "tokens), or flops (each arm's training FLOPs per token counted on one forward and backward pass, "
    "routed experts at their active share; the method trains the steps that spend the baseline's "
    "FLOPs, tuning included; files say -flops). Model-slot comparisons only.")]

# the launcher (llmevo.experiments.launcher), the same on every command with shared work
LauncherOption = Annotated[str | None, typer.Option(
    metavar="local|slurm", help="Run the shared work (--storage) as submitit jobs: local processes, "
                                "or a Slurm job array; this command waits for them.")]
JobsOption = Annotated[int | None, typer.Option(help="With --launcher: how many worker jobs (default 2).")]
SlurmPartitionOption = Annotated[str | None, typer.Option(help="With --launcher slurm: the partition.")]
JobMinutesOption = Annotated[int | None, typer.Option(
    help="With --launcher: each job's time limit in minutes (default 1440; Slurm requeues a job at its limit).")]
LauncherFolderOption = Annotated[Path | None, typer.Option(
    help="With --launcher: submitit's job files and logs (default: <the work's folder>/submitit).")]


def launch_options(launcher: str | None, jobs: int | None, slurm_partition: str | None,
                   job_minutes: int | None, launcher_folder: Path | None) -> dict:
    """The launcher options given, as the request's flat keywords (a default is not given)."""
    given = {"launcher": launcher, "jobs": jobs, "slurm_partition": slurm_partition,
             "job_minutes": job_minutes, "launcher_folder": launcher_folder}
    return {key: value for key, value in given.items() if value is not None}


def resolve_data_dir(option: Path | None) -> Path:
    """The data directory: ``--data-dir``, else ``$LLMEVO_DATA``, else the user's default data
    folder, whose files are unpacked from the package or fetched (from ``$LLMEVO_DATA_URL``, else
    their public sources) on first use (``llmevo.data.store``)."""
    if option is not None:
        candidate = option
    elif os.environ.get(DATA_ENV):
        candidate = Path(os.environ[DATA_ENV])
    else:
        from llmevo.data.fetch import DEFAULT_BASE_URL
        from llmevo.data.store import default_data_dir, prepare_managed

        return prepare_managed(default_data_dir(), os.environ.get(DATA_URL_ENV) or DEFAULT_BASE_URL)
    if not candidate.is_dir():
        raise ConfigError(
            f"data directory {candidate} does not exist; download it with: "
            f"llmevo data fetch --to {candidate} (or unset --data-dir / {DATA_ENV} for the default folder)"
        )
    return candidate.resolve()


def resolve_cache_dir() -> Path:
    """Where tokenizers, token arrays, entropy models and arm results are cached
    (``$LLMEVO_CACHE``); a path that exists and is not a folder is a ``ConfigError``."""
    folder = Path(os.environ.get(CACHE_ENV, ".cache/llmevo")).resolve()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"cache folder {folder} is not a folder; point {CACHE_ENV} at a folder "
                          "(or unset it for .cache/llmevo)")
    return folder


def parse_seeds(seed: int | None, seeds: str | None, default: str | None = None,
                option: str = "--seeds") -> list[int]:
    """``--seed 42`` or ``--seeds 42,43,44``; non-integers are errors, and so are
    duplicates and seeds out of range (``registry.check_seeds``, the rule the typed requests
    apply too), named by ``option``. Neither given: ``default`` (e.g. ``DEFAULT_SEEDS``),
    else ``DEFAULT_SEED``."""
    if seed is not None and seeds is not None:
        raise ConfigError("give either --seed or --seeds, not both")
    if seeds is None and seed is None and default is not None:
        seeds = default
    if seeds is None:
        values = [DEFAULT_SEED if seed is None else seed]
    else:
        values = []
        for item in seeds.split(","):
            item = item.strip()
            try:
                values.append(int(item))
            except ValueError:
                raise ConfigError(
                    f"{option}: '{item}' is not an integer (expected e.g. 42,43,44)") from None
    return check_seeds(values, "--seed" if seeds is None and seed is not None else option)


def require(condition: bool, option: str, value: object, expected: str) -> None:
    if not condition:
        raise ConfigError(f"{option} {value}: expected {expected}")


def check_count(option: str, value: int | None, minimum: int = 1) -> None:
    """An integer option that counts something (steps, threads, tokens): at least ``minimum``."""
    if value is not None:
        require(value >= minimum, option, value, f"an integer >= {minimum}")


def check_real(option: str, value: float | None, minimum: float = 0.0,
               strict: bool = False) -> None:
    """A real option: finite, and above (``strict``) or at least ``minimum``."""
    if value is None:
        return
    bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
    require(math.isfinite(value) and (value > minimum if strict else value >= minimum),
            option, value, f"a finite number {bound}")


def apply_threads(threads: int | None) -> None:
    """Validate ``--threads`` and hand it to torch (imported here, never at module level)."""
    check_count("--threads", threads)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def changed_options(context: typer.Context, exclude: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The options of the command line that were given a value other than their default, by
    the spelling given (``--no-report``): an explicit default (``--no-publish``,
    ``--path auto``) asks for nothing, and a refusal of what does not apply must not name it.
    Parameters named in ``exclude`` and arguments are left out."""
    found = []
    for param in context.command.params:
        if param.name in exclude or not param.opts or not param.opts[0].startswith("--"):
            continue
        source = context.get_parameter_source(param.name)
        if getattr(source, "name", "DEFAULT") == "DEFAULT":
            continue
        value = context.params.get(param.name)
        if value != param.default:  # a flag by the spelling given (--no-report, not --report)
            secondary = getattr(param, "secondary_opts", None)
            found.append(secondary[0] if value is False and secondary else param.opts[0])
    return found


def check_applies(option: str, given: bool, applies: bool, where: str) -> None:
    """An option given where it cannot apply is an error, never silently ignored."""
    if given and not applies:
        raise ConfigError(f"{option} applies to {where}; drop it (here it would be ignored)")


def parse_names(text: str, option: str, what: str) -> list[str]:
    """``a,b`` -> ['a', 'b'] (``what``: e.g. "gene names"); an empty name (``''``,
    ``a,,b``) or a name given twice is a one-line error naming the option."""
    names = [item.strip() for item in text.split(",")]
    if not all(names):
        raise ConfigError(f"{option}: expected {what}, comma-separated (got '{text}')")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"{option}: {', '.join(repeated)} is named twice; name each once")
    return names


def parse_int_list(text: str, option: str) -> list[int]:
    """``1,2,4`` -> [1, 2, 4]; a non-integer item is a one-line error naming the option."""
    if not text.strip():
        raise ConfigError(f"{option}: no value given (expected e.g. 1,2,4)")
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
    if not text.strip():
        raise ConfigError(f"{option}: no value given (expected e.g. 1e-3,3e-3,1e-2)")
    values = []
    for item in text.split(","):
        try:
            values.append(float(item.strip()))
        except ValueError:
            raise ConfigError(f"{option}: '{item.strip()}' is not a number (expected e.g. 1e-3,3e-3,1e-2)") from None
    return values
