"""An external experiment's ladder: the same comparison at each value of a declared size.

The experiment file declares which parameter is the size (``[ladder]``: ``param``, the
default ``values``, and ``compute``, the metric each run reports as its training compute;
``external.Ladder``). ``run_external_ladder`` runs, for each size in ascending order, the
comparison ``reproduce --experiment`` would run with that size given to both arms (both arms
tuned alike on the file's grid under the tuning seeds, then paired over the report seeds;
every run through the external arm cache, so a ladder killed and run again reruns nothing
that finished), writes each rung's artifact (``rung-<param>-<size>.json``, a complete
``llmevo.external/1`` artifact) into the ladder's folder, and then ``ladder.json`` and a
README: the across-rung statistics of ``eval.scaling.ladder_statistics``, the very fit the
built-in ladders use (per arm a loss-vs-compute fit, the per-rung change with its interval,
the gap's trend with the rung-scatter interval of ``rung_level_trend`` and its
leave-one-rung-out check, the compute multiplier, the projection, the ladder class), recorded
through the built-in ladder's own records (``experiments.ladder.across_rung_records``).

The x axis is the declared ``compute`` metric (the baseline's mean over the report seeds at
each rung; it must grow with the size), or the size itself when none is declared (the file
says which). A ladder's fits are power laws in a loss: the decisive metric must be
lower-is-better and positive. Rungs are numbered 0..K-1 in size order in the statistics
(``trend_fit.rungs``); each rung's record names its size.

**The ladder file** (``LADDER_SCHEMA`` = ``"llmevo.external-ladder/1"``): ``schema``,
``name``, ``created``, ``command``, ``experiment`` (file, sha256, metric, direction),
``size`` (``param``, ``values``, ``x_axis``), ``arms`` (each arm's label and settings),
``margin_percent``, ``rungs`` (per size: ``size``, ``compute``, ``seeds``, the paired
``baseline`` and ``method`` values, ``delta_percent`` with ``ci_low``/``ci_high``,
``classification``, ``noise_floor_percent``, each arm's tuned value, ``artifact`` and its
``artifact_sha256``), then the across-rung records (``fits``, ``gap_slope_per_decade``,
``trend``, ``trend_fit``, ``compute_multiplier``, ``projection``, ``ladder_class``,
``transfers``, ``bootstrap``), ``wall_seconds`` (what its runs cost, cached ones at their
recorded time), ``wall`` (``experiment_file.wall_summary`` and ``elapsed_s``) and
``provenance`` (as a comparison's).

**Publishing** (``publish``): both checkouts (llmevo's and the experiment's) must be clean
when the ladder starts; their state is read once then and recorded in every rung, since the
rungs' own artifacts dirty the tree as they are written. The folder is
``docs/external/<name>/ladder-<param>-<comparison>/`` (else under ``runs/external``). A
ladder's rungs are not members of the experiment's Holm family (``external_family``), as the
built-in ladders' rungs are not members of llmevo's.

Public API: ``LADDER_SCHEMA``, ``ExternalLadderRequest``, ``ExternalLadderPlan``,
``plan_external_ladder``, ``run_external_ladder``, ``ladder_readme``.
"""

from __future__ import annotations

import datetime
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from llmevo.artifacts.io import check_output_dir, write_json_atomic, write_text_atomic
from llmevo.artifacts.provenance import library_versions
from llmevo.digests import sha256_file
from llmevo.errors import ConfigError, LlmevoError
from llmevo.eval.scaling import RungResult, ladder_statistics
from llmevo.experiments.experiment_file import (
    LoadedExperiment,
    Value,
    check_ladder_values,
    load_experiment,
    parse_settings,
    publish_folder,
    wall_summary,
)
from llmevo.experiments.external import (
    ExternalPlan,
    ExternalRequest,
    RunEvent,
    arm_settings,
    check_publishable_source,
    check_source_unchanged,
    compare_external,
    comparison_stem,
    plan_external,
    shared_settings,
    source_state,
)
from llmevo.experiments.ladder import across_rung_records

LADDER_SCHEMA = "llmevo.external-ladder/1"


class ExternalLadderRequest(ExternalRequest):
    """A ladder of one external comparison: ``rungs`` (sizes of the declared size parameter;
    None: the file's ``[ladder] values``), the rest as ``external.ExternalRequest`` (the same
    fields and sections, the same refusals); ``out`` is the ladder's folder; ``resamples`` the
    across-rung bootstrap's."""

    rungs: list[Value] | None = None
    resamples: int = Field(default=2000, ge=1)


@dataclass(frozen=True)
class ExternalLadderPlan:
    """A checked ladder: its sizes, one planned comparison per size, its folder."""

    request: ExternalLadderRequest
    experiment: LoadedExperiment
    param: str
    sizes: list[Value]
    compute: str | None
    folder: Path
    labels: dict[str, str]
    rungs: list[ExternalPlan]


def _with_size(settings: str, param: str, size: Value) -> str:
    return f"{settings},{param}={json.dumps(size)}" if settings else f"{param}={json.dumps(size)}"


def plan_external_ladder(request: ExternalLadderRequest) -> ExternalLadderPlan:
    """Every rung's comparison checked before the first run (one ``ConfigError`` line each):
    the declared size, the sizes, the arms (which may not set the size), the outputs, and
    with ``publish`` clean checkouts."""
    loaded = load_experiment(request.experiment)
    spec = loaded.spec
    sizes = check_ladder_values(spec, request.rungs if request.rungs is not None
                                else (spec.ladder.values if spec.ladder else []), "--rungs")
    assert spec.ladder is not None
    param = spec.ladder.param
    for option, text in (("--baseline", request.baseline), ("--method", request.method)):
        if param in parse_settings(text, spec, option):
            raise ConfigError(f"{option} sets {param}, the ladder's size; --rungs chooses it at each rung")
    run = request.run
    if run.publish:
        check_publishable_source(loaded, run.repo_root, run.allow_dirty)
    source = source_state(loaded, run.repo_root)  # read once, before any rung writes

    def rung_request(size: Value, out: Path | None) -> ExternalRequest:
        command = f"{request.run.command or 'python: run_external_ladder'} ({param}={size})"
        return ExternalRequest(**{
            **{name: getattr(request, name) for name in ExternalRequest.model_fields},
            "baseline": _with_size(request.baseline, param, size), "method": _with_size(request.method, param, size),
            "out": out, "run": request.run.model_copy(update={"command": command})})

    baseline, method, labels = arm_settings(spec, _with_size(request.baseline, param, sizes[0]),
                                            _with_size(request.method, param, sizes[0]))
    shared = {key: value for key, value in shared_settings(baseline, method).items() if key != param}
    root = publish_folder(loaded, request.published_dir, run.repo_root) if run.publish else request.runs_dir
    folder = request.out or root / spec.name / f"ladder-{param}-{comparison_stem(labels, shared)}"
    check_output_dir(folder, "--out")
    rungs = [plan_external(rung_request(size, folder / f"rung-{param}-{size}.json"), check_publish=False,
                           source=source) for size in sizes]
    return ExternalLadderPlan(request=request, experiment=loaded, param=param, sizes=sizes,
                              compute=spec.ladder.compute, folder=folder, labels=labels, rungs=rungs)


def _no_family(path: Path, data: Mapping[str, Any]) -> None:
    """A ladder's rungs are not members of the experiment's family (module docstring)."""
    return None


RungEvent = Callable[[Value, dict | None], None]


def _rung_compute(plan: ExternalLadderPlan, size: Value, artifact: Mapping[str, Any]) -> float:
    if plan.compute is None:
        return float(size)
    values = [row["baseline"].get(plan.compute) for row in artifact["per_seed"]]
    if not values or any(value is None for value in values):
        raise ConfigError(f"rung {plan.param}={size}: the runs report no {plan.compute!r}, the compute the "
                          f"[ladder] table declares (they report {', '.join(artifact['per_seed'][0]['baseline'])})")
    return math.fsum(values) / len(values)


def run_external_ladder(plan: ExternalLadderPlan, base_env: Mapping[str, str],
                        on_run: RunEvent = lambda record: None,
                        on_rung: RungEvent = lambda size, artifact: None,
                        created: str | None = None) -> dict[str, Any]:
    """Run every rung (ascending size), then write ``ladder.json`` and its README into the
    ladder's folder; return the ladder file. ``on_rung(size, None)`` as a rung starts,
    ``on_rung(size, artifact)`` as it ends. A rung without a verdict (a failed report run)
    stops the ladder after its artifact is written: one line; the finished runs are cached."""
    request, spec = plan.request, plan.experiment.spec
    started = time.perf_counter()
    rows, results, all_runs = [], [], []

    def checked(record: dict) -> None:
        # the declared compute is known missing at the first run that reports: refused there, before
        # any rung goes on (its run cached, no rung file written)
        if plan.compute is not None and record.get("metrics") is not None and plan.compute not in record["metrics"]:
            raise ConfigError(f"the runs report no {plan.compute!r}, the compute the [ladder] table declares "
                              f"(a run reported {', '.join(sorted(record['metrics']))}); report it, or change "
                              "[ladder] compute")
        on_run(record)

    for index, (size, rung) in enumerate(zip(plan.sizes, plan.rungs, strict=True)):
        on_rung(size, None)
        artifact = compare_external(rung, base_env, checked, created, family=_no_family)
        all_runs += artifact["runs"]
        on_rung(size, artifact)
        verdict = artifact["verdict"]
        if verdict is None:
            raise LlmevoError(f"rung {plan.param}={size}: no verdict ({artifact['verdict_withheld']}); the "
                              f"ladder needs every rung: {rung.artifact} records the runs, and the command "
                              "run again reruns only what did not finish")
        compute = _rung_compute(plan, size, artifact)
        if rows and not compute > rows[-1]["compute"]:
            raise ConfigError(f"the compute {plan.compute!r} does not grow with {plan.param}: {rows[-1]['compute']:.4g} "
                              f"at {plan.param}={rows[-1]['size']}, {compute:.4g} at {plan.param}={size}")
        per_seed = artifact["per_seed"]
        baseline = tuple(float(row["baseline"][spec.metric]) for row in per_seed)
        method = tuple(float(row["method"][spec.metric]) for row in per_seed)
        change = artifact["statistics"][spec.metric]["paired_relative_change_percent"]
        results.append(RungResult(index, compute, baseline, method, verdict.get("classification")))
        rows.append({
            "size": size, "compute": compute, "seeds": [row["seed"] for row in per_seed],
            "baseline": list(baseline), "method": list(method), "delta_percent": change["mean"],
            "ci_low": change.get("ci_low"), "ci_high": change.get("ci_high"),
            "classification": verdict.get("classification"), "noise_floor_percent": verdict.get("noise_floor_percent"),
            "tuned": {arm: (artifact[arm]["tuning"] or {}).get("chosen") for arm in ("baseline", "method")},
            "artifact": rung.artifact.name,
            "artifact_sha256": sha256_file(rung.artifact),
        })
    statistics = ladder_statistics(results, resamples=request.resamples)
    records = _jsonable(across_rung_records(statistics))
    first = plan.rungs[0]
    ladder = {
        "schema": LADDER_SCHEMA, "name": spec.name,
        "created": created or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": request.run.command or "",
        "experiment": {"file": str(plan.experiment.path), "sha256": plan.experiment.sha256,
                       "metric": spec.metric, "direction": spec.direction},
        "size": {"param": plan.param, "values": list(plan.sizes),
                 "x_axis": (f"the metric {plan.compute!r} the runs report (the baseline's mean over the report "
                            "seeds)") if plan.compute else f"the size parameter {plan.param} itself"},
        "arms": {arm: {"label": plan.labels[arm],
                       "settings": {k: v for k, v in getattr(first, arm).items() if k != plan.param}}
                 for arm in ("baseline", "method")},
        "margin_percent": request.margin, "rungs": rows, **records,
        # what the runs cost, cached ones at the time they took when they ran; ``wall`` splits it
        "wall_seconds": wall_summary(all_runs)["total_s"], "wall": {**wall_summary(all_runs),
                                                                    "elapsed_s": time.perf_counter() - started},
        "provenance": {"files": plan.experiment.files,
                       "git": {key: first.source[key] for key in ("commit", "dirty", "files_dirty")},
                       "llmevo": first.source["llmevo"],
                       "published": {"allow_dirty": request.run.allow_dirty} if request.run.publish else None,
                       "libraries": library_versions()},
    }
    changed = check_source_unchanged(plan.experiment, first.source, request.run.repo_root, request.run.publish,
                                     request.run.allow_dirty, plan.folder / "ladder.json")  # before any write
    if changed is not None:
        ladder["provenance"]["code_changed"] = changed
    plan.folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(plan.folder / "ladder.json", ladder)
    write_text_atomic(plan.folder / "README.md", ladder_readme(ladder))
    return ladder


def _jsonable(value: Any) -> Any:
    """Records (pydantic) inside dicts and lists, as JSON values."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def _interval(record: Mapping[str, Any], digits: int = 2) -> str:
    if record.get("value") is None:
        return "—"
    low, high = record.get("low"), record.get("high")
    bounds = "" if low is None or high is None else f" [{low:+.{digits}f}, {high:+.{digits}f}]"
    return f"{record['value']:+.{digits}f}{bounds}"


def ladder_readme(ladder: Mapping[str, Any]) -> str:
    """A short markdown report of an external ladder file."""
    size, metric = ladder["size"], ladder["experiment"]["metric"]
    arms = ladder["arms"]
    lines = [f"# {ladder['name']}: {arms['method']['label']} vs {arms['baseline']['label']} across "
             f"{size['param']}", "",
             f"Decisive metric `{metric}` (lower is better); x axis: {size['x_axis']}. Each rung is a full "
             "comparison (its artifact linked); the across-rung fits are llmevo's ladder fits "
             "(`eval.scaling`).", "",
             f"| {size['param']} | compute | baseline | method | Δ% [95% CI] | class | artifact |",
             "|---:|---:|---:|---:|---|---|---|"]
    for row in ladder["rungs"]:
        mean_b = math.fsum(row["baseline"]) / len(row["baseline"])
        mean_m = math.fsum(row["method"]) / len(row["method"])
        interval = "" if row["ci_low"] is None else f" [{row['ci_low']:+.2f}, {row['ci_high']:+.2f}]"
        lines.append(f"| {row['size']} | {row['compute']:.3g} | {mean_b:.4f} | {mean_m:.4f} | "
                     f"{row['delta_percent']:+.2f}{interval} | {row['classification']} | "
                     f"[{row['artifact']}]({Path(row['artifact']).with_suffix('.md').name}) |")
    trend = ladder["trend_fit"]
    lines += ["", f"**Ladder class:** {ladder['ladder_class']}. **Trend** of Δ% per decade of compute: "
                  f"{_interval(trend['slope'])} (rung-level fit, {trend['df']} df), trend of record "
                  f"**{ladder['trend']}**; seed-only slope {_interval(ladder['gap_slope_per_decade'])}.",
              "", "| arm | fit | alpha [95%] |", "|---|---|---|"]
    for arm in ("baseline", "method"):
        fit = ladder["fits"][arm]
        lines.append(f"| {arm} | {fit['form']} | {_interval(fit['alpha_interval'], 3)} |")
    lines += ["", f"Compute multiplier at the top rung: {_interval(ladder['compute_multiplier'])}; "
                  f"projected Δ% at {ladder['projection']['compute']:.3g} ({ladder['projection']['label']}): "
                  f"{_interval(ladder['projection']['delta_percent'])}.", ""]
    git, own = ladder["provenance"]["git"], ladder["provenance"]["llmevo"]
    lines += [f"Script commit {git['commit']}{' (tree dirty)' if git['dirty'] else ''}; llmevo commit "
              f"{own['commit']}{' (tree dirty)' if own['dirty'] else ''}.", ""]
    return "\n".join(lines)
