"""External experiments: llmevo's paired protocol around anyone's training command.

A researcher's own script (one that does not import llmevo) is declared in a small TOML
file; ``run_external`` runs a baseline and a method arm of it through the same protocol a
built-in reproduction follows: the same lr grid under the same tuning seeds for both arms
(equal budget), report seeds disjoint from the tuning seeds, paired statistics and the
four-class verdict of ``llmevo.eval.stats``, an arm cache, and provenance.

**The experiment file** (``experiments.experiment_file``: the loader, one run, the cache and
``run_many``; every key, placeholder and way of reading a metric is documented in
docs/guide/experiment-file.md) declares the command, its parameters (declared and derived),
the metric and how it is read. A run that exits nonzero, outlives the timeout (its whole
process group is killed) or reports no usable metric is a *failed run*: one line, recorded,
never an exception. A failed tuning run removes its grid point; a failed report run withholds
the verdict. A successful run is cached under its key (``experiment_file.run_key``) with the
time it took, so an interrupted command resumes where it stopped and a cached run counts at
the time it cost when it ran.

**The artifact** (``SCHEMA`` = ``"llmevo.external/1"``), a JSON object:

- ``schema``, ``name``, ``created`` (UTC ISO time), ``command`` (the llmevo command line);
- ``experiment``: ``file``, ``sha256`` (of the TOML), ``command``, ``files``, ``metric``,
  ``direction``, ``read`` (the ``[read]`` table), ``params`` (the declared defaults), ``derived``;
- ``protocol``: ``report_seeds``, ``tuning`` (``{param, grid, seeds}`` or null),
  ``timeout_s``, ``margin_percent``;
- ``baseline`` / ``method``: ``label`` (the parameters where it differs from the other
  arm), ``settings`` (as given), ``params`` (resolved, tuned value
  included), ``tuning`` (``{param, chosen, grid_means}`` or null), ``report`` (``{mean,
  std, n}`` of the metric over its successful report seeds, or null);
- ``runs``: every run, ``{arm, phase ("tune"|"report"), seed, params, status ("ok" |
  "failed"), metrics, error, cached, wall_s (a cached run's: what it took when it ran), key}``;
- ``wall_seconds``: what the runs cost, cached ones at their recorded time; ``wall``
  (``experiment_file.wall_summary``): ``total_s``, ``ran_s``, ``cached_s``, ``cached_runs``, ``runs``;
- ``per_seed``: ``{seed, baseline: {metric: value}, method: {...}}`` for the report seeds
  both arms completed;
- ``statistics``: ``eval.stats.build_statistics`` over the metrics every report run gave;
- ``verdict``: ``eval.stats.decide`` (every verdict's function) of the decisive metric (``classification``
  one of better / non-inferior / inconclusive / worse; null below 3 seeds), or null with
  ``verdict_withheld`` saying why;
- ``family``: null, or for a published comparison its Holm reading within the experiment's
  own published family when it was published (``external_family``);
- ``provenance``: ``files`` (path -> sha256), ``git`` (``commit`` and ``dirty`` of the
  repository holding the experiment file; ``files_dirty``: whether the declared files
  themselves differ from that commit; all null outside a checkout), ``llmevo`` (``commit``
  and ``dirty`` of llmevo's own checkout, the protocol's code), ``published`` (null, or
  ``{allow_dirty}``), ``libraries``; the code state is read before the first run.

**Publishing** (``publish``): under ``docs/external/<name>/`` of the git repository holding the
experiment file, or ``<published_dir>/<name>/`` (``--publish-to``; never inside llmevo's own
checkout unless the experiment lives there: ``experiment_file.publish_folder``), from clean checkouts of both
llmevo and the experiment's repository (``artifacts.provenance.check_publishable``, the
built-in rule; ``allow_dirty`` overrides it, recorded), never over an artifact holding
report seeds this one lacks unless ``replace`` (``artifacts.replacement``). Run a published
comparison through ``external_family.run_comparison``, which adds its family reading.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import subprocess
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from llmevo.artifacts.io import check_output_file, write_json_atomic, write_text_atomic
from llmevo.artifacts.provenance import (
    REPO_ROOT,
    check_dirty_needs_publish,
    check_publishable,
    git_state,
    library_versions,
)
from llmevo.artifacts.replacement import Contents, check_replacement
from llmevo.digests import sha256_file
from llmevo.errors import (
    ArtifactError,
    CodeChangedError,
    CodeChangedWarning,
    ConfigError,
)
from llmevo.eval.stats import (
    DEFAULT_MARGIN_PERCENT,
    build_statistics,
    check_margin,
    decide,
    summarize,
)
from llmevo.experiments.experiment_file import (  # the file, one run, the cache
    CacheUse,
    Experiment,
    LoadedExperiment,
    Tuning,
    Value,
    _coerce,
    _env_text,
    load_experiment,
    parse_settings,
    publish_folder,
    run_once,
    wall_summary,
)
from llmevo.registry import RequestModel, StrictModel, check_seeds

SCHEMA = "llmevo.external/1"


# --- the protocol ---------------------------------------------------------------------------

class ExternalRequest(RequestModel):
    """One external comparison: the experiment, its two arms, seeds, budget and outputs."""

    experiment: Path
    baseline: str = ""
    method: str = ""
    seeds: list[int] = Field(default_factory=lambda: [42, 43, 44])
    tune: bool | None = None  # None: tune when the file declares [tune] or a grid is given
    tune_grid: list[float] | None = None
    tune_seeds: list[int] | None = None
    timeout: float | None = Field(default=None, gt=0)
    margin: float = DEFAULT_MARGIN_PERCENT
    cache: CacheUse = "use"
    cache_dir: Path = Path(".cache/llmevo")
    out: Path | None = None
    runs_dir: Path = Path("runs/external")
    # with publish: the folder holding <name>/ (--publish-to; None: docs/external of the experiment's repository)
    published_dir: Path | None = None
    publish: bool = False  # write under the published folder from clean checkouts; the family's Holm reading
    allow_dirty: bool = False  # with publish: from a dirty checkout (recorded)
    replace: bool = False  # replace an artifact at the path that holds seeds this one lacks
    repo_root: Path = REPO_ROOT  # llmevo's own checkout (the protocol's code), checked for publish
    report: bool = True
    command: str = ""

    @model_validator(mode="after")
    def _dirty_needs_publish(self) -> ExternalRequest:
        check_dirty_needs_publish(self.publish, self.allow_dirty)
        return self


class ExternalPlan(StrictModel):
    """A checked request: every error found before the first run; ``source`` the code state
    (the experiment's repository and llmevo's) read when it was planned, before any run."""

    request: ExternalRequest
    experiment: LoadedExperiment
    baseline: dict[str, Value]
    method: dict[str, Value]
    labels: dict[str, str]  # each arm by where it differs from the other
    tuning: Tuning | None
    timeout: float
    artifact: Path
    source: dict[str, Any]


def arm_label(params: Mapping[str, Value], other: Mapping[str, Value]) -> str:
    """An arm by the parameters where it differs from the other arm (``norm=rmsnorm``)."""
    return ",".join(f"{key}={_env_text(value)}" for key, value in sorted(params.items())
                    if other.get(key) != value) or "defaults"


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label)[:80]


def shared_settings(baseline: Mapping[str, Value], method: Mapping[str, Value]) -> dict[str, Value]:
    """The settings both arms override alike (``steps=150`` given to each)."""
    return {key: value for key, value in baseline.items() if key in method and method[key] == value}


def comparison_stem(labels: Mapping[str, str], shared: Mapping[str, Value]) -> str:
    """What one comparison of an experiment is, as a file stem and a family key:
    ``<method>-vs-<baseline>[_<shared overrides>]`` (``activation-relu2-vs-activation-gelu_steps-300``)."""
    stem = f"{_slug(labels['method'])}-vs-{_slug(labels['baseline'])}"
    return stem + ("_" + _slug(arm_label(shared, {})) if shared else "")


def artifact_key(data: Mapping[str, Any]) -> str:
    """``comparison_stem`` of a written artifact: a rerun of the same comparison has the same key."""
    baseline, method = data["baseline"], data["method"]
    return comparison_stem({"baseline": baseline["label"], "method": method["label"]},
                           shared_settings(baseline.get("settings") or {}, method.get("settings") or {}))


def read_external(path: Path) -> dict[str, Any]:
    """The external artifact at ``path`` (``SCHEMA``), or one ``ArtifactError`` line."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ArtifactError(f"{path}: not a readable JSON artifact ({error})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ArtifactError(f"{path}: not an external experiment's artifact (schema {SCHEMA})")
    return data


def external_contents(path: Path) -> Contents:
    """What the external artifact at ``path`` holds, for ``check_replacement``: its report
    seeds (the per-seed rows both arms completed) and the blocks that carry a value."""
    data = read_external(path)
    blocks = frozenset(key for key, value in data.items() if value not in (None, {}, []))
    return Contents(blocks=blocks, experiments=frozenset(),
                    seeds=frozenset(int(row["seed"]) for row in data.get("per_seed") or []))


def source_state(experiment: LoadedExperiment, repo_root: Path) -> dict[str, Any]:
    """The code a comparison runs, read before its first run: the experiment's repository
    (``commit``, ``dirty``, ``files_dirty``: its declared files themselves) and llmevo's own
    checkout (the protocol's code: ``llmevo.commit``, ``llmevo.dirty``)."""
    commit, dirty = git_state(experiment.folder)
    files_dirty = None if dirty is None else _files_dirty(experiment.folder, experiment.files)
    own_commit, own_dirty = git_state(repo_root)
    return {"commit": commit, "dirty": dirty, "files_dirty": files_dirty,
            "llmevo": {"commit": own_commit, "dirty": own_dirty}}


def source_changes(experiment: LoadedExperiment, source: Mapping[str, Any], repo_root: Path) -> dict | None:
    """What moved since ``source`` was read at the start (None: nothing): HEAD of the
    experiment's repository and of llmevo's checkout (``commit_now``, ``llmevo_commit_now``:
    None where it did not move) and the experiment's file and declared files whose bytes differ
    (``files``). Every run executes the files as they are on disk when it starts."""
    def digest(path: Path) -> str | None:
        try:
            return sha256_file(path)
        except OSError:
            return None

    files = sorted(name for name, sha in experiment.files.items() if digest(experiment.folder / name) != sha)
    if digest(experiment.path) != experiment.sha256:
        files.insert(0, experiment.path.name)
    commit, _ = git_state(experiment.folder)
    own, _ = git_state(repo_root)
    moved = None if commit == source["commit"] else commit
    own_moved = None if own == source["llmevo"]["commit"] else own
    if not files and moved is None and own_moved is None:
        return None
    return {"commit_now": moved, "llmevo_commit_now": own_moved, "files": files}


def check_source_unchanged(experiment: LoadedExperiment, source: Mapping[str, Any], repo_root: Path,
                           publish: bool, allow_dirty: bool, what: Path) -> dict | None:
    """At write time: refuse to publish (``CodeChangedError``, nothing written) when the
    experiment's files or either checkout's HEAD moved since the start (``source_changes``),
    unless ``allow_dirty``; otherwise return the change for ``provenance.code_changed`` (None:
    none), with a ``CodeChangedWarning``."""
    change = source_changes(experiment, source, repo_root)
    if change is None:
        return None
    parts = [f"{whose} HEAD moved to {change[key][:12]}" for whose, key in
             (("the experiment's", "commit_now"), ("llmevo's", "llmevo_commit_now")) if change[key] is not None]
    said = "; ".join(parts + ([f"changed: {', '.join(change['files'])}"] if change["files"] else []))
    if publish and not allow_dirty:
        raise CodeChangedError(
            f"cannot publish {what}: the experiment's code changed while it ran ({said}); nothing was written. "
            "The runs are in the arm cache: rerun the same command from trees nobody changes while it runs, "
            "and the runs whose files did not change load from the cache")
    warnings.warn(f"the experiment's code changed while it ran ({said}); the artifact records it in "
                  "provenance.code_changed", CodeChangedWarning, stacklevel=2)
    return change


def check_publishable_source(experiment: LoadedExperiment, repo_root: Path, allow_dirty: bool) -> None:
    """``--publish`` refuses unless both llmevo's checkout and the repository holding the
    experiment are committed and clean (``artifacts.provenance.check_publishable``, the
    built-in reproductions' rule), unless ``allow_dirty``. An llmevo that is no checkout (an
    installed package) has nothing to check: its version is in ``provenance.libraries``."""
    if git_state(repo_root)[1] is not None:
        check_publishable(repo_root, allow_dirty)
    check_publishable(experiment.folder, allow_dirty)


def arm_settings(spec: Experiment, baseline_text: str, method_text: str
                 ) -> tuple[dict[str, Value], dict[str, Value], dict[str, str]]:
    """Each arm's settings (``--baseline``, ``--method``) checked, and each arm's label: the
    parameters where it differs from the other arm."""
    baseline = parse_settings(baseline_text, spec, "--baseline")
    method = parse_settings(method_text, spec, "--method")
    baseline_params, method_params = {**spec.params, **baseline}, {**spec.params, **method}
    if baseline_params == method_params:
        raise ConfigError("--baseline and --method resolve to the same parameters; nothing to compare")
    return baseline, method, {"baseline": arm_label(baseline_params, method_params),
                              "method": arm_label(method_params, baseline_params)}


def plan_external(request: ExternalRequest, check_publish: bool = True,
                  source: Mapping[str, Any] | None = None) -> ExternalPlan:
    """Check everything a comparison needs before it runs (one ``ConfigError`` line each),
    with ``publish`` clean checkouts too (``check_publish`` False and ``source`` given: a
    caller running several comparisons, a ladder, checked and read them once before its first)."""
    loaded = load_experiment(request.experiment)
    spec = loaded.spec
    baseline, method, labels = arm_settings(spec, request.baseline, request.method)
    check_seeds(request.seeds, "--seeds")
    check_margin(request.margin)
    tuning = None
    if request.tune is not False and (spec.tune is not None or request.tune_grid is not None):
        if spec.tune is None:
            raise ConfigError(f"--tune-grid: {spec.name} declares no [tune] axis to tune")
        tuning = Tuning(param=spec.tune.param, grid=request.tune_grid or spec.tune.grid,
                        seeds=request.tune_seeds or spec.tune.seeds)
        check_seeds(tuning.seeds, "--tune-seeds")
        overlap = sorted(set(tuning.seeds) & set(request.seeds))
        if overlap:
            raise ConfigError(f"--tune-seeds {overlap} are also report seeds; tuning and report seeds "
                              "must be disjoint")
        for label, settings in (("--baseline", baseline), ("--method", method)):
            if tuning.param in settings:
                raise ConfigError(f"{label} sets {tuning.param}, the tuned axis; pass --no-tune to fix it")
        if not all(math.isfinite(value) for value in tuning.grid):
            raise ConfigError("--tune-grid: every value must be finite")
    # settings both arms override alike name the file too (steps-150)
    stem = comparison_stem(labels, shared_settings(baseline, method))
    folder = publish_folder(loaded, request.published_dir, request.repo_root) if request.publish else request.runs_dir
    artifact = request.out or folder / spec.name / f"{stem}.json"
    check_output_file(artifact, "--out")
    # an artifact is never replaced by one holding fewer seeds, unless replace (as built-ins)
    check_replacement(artifact, Contents(blocks=None, experiments=frozenset(), seeds=frozenset(request.seeds)),
                      replace=request.replace, read=external_contents)
    if request.publish and check_publish:
        check_publishable_source(loaded, request.repo_root, request.allow_dirty)
    return ExternalPlan(request=request, experiment=loaded, baseline=baseline, method=method, labels=labels,
                        tuning=tuning, timeout=request.timeout or spec.timeout, artifact=artifact,
                        source=dict(source) if source is not None else source_state(loaded, request.repo_root))


RunEvent = Callable[[dict], None]


def _one_run(plan: ExternalPlan, arm: str, phase: str, params: dict[str, Value], seed: int,
             base_env: Mapping[str, str]) -> dict:
    record = run_once(plan.experiment, params, seed, timeout=plan.timeout, base_env=base_env,
                      cache_dir=plan.request.cache_dir, cache=plan.request.cache)
    return {"arm": arm, "phase": phase, **record}


def _tune_arm(plan: ExternalPlan, arm: str, settings: dict[str, Value], base_env: Mapping[str, str],
              runs: list[dict], on_run: RunEvent) -> dict:
    """Every grid value under every tuning seed; the best mean over the seeds (a grid point
    with a failed seed is out; ties go to the earlier value)."""
    tuning = plan.tuning
    assert tuning is not None
    spec = plan.experiment.spec
    means: dict[str, float | None] = {}
    chosen, best = None, None
    for value in tuning.grid:
        params = {**spec.params, **settings, tuning.param: _coerce(tuning.param, value, spec.params[tuning.param])}
        values = []
        for seed in tuning.seeds:
            record = _one_run(plan, arm, "tune", params, seed, base_env)
            runs.append(record)
            on_run(record)
            values.append(None if record["metrics"] is None else record["metrics"][spec.metric])
        point = None if None in values else math.fsum(values) / len(values)
        means[repr(value)] = point
        if point is not None and (best is None or (point < best if spec.lower_is_better else point > best)):
            chosen, best = params[tuning.param], point
    return {"param": tuning.param, "chosen": chosen, "grid_means": means}


def grid_edges(arms: Mapping[str, Mapping[str, Any]], grid: Sequence[Value]) -> list[str]:
    """Each arm whose tuned choice is the highest or lowest value of ``grid`` (of 2 or more
    numeric values), in words: an optimum at the edge of what was tried is not known to be one."""
    try:
        ordered = sorted(float(value) for value in grid)
    except (TypeError, ValueError):
        return []
    said = []
    for arm in ("baseline", "method"):
        tuned = arms[arm].get("tuning")
        if len(ordered) < 2 or not tuned or tuned.get("chosen") is None:
            continue
        chosen = float(tuned["chosen"])
        for edge, name in ((ordered[-1], "top"), (ordered[0], "bottom")):
            if chosen == edge:
                said.append(f"the {arm} chose {tuned['param']} {tuned['chosen']:g}, the {name} of its grid")
    return said


FamilyReader = Callable[[Path, Mapping[str, Any]], dict]


def run_external(plan: ExternalPlan, base_env: Mapping[str, str], on_run: RunEvent = lambda record: None,
                 created: str | None = None, family: FamilyReader | None = None) -> dict:
    """Run the comparison of ``plan`` and write its artifact (and README); returns it.

    ``base_env`` is the environment every run starts from (the command line passes its own);
    ``on_run`` sees each run's record as it completes. ``family`` (published comparisons
    only): the artifact's ``family`` block from its path and contents
    (``external_family.publish_reading``: Holm over the experiment's published comparisons)."""
    if plan.request.publish and family is None:
        raise ConfigError("a published comparison needs its family's reading: run it through "
                          "llmevo.experiments.external_family.run_comparison")
    spec = plan.experiment.spec
    runs: list[dict] = []
    arms: dict[str, dict] = {}
    withheld: list[str] = []
    for arm, settings in (("baseline", plan.baseline), ("method", plan.method)):
        params = {**spec.params, **settings}
        tuned = None
        if plan.tuning is not None:
            tuned = _tune_arm(plan, arm, settings, base_env, runs, on_run)
            if tuned["chosen"] is None:
                withheld.append(f"every {plan.tuning.param} of the {arm}'s tuning grid had a failed run")
            else:
                params[plan.tuning.param] = tuned["chosen"]
        arms[arm] = {"label": plan.labels[arm], "settings": settings, "params": params, "tuning": tuned, "report": None}
    values: dict[str, dict[int, dict[str, float]]] = {"baseline": {}, "method": {}}
    if not withheld:
        for seed in plan.request.seeds:
            for arm in ("baseline", "method"):
                record = _one_run(plan, arm, "report", arms[arm]["params"], seed, base_env)
                runs.append(record)
                on_run(record)
                if record["metrics"] is None:
                    withheld.append(f"the {arm}'s report seed {seed} failed: {record['error']}")
                else:
                    values[arm][seed] = record["metrics"]
    for arm in ("baseline", "method"):
        decisive = [metrics[spec.metric] for metrics in values[arm].values()]
        arms[arm]["report"] = summarize(decisive) if decisive else None
    paired = [seed for seed in plan.request.seeds if seed in values["baseline"] and seed in values["method"]]
    per_seed = [{"seed": seed, "baseline": values["baseline"][seed], "method": values["method"][seed]}
                for seed in paired]
    statistics = None
    if per_seed:  # the metrics every paired report run gave
        common = set.intersection(*(set(row[arm]) for row in per_seed for arm in ("baseline", "method")))
        statistics = build_statistics(per_seed, sorted(common))
    outcome = None
    if not withheld and spec.metric in (statistics or {}):
        outcome = decide(spec.metric, per_seed, statistics, plan.request.margin, plan.labels["method"],
                         lower_is_better=spec.lower_is_better)
        edges = [] if plan.tuning is None else grid_edges(arms, plan.tuning.grid)
        if edges:  # a choice on the grid's edge is said in the verdict's own sentence
            outcome = {**outcome, "summary": outcome["summary"] + f" Tuning: {'; '.join(edges)}; "
                       "a wider grid may move the choice and the verdict."}
    elif not withheld:
        withheld.append(f"no relative change of {spec.metric} (a baseline value of 0)")
    publication = None
    if plan.request.publish:
        publication = {"allow_dirty": plan.request.allow_dirty}
    changed = check_source_unchanged(plan.experiment, plan.source, plan.request.repo_root, plan.request.publish,
                                     plan.request.allow_dirty, plan.artifact)  # before any write
    artifact = {
        "schema": SCHEMA,
        "name": spec.name,
        "created": created or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": plan.request.command,
        "experiment": {"file": str(plan.experiment.path), "sha256": plan.experiment.sha256,
                       "command": spec.command, "files": sorted(plan.experiment.files),
                       "metric": spec.metric, "direction": spec.direction,
                       "read": spec.read.model_dump(by_alias=True, exclude_none=True),
                       "params": spec.params, "derived": spec.derived},
        "protocol": {"report_seeds": plan.request.seeds,
                     "tuning": None if plan.tuning is None else plan.tuning.model_dump(),
                     "timeout_s": plan.timeout, "margin_percent": plan.request.margin},
        "baseline": arms["baseline"],
        "method": arms["method"],
        "runs": runs,
        "wall_seconds": wall_summary(runs)["total_s"],  # cached runs at the time they took when they ran
        "wall": wall_summary(runs),
        "per_seed": per_seed,
        "statistics": statistics,
        "verdict": outcome,
        "verdict_withheld": "; ".join(withheld) or None,
        "family": None,
        "provenance": {"files": plan.experiment.files,
                       "git": {key: plan.source[key] for key in ("commit", "dirty", "files_dirty")},
                       "llmevo": plan.source["llmevo"], "published": publication,
                       "libraries": library_versions(), **({} if changed is None else {"code_changed": changed})},
    }
    if plan.request.publish and family is not None:  # the published family, this comparison in it
        artifact["family"] = family(plan.artifact, artifact)
    plan.artifact.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(plan.artifact, artifact)
    if plan.request.report:
        write_text_atomic(plan.artifact.with_suffix(".md"), readme(artifact))
    return artifact


def _files_dirty(folder: Path, files: Mapping[str, str]) -> bool | None:
    """Whether git sees uncommitted changes to (or untracked) ``files`` of ``folder``."""
    if not files:
        return False
    try:
        status = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--", *files],
                                capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return bool(status.stdout.strip()) if status.returncode == 0 else None


def readme(artifact: Mapping) -> str:
    """A short markdown report of an external comparison's artifact."""
    spec = artifact["experiment"]
    metric = spec["metric"]
    lines = [f"# {artifact['name']}: {artifact['method']['label']} vs {artifact['baseline']['label']}", "",
             f"Decisive metric: `{metric}` ({spec['direction']} is better). Report seeds: "
             f"{', '.join(map(str, artifact['protocol']['report_seeds']))}.", ""]
    tuning = artifact["protocol"]["tuning"]
    if tuning is not None:
        lines += [f"Tuned `{tuning['param']}` over {tuning['grid']} on seeds {tuning['seeds']} (both arms); "
                  f"chosen: baseline {artifact['baseline']['tuning']['chosen']}, method "
                  f"{artifact['method']['tuning']['chosen']}.", ""]
    lines += ["| seed | baseline | method |", "|---|---:|---:|"]
    for row in artifact["per_seed"]:
        lines.append(f"| {row['seed']} | {row['baseline'][metric]:.4f} | {row['method'][metric]:.4f} |")
    lines.append("")
    if artifact["verdict"] is not None:
        lines.append(f"**Verdict:** {artifact['verdict']['summary']}")
        family = artifact.get("family")
        if family is not None:
            lines += ["", f"**After Holm** over the {family['size']} published comparison(s) of "
                          f"`{artifact['name']}` (its own family): {family['classification']}, adjusted p "
                          f"{family['p_holm']:.3g}, interval [{family['ci_low']:+.2f}%, {family['ci_high']:+.2f}%] "
                          f"at level {family['level']:.3g} (when published; `FAMILY.md` beside it is current)."]
    else:
        lines.append(f"**Verdict withheld:** {artifact['verdict_withheld']}")
    failed = [run for run in artifact["runs"] if run["status"] == "failed"]
    if failed:
        lines += ["", "Failed runs:", ""]
        lines += [f"- {run['arm']} {run['phase']} seed {run['seed']}: {run['error']}" for run in failed]
    git = artifact["provenance"]["git"]
    lines += ["", f"Script: {', '.join(f'`{k}` sha256 {v[:12]}' for k, v in artifact['provenance']['files'].items())}; "
              f"commit {git['commit']}{' (script changed since)' if git['files_dirty'] else ''}"
              f"{' (tree dirty)' if git['dirty'] else ''}.", ""]
    own = artifact["provenance"].get("llmevo")
    if own is not None:
        lines[-1:] = [f"llmevo: commit {own['commit']}{' (tree dirty)' if own['dirty'] else ''}.", ""]
    return "\n".join(lines)
