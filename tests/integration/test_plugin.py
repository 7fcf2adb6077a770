"""Plugins: a separate distribution registers a component through the ``llmevo.components``
entry-point group with no edit to llmevo. The test builds and pip-installs (``--target``, no
network) a tiny plugin with a LayerScale feed-forward, then, in fresh processes that see it
on ``PYTHONPATH``: ``llmevo components`` names its origin, the contract suite runs over it
(``llmevo components check --plugin``), and a smoke reproduction trains it. A broken plugin
is one line naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from llmevo.catalog import load_plugin
from llmevo.errors import ConfigError
from llmevo.registry import Registry

REPO = Path(__file__).resolve().parents[2]
DIST = "llmevo-layerscale"

COMPONENT = '''
"""LayerScale on the feed-forward branch: ``diag(scale) SwiGLU(x)``, the scale initialised
small (Touvron et al., "Going deeper with Image Transformers", arXiv 2103.17239)."""

from typing import Annotated

import torch
from pydantic import PositiveFloat, PositiveInt
from torch import Tensor, nn

from llmevo.components.base import FeedForward, ModelDims
from llmevo.components.feedforward.swiglu import GatedConfig, SwiGLU
from llmevo.registry import Paper, Scaling, StrictModel, register


class LayerScaleConfig(StrictModel):
    hidden: Annotated[PositiveInt, Scaling.WIDTH] = 192  # follows the width on the size dial
    init: PositiveFloat = 0.1


@register(
    slot="feedforward",
    name="layerscale_swiglu",
    config=LayerScaleConfig,
    paper=Paper(arxiv_id="2103.17239", title="Going deeper with Image Transformers",
                url="https://arxiv.org/abs/2103.17239", organization="Facebook AI; Sorbonne University"),
    ablation="swiglu",
    implementation_status="component_only",
)
class LayerScaleSwiGLU(FeedForward):
    def __init__(self, config: LayerScaleConfig, dims: ModelDims):
        super().__init__()
        self.swiglu = SwiGLU(GatedConfig(hidden=config.hidden), dims)
        self.scale = nn.Parameter(torch.full((dims.d_model,), config.init))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * self.swiglu(x)  # (B, T, D)
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("plugin-source")
    (source / "llmevo_layerscale").mkdir()
    (source / "llmevo_layerscale" / "__init__.py").write_text("")
    (source / "llmevo_layerscale" / "component.py").write_text(COMPONENT)
    (source / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{DIST}"
        version = "0.1.0"

        [project.entry-points."llmevo.components"]
        layerscale = "llmevo_layerscale.component"

        [tool.setuptools]
        packages = ["llmevo_layerscale"]
        """))
    target = tmp_path_factory.mktemp("plugin-target")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--no-build-isolation", "--target", str(target), str(source)],
                   check=True, capture_output=True, timeout=300)
    return target


def _llmevo(args: list[str], *paths: Path, cwd: Path = REPO, timeout: int = 600):
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([*map(str, paths), str(REPO / "src")])}
    return subprocess.run([sys.executable, "-m", "llmevo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_components_names_the_plugin_as_origin(plugin_path):
    result = _llmevo(["components", "--json"], plugin_path)
    assert result.returncode == 0, result.stderr
    records = {record["name"]: record for record in json.loads(result.stdout)}
    assert records["layerscale_swiglu"]["origin"] == DIST
    assert records["layerscale_swiglu"]["slot"] == "feedforward"
    assert records["rope"]["origin"] == "builtin"


def test_the_contract_suite_runs_over_the_plugin_only(plugin_path):
    result = _llmevo(["components", "check", "--plugin", DIST], plugin_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and " deselected" in summary and "failed" not in summary


def test_check_refuses_a_plugin_that_is_not_installed(plugin_path):
    result = _llmevo(["components", "check", "--plugin", "llmevo-nothing"], plugin_path)
    assert result.returncode == 2
    assert f"--plugin llmevo-nothing: no installed plugin of that name registered a component (plugins: {DIST})" in result.stderr


def test_a_smoke_reproduction_trains_the_plugin_component(plugin_path, tmp_path, data_dir):
    out = tmp_path / "layerscale.json"
    result = _llmevo(["reproduce", "layerscale_swiglu", "--preset", "smoke", "--seed", "42",
                      "--steps", "3", "--device", "cpu", "--threads", "1", "--data-dir", str(data_dir),
                      "--out", str(out), "--no-report"], plugin_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    artifact = json.loads(out.read_text())
    assert artifact["method"]["genome"]["model"]["feedforward"]["name"] == "layerscale_swiglu"
    assert artifact["baseline"]["genome"]["model"]["feedforward"]["name"] == "swiglu"
    assert artifact["method"]["parameters"] == artifact["baseline"]["parameters"] + 2 * 64  # a scale per layer
    assert artifact["setup"]["steps_per_variant"] == 3


def _fake_distribution(folder: Path, name: str, module: str, source: str) -> Path:
    """An installed distribution as importlib.metadata finds it: a dist-info folder."""
    info = folder / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[llmevo.components]\nbroken = {module}\n")
    (folder / f"{module}.py").write_text(source)
    return folder


def test_a_broken_plugin_is_one_line_naming_it(tmp_path):
    broken = _fake_distribution(tmp_path / "site", "llmevo-broken", "llmevo_broken",
                                "import a_module_that_does_not_exist\n")
    result = _llmevo(["components"], broken)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: plugin 'llmevo-broken' (entry point broken = llmevo_broken) failed to load: "
        "ModuleNotFoundError: No module named 'a_module_that_does_not_exist'")


def test_a_plugin_that_exits_on_import_is_one_line_naming_it(tmp_path):
    """sys.exit() in a plugin's import used to end llmevo with the plugin's status and
    nothing on stderr."""
    exits = _fake_distribution(tmp_path / "site", "llmevo-exits", "llmevo_exits", "import sys\nsys.exit(3)\n")
    result = _llmevo(["components"], exits)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.strip() == (
        "error: plugin 'llmevo-exits' (entry point broken = llmevo_exits) failed to load: SystemExit(3)")


@pytest.mark.parametrize(("source", "message"), [
    ("x = 1\n", "registered no component; its module must use llmevo.registry.register"),
    ("raise RuntimeError('boom')\n", "failed to load: RuntimeError: boom"),
    ("import sys\nsys.exit(3)\n", "failed to load: SystemExit(3)"),
    ("raise SystemExit('bye')\n", "failed to load: SystemExit('bye')"),
])
def test_load_plugin_errors_name_the_plugin(tmp_path, monkeypatch, source, message):
    module = f"llmevo_plugin_{abs(hash(source))}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    entry_point = EntryPoint(name="demo", value=module, group="llmevo.components")
    with pytest.raises(ConfigError) as caught:
        load_plugin(entry_point, Registry())
    assert str(caught.value) == f"plugin '{module}' (entry point demo = {module}) {message}"
