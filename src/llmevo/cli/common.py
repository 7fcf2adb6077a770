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
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console

from llmevo.errors import ConfigError
from llmevo.experiments.sections import (
    GIVEN,
    MACHINE_FIELDS,
    as_given,
    check_value,
    note_given,
)
from llmevo.registry import check_seeds

# --help into a pipe or a file (``llmevo reproduce --help | grep tune``): plain text, one line per
# option, not rich's boxes wrapped at 80 columns
PIPED = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
app = typer.Typer(
    name="llmevo",
    help="Reproduce LLM papers at small scale, with statistics and provenance; evolve designs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None if PIPED else "rich",
    context_settings={"terminal_width": 100_000, "max_content_width": 100_000} if PIPED else {},
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
def resolve_data_dir(option: Path | None) -> Path:
    """The data directory: ``--data-dir``, else ``$LLMEVO_DATA``, else the user's default data
    folder, whose files are unpacked from the package or fetched (from ``$LLMEVO_DATA_URL``, else
    their public sources) on first use (``llmevo.data.store``)."""
    if option is not None:
        candidate, source = Path(option), "--data-dir"  # text from --set run.data_dir
    elif os.environ.get(DATA_ENV):
        candidate, source = Path(os.environ[DATA_ENV]), f"${DATA_ENV}"
    else:
        from llmevo.data.fetch import DEFAULT_BASE_URL
        from llmevo.data.store import default_data_dir, prepare_managed

        return prepare_managed(default_data_dir(), os.environ.get(DATA_URL_ENV) or DEFAULT_BASE_URL)
    if candidate.exists() and not candidate.is_dir():
        raise ConfigError(f"{source} {candidate} is a file, not a folder; " + (
            "give the data folder, or leave --data-dir out for the default folder" if option is not None else
            f"point {DATA_ENV} at the data folder, or unset it for the default folder"))
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
        if value != param.default and value != FIELD_DEFAULTS.get(param.name):  # a flag by its spelling (--no-report)
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


# --- the options of a request's sections, generated from the sections' fields ---------------
# Each section field (``experiments.sections``, ``runner.settings.TuningSection``) is declared
# once, with its help as its ``Field(description=...)``; a command takes its sections' fields as
# options (``tune_grid`` -> ``--tune-grid``), each None unless given, so the request's own
# default applies and the request's refusals read only what was given. ``--set SECTION.FIELD=V``
# reaches every field of the request, sections or not (what an experiment file holds).
NOT_OPTIONS = frozenset(MACHINE_FIELDS) - {"data_dir"}  # provenance records; $LLMEVO_CACHE; set by llmevo
FIELD_DEFAULTS: dict[str, object] = {}  # a section field's default: given explicitly, it asks for nothing


def _plain(annotation: object) -> object:
    """``X | None`` -> ``X``, ``Annotated[X, ...]`` -> ``X``."""
    import types
    from typing import Annotated, Union, get_args, get_origin

    if get_origin(annotation) in (Union, types.UnionType):
        rest = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(rest) == 1:
            return _plain(rest[0])
    return get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation


def _list_item(annotation: object) -> type | None:
    """The item type of a list field (``list[float] | None`` -> float), else None."""
    from typing import get_args, get_origin

    plain = _plain(annotation)
    return (get_args(plain) or (str,))[0] if get_origin(plain) is list else None


def _option(name: str, info: object, panel: str, hidden: bool = False) -> object:
    from typing import Annotated as Annot

    annotation = info.annotation  # type: ignore[attr-defined]
    kind = str if _list_item(annotation) is not None else _plain(annotation)
    default = None if info.is_required() else info.get_default()  # a factory is not called (no torch here)  # type: ignore[attr-defined]
    help_text = info.description or ""  # type: ignore[attr-defined]
    if not callable(default) and default not in (None, False, True, "") and "default" not in help_text:
        shown = ",".join(map(str, default)) if isinstance(default, list) else default
        help_text += f" [default: {shown}]"
    return Annot[kind | None, typer.Option(help=help_text, rich_help_panel=panel, show_default=False, hidden=hidden,
                                           metavar="A,B,..." if kind is str and _list_item(annotation) else None)]


SetOption = Annotated[list[str] | None, typer.Option(
    "--set", metavar="SECTION.FIELD=VALUE", rich_help_panel="Any field",
    help="Set any field of the request, e.g. --set train.lr=3e-3, --set tuning.tune_grid=[1e-3,3e-3] "
         "(a TOML value, else a string; repeatable); a section's field once, by its option or here.")]


def section_options(*sections: type, exclude: frozenset[str] | set[str] = frozenset(),  # noqa: ANN201
                    takes: frozenset[str] | None = None, refused: Mapping[str, str] | None = None):
    """A decorator giving a command an option per field of ``sections`` (less ``exclude`` and
    ``NOT_OPTIONS``) and ``--set``; the command takes them as ``**fields`` (``request_values``
    turns them into the request's keywords). What the pipeline does not take (its request's
    declaration: ``takes``, ``refused``) is not listed in ``--help``; given, the request refuses
    it with its reason."""
    import functools
    import inspect
    from typing import get_type_hints

    fields = {name: (info, section.__name__.removesuffix("Section").lower() + " section")
              for section in sections for name, info in section.model_fields.items()
              if name not in NOT_OPTIONS and name not in exclude}
    FIELD_DEFAULTS.update({name: info.get_default() for name, (info, _) in fields.items()
                           if not info.is_required() and not callable(info.get_default())})

    def wrap(func):  # noqa: ANN001, ANN202
        hints = get_type_hints(func, include_extras=True)
        signature = inspect.signature(func)
        own = [param.replace(annotation=hints.get(param.name, param.annotation))
               for param in signature.parameters.values() if param.kind is not param.VAR_KEYWORD]
        unread = {name for name in fields if name in (refused or {}) or (takes is not None and name not in takes)}
        generated = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                       annotation=_option(name, info, panel, hidden=name in unread))
                     for name, (info, panel) in fields.items()]
        generated.append(inspect.Parameter("set_", inspect.Parameter.KEYWORD_ONLY, default=None,
                                           annotation=SetOption))

        @functools.wraps(func)
        def command(**values):  # noqa: ANN003, ANN202
            token = GIVEN.set({})  # how each field was given (request_values, read_experiment)
            try:
                return func(**values)
            except ConfigError as error:
                raise as_given(error) from None  # the library's refusal, led by what the user wrote
            finally:
                GIVEN.reset(token)

        params = [*own, *generated]
        command.__signature__ = signature.replace(parameters=params, return_annotation=None)  # type: ignore[attr-defined]
        command.__annotations__ = {param.name: param.annotation for param in params}
        return command

    return wrap


def _toml_value(text: str, where: str) -> object:
    import tomllib

    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        if text[0] in "[{\"'":  # meant as TOML: a list, a table, a quoted string
            raise ConfigError(f"{where}: not a TOML value; write a list as [1e-3, 3e-3] or 1e-3,3e-3, "
                              'text as a bare word or in double quotes') from None
        return text  # a bare word: a string (``--set train.schedule=cosine``)


def _parse_list(item: type, text: str, option: str) -> list:
    if item is int:
        return parse_seeds(None, text, option=option)
    if item is float:
        return parse_floats(text, option)
    return parse_names(text, option, "names")


def request_values(fields: dict, request: type, given: Mapping[str, str] | None = None) -> dict:
    """The request's keywords from a command's generated options and ``--set`` items: the
    options given (a comma list parsed into a list field), then each ``--set SECTION.FIELD=V``
    or ``--set FIELD=V`` (a field of ``request`` itself), routed flat (section field names are
    unique). ``given``: the request's own fields the command line gave by their own options
    (field -> how: ``{"name": "NAME", "seeds": "--seeds"}``). A field given twice (by its option
    and ``--set``, or twice by ``--set``), an unknown section or field: one line."""
    values: dict = {}
    how_given: dict[str, str] = {}  # field -> how it was given here: its option, or --set
    for name, value in fields.items():
        if name == "set_" or value is None:
            continue
        info = _section_field(request, name)
        item = _list_item(info.annotation) if info is not None else None
        values[name] = _parse_list(item, value, "--" + name.replace("_", "-")) if item is not None else value
        how_given[name] = "--" + name.replace("_", "-")
    for name in [*how_given, *(given or {})]:
        note_given(name, None)  # by its own option: a refusal naming it says so already
    for text in fields.get("set_") or []:
        name, value = parse_set(text, request)
        if name in values or name in (given or {}):
            how = (given or {}).get(name) or how_given[name]
            twice = "twice by --set" if how == "--set" else f"by {how} and --set"
            raise ConfigError(f"--set {text}: {name} is given twice ({twice}); give it once")
        values[name] = value
        how_given[name] = "--set"
        note_given(name, ("--set", text.strip()))
    return values


def _section_field(request: type, name: str) -> object:
    for section in request.sections().values():
        if name in section.model_fields:
            return section.model_fields[name]
    return request.model_fields.get(name)


def parse_set(text: str, request: type) -> tuple[str, object]:
    """``SECTION.FIELD=VALUE`` (or ``FIELD=VALUE`` for a field of the request itself) -> (field,
    value): the value is TOML (``3e-3``, ``true``, ``[1, 2]``, ``"x"``), else the text; a comma
    list where a list is expected."""
    key, equals, raw = text.partition("=")
    if not equals or not key.strip():
        raise ConfigError(f"--set {text}: expected SECTION.FIELD=VALUE, e.g. --set train.lr=3e-3")
    section, _, name = key.strip().rpartition(".")
    sections = request.sections()
    if section:
        if section not in sections:
            raise ConfigError(f"--set {text}: {request.__name__} has no section '{section}'; its sections: "
                              f"{', '.join(sections)}")
        if name not in sections[section].model_fields:
            raise ConfigError(f"--set {text}: the {section} section has no field '{name}'; its fields: "
                              f"{', '.join(sections[section].model_fields)}")
        info = sections[section].model_fields[name]
    else:
        if name in sections:
            raise ConfigError(f"--set {text}: {name} is a section, not a field; set one of its fields, "
                              f"--set {name}.FIELD=VALUE (its fields: {', '.join(sections[name].model_fields)})")
        if name not in request.model_fields:
            raise ConfigError(f"--set {text}: {request.__name__} has no field '{name}' (a section's field is "
                              f"SECTION.FIELD; sections: {', '.join(sections)})")
        info = request.model_fields[name]
    if name in NOT_OPTIONS:
        raise ConfigError(f"--set {text}: {name} is not set by hand: {MACHINE_FIELDS[name]}")
    if not raw.strip():
        raise ConfigError(f"--set {text}: no value given; give one after the '=' (e.g. --set train.lr=3e-3), "
                          "or leave the field out for its default")
    value = _toml_value(raw.strip(), f"--set {text}")
    item = _list_item(info.annotation)
    if item is not None and not isinstance(value, list):  # a comma list, or one item (seeds=42)
        value = _parse_list(item, raw.strip(), f"--set {text}")
    check_value(f"--set {text}", info, value)  # strictly, as a file's (tune=yes is no boolean)
    return name, value
