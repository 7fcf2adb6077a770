"""The contract suite as a command: ``llmevo components check [--plugin DIST]``.

The suite is ``tests/contract`` of llmevo's source tree (it ships with the repository, as
its tests do, not with a wheel); it runs in a pytest process of its own over the registry
this process sees, installed plugins included. ``--plugin DIST`` (a pytest option of
``tests/conftest.py``) keeps only the tests of the components whose origin is DIST.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llmevo.catalog import full_registry
from llmevo.errors import ConfigError

SOURCE_TREE = Path(__file__).resolve().parents[2]


def contract_suite(tree: Path = SOURCE_TREE) -> Path:
    suite = tree / "tests" / "contract"
    if not (suite / "test_component_contract.py").is_file():
        raise ConfigError(f"the contract suite is not at {suite}: it ships with llmevo's source "
                          "tree; install llmevo from a checkout (pip install -e .)")
    return suite


def plugin_origins() -> list[str]:
    """The distributions of the installed plugins that registered components."""
    return sorted({spec.origin for spec in full_registry().all()} - {"builtin"})


def contract_command(plugin: str | None, tree: Path = SOURCE_TREE) -> list[str]:
    """The pytest command of the suite (checked: a named plugin must be installed)."""
    suite = contract_suite(tree)
    if plugin is not None and plugin not in plugin_origins():
        known = ", ".join(plugin_origins()) or "none installed"
        raise ConfigError(f"--plugin {plugin}: no installed plugin of that name registered a "
                          f"component (plugins: {known})")
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rf", str(suite),
            *(["--plugin", plugin] if plugin else [])]


def run_contract_suite(plugin: str | None, tree: Path = SOURCE_TREE) -> int:
    """Run the suite; pytest's exit status."""
    return subprocess.run(contract_command(plugin, tree), cwd=tree).returncode
