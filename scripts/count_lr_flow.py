"""Where ``--lr`` travels in a tuned reproduction, counted from the running code (issue 33).

``llmevo reproduce rope --preset smoke --tune --lr L`` (L = 1.2345e-3, a value nothing else
holds; 2 steps, one report seed, sequential, one thread, arm cache off, no report) runs in this
process (``llmevo.cli.main``) under ``sys.setprofile``. The *learning rates* followed are L and the values tuning derives
from it: the default grid (L/3 .. 3L, 5 points) and one extension step past either edge. For
every call of a function in ``src/llmevo``:

- a *name*: a parameter that receives a learning rate itself (a float, or a flat list/tuple
  of floats holding one; not an object holding one, e.g. a ``TrainConfig``); each distinct
  parameter name counts once;
- a *file*: an llmevo file with a function that receives one under some name; *files
  carrying*: the same with a parameter that holds one anywhere inside (as a climb's value);
- a *climb*: a function returns a value holding a learning rate (itself, or inside a list,
  tuple, dict, dataclass or pydantic model, 4 levels deep) to a caller in a *higher* layer
  (the layer order of ``tests/unit/test_import_layers.py``); each distinct (callee, caller)
  pair counts once. A result recorded for the artifact necessarily climbs at least once;
- a *round trip*: a climb whose returned object (the very object, found by identity inside
  the arguments, 3 levels deep) is later passed by a function to one in a *lower* layer: the
  learning rate went down, came back up, and goes down again. A climb that only reaches the
  record (the artifact, the printed table) is not one.

**A property read is not a descent** (the eighteenth session's correction). ``paired.rates``,
where ``rates`` is a ``property`` (or ``functools.cached_property``) of ``paired``'s class, is
written and read as an attribute: the caller reads a value off the object it holds, as it
reads a dataclass field, and hands the object to no function. Python still runs the getter as
a call whose ``self`` is the object, in the module (so the layer) that defines the class; the
profile saw that as the object going down (``Paired.learning_rates``, a round trip, where the
same value as a field would have been none). So ``self`` of a property getter is not looked
at for a descent; what the getter returns still counts as a climb. An ordinary method called
on a climbed object is still a descent (``plan.check_arms(arms, preset)`` hands the plan to
the lower layer's code to work with): the exception is the attribute syntax alone.
``tests/unit/test_count_lr_flow.py`` checks both on a hand-made two-layer call graph.

What the count does not see, by its definitions: an object *constructed* by a higher layer
(its ``__init__`` or ``__post_init__`` returns nothing to the caller: a constructor's result is
the caller's own, built from what it handed down), and the parts of a climbed tuple once it is
unpacked (identity is followed from the returned object into the arguments, not from a part
of it back to the whole).

    PYTHONPATH=src LLMEVO_DATA=../shared/data .venv/bin/python scripts/count_lr_flow.py [--verbose]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import inspect
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

LR = 1.2345e-3
ROOT = Path(__file__).resolve().parents[1]


def layers(src: Path) -> dict[str, int]:
    """Each top-level llmevo module's layer index, from the import-layer test."""
    spec = importlib.util.spec_from_file_location("layers", ROOT / "tests" / "unit" / "test_import_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return {name: index for index, group in enumerate(module.LAYERS) for name in group}


def followed() -> set[float]:
    from llmevo.runner.tuning import default_grid, extension_value

    grid = default_grid(LR)
    return {LR, *grid, extension_value(grid, "up"), extension_value(grid, "down")}


def holds(value, rates: set[float], depth: int) -> bool:
    if isinstance(value, float):
        return value in rates
    if depth <= 0 or isinstance(value, str | bytes) or type(value).__module__.startswith("torch"):
        return False
    if isinstance(value, list | tuple | set | frozenset) and len(value) <= 64:
        return any(holds(v, rates, depth - 1) for v in value)
    if isinstance(value, dict) and len(value) <= 64:
        return any(holds(v, rates, depth - 1) for v in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(holds(getattr(value, f.name, None), rates, depth - 1) for f in dataclasses.fields(value))
    fields = getattr(type(value), "model_fields", None)
    if isinstance(fields, dict):
        return any(holds(getattr(value, name, None), rates, depth - 1) for name in fields)
    return False


def is_rate(value, rates: set[float]) -> bool:
    """A learning rate itself, or a flat list/tuple of floats holding one."""
    if isinstance(value, float):
        return value in rates
    return isinstance(value, list | tuple) and any(isinstance(v, float) and v in rates for v in value)


def contains(value, wanted: dict[int, object], depth: int) -> int | None:
    """The id of an object of ``wanted`` that ``value`` is or holds (``depth`` levels deep)."""
    if id(value) in wanted:
        return id(value)
    if depth <= 0 or isinstance(value, str | bytes | float | int) or type(value).__module__.startswith("torch"):
        return None
    if isinstance(value, list | tuple | set | frozenset) and len(value) <= 64:
        items = list(value)
    elif isinstance(value, dict) and len(value) <= 64:
        items = list(value.values())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    elif isinstance(getattr(type(value), "model_fields", None), dict):
        items = [getattr(value, name, None) for name in type(value).model_fields]
    else:
        return None
    for item in items:
        found = contains(item, wanted, depth - 1)
        if found is not None:
            return found
    return None


def read_only(code, receiver) -> bool:
    """Whether ``code`` is a property's getter on ``receiver``'s class: ``x.attr`` reads the
    object it is called on (no function of another layer receives it; see the docstring)."""
    attribute = inspect.getattr_static(type(receiver), code.co_name, None)
    getter = attribute.fget if isinstance(attribute, property) else (
        attribute.func if isinstance(attribute, functools.cached_property) else None)
    return getattr(getter, "__code__", None) is code


@dataclasses.dataclass
class Flow:
    """Where the followed learning rates travel in the calls of ``package``'s functions (the
    module docstring's definitions); ``layer_of``: each top-level module's layer index."""

    package: Path
    layer_of: dict[str, int]
    rates: set[float]
    names: dict[str, set[str]] = dataclasses.field(default_factory=lambda: defaultdict(set))
    files: set[str] = dataclasses.field(default_factory=set)
    carrying: set[str] = dataclasses.field(default_factory=set)
    climbs: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    # climb -> the first call that took it down again
    round_trips: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.climbed: dict[int, object] = {}  # id -> the object that climbed (kept alive: ids stay unique)
        self.edge_of: dict[int, tuple[str, str]] = {}
        self.modules: dict[str, str | None] = {}

    def module_of(self, filename: str) -> str | None:
        if filename not in self.modules:
            path = Path(filename)
            module = None
            if self.package in path.parents:
                parts = list(path.relative_to(self.package.parent).with_suffix("").parts)
                module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self.modules[filename] = module
        return self.modules[filename]

    def layer(self, module: str) -> int:
        while module not in self.layer_of:
            module = module.rpartition(".")[0]
        return self.layer_of[module]

    def profile(self, frame, event, arg) -> None:
        if event not in ("call", "return"):
            return
        module = self.module_of(frame.f_code.co_filename)
        if module is None:
            return
        code = frame.f_code
        function = f"{module}.{code.co_qualname}"
        caller = frame.f_back
        caller_module = None if caller is None else self.module_of(caller.f_code.co_filename)
        if event == "call":
            parameters = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            if self.climbed and caller_module is not None and self.layer(caller_module) > self.layer(module):
                for index, name in enumerate(parameters):
                    value = frame.f_locals.get(name)
                    if index == 0 and read_only(code, value):
                        continue  # a property read of the object, not the object handed down
                    found = contains(value, self.climbed, 3)
                    if found is not None and self.edge_of[found] not in self.round_trips:
                        self.round_trips[self.edge_of[found]] = (
                            f"{caller_module}.{caller.f_code.co_qualname} -> {function} ({name})")
            for name in parameters:
                value = frame.f_locals.get(name)
                if is_rate(value, self.rates):
                    self.names[name].add(function)
                    self.files.add(module)
                if module not in self.carrying and holds(value, self.rates, 4):
                    self.carrying.add(module)
            return
        if caller_module is None or self.layer(caller_module) <= self.layer(module):
            return
        if holds(arg, self.rates, 4):
            key = (function, f"{caller_module}.{caller.f_code.co_qualname}")
            self.climbs[key] = self.climbs.get(key, 0) + 1
            self.climbed[id(arg)], self.edge_of[id(arg)] = arg, key

    def trace(self, run) -> None:
        """Call ``run()`` under this profile."""
        sys.setprofile(self.profile)
        try:
            run()
        finally:
            sys.setprofile(None)

    def summary(self) -> str:
        return (f"files: {len(self.files)}; files carrying: {len(self.carrying)}; names: {len(self.names)} "
                f"({', '.join(sorted(self.names))}); climbs: {len(self.climbs)}; "
                f"round trips: {len(self.round_trips)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    import llmevo
    from llmevo.cli import main as command

    package = Path(llmevo.__file__).resolve().parent
    flow = Flow(package, layers(package.parent), followed())
    data = os.environ.get("LLMEVO_DATA", str(ROOT.parent / "shared" / "data"))
    with tempfile.TemporaryDirectory() as folder:
        argv = ["reproduce", "rope", "--preset", "smoke", "--tune", "--lr", repr(LR), "--steps", "2",
                "--seeds", "42", "--threads", "1", "--device", "cpu", "--path", "sequential",
                "--no-arm-cache", "--no-report", "--data-dir", data, "--out", str(Path(folder) / "rope.json")]

        def run() -> None:
            try:
                command(argv)
            except SystemExit as stop:
                if stop.code not in (0, None):
                    raise

        flow.trace(run)
    print(flow.summary())
    for (callee, caller), times in sorted(flow.climbs.items()):
        print(f"  climb: {callee} -> {caller} ({times}x)")
        if (callee, caller) in flow.round_trips:
            print(f"    and down again: {flow.round_trips[(callee, caller)]}")
    if args.verbose:
        for name, functions in sorted(flow.names.items()):
            print(f"  name {name}: {', '.join(sorted(functions))}")
        print("  files:", ", ".join(sorted(flow.files)))
        print("  files carrying:", ", ".join(sorted(flow.carrying)))


if __name__ == "__main__":
    main()
