"""The experiment file of an external experiment, and one run of its command.

A researcher's own training script (one that does not import llmevo) is declared in a small
TOML file; this module reads and checks that file (``load_experiment``: every problem is one
``ConfigError`` line before anything runs), runs the command once for a set of parameters and
a seed (``execute``), reads the metric from what the run printed or wrote (``read_metrics``:
a JSON line, a regular expression on its output, or a JSON file), names a run for the cache
(``run_key``) and runs many at once (``run_many``: a pool of N subprocesses, each in its own
process group, all killed on an interrupt). The protocol around it (tuning, pairing,
statistics, the verdict, the artifact) is ``experiments.external``. The file's every key is
documented in docs/guide/experiment-file.md; ``tests/unit/test_experiment_file.py`` checks that
page names each key this module accepts.

**Derived parameters** (``[derived] min_lr = "{lr} / 10"``) are arithmetic over the declared
parameters, ``{seed}`` and other derived ones, evaluated by ``simpleeval`` (no ``eval``: only
numbers, strings, arithmetic, comparisons, ``x if c else y`` and the functions ``min``, ``max``,
``abs``, ``round``, ``int``, ``float``; powers are capped). Unknown names, cycles and
expressions that fail on the defaults are refused at load. A derived value reaches a run as a
parameter does (templates, environment, parameters file); it cannot be set by an arm. The cache
key holds the run's declared parameters and the derived *expressions* (``derived`` in the key),
not the values: a derived value is a function of those, so it changes the key exactly when an
input or an expression changes.

**The cache** entry of a successful run (``<cache_dir>/external/<key[:2]>/<key>.json``,
written atomically with a sha256 of its own payload; the folder holds a ``.gitignore`` of
``*``, so a cache inside the experiment's repository leaves it clean) keeps the run's metrics
and the wall time it took; a run loaded from it is reported with that recorded time (``cached: true``), so an
artifact's cost counts what its runs cost when they ran.

Public API: ``Experiment``, ``Read``, ``Tuning``, ``Ladder``, ``LoadedExperiment``,
``load_experiment``, ``parse_settings``, ``check_ladder_values``, ``resolve_params``,
``resolve_command``, ``run_environment``, ``RunFailed``, ``parse_metrics``, ``read_metrics``,
``execute``, ``Stop``, ``run_key``, ``read_cached``, ``read_entry``, ``write_entry``, ``run_once``, ``run_many``,
``wall_summary``, ``publish_folder``.
"""

from __future__ import annotations

import ast
import graphlib
import hashlib
import json
import math
import os
import re
import shlex
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Literal

import simpleeval
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from llmevo.artifacts.io import write_json_atomic
from llmevo.digests import sha256_file
from llmevo.errors import ConfigError, LlmevoError
from llmevo.registry import StrictModel, one_line_error

CACHE_FOLDER = "external"
ENTRY_VERSION = 1
PARAM_ENV_PREFIX = "LLMEVO_PARAM_"
PARAMS_FILE_ENV = "LLMEVO_PARAMS_FILE"
METRICS_FILE_ENV = "LLMEVO_METRICS_FILE"
PYTHON_TOKEN = "python"  # ``{python}`` in a command is this interpreter
SEED_TOKEN = "seed"
PUBLISH_SUBFOLDER = Path("docs/external")  # under the experiment's repository: <name>/<comparison>.json
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
Value = bool | int | float | str
CacheUse = Literal["use", "refresh", "off"]
# the functions a derived parameter may call (simpleeval's defaults, rand and str among them, are not given)
DERIVED_FUNCTIONS: dict[str, Callable] = {"min": min, "max": max, "abs": abs, "round": round,
                                          "int": int, "float": float}


class Tuning(StrictModel):
    """One tuned axis: the same grid under the same seeds for both arms."""

    param: str
    grid: list[float] = Field(min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [1000])


class Ladder(StrictModel):
    """The size a ladder climbs: a declared numeric parameter, its default rungs, and the
    metric each run reports as its training compute (None: the size itself is the x axis)."""

    param: str
    values: list[int | float] = Field(min_length=2)
    compute: str | None = None


def _one_line(validate: Callable[[], None]) -> Any:
    """Run a model's checks; a ``ValueError`` becomes pydantic's error with the text as it is
    (no "Value error, " in front: ``one_line_error`` shows it as the line)."""
    try:
        validate()
    except ValueError as error:
        raise PydanticCustomError("experiment_file", str(error)) from None
    return validate.__self__


def _compile(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as error:
        raise ValueError(f"pattern {pattern!r} is not a regular expression: {error}") from None


class Read(StrictModel):
    """How a run's metrics are read (``[read]``): ``from = "json"`` the last non-blank line of
    the run's output as a JSON object; ``"regex"`` the last match of ``pattern`` in its output
    (each named group a metric, or ``groups`` naming the groups in order, or one group: the
    decisive metric); ``"file"`` a JSON object in a file the run writes (``path``, a template
    relative to the working directory, or ``$LLMEVO_METRICS_FILE`` when none is given)."""

    model_config = ConfigDict(populate_by_name=True)

    source: Literal["json", "regex", "file"] = Field(default="json", alias="from")
    stream: Literal["stdout", "stderr"] | None = None  # json and regex: the output read (stdout)
    pattern: str | None = None
    groups: list[str] | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Read:
        return _one_line(self._validate)

    def _validate(self) -> None:
        allowed = {"json": {"stream"}, "regex": {"stream", "pattern", "groups"}, "file": {"path"}}[self.source]
        for key in ("stream", "pattern", "groups", "path"):
            if getattr(self, key) is not None and key not in allowed:
                raise ValueError(f"{key} does not apply to from = {self.source!r} "
                                 f"(it takes: {', '.join(sorted(allowed)) or 'nothing'})")
        if self.source != "regex":
            return
        if self.pattern is None:
            raise ValueError("from = \"regex\" needs pattern = '<regular expression>' (its last match is read)")
        compiled = _compile(self.pattern)
        if compiled.groups == 0:
            raise ValueError(f"pattern {self.pattern!r} has no group: capture the number, e.g. "
                             "'val loss ([0-9.eE+-]+)' or '(?P<val_loss>[0-9.eE+-]+)'")
        if compiled.groupindex and self.groups is not None:
            raise ValueError(f"pattern {self.pattern!r} names its groups; groups = [...] does not apply")
        if self.groups is not None:
            if len(self.groups) != compiled.groups:
                raise ValueError(f"groups {self.groups} names {len(self.groups)} metric(s); pattern "
                                 f"{self.pattern!r} has {compiled.groups} group(s)")
            if len(set(self.groups)) != len(self.groups) or not all(self.groups):
                raise ValueError(f"groups {self.groups}: each metric needs a distinct, non-empty name")
        elif not compiled.groupindex and compiled.groups > 1:
            raise ValueError(f"pattern {self.pattern!r} has {compiled.groups} unnamed groups; name them "
                             "((?P<name>...)) or give groups = [\"metric\", ...]")

    def names(self, metric: str) -> list[str] | None:
        """The metrics a regex read gives (None: whatever the JSON holds)."""
        if self.source != "regex":
            return None
        compiled = _compile(self.pattern or "")
        if compiled.groupindex:
            return list(compiled.groupindex)
        return list(self.groups) if self.groups is not None else [metric]

    def cache_fields(self) -> dict[str, Any]:
        """What of the read goes into a run's cache key. The reads of before ``[read]``
        (``report = "stdout"`` / ``"file"``) keep their keys, so cached runs stay valid."""
        if self.source == "json" and self.stream in (None, "stdout"):
            return {"report": "stdout"}
        if self.source == "file" and self.path is None:
            return {"report": "file"}
        return {"read": self.model_dump(by_alias=True, exclude_none=True)}


def _fields(template: str, where: str) -> list[str]:
    """The placeholders of a ``str.format`` template (``{{`` is a literal brace)."""
    try:
        return [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as error:
        raise ValueError(f"{where} {template!r}: {error} (a literal brace is written {{{{ or }}}})") from None


def _bare(field: str) -> str:
    """The name a placeholder reads: ``lr`` of ``lr``, ``lr.real`` or ``lr[0]``."""
    return re.split(r"[.\[!:]", field, maxsplit=1)[0]


class Experiment(StrictModel):
    """A declared external experiment (the TOML file; docs/guide/experiment-file.md)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    command: list[str] = Field(min_length=1)
    files: list[str] | None = None
    metric: str = Field(min_length=1)
    direction: Literal["lower", "higher"] = "lower"
    read: Read = Field(default_factory=Read)
    timeout: float = Field(default=600.0, gt=0)
    params: dict[str, Value] = Field(default_factory=dict)
    derived: dict[str, str] = Field(default_factory=dict)
    tune: Tuning | None = None
    ladder: Ladder | None = None

    @field_validator("command", mode="before")
    @classmethod
    def _argv(cls, command: Any) -> Any:
        # one string (command = "python train.py"): pydantic's "Input should be a valid list" says not what to write
        if isinstance(command, str):
            try:
                words = shlex.split(command)
            except ValueError:
                words = []
            shown = ", ".join(map(json.dumps, words)) if words else '"python", "train.py", ...'
            raise PydanticCustomError("experiment_file", f"one string, not a list of arguments; write it as a list, "
                                      f"one entry per argument: command = [{shown}]")
        return command

    @field_validator("params", mode="before")
    @classmethod
    def _values(cls, params: Any) -> Any:
        # each a number, true/false or text (else pydantic reports the union's last member: "a valid boolean")
        for name, value in (params.items() if isinstance(params, dict) else ()):
            if not isinstance(value, bool | int | float | str):
                raise PydanticCustomError("experiment_file", f"{name} = {value!r}: a parameter's default is a number, "
                                          "true/false or text")
        return params

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "report" in data:
            raise PydanticCustomError("experiment_file",f"report = {data['report']!r} is now the [read] table: from = \"json\" (the last "
                             "stdout line), \"file\" or \"regex\" (docs/guide/experiment-file.md)")
        return data

    @model_validator(mode="after")
    def _check(self) -> Experiment:
        return _one_line(self._validate)

    def _validate(self) -> None:
        for name in (*self.params, *self.derived):
            if not _NAME.match(name) or name in (SEED_TOKEN, PYTHON_TOKEN):
                raise ValueError(f"parameter name {name!r} must match [a-z_][a-z0-9_]* and not be "
                                 f"'{SEED_TOKEN}' or '{PYTHON_TOKEN}'")
        both = sorted(set(self.params) & set(self.derived))
        if both:
            raise ValueError(f"{both[0]!r} is both a parameter and derived; declare it once")
        derived_order(self)  # names, cycles
        try:
            resolve_params(self, self.params, 0)  # every expression on the defaults
        except ConfigError as error:
            raise ValueError(str(error)) from None
        known = {*self.params, *self.derived, SEED_TOKEN, PYTHON_TOKEN}
        templates = [("command", entry) for entry in self.command]
        if self.read.path is not None:
            templates.append(("read.path", self.read.path))
        for where, template in templates:
            unknown = sorted({_bare(field) for field in _fields(template, where)} - known)
            if unknown:
                raise ValueError(f"{where} {template!r}: {{{unknown[0]}}} is not a parameter ({', '.join(sorted(known))}; "
                                 "a literal brace is written {{ or }})")
        names = self.read.names(self.metric)
        if names is not None:
            for what, metric in (("metric", self.metric),
                                 ("ladder.compute", self.ladder.compute if self.ladder else None)):
                if metric is not None and metric not in names:
                    raise ValueError(f"{what} {metric!r} is not read by the pattern (it reads {', '.join(names)})")
        for what, axis in (("tune.param", self.tune), ("ladder.param", self.ladder)):
            if axis is not None and axis.param in self.derived:
                raise ValueError(f"{what} {axis.param!r} is derived ({self.derived[axis.param]}); "
                                 "tune or climb one of its inputs")
        if self.tune is not None and self.tune.param not in self.params:
            raise ValueError(f"tune.param {self.tune.param!r} is not a declared parameter "
                             f"({', '.join(self.params) or 'none declared'})")
        if self.ladder is not None:
            try:
                check_ladder_values(self, self.ladder.values, "ladder.values")
            except ConfigError as error:
                raise ValueError(str(error)) from None

    @property
    def lower_is_better(self) -> bool:
        return self.direction == "lower"


# --- derived parameters -----------------------------------------------------------------------

def _expression(name: str, text: str) -> tuple[str, set[str]]:
    """A derived parameter's expression with ``{x}`` written ``x``, and the names it reads;
    a bare name (``lr / 10``) or a syntax error is refused."""
    where = f"derived.{name}"
    fields = _fields(text, where)
    if any(_bare(field) != field or not _NAME.match(field) for field in fields):
        raise ValueError(f"{where} = {text!r}: a placeholder is a bare name, e.g. {{lr}}")
    source = "".join(literal + (field or "") for literal, field, _, _ in string.Formatter().parse(text))
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as error:
        raise ValueError(f"{where} = {text!r}: not an expression ({error.msg})") from None
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} - called
    bare = sorted(names - set(fields))
    if bare:
        raise ValueError(f"{where} = {text!r}: write the parameter {bare[0]!r} as {{{bare[0]}}}")
    unknown = sorted(called - set(DERIVED_FUNCTIONS))
    if unknown:
        raise ValueError(f"{where} = {text!r}: {unknown[0]}() is not allowed (allowed: "
                         f"{', '.join(DERIVED_FUNCTIONS)})")
    return source, names


def derived_order(spec: Experiment) -> list[tuple[str, str]]:
    """The derived parameters as ``(name, expression)`` in an order where each comes after what
    it reads; an unknown name or a cycle is a ``ValueError`` line."""
    graph, sources = {}, {}
    known = {*spec.params, *spec.derived, SEED_TOKEN}
    for name, text in spec.derived.items():
        sources[name], names = _expression(name, text)
        unknown = sorted(names - known)
        if unknown:
            raise ValueError(f"derived.{name} = {text!r}: {{{unknown[0]}}} is not a parameter "
                             f"({', '.join(sorted(known - {name}))})")
        graph[name] = names & set(spec.derived)
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        raise ValueError(f"derived parameters form a cycle: {' -> '.join(error.args[1])}") from None
    return [(name, sources[name]) for name in order]


def resolve_params(spec: Experiment, params: Mapping[str, Value], seed: int) -> dict[str, Value]:
    """``params`` with every derived parameter evaluated (``simpleeval``); a failure is a
    ``ConfigError`` line naming the expression and the values it read."""
    values: dict[str, Value] = {**params}
    for name, source in derived_order(spec):
        evaluator = simpleeval.SimpleEval(functions=DERIVED_FUNCTIONS, names={**values, SEED_TOKEN: seed})
        try:
            value = evaluator.eval(source)
        except (simpleeval.InvalidExpression, ArithmeticError, TypeError, ValueError) as error:
            raise ConfigError(f"derived.{name} = {spec.derived[name]!r} fails for "
                              f"{ {k: v for k, v in values.items() if k in source} }: "
                              f"{type(error).__name__}: {error}") from None
        if not isinstance(value, bool | int | float | str) or (isinstance(value, float) and not math.isfinite(value)):
            raise ConfigError(f"derived.{name} = {spec.derived[name]!r} gives {value!r}, not a finite number, "
                              "true/false or text")
        values[name] = value
    return values


class LoadedExperiment(StrictModel):
    """An experiment with where it lives: its folder (the runs' working directory) and the
    sha256 of its file and of every file it names."""

    spec: Experiment
    path: Path
    sha256: str
    files: dict[str, str]  # path relative to the folder -> sha256

    @property
    def folder(self) -> Path:
        return self.path.parent


REQUIRED_EXAMPLE = {  # a required key of the file, as the error that misses it shows it
    "name": 'its name (name = "my-experiment")',
    "command": 'the argv of one run (command = ["python", "train.py", "--lr", "{lr}"])',
    "metric": 'the metric that decides (metric = "val_loss")',
}


def load_experiment(path: Path | str) -> LoadedExperiment:
    """Read and check an experiment file; any problem is one ``ConfigError`` line."""
    from llmevo.experiments.sections import read_toml

    path = Path(path)
    raw = read_toml(path, f"--experiment {path}")
    missing = [key for key, info in Experiment.model_fields.items() if info.is_required() and key not in raw]
    if missing:  # before: "command: Field required"
        raise ConfigError(f"--experiment {path}: no {' and no '.join(missing)}; the file declares "
                          + "; ".join(REQUIRED_EXAMPLE[key] for key in missing) + " (docs/guide/experiment-file.md)")
    try:
        spec = Experiment(**raw)
    except ValidationError as error:
        raise one_line_error(error, f"--experiment {path}") from None
    folder = path.resolve().parent
    named = spec.files if spec.files is not None else [
        entry for entry in spec.command if "{" not in entry and (folder / entry).is_file()]
    files = {}
    for name in named:
        file = folder / name
        if not file.is_file():
            raise ConfigError(f"--experiment {path}: files: {name} is not a file in {folder}")
        files[name] = sha256_file(file)
    return LoadedExperiment(spec=spec, path=path.resolve(), sha256=sha256_file(path), files=files)


def _coerce(name: str, value: Value, default: Value) -> Value:
    """``value`` as the type of the parameter's declared default (an int where a float is
    declared becomes a float; text where text is declared stays text)."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, str):
        return value if isinstance(value, str) else json.dumps(value)
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(float(value)):
            return float(value)
    kind = {"bool": "true or false", "str": "text", "int": "an integer", "float": "a number"}[type(default).__name__]
    raise ConfigError(f"parameter {name}={value!r}: expected {kind} like its default {default!r}")


def parse_settings(text: str, experiment: Experiment, option: str) -> dict[str, Value]:
    """``'k=v,k=v'`` (values read as JSON, else as text) checked against the declared
    parameters and coerced to their types; ``''`` is the declared defaults. A derived
    parameter is refused (its inputs are what an arm sets), and so are settings on which a
    derived expression fails."""
    settings: dict[str, Value] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, equals, raw = item.partition("=")
        key = key.strip()
        if not equals:
            raise ConfigError(f"{option} {text!r}: {item!r} is not k=v")
        if key in experiment.derived:
            raise ConfigError(f"{option}: {key!r} is derived ({experiment.derived[key]}); set its inputs instead")
        if key not in experiment.params:
            raise ConfigError(f"{option}: {key!r} is not a parameter of {experiment.name} "
                              f"({', '.join(experiment.params) or 'none declared'})")
        if key in settings:
            raise ConfigError(f"{option}: {key!r} is given twice")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw.strip()
        if not isinstance(value, bool | int | float | str):
            raise ConfigError(f"{option}: {key}={raw}: expected a number, true/false or text")
        settings[key] = _coerce(key, value, experiment.params[key])
    try:
        resolve_params(experiment, {**experiment.params, **settings}, 0)
    except ConfigError as error:
        raise ConfigError(f"{option}: {error}") from None
    return settings


def check_ladder_values(experiment: Experiment, values: Sequence[Value], option: str) -> list[Value]:
    """The rungs of ``experiment``'s declared size: each of the size parameter's type (an int
    or a float, never text or true/false), distinct, at least two, ascending; else one line."""
    ladder = experiment.ladder
    if ladder is None:
        raise ConfigError(f"{experiment.name} declares no [ladder] table (param = \"<size parameter>\", "
                          "values = [...]): nothing to climb")
    if ladder.param not in experiment.params:
        raise ConfigError(f"ladder.param {ladder.param!r} is not a declared parameter "
                          f"({', '.join(experiment.params) or 'none declared'})")
    default = experiment.params[ladder.param]
    if isinstance(default, bool | str):
        raise ConfigError(f"ladder.param {ladder.param!r} is {type(default).__name__} ({default!r}); a size "
                          "must be a number")
    if experiment.tune is not None and experiment.tune.param == ladder.param:
        raise ConfigError(f"ladder.param {ladder.param!r} is also the tuned axis (tune.param)")
    if experiment.direction != "lower":
        raise ConfigError(f"a ladder fits loss-vs-compute power laws; {experiment.metric} is higher-is-better "
                          "(direction = \"higher\"), which they do not describe")
    rungs = [_coerce(f"{option}: {ladder.param}", value, default) for value in values]
    if len(rungs) < 2 or len(set(rungs)) != len(rungs):
        raise ConfigError(f"{option} {list(values)}: a ladder needs at least 2 distinct sizes")
    if any(not float(value) > 0 for value in rungs):
        raise ConfigError(f"{option} {list(values)}: every size must be positive")
    return sorted(rungs)


# --- one run ---------------------------------------------------------------------------------

def resolve_command(command: Sequence[str], params: Mapping[str, Value], seed: int) -> list[str]:
    """The argv of one run: each entry formatted with the parameters (derived ones resolved:
    ``resolve_params``) and ``seed``."""
    values = {**params, SEED_TOKEN: seed, PYTHON_TOKEN: sys.executable}
    try:
        return [entry.format_map(values) for entry in command]
    except (KeyError, IndexError, ValueError, AttributeError) as error:
        raise ConfigError(f"command {list(command)}: cannot fill in {error} (parameters: "
                          f"{', '.join(sorted(values))})") from None


def _env_text(value: Value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def run_environment(params: Mapping[str, Value], seed: int, params_file: Path,
                    metrics_file: Path | None) -> dict[str, str]:
    """The variables a run receives: ``LLMEVO_PARAM_<NAME>`` per parameter and the seed,
    ``LLMEVO_PARAMS_FILE`` and, with a file read, ``LLMEVO_METRICS_FILE``."""
    env = {f"{PARAM_ENV_PREFIX}{name.upper()}": _env_text(value) for name, value in params.items()}
    env[f"{PARAM_ENV_PREFIX}SEED"] = str(seed)
    env[PARAMS_FILE_ENV] = str(params_file)
    if metrics_file is not None:
        env[METRICS_FILE_ENV] = str(metrics_file)
    return env


class RunFailed(LlmevoError):
    """One run failed (exit status, timeout, no usable metric); the message is its line."""


def _finite(metric: str, number: Any) -> float:
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
        raise RunFailed(f"metric {metric!r} is {number!r}, not a finite number")
    return float(number)


def parse_metrics(text: str, metric: str, source: str) -> dict[str, float]:
    """The finite numbers of one JSON object (``source`` names where it came from); the
    decisive ``metric`` must be among them, else ``RunFailed``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        shown = text.strip()[:80]
        raise RunFailed(f"{source} is not a JSON object of metrics: {shown!r}") from None
    if not isinstance(value, dict):
        raise RunFailed(f"{source} is JSON but not an object of metrics: {text.strip()[:80]!r}")
    if metric not in value:
        raise RunFailed(f"{source} has no metric {metric!r} (it has {', '.join(value) or 'none'})")
    _finite(metric, value[metric])
    return {key: float(item) for key, item in value.items()
            if isinstance(item, int | float) and not isinstance(item, bool) and math.isfinite(item)}


def parse_match(text: str, read: Read, metric: str, source: str) -> dict[str, float]:
    """The metrics of the last match of ``read.pattern`` in ``text``: each group a number (a
    group that did not take part is left out); the decisive ``metric`` must be one."""
    compiled = _compile(read.pattern or "")
    last = None
    for last in compiled.finditer(text):  # noqa: B007 - the last match is read
        pass
    if last is None:
        raise RunFailed(f"{source} has no match of {read.pattern!r}")
    names = read.names(metric) or []
    groups = last.groupdict() if compiled.groupindex else dict(zip(names, last.groups(), strict=True))
    metrics = {}
    for name, text_value in groups.items():
        if text_value is None:
            continue
        try:
            metrics[name] = float(text_value)
        except ValueError:
            raise RunFailed(f"{source}: {read.pattern!r} matched {text_value!r} for {name!r}, not a number") from None
    if metric not in metrics:
        raise RunFailed(f"{source}: the last match of {read.pattern!r} has no {metric!r}")
    _finite(metric, metrics[metric])
    return {name: value for name, value in metrics.items() if math.isfinite(value)}


def last_line(text: str) -> str:
    """The last non-blank line of a command's output (a reply, or its error)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def read_metrics(spec: Experiment, stdout: str, stderr: str, metrics_file: Path | None) -> dict[str, float]:
    """A finished run's metrics as ``spec.read`` says; ``RunFailed`` when they are not there."""
    read = spec.read
    stream = read.stream or "stdout"
    output = stdout if stream == "stdout" else stderr
    if read.source == "json":
        return parse_metrics(last_line(output), spec.metric, f"the last {stream} line")
    if read.source == "regex":
        return parse_match(output, read, spec.metric, f"the run's {stream}")
    assert metrics_file is not None
    shown = read.path or f"${METRICS_FILE_ENV}"
    if not metrics_file.is_file():
        raise RunFailed(f"wrote no metrics file ({shown})")
    return parse_metrics(metrics_file.read_text(encoding="utf-8", errors="replace"), spec.metric,
                         f"the metrics file {shown}")


def kill_group(process: subprocess.Popen) -> None:
    """Kill a command started in its own session, with everything it started, and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.communicate()


class Stop:
    """What one ``run_many`` call shares with its runs: once ``stop()`` is called, no run of the
    call starts and every one going is killed (its whole process group)."""

    _lock = threading.Lock()  # one for all calls: a start and a stop never interleave

    def __init__(self) -> None:
        self.stopped = False
        self.live: set[subprocess.Popen] = set()

    def start(self, start: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        with self._lock:
            if self.stopped:
                raise RunFailed("not started: the command was interrupted")
            process = start()
            self.live.add(process)
            return process

    def done(self, process: subprocess.Popen) -> None:
        with self._lock:
            self.live.discard(process)

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            live = list(self.live)
        for process in live:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def execute(experiment: LoadedExperiment, params: Mapping[str, Value], seed: int, timeout: float,
            base_env: Mapping[str, str], stop: Stop | None = None) -> dict[str, float]:
    """Run the command once for ``params`` (the declared ones; derived ones are resolved here)
    and ``seed``: its metrics, or ``RunFailed``.

    The run is its own process group (a timeout or an interrupt kills all of it) in the
    experiment's folder, with ``base_env`` plus the variables of ``run_environment``. Safe to
    call from several threads at once (``run_many``, whose ``stop`` it registers with): each run
    has its own scratch folder, and a ``read.path`` file is the run's own when its template
    names what differs between runs."""
    spec = experiment.spec
    try:
        values = resolve_params(spec, params, seed)
    except ConfigError as error:
        raise RunFailed(str(error)) from None
    argv = resolve_command(spec.command, values, seed)
    with tempfile.TemporaryDirectory(prefix="llmevo-external-") as scratch:
        params_file = Path(scratch) / "params.json"
        params_file.write_text(json.dumps({SEED_TOKEN: seed, **values}), encoding="utf-8")
        metrics_file = None
        if spec.read.source == "file":
            metrics_file = (Path(scratch) / "metrics.json" if spec.read.path is None else
                            experiment.folder / resolve_command([spec.read.path], values, seed)[0])
            metrics_file.unlink(missing_ok=True)  # an earlier run's file is not this run's metrics
        env = {**base_env, **run_environment(values, seed, params_file,
                                             metrics_file if spec.read.source == "file" else None)}
        stop = stop or Stop()
        try:
            process = stop.start(lambda: subprocess.Popen(
                argv, cwd=experiment.folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                errors="replace", start_new_session=True))
        except OSError as error:
            raise RunFailed(f"cannot start {argv[0]}: {error.strerror or error}") from None
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(process)
            raise RunFailed(f"timed out after {timeout:g} s (process group killed)") from None
        except BaseException:  # an interrupt: leave no run behind
            kill_group(process)
            raise
        finally:
            stop.done(process)
        if process.returncode != 0:
            last = last_line(stderr) or last_line(stdout)
            if process.returncode < 0:
                last = f"killed by signal {-process.returncode}" + (f"; {last}" if last else "")
            raise RunFailed(f"exit status {process.returncode}" + (f": {last.strip()[:160]}" if last else ""))
        return read_metrics(spec, stdout, stderr, metrics_file)


# --- the cache ----------------------------------------------------------------------------

def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def run_key(experiment: LoadedExperiment, params: Mapping[str, Value], seed: int) -> str:
    """The sha256 that names one run: the resolved command line, the declared files' sha256,
    how the metrics are read, the declared parameters, the derived expressions (not their
    values: those follow from the two) and the seed."""
    spec = experiment.spec
    values = resolve_params(spec, params, seed)
    fields = {"version": ENTRY_VERSION, "argv": resolve_command(spec.command, values, seed),
              "files": experiment.files, **spec.read.cache_fields(), "params": dict(params), "seed": seed}
    if spec.derived:
        fields["derived"] = dict(spec.derived)
    return hashlib.sha256(_canonical(fields).encode()).hexdigest()


def _entry_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / CACHE_FOLDER / key[:2] / f"{key}.json"


def read_cached(cache_dir: Path, key: str) -> tuple[dict[str, float], float] | None:
    """The metrics stored under ``key`` and the seconds the run took when it ran, or ``None``
    (missing, unreadable or altered)."""
    try:
        entry = json.loads(_entry_path(cache_dir, key).read_text(encoding="utf-8"))
        payload = entry["payload"]
        if entry["payload_sha256"] != hashlib.sha256(_canonical(payload).encode()).hexdigest():
            return None
        if payload["key"] != key or entry["version"] != ENTRY_VERSION:
            return None
        wall_s = float(payload.get("wall_s") or 0.0)
        return {str(name): float(value) for name, value in payload["metrics"].items()}, wall_s
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def read_entry(cache_dir: Path, key: str) -> dict[str, float] | None:
    """The metrics stored under ``key``, or ``None`` (``read_cached`` without the time)."""
    hit = read_cached(cache_dir, key)
    return None if hit is None else hit[0]


def write_entry(cache_dir: Path, key: str, metrics: Mapping[str, float], wall_s: float) -> None:
    """Store a successful run (atomically); a write that fails is skipped."""
    payload = {"key": key, "metrics": dict(metrics), "wall_s": wall_s}
    entry = {"version": ENTRY_VERSION, "payload": payload,
             "payload_sha256": hashlib.sha256(_canonical(payload).encode()).hexdigest()}
    try:
        path = _entry_path(cache_dir, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        ignore = cache_dir / CACHE_FOLDER / ".gitignore"
        if not ignore.exists():  # a cache inside the experiment's repository leaves it clean (publishable)
            ignore.write_text("# Created by llmevo: the run cache is never committed.\n*\n", encoding="utf-8")
        write_json_atomic(path, entry)
    except (OSError, LlmevoError):
        pass


# --- runs through the cache, one or N at once ---------------------------------------------------

def run_once(experiment: LoadedExperiment, params: Mapping[str, Value], seed: int, *, timeout: float,
             base_env: Mapping[str, str], cache_dir: Path, cache: CacheUse, stop: Stop | None = None) -> dict:
    """One run through the cache: ``{seed, params, status ("ok"|"failed"), metrics, error,
    cached, wall_s, key}``. A cached run's ``wall_s`` is what it took when it ran."""
    key = run_key(experiment, params, seed)
    record = {"seed": seed, "params": dict(params), "status": "ok", "metrics": None, "error": None,
              "cached": False, "wall_s": 0.0, "key": key}
    if cache == "use" and (hit := read_cached(cache_dir, key)) is not None:
        record.update(metrics=hit[0], cached=True, wall_s=hit[1])
        return record
    start = time.perf_counter()
    try:
        metrics = execute(experiment, params, seed, timeout, base_env, stop)
    except RunFailed as failure:
        record.update(status="failed", error=str(failure), wall_s=time.perf_counter() - start)
        return record
    record.update(metrics=metrics, wall_s=time.perf_counter() - start)
    if cache != "off":
        write_entry(cache_dir, key, metrics, record["wall_s"])
    return record


def run_many(experiment: LoadedExperiment, jobs: Sequence[tuple[Mapping[str, Value], int]], *, workers: int,
             timeout: float, base_env: Mapping[str, str], cache_dir: Path, cache: CacheUse,
             on_run: Callable[[int, dict], None] = lambda index, record: None) -> list[dict]:
    """Every ``(params, seed)`` of ``jobs`` through ``run_once``, at most ``workers`` at once
    (threads, each waiting on its own subprocess); the records in the order of ``jobs``.

    ``on_run(index, record)`` is called in the calling thread as each run completes (in the
    order they complete). An interrupt (Ctrl-C, SIGTERM as raised by ``llmevo.interrupts``)
    kills every run still going, process group and all, and is raised again: no run outlives
    the call. Runs whose ``read.path`` names the same file for two jobs must not run at once:
    give the path a placeholder that differs (``{seed}``, the tuned parameter)."""
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    records: list[dict | None] = [None] * len(jobs)
    stop = Stop()

    def one(index: int) -> dict:
        params, seed = jobs[index]
        return run_once(experiment, params, seed, timeout=timeout, base_env=base_env, cache_dir=cache_dir,
                        cache=cache, stop=stop)

    if workers == 1 or len(jobs) <= 1:
        for index in range(len(jobs)):
            records[index] = one(index)
            on_run(index, records[index])
        return records  # type: ignore[return-value]
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llmevo-external")
    pending: dict[Future, int] = {}
    try:
        pending = {pool.submit(one, index): index for index in range(len(jobs))}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                records[index] = future.result()
                on_run(index, records[index])
    except BaseException:
        stop.stop()  # no run starts now; the threads' communicate() returns once their process is gone
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return records  # type: ignore[return-value]


def wall_summary(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a set of runs cost: ``total_s`` (every run at the time it took when it ran, cached
    ones at their recorded time), ``ran_s`` (the runs executed now), ``cached_s`` and
    ``cached_runs`` (those loaded from the cache), ``runs``."""
    ran = math.fsum(run["wall_s"] for run in runs if not run["cached"])
    cached = math.fsum(run["wall_s"] for run in runs if run["cached"])
    return {"total_s": ran + cached, "ran_s": ran, "cached_s": cached,
            "cached_runs": sum(1 for run in runs if run["cached"]), "runs": len(runs)}


# --- where a comparison is published -------------------------------------------------------------

def _git_toplevel(folder: Path) -> Path | None:
    try:
        result = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"], capture_output=True,
                                text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(result.stdout.strip()).resolve() if result.returncode == 0 and result.stdout.strip() else None


def publish_folder(experiment: LoadedExperiment, publish_to: Path | None, llmevo_root: Path) -> Path:
    """The folder a published comparison of ``experiment`` goes under (``<folder>/<name>/``):
    ``publish_to`` when given, else ``docs/external`` of the git repository holding the
    experiment file. Never inside llmevo's own checkout (``llmevo_root``) unless the experiment
    lives there (the in-repo examples): its published files would make that checkout dirty, and
    the next publication, which checks it, would be refused. One ``ConfigError`` line."""
    own = _git_toplevel(llmevo_root)
    if publish_to is not None:
        target = Path(publish_to).resolve()
    else:
        repository = _git_toplevel(experiment.folder)
        if repository is None:
            raise ConfigError(f"--publish: {experiment.path} is in no git repository, so there is none to publish "
                              "into; commit it in one, or give --publish-to DIR")
        target = repository / PUBLISH_SUBFOLDER
    home = _git_toplevel(experiment.folder)
    if own is not None and target.is_relative_to(own) and home != own:
        raise ConfigError(f"--publish: {target} is inside llmevo's own checkout ({own}); publish into the "
                          "experiment's repository (the default) or --publish-to a folder outside it")
    return target
