"""The import graph of ``src/llmevo`` goes one way: each module imports only its own layer
or the layers below it, and no set of modules imports itself round a cycle.

Every ``import`` counts, including those inside functions (a lazy import is still a
dependency). A new top-level module or package must be given a layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("llmevo", "llmevo.errors", "llmevo.digests", "llmevo.interrupts"),
    ("llmevo.registry",),
    ("llmevo.artifacts",),
    ("llmevo.data",),
    ("llmevo.eval",),
    ("llmevo.components",),
    ("llmevo.model",),
    ("llmevo.train",),  # receives built models and optimizer components: never the catalog
    ("llmevo.catalog", "llmevo.skeleton"),  # every component and architecture module; shapes-only builds
    ("llmevo.inference",),
    ("llmevo.promotion", "llmevo.reports", "llmevo.diagnostics", "llmevo.hf", "llmevo.papers",
     "llmevo.contract"),
    ("llmevo.runner",),  # the shared arm runner: presets, data views, tuning, cache
    ("llmevo.experiments", "llmevo.diagnostics.pipeline"),  # the diagnose pipeline reads the shared run section
    ("llmevo.evolve", "llmevo.bench"),
    ("llmevo.cli",),
    ("llmevo.__main__",),
)


def module_files(src: Path = SRC) -> dict[str, Path]:
    """``{dotted module name: file}`` for every module under ``src``."""
    modules = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` imports mod
            targets = [
                f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin
                for alias in node.names
            ]
        else:
            continue
        found.update(target for target in targets if target in known and target != name)
    return found


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    modules = module_files(src)
    return {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}


def layer_of(module: str) -> int:
    """Index of the layer whose longest matching prefix names ``module``."""
    best, best_length = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix != "llmevo" and module.startswith(prefix + "."))
            if matches and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


GRAPH = import_graph()


def test_every_module_has_a_layer():
    assert [name for name in GRAPH if layer_of(name) < 0] == []


def test_imports_go_downward_only():
    upward = [
        f"{name} (layer {layer_of(name)}) imports {target} (layer {layer_of(target)})"
        for name, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(name)
    ]
    assert upward == []


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def test_registry_imports_no_component():
    assert not any(
        target.startswith(("llmevo.components", "llmevo.model"))
        for target in GRAPH["llmevo.registry"]
    )


# --- the command line only parses and prints ------------------------------------------------

# What a command may reach of the pipelines: their public, typed entry points (and the types
# it prints). Training, search, provenance and the runner's internals stay in the library.
CLI_FORBIDDEN = (
    "llmevo.train",  # training (llmevo.train.device, which only names devices, is allowed)
    "llmevo.artifacts.provenance",  # provenance capture
    "llmevo.runner",  # the shared arm runner: training, data views, tuning, cache
    "llmevo.experiments",  # reproduction internals: plans, assembly, ...
    "llmevo.evolve",  # search internals: engine, sampler, objective, champion, report, ...
)
CLI_ALLOWED = (
    "llmevo.train.device",
    "llmevo.experiments",  # the package: reproduce, ReproductionRequest
    "llmevo.experiments.pipeline",
    "llmevo.runner.presets",
    "llmevo.evolve",  # the package: run, EvolutionSettings, search_space
    "llmevo.evolve.pipeline",
    "llmevo.evolve.space",  # the SearchSpace type, for printing it
    "llmevo.experiments.sections",  # the requests' sections: the options are generated from their fields
    "llmevo.train.tracking",  # track_external: an external comparison's runs to the run section's tracker
)
# heavy libraries a command may only import inside its function (``llmevo --help`` stays fast)
HEAVY = ("torch", "optuna", "numpy", "scipy", "matplotlib", "tokenizers", "sqlalchemy", "arxiv",
         "requests")


def cli_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports by ``llmevo.cli.*`` of pipeline internals (anywhere in the file)."""
    return sorted(
        f"{name} imports {target}"
        for name, targets in graph.items()
        if layer_of(name) == layer_of("llmevo.cli")
        for target in targets
        if target not in CLI_ALLOWED
        and any(target == prefix or target.startswith(prefix + ".") for prefix in CLI_FORBIDDEN)
    )


def module_level_imports(path: Path) -> set[str]:
    """Top-level packages imported by the statements of the module body (not inside
    functions, classes, or ``if TYPE_CHECKING:``)."""
    found: set[str] = set()
    body = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while body:
        node = body.pop(0)
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            body.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            body.extend(node.body + node.orelse + node.finalbody)
    return found


def test_cli_reaches_pipelines_only_through_their_public_functions():
    assert cli_violations(GRAPH) == []


def test_cli_modules_import_no_heavy_library_at_module_level():
    files = module_files()
    heavy = {
        name: sorted(module_level_imports(path) & set(HEAVY))
        for name, path in files.items()
        if layer_of(name) == layer_of("llmevo.cli")
    }
    assert {name: found for name, found in heavy.items() if found} == {}


def test_cli_checks_catch_internals_and_module_level_torch(tmp_path):
    graph = _package(
        tmp_path,
        {
            "llmevo/__init__.py": "",
            "llmevo/cli/__init__.py": "",
            "llmevo/cli/run.py": (
                "from typing import TYPE_CHECKING\n"
                "import torch\n"
                "if TYPE_CHECKING:\n    import numpy\n"
                "from llmevo.experiments import pipeline\n"
                "def f():\n    import optuna\n    from llmevo.evolve.workers import run_workers\n"
            ),
            "llmevo/cli/fine.py": "from llmevo.evolve import run\nfrom llmevo.train.device import x\n",
            "llmevo/experiments/__init__.py": "",
            "llmevo/experiments/pipeline.py": "",
            "llmevo/evolve/__init__.py": "",
            "llmevo/evolve/workers.py": "",
            "llmevo/train/__init__.py": "",
            "llmevo/train/device.py": "",
        },
    )
    assert cli_violations(graph) == ["llmevo.cli.run imports llmevo.evolve.workers"]
    assert module_level_imports(tmp_path / "llmevo/cli/run.py") & set(HEAVY) == {"torch"}


# --- the checker itself, on hand-made packages ---------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(tmp_path)


def test_checker_finds_a_cycle_through_a_lazy_import(tmp_path):
    graph = _package(
        tmp_path,
        {
            "llmevo/__init__.py": "",
            "llmevo/registry.py": "def f():\n    import llmevo.components\n",
            "llmevo/components/__init__.py": "from llmevo.components import rope\n",
            "llmevo/components/rope.py": "from llmevo.registry import f\n",
        },
    )
    assert graph["llmevo.components"] == {"llmevo.components.rope"}
    assert cycles(graph) == [["llmevo.components", "llmevo.components.rope", "llmevo.registry"]]


def test_checker_resolves_relative_imports_and_finds_no_cycle_in_a_chain(tmp_path):
    graph = _package(
        tmp_path,
        {
            "llmevo/__init__.py": "",
            "llmevo/a.py": "from . import b\n",
            "llmevo/b.py": "from .c import thing\n",
            "llmevo/c.py": "thing = 1\n",
        },
    )
    assert graph["llmevo.a"] == {"llmevo.b"} and graph["llmevo.b"] == {"llmevo.c"}
    assert cycles(graph) == []


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("llmevo.errors", 0),
        ("llmevo.registry", 1),
        ("llmevo.model.blt.core", 6),
        ("llmevo.catalog", 8),
        ("llmevo.cli.reproduce", 14),
    ],
)
def test_layer_of_uses_the_longest_prefix(module, layer):
    assert layer_of(module) == layer
