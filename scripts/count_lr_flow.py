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

    PYTHONPATH=src LLMEVO_DATA=../shared/data .venv/bin/python scripts/count_lr_flow.py [--verbose]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    import llmevo
    from llmevo.cli import main as command

    package = Path(llmevo.__file__).resolve().parent
    layer_of = layers(package.parent)
    rates = followed()

    def module_of(filename: str) -> str | None:
        path = Path(filename)
        if package not in path.parents:
            return None
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def layer(module: str) -> int:
        while module not in layer_of:
            module = module.rpartition(".")[0]
        return layer_of[module]

    names: dict[str, set[str]] = defaultdict(set)  # parameter name -> functions
    files: set[str] = set()
    carrying: set[str] = set()
    climbs: dict[tuple[str, str], int] = {}
    climbed: dict[int, object] = {}  # id -> the object that climbed (kept alive: ids stay unique)
    edge_of: dict[int, tuple[str, str]] = {}
    round_trips: dict[tuple[str, str], str] = {}  # climb -> the first call that took it down again
    modules: dict[str, str | None] = {}

    def where(frame) -> str | None:
        filename = frame.f_code.co_filename
        if filename not in modules:
            modules[filename] = module_of(filename)
        return modules[filename]

    def profile(frame, event, arg):
        if event not in ("call", "return"):
            return
        module = where(frame)
        if module is None:
            return
        code = frame.f_code
        function = f"{module}.{code.co_qualname}"
        if event == "call":
            count = code.co_argcount + code.co_kwonlyargcount
            caller = frame.f_back
            caller_module = None if caller is None else where(caller)
            if climbed and caller_module is not None and layer(caller_module) > layer(module):
                for name in code.co_varnames[:count]:
                    found = contains(frame.f_locals.get(name), climbed, 3)
                    if found is not None and edge_of[found] not in round_trips:
                        round_trips[edge_of[found]] = (f"{caller_module}.{caller.f_code.co_qualname} -> "
                                                       f"{function} ({name})")
            for name in code.co_varnames[:count]:
                value = frame.f_locals.get(name)
                if is_rate(value, rates):
                    names[name].add(function)
                    files.add(module)
                if module not in carrying and holds(value, rates, 4):
                    carrying.add(module)
            return
        caller = frame.f_back
        caller_module = None if caller is None else where(caller)
        if caller_module is None or layer(caller_module) <= layer(module):
            return
        if holds(arg, rates, 4):
            key = (function, f"{caller_module}.{caller.f_code.co_qualname}")
            climbs[key] = climbs.get(key, 0) + 1
            climbed[id(arg)], edge_of[id(arg)] = arg, key

    data = os.environ.get("LLMEVO_DATA", str(ROOT.parent / "shared" / "data"))
    with tempfile.TemporaryDirectory() as folder:
        argv = ["reproduce", "rope", "--preset", "smoke", "--tune", "--lr", repr(LR), "--steps", "2",
                "--seeds", "42", "--threads", "1", "--device", "cpu", "--path", "sequential",
                "--no-arm-cache", "--no-report", "--data-dir", data, "--out", str(Path(folder) / "rope.json")]
        sys.setprofile(profile)
        try:
            command(argv)
        except SystemExit as stop:
            if stop.code not in (0, None):
                raise
        finally:
            sys.setprofile(None)
    print(f"files: {len(files)}; files carrying: {len(carrying)}; names: {len(names)} "
          f"({', '.join(sorted(names))}); climbs: {len(climbs)}; round trips: {len(round_trips)}")
    for (callee, caller), times in sorted(climbs.items()):
        print(f"  climb: {callee} -> {caller} ({times}x)")
        if (callee, caller) in round_trips:
            print(f"    and down again: {round_trips[(callee, caller)]}")
    if args.verbose:
        for name, functions in sorted(names.items()):
            print(f"  name {name}: {', '.join(sorted(functions))}")
        print("  files:", ", ".join(sorted(files)))
        print("  files carrying:", ", ".join(sorted(carrying)))


if __name__ == "__main__":
    main()
