"""``llmevo new component``: in a temporary copy of the source tree, the scaffold writes the
module, a failing reference test and its line in the components table; the contract suite picks the new
component up (and fails until it is written); every refusal leaves the tree as it was."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_cli

from llmevo.papers.ledger import Ledger, Queued, make_entry, save_ledger

REPO = Path(__file__).resolve().parents[2]
NAME = "layerscale_demo"


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "src" / "llmevo", root / "src" / "llmevo", ignore=ignore)
    shutil.copytree(REPO / "tests" / "contract", root / "tests" / "contract", ignore=ignore)
    shutil.copy(REPO / "tests" / "conftest.py", root / "tests" / "conftest.py")
    return root


def _ledger(tmp_path: Path) -> Path:
    path = tmp_path / "papers.json"
    save_ledger(Ledger(papers=[make_entry({
        "arxiv_id": "2103.17239", "title": "Going deeper with Image Transformers",
        "authors": ["Hugo Touvron", "Matthieu Cord"], "year": 2021, "categories": ["cs.CV"],
        "track": "block", "source": "hand", "decision": Queued(), "why": "LayerScale."})]), path)
    return path


def _snapshot(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("args", "message"), [
    (["rope", "--slot", "position", "--paper", "2103.17239"], "component 'rope' is already registered"),
    ([NAME, "--slot", "mixer", "--paper", "2103.17239"], "--slot mixer: unknown slot; slots are: position"),
    ([NAME, "--slot", "kv_cache", "--paper", "2103.17239"], "a kv_cache component is written by hand"),
    ([NAME, "--slot", "feedforward", "--paper", "2410.05258"],
     "paper 2410.05258 is not in the ledger; add it first with 'llmevo papers add 2410.05258"),
    (["Bad-Name", "--slot", "feedforward", "--paper", "2103.17239"], "must be a lowercase Python identifier"),
    # a keyword would write 'from llmevo.components.feedforward import class', which breaks the package
    (["class", "--slot", "feedforward", "--paper", "2103.17239"], "component name 'class' is a Python keyword"),
    (["import", "--slot", "position", "--paper", "2103.17239"], "component name 'import' is a Python keyword"),
    (["abc\n", "--slot", "feedforward", "--paper", "2103.17239"], "must be a lowercase Python identifier"),
    (["名前", "--slot", "feedforward", "--paper", "2103.17239"], "must be a lowercase Python identifier"),
])
def test_refusals_exit_2_and_write_nothing(tmp_path, capsys, args, message):
    root, ledger = _tree(tmp_path), _ledger(tmp_path)
    before = _snapshot(root)
    assert run_cli(["new", "component", *args, "--ledger", str(ledger), "--root", str(root)]) == 2
    assert message in capsys.readouterr().err
    assert _snapshot(root) == before


def test_an_existing_module_file_is_refused(tmp_path, capsys):
    root, ledger = _tree(tmp_path), _ledger(tmp_path)
    (root / "src/llmevo/components/feedforward" / f"{NAME}.py").write_text("# someone's draft\n")
    before = _snapshot(root)
    assert run_cli(["new", "component", NAME, "--slot", "feedforward", "--paper", "2103.17239",
                    "--ledger", str(ledger), "--root", str(root)]) == 2
    assert f"{NAME}.py already exists" in capsys.readouterr().err
    assert _snapshot(root) == before


def test_the_scaffold_registers_and_the_contract_suite_fails_until_it_is_written(tmp_path):
    root, ledger = _tree(tmp_path), _ledger(tmp_path)
    assert run_cli(["new", "component", NAME, "--slot", "feedforward", "--paper", "2103.17239",
                    "--ledger", str(ledger), "--root", str(root)]) == 0
    module = (root / "src/llmevo/components/feedforward" / f"{NAME}.py").read_text()
    assert 'arxiv_id="2103.17239"' in module and 'title="Going deeper with Image Transformers"' in module
    assert 'ablation="swiglu"' in module and "class LayerscaleDemo(FeedForward):" in module
    init = (root / "src/llmevo/components/__init__.py").read_text()
    # declared after the slot's last line of the components table
    assert ('    ("feedforward", "relu2", "feedforward.relu2"),\n'
            f'    ("feedforward", "{NAME}", "feedforward.{NAME}"),\n    ("norm", ') in init
    reference = root / "tests" / "reference" / f"test_{NAME}_reference.py"
    assert "pytest.fail(" in reference.read_text()

    env = {**os.environ, "PYTHONPATH": str(root / "src"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfp", "-k", NAME,
         "tests/contract", str(reference.relative_to(root))],
        cwd=root, env=env, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output  # tests ran, and failed
    assert f"FAILED tests/contract/test_component_contract.py::test_forward_backward_finite[feedforward:{NAME}]" in output
    assert f"NotImplementedError: {NAME}: implement arXiv 2103.17239 here" in output
    assert f"Failed: write the reference test for {NAME}" in output
    # nothing about it passes yet but the size declarations, which its empty config has none of
    passed = [line for line in output.splitlines() if line.startswith("PASSED")]
    assert passed == [f"PASSED tests/contract/test_component_contract.py::"
                      f"test_every_integer_field_declares_how_it_scales[feedforward:{NAME}]"], output
