"""A warm smoke reproduction with ``--no-report`` imports neither matplotlib (reports are not
drawn) nor ``torch._dynamo`` (1.3 s: the first operation on the meta device imports it, and
the memory estimate and the planning checks build their skeletons on the CPU instead), nor
Optuna (no space is tuned); nor the other commands' CLI modules (the data downloader's HTTP
stack with them), the components and architectures its arms do not name (the registry imports
a declared component on first lookup), the genome comparison, the post-training pipeline or
checkpoint saving (LOG, 2026-12-05, seventeenth session). Checked on ``sys.modules`` of a
fresh interpreter, never by timing: ``llmevo bench --fixed-costs`` measures the time (LOG,
2026-12-04).

The first run fills this session's arm cache (or finds it filled); the second, the one
checked, must train nothing: its artifact's cache block lists the seed as loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
COMMAND = ["reproduce", "rope", "--preset", "smoke", "--seed", "42", "--no-report", "--threads", "1"]
NEVER = ("matplotlib", "torch._dynamo", "optuna", "llmevo.reports.plots",
         # the other commands (llmevo.cli.COMMAND_MODULES)
         "llmevo.cli.artifacts", "llmevo.cli.bench", "llmevo.cli.components", "llmevo.cli.data",
         "llmevo.cli.evolve", "llmevo.cli.export", "llmevo.cli.inference", "llmevo.cli.ladder",
         "llmevo.cli.new", "llmevo.cli.papers", "llmevo.cli.reports", "llmevo.cli.verdict",
         "llmevo.data.fetch",
         # components and architectures the arms (rope vs learned on llama_modern) do not name
         "llmevo.components.position.alibi", "llmevo.components.attention.mla",
         "llmevo.components.attention.diff_attn", "llmevo.components.feedforward.moe",
         "llmevo.components.optim.muon", "llmevo.components.optim.soap",
         "llmevo.components.optim.adam_mini", "llmevo.components.post_training.dpo",
         "llmevo.components.post_training.grpo", "llmevo.components.kvcache.rope_relay",
         "llmevo.components.data.mixture", "llmevo.model.blt",
         # what other kinds of reproduction use
         "llmevo.experiments.genome_comparison", "llmevo.experiments.post_training",
         "llmevo.inference.checkpoint")

CHECKED = r"""
import json, runpy, sys
out, sys.argv = sys.argv[1], ["llmevo", *sys.argv[2:]]
try:
    runpy.run_module("llmevo", run_name="__main__")
    code = 0
except SystemExit as error:
    code = error.code or 0
with open(out, "w") as handle:
    json.dump({"code": code, "modules": sorted(sys.modules)}, handle)
"""


def test_a_warm_smoke_reproduction_imports_only_what_it_runs(workdir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    first = subprocess.run([sys.executable, "-m", "llmevo", *COMMAND, "--out", "cold.json"],
                           capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    second = subprocess.run([sys.executable, "-c", CHECKED, "modules.json", *COMMAND, "--out", "warm.json"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    report = json.loads((workdir / "modules.json").read_text())
    assert report["code"] == 0
    artifact = json.loads((workdir / "warm.json").read_text())
    assert artifact["cache"]["baseline"]["report_seeds"] == [42]  # warm: nothing trained
    assert artifact["cache"]["method"]["report_seeds"] == [42]
    imported = [name for name in report["modules"]
                if any(name == never or name.startswith(f"{never}.") for never in NEVER)]
    assert imported == []
    assert {"torch", "llmevo.skeleton", "llmevo.cli.reproduce", "llmevo.components.position.rope",
            "llmevo.components.position.learned", "llmevo.model.transformer"} <= set(report["modules"])  # the control


def test_each_command_is_registered_by_the_module_the_cli_imports_for_it() -> None:
    """``llmevo.cli.COMMAND_MODULES`` (a run imports only its command's module) against what
    the modules register: every command and group of the full application is in the table
    under the module whose code defines it, and every module under ``llmevo/cli`` whose source
    registers a command (read as text, not imported) is one of the table's."""
    import llmevo.cli as cli

    application = cli.app  # every command module imported
    registered = {info.name or info.callback.__name__: info.callback.__module__
                  for info in application.registered_commands}
    for group in application.registered_groups:
        members = [info.callback.__module__ for info in group.typer_instance.registered_commands]
        registered[group.name] = members[0]
    assert {name: f"llmevo.cli.{module}" for name, module in cli.COMMAND_MODULES.items()} == registered
    registering = {path.stem for path in (SRC / "llmevo" / "cli").glob("*.py")
                   if "@app.command(" in path.read_text() or "app.add_typer(" in path.read_text()}
    assert registering == set(cli.COMMAND_MODULES.values())
