"""L1 mechanism diagnostics: run a registered diagnostic over seeds, write its artifact.

A diagnostic builds synthetic tensors from each seed, checks the mechanism against an
exact reference, and returns one row of metrics (floats or booleans). The harness
aggregates the floats into ``{mean, std, n}`` (sample standard deviation) and the booleans
with ``all``, keeps the per-seed floats, and writes the component-diagnostic artifact
(schema v2, the shape of the reference artifact
``2610.21126-rope-relay.component-cpu-seeds42-44.json``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.eval.stats import summarize
from llmevo.registry import StrictModel

if TYPE_CHECKING:
    from llmevo.artifacts.provenance import CodeState
    from llmevo.artifacts.schema import DiagnosticArtifact

SeedRow = dict[str, float | bool]
DIAGNOSTIC_DATASET_REVISION = "llmevo-l1-synthetic-v1"


@dataclass(frozen=True)
class Diagnostic:
    """A registered L1 diagnostic of one component.

    ``run_seed(config, seed, device)`` returns the metrics of one seed, in reporting order.
    It draws its random tensors on the CPU from a generator seeded with ``seed`` and moves
    them to ``device``, so every device starts from the same numbers; exact references in
    float64 are computed on the CPU (MPS has no float64).
    ``modules`` are the implementation files measured (for provenance).
    """

    name: str
    component: str  # the registered component name whose manifest describes the method
    config_cls: type[StrictModel]
    run_seed: Callable[[Any, int, torch.device], SeedRow]
    claim_policy: str
    modules: tuple[object, ...]
    dataset_id: str = "synthetic-formula-tensors"


DIAGNOSTICS: dict[str, Diagnostic] = {}


def register_diagnostic(diagnostic: Diagnostic) -> Diagnostic:
    if diagnostic.name in DIAGNOSTICS:
        raise ConfigError(f"diagnostic '{diagnostic.name}' is registered twice")
    DIAGNOSTICS[diagnostic.name] = diagnostic
    return diagnostic


def get_diagnostic(name: str) -> Diagnostic:
    """A registered diagnostic. Importing this module runs the package's ``__init__``
    first, which imports (and so registers) every diagnostic module."""
    try:
        return DIAGNOSTICS[name]
    except KeyError:
        known = ", ".join(sorted(DIAGNOSTICS))
        if name.endswith(".toml"):  # reproduce, ladder and evolve take FILE.toml; diagnose does not
            raise ConfigError(f"diagnose takes no experiment file ({name}); name a diagnostic ({known}) "
                              "and give its settings as options: llmevo diagnose rope --seeds 42") from None
        raise ConfigError(f"unknown diagnostic '{name}'; known: {known}") from None


def aggregate(rows: Sequence[SeedRow]) -> dict[str, dict[str, float | int] | bool]:
    """Floats -> ``{mean, std, n}`` (sample std, 0 for one seed); booleans -> ``all``."""
    metrics: dict[str, dict[str, float | int] | bool] = {}
    for key in rows[0]:
        values = [row[key] for row in rows]
        if all(isinstance(value, bool) for value in values):
            metrics[key] = all(values)
        else:
            metrics[key] = summarize([float(value) for value in values])
    return metrics


@dataclass
class DiagnosticRun:
    """The measured part of an artifact: configuration, per-seed rows, aggregated metrics."""

    diagnostic: Diagnostic
    configuration: dict[str, Any]
    seeds: list[int]
    per_seed: list[dict[str, Any]]
    metrics: dict[str, Any]
    full_experiment: dict[str, Any] = field(default_factory=dict)


def run_diagnostic(
    name: str,
    seeds: Sequence[int],
    overrides: dict[str, Any] | None = None,
    device: torch.device = torch.device("cpu"),
) -> DiagnosticRun:
    """Run diagnostic ``name`` once per seed on ``device`` and aggregate."""
    if not seeds:
        raise ConfigError("diagnose: expected at least one seed")
    diagnostic = get_diagnostic(name)
    spec = full_registry().find(diagnostic.component)
    del spec  # looked up only to fail early on an unregistered component
    try:
        config = diagnostic.config_cls.model_validate(overrides or {})
    except Exception as error:  # pydantic ValidationError -> one line
        raise ConfigError(f"diagnostic '{name}': {error}".splitlines()[0]) from None
    rows = [diagnostic.run_seed(config, seed, device) for seed in seeds]
    per_seed = [
        {"seed": seed, **{k: float(v) for k, v in row.items() if not isinstance(v, bool)}}
        for seed, row in zip(seeds, rows, strict=True)
    ]
    return DiagnosticRun(
        diagnostic=diagnostic,
        configuration=config.model_dump(mode="json"),
        seeds=list(seeds),
        per_seed=per_seed,
        metrics=aggregate(rows),
    )


def default_artifact_path(name: str, seeds: Sequence[int], accelerator: str = "cpu", *,
                          publish: bool = False) -> Path:
    """``runs/foundation-models/<arxiv>-<name>/metrics/component-<acc>-seeds<a>-<b>.json``;
    published (``publish``), the same path under ``docs/`` instead of ``runs/``."""
    diagnostic = get_diagnostic(name)
    manifest = full_registry().find(diagnostic.component).manifest
    arxiv = manifest.paper.arxiv_id if manifest.paper else "no-arxiv"
    seed_part = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    folder = Path("docs" if publish else "runs") / "foundation-models" / f"{arxiv}-{name}" / "metrics"
    return folder / f"component-{accelerator}-seeds{seed_part}.json"


def dataset_fingerprint(run: DiagnosticRun) -> str:
    """sha256 of what determines the synthetic tensors: generator revision, config, seeds."""
    payload = {
        "dataset": run.diagnostic.dataset_id,
        "revision": DIAGNOSTIC_DATASET_REVISION,
        "configuration": run.configuration,
        "seeds": run.seeds,
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def build_artifact(
    run: DiagnosticRun,
    *,
    command: str,
    artifact_path: Path,
    repo_root: Path,
    runner_file: Path,
    accelerator: str = "CPU",
    checkpoint: str | None = None,
    extra_modules: Sequence[object] = (),
    allow_dirty: bool | None = None,
    publish: bool = False,
    since: CodeState | None = None,
) -> DiagnosticArtifact:
    """The component-diagnostic artifact (schema v2, validated), key order as in the reference.
    ``allow_dirty`` is recorded in provenance for a published artifact (None: unpublished);
    ``since``: the code state when the run started, compared with the code now
    (``collect_provenance``: a change refuses ``publish``)."""
    from llmevo.artifacts.provenance import collect_provenance, module_files
    from llmevo.artifacts.schema import DiagnosticArtifact, validate_artifact

    diagnostic = run.diagnostic
    manifest = full_registry().find(diagnostic.component).manifest
    component_spec = full_registry().find(diagnostic.component)
    files = module_files([component_spec.cls, *diagnostic.modules, run_diagnostic, *extra_modules])
    fingerprint = dataset_fingerprint(run)
    provenance = collect_provenance(
        command=command,
        implementation_files=files,
        runner_file=runner_file,
        dataset_fingerprint=fingerprint,
        accelerator=accelerator,
        artifact_path=artifact_path.as_posix(),
        repo_root=repo_root,
        allow_dirty=allow_dirty,
        publish=publish,
        since=since,
    )
    full_experiment = run.full_experiment or {
        "status": "not_run (pass --full-experiment --checkpoint DIR where one exists)",
        "review_done": False,
    }
    body = {
        "schema_version": 2,
        "method": diagnostic.name,
        "manifest_ref": manifest.manifest_ref,
        "adapter": None,
        "implementation_status": manifest.implementation_status,
        "diagnostic_only": True,
        "promotion_eligible": manifest.baseline,
        "evolve_integrated": manifest.evolve_integrated,
        "measured_locally": True,
        "evaluation_tier": "l1_mechanism",
        "seeds": run.seeds,
        "evaluation_protocol": {
            "tier": "l1_mechanism",
            "formal_comparison": False,
            "claim_policy": diagnostic.claim_policy,
            "seeds": run.seeds,
        },
        "dataset": {
            "id": diagnostic.dataset_id,
            "revision": DIAGNOSTIC_DATASET_REVISION,
            "checkpoint": checkpoint,
            "capability_benchmark": False,
        },
        "configuration": run.configuration,
        "metrics": run.metrics,
        "per_seed": run.per_seed,
        "provenance": provenance,
        "full_experiment": full_experiment,
    }
    artifact = validate_artifact(body, artifact_path.as_posix())
    assert isinstance(artifact, DiagnosticArtifact)
    return artifact


def write_artifact(artifact: DiagnosticArtifact, path: Path) -> None:
    """Validate against the schema and write atomically (nothing is written if invalid)."""
    from llmevo.artifacts.io import save_artifact

    save_artifact(artifact, path)
