"""External experiments: llmevo's paired protocol around anyone's training command.

A researcher's own script (one that does not import llmevo) is declared in a small TOML
file; ``compare_external`` runs a baseline and a method arm of it through the comparison
every built-in takes (``runner.compare.compare_arms``), its arms run by ``SubprocessRunner``
(one of the three arm runners, ``runner.arm_runner.ArmRunner``): before anything else the seed check (the
baseline on two seeds must differ) and the no-op check (the arms on one seed must differ;
``allow_noop`` classes them no-op instead), then the file's ``[tune]`` parameter tuned by the
built-ins' lr-grid protocol (``runner.tuning``: the grid, one edge extension, the adequacy
probe, re-scoring of the contenders on further seeds), report seeds disjoint from the tuning
seeds, paired statistics and the verdict of ``eval.stats.decide`` (its class, no-op, stalled
seeds) with fragile seeds, a run cache, and provenance. What cannot apply to a command llmevo
does not build (the space protocol, halving, counting its tokens) is said in the artifact's
``not_applicable``, and refused as an option (``EXTERNAL_REFUSED``).

**The experiment file** (``experiments.experiment_file``: the loader, one run, the cache and
``run_many``; every key, placeholder and way of reading a metric is documented in
docs/guide/experiment-file.md) declares the command, its parameters (declared and derived),
the metric and how it is read. A run that exits nonzero, outlives the timeout (its whole
process group is killed) or reports no usable metric is a *failed run*: one line, recorded,
never an exception. A failed tuning run scores as a diverged one; a failed report run withholds
the verdict. A successful run is cached under its key (``experiment_file.run_key``) with the
time it took, so an interrupted command resumes where it stopped and a cached run counts at
the time it cost when it ran.

**The artifact** (``SCHEMA`` = ``"llmevo.external/1"``), a JSON object:

- ``schema``, ``name``, ``created`` (UTC ISO time), ``command`` (the llmevo command line);
- ``experiment``: ``file``, ``sha256`` (of the TOML), ``command``, ``files``, ``metric``,
  ``direction``, ``read`` (the ``[read]`` table), ``params`` (the declared defaults), ``derived``;
- ``protocol``: ``report_seeds``, ``tuning`` (``{protocol: "grid", param, grid, seeds,
  confirm_seeds, extend_edges, probe}`` or null), ``timeout_s``, ``margin_percent``, ``allow_noop``;
- ``tuned``: true only when the tuning protocol ran; ``tuning``: its block, as a built-in
  artifact's (``runner.tuning.tuning_block``; its ``lr`` entries are the values of
  ``parameter``; ``minimized`` says so where the metric is higher-is-better), or null;
- ``baseline`` / ``method``: ``label`` (the parameters where it differs from the other
  arm), ``settings`` (as given), ``params`` (resolved, tuned value
  included), ``tuning`` (``{param, chosen, grid_means, on_edge}`` or null), ``report`` (``{mean,
  std, n}`` of the metric over its successful report seeds, or null);
- ``checks``: ``seed`` (the two seeds, their values, ``differ``; null: not made) and ``no_op``
  (``how: "metrics"``, ``same_function``, ``reason``, ``allowed_noop``);
- ``not_applicable``: each part of the built-in protocol that does not apply here, and why;
- ``runs``: every run, ``{arm, phase ("check"|"tune"|"report"), seed, params, status ("ok" |
  "failed"), metrics, error, cached, wall_s (a cached run's: what it took when it ran), key}``
  (``reused``: a run asked again in the same comparison, executed once, at 0 s);
- ``wall_seconds``: what the runs cost, cached ones at their recorded time; ``wall``
  (``experiment_file.wall_summary``): ``total_s``, ``ran_s``, ``cached_s``, ``cached_runs``, ``runs``;
- ``per_seed``: ``{seed, baseline: {metric: value}, method: {...}}`` for the report seeds
  both arms completed;
- ``statistics``: ``eval.stats.build_statistics`` over the metrics every report run gave;
- ``verdict``: ``eval.stats.decide`` (every verdict's function) of the decisive metric (``classification``
  one of better / non-inferior / inconclusive / worse, or no-op; null below 3 seeds;
  ``stalled_seeds`` and ``fragile_seeds`` from 4 seeds), or null with ``verdict_withheld`` saying why;
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from llmevo.artifacts.io import check_output_file, write_json_atomic, write_text_atomic
from llmevo.artifacts.provenance import (
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
    DivergedError,
)
from llmevo.eval.stats import (
    DEFAULT_MARGIN_PERCENT,
    build_statistics,
    check_margin,
    decide,
    fragile_seeds,
    summarize,
)
from llmevo.experiments.experiment_file import (  # the file, one run, the cache
    PARAM_ENV_PREFIX,
    Experiment,
    LoadedExperiment,
    Value,
    _coerce,
    _env_text,
    load_experiment,
    parse_settings,
    publish_folder,
    run_key,
    run_many,
    wall_summary,
)
from llmevo.experiments.sections import RunSection, TuningSection
from llmevo.registry import SectionedRequest, check_seeds
from llmevo.runner.arm_run import Scores
from llmevo.runner.compare import compare_arms
from llmevo.runner.equivalence import Equivalence
from llmevo.runner.tuner import ArmChoice, Tuner, TuningStart
from llmevo.runner.tuning import GridTuner
from llmevo.train.execution import RunSpec
from llmevo.train.trainer import TrainConfig

SCHEMA = "llmevo.external/1"


# --- the protocol ---------------------------------------------------------------------------

UNUSED_DATA = Path("-")  # the run section's data folder, which an external command does not read

# The section fields ``reproduce --experiment`` (and ``ladder --experiment``) does not read,
# each with why: giving one is a one-line error (``registry.SectionedRequest.refused``), from
# Python and from the command line alike. Every other section field applies.
EXTERNAL_REFUSED: dict[str, str] = {
    "data_dir": "the command reads its own data (give it in the command or its environment)",
    "device": "the command chooses its own device",
    "threads": "the command sets its own threads",
    "path": "each run is one subprocess; an external arm's seeds do not batch",
    "replicas_max": "each run is one subprocess; an external arm's seeds do not batch",
    "val_every": "the command reports its metrics once, at its end",
    "tune_space": ("the command declares no component tuning space (Manifest.tuning_space); its [tune] "
                   "parameter is tuned by the lr-grid protocol"),
    "tune_trials": "trials belong to --tune-space, which does not apply",
    "tune_sampler": "a sampler belongs to --tune-space, which does not apply",
    "tune_fidelity": "halving stops runs at a step; an external command trains to its own length",
}

# What does not apply to an external comparison, and why: the artifact's ``not_applicable``
NOT_APPLICABLE: dict[str, str] = {
    "space": EXTERNAL_REFUSED["tune_space"],
    "fidelity": EXTERNAL_REFUSED["tune_fidelity"],
    "equal_budget": ("llmevo cannot count a command's tokens or FLOPs; both arms get the same tuner, "
                     "tuning seeds and report seeds, and the command's own steps decide the rest"),
    "no_op_outputs": ("llmevo builds no model of the command, so the arms' logits cannot be compared; "
                      "the no-op check compares the metrics the arms report on one seed instead"),
}


class ExternalRunSection(RunSection):
    """``RunSection`` for a command llmevo does not run in-process: ``data_dir`` is not read
    (refused when given)."""

    data_dir: Path = UNUSED_DATA


class ExternalRequest(SectionedRequest):
    """One external comparison: the experiment, its two arms, seeds and outputs, and the
    shared sections (``run``: cache, publishing, the command recorded; ``tuning``: the lr-grid
    protocol on the file's ``[tune]`` parameter). ``refused``: the section fields it does not
    read (``EXTERNAL_REFUSED``)."""

    refused: ClassVar[dict[str, str]] = EXTERNAL_REFUSED

    experiment: Path
    baseline: str = ""
    method: str = ""
    seeds: list[int] = Field(default_factory=lambda: [42, 43, 44])
    timeout: float | None = Field(default=None, gt=0)
    margin: float = DEFAULT_MARGIN_PERCENT
    allow_noop: bool = False  # arms that report the same metrics: classed no-op instead of refused
    workers: int = Field(default=1, ge=1)  # runs at once, each one subprocess (experiment_file.run_many)
    out: Path | None = None
    runs_dir: Path = Path("runs/external")
    # with publish: the folder holding <name>/ (--publish-to; None: docs/external of the experiment's repository)
    published_dir: Path | None = None
    report: bool = True
    run: ExternalRunSection = Field(default_factory=ExternalRunSection)
    tuning: TuningSection = Field(default_factory=TuningSection)


@dataclass(frozen=True)
class ExternalPlan:
    """A checked request: every error found before the first run. ``tuner``: the lr-grid
    protocol on ``param`` (None: untuned); ``source`` the code state (the experiment's
    repository and llmevo's) read when it was planned, before any run."""

    request: ExternalRequest
    experiment: LoadedExperiment
    baseline: dict[str, Value]
    method: dict[str, Value]
    labels: dict[str, str]  # each arm by where it differs from the other
    param: str | None  # the tuned parameter (None: untuned)
    tuner: GridTuner | None
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
    if not allow_dirty and git_state(experiment.folder)[1] is None:  # --publish-to does not change it
        raise ConfigError(f"cannot publish: the experiment's folder {experiment.folder} is in no git repository, so "
                          "no commit records its code; commit it to one (git init && git add -A && git commit), "
                          "or pass --allow-dirty to publish with its files' sha256 alone (recorded in provenance)")
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
    tuning = request.tuning
    param, tuner = None, None
    if tuning.wanted(tuned_by_default=spec.tune is not None):
        if spec.tune is None:
            raise ConfigError(f"--tune-grid: {spec.name} declares no [tune] axis to tune (a [tune] table: param, grid)")
        param = spec.tune.param
        default = spec.params[param]
        if not isinstance(default, float) or not default > 0:
            raise ConfigError(f"tune.param {param} = {default!r}: the lr-grid protocol tunes a positive float "
                              "(a learning rate: its grid is extended and probed by ratios)")
        for label, settings in (("--baseline", baseline), ("--method", method)):
            if param in settings:
                raise ConfigError(f"{label} sets {param}, the tuned axis; pass --no-tune to fix it")
        if "tune_seeds" not in tuning.model_fields_set:  # the file's tuning seeds
            tuning = tuning.model_copy(update={"tune_seeds": list(spec.tune.seeds)})
        tuner = tuning.tuner(default, list(request.seeds), grid=None if tuning.tune_grid else spec.tune.grid)
        # an lr-grid plan: tune_space, the one other tuner, is refused (EXTERNAL_REFUSED)
    else:
        tuning.refuse_untuned("the arms are not tuned (the file declares no [tune], or --no-tune)")
    # settings both arms override alike name the file too (steps-150)
    stem = comparison_stem(labels, shared_settings(baseline, method))
    run = request.run
    folder = publish_folder(loaded, request.published_dir, run.repo_root) if run.publish else request.runs_dir
    artifact = request.out or folder / spec.name / f"{stem}.json"
    check_output_file(artifact, "--out")
    # an artifact is never replaced by one holding fewer seeds, unless replace (as built-ins)
    check_replacement(artifact, Contents(blocks=None, experiments=frozenset(), seeds=frozenset(request.seeds)),
                      replace=run.replace, read=external_contents)
    if run.publish and check_publish:
        check_publishable_source(loaded, run.repo_root, run.allow_dirty)
    return ExternalPlan(request=request, experiment=loaded, baseline=baseline, method=method, labels=labels,
                        param=param, tuner=tuner, timeout=request.timeout or spec.timeout, artifact=artifact,
                        source=dict(source) if source is not None else source_state(loaded, run.repo_root))


RunEvent = Callable[[dict], None]


@dataclass(frozen=True)
class ExternalArm:
    """One arm of an external comparison: its label, its settings as given, and its
    parameters resolved (the tuned one at its choice once tuned)."""

    label: str
    settings: dict[str, Value]
    params: dict[str, Value]


@dataclass
class SubprocessRunner:
    """The arm runner (``runner.arm_runner.ArmRunner``) of an external comparison: each run one
    subprocess (``execute``), read from the run cache where it ran before (``run_key``,
    ``read_entry``; with ``run.arm_cache`` False every run executes again and is rewritten), a
    run asked twice in one comparison executed once. ``records``: every run in order (the
    artifact's ``runs``), each handed to ``on_run`` as it completes. The tuner's learning rate
    is the file's ``[tune]`` parameter; a failed tuning run scores as a diverged one."""

    plan: ExternalPlan
    base_env: Mapping[str, str]
    on_run: RunEvent = lambda record: None
    records: list[dict] = field(default_factory=list)
    seed_check: dict[str, Any] | None = None  # the seed check's finding (None: not made)
    _done: dict[str, dict] = field(default_factory=dict)  # this comparison's runs by key (failed ones too)

    @property
    def spec(self) -> Experiment:
        return self.plan.experiment.spec

    def _run(self, arm: str, phase: str, params: dict[str, Value], seed: int) -> dict:
        return self._runs(arm, phase, [(params, seed)])[0]

    def _runs(self, arm: str, phase: str, jobs: Sequence[tuple[dict[str, Value], int]]) -> list[dict]:
        """``jobs`` (``(params, seed)`` each) through the run cache, ``run.workers`` at once
        (``experiment_file.run_many``); a run asked before in this comparison is not run again
        (its record says ``reused``, at 0 s, so that its cost counts once)."""
        run = self.plan.request.run
        records: list[dict | None] = [None] * len(jobs)
        fresh: list[int] = []
        for index, (params, seed) in enumerate(jobs):
            key = run_key(self.plan.experiment, params, seed)
            earlier = self._done.get(key)
            if earlier is not None:  # asked before in this comparison (a check run the tuner needs too)
                records[index] = {"arm": arm, "phase": phase, "seed": seed, "params": params, "key": key,
                                  **{name: earlier[name] for name in ("metrics", "status", "error")},
                                  "cached": True, "reused": True, "wall_s": 0.0}
            elif all(key != run_key(self.plan.experiment, *jobs[other]) for other in fresh):
                fresh.append(index)
        done = run_many(self.plan.experiment, [jobs[index] for index in fresh], workers=self.plan.request.workers,
                        timeout=self.plan.timeout, base_env=self.base_env, cache_dir=run.cache_dir,
                        cache="use" if run.arm_cache else "refresh")
        for index, record in zip(fresh, done, strict=True):
            records[index] = {"arm": arm, "phase": phase, **record}
            self._done.setdefault(record["key"], records[index])
        for index, (params, seed) in enumerate(jobs):  # a job given twice in one call
            if records[index] is None:
                earlier = self._done[run_key(self.plan.experiment, params, seed)]
                records[index] = {**earlier, "arm": arm, "phase": phase, "cached": True, "reused": True,
                                  "wall_s": 0.0}
        for record in records:
            self.records.append(record)
            self.on_run(record)
        return records  # type: ignore[return-value]

    def _decisive(self, record: Mapping[str, Any]) -> float | None:
        return None if record["metrics"] is None else record["metrics"][self.spec.metric]

    def check(self, name: str, baseline: ExternalArm, method: ExternalArm, seeds: Sequence[int],
              tuner: Tuner | None, allow_noop: bool) -> Equivalence:
        """The seed check and the no-op check, before the tuning and report runs, on runs those
        reuse where they can: the baseline on two seeds (the first tuning seeds, else the
        report seeds) and the method on the first, the tuned parameter at the grid point
        nearest its default. A decisive metric equal on both seeds: the command ignores
        ``{seed}`` (refused); equal for both arms: they compute the same thing (refused, or
        with ``allow_noop`` classed no-op). A check run that fails decides nothing here (the
        same run fails again where the protocol needs it)."""
        metric = self.spec.metric
        pool = list(dict.fromkeys([*(tuner.seeds if tuner else ()), *(getattr(tuner, "confirm_seeds", ())),
                                   *seeds]))
        first, second = pool[0], (pool[1] if len(pool) > 1 else None)
        at = {}
        grid = getattr(tuner, "grid", None)  # the lr-grid plan's (the only tuner external arms take)
        if self.plan.param is not None and grid:
            default = float(self.spec.params[self.plan.param])
            at = {self.plan.param: min(grid, key=lambda value: abs(math.log(value / default)))}
        base = self._run("baseline", "check", {**baseline.params, **at}, first)
        if second is not None:
            other = self._run("baseline", "check", {**baseline.params, **at}, second)
            values = (self._decisive(base), self._decisive(other))
            self.seed_check = {"seeds": [first, second], metric: list(values),
                               "differ": None if None in values else values[0] != values[1]}
            if self.seed_check["differ"] is False:
                raise ConfigError(
                    f"{self.spec.name}: {metric} does not change with {{seed}} (seeds {first} and {second} both gave "
                    f"{values[0]!r}); pass the seed to the script's initialisation and data order (it receives "
                    f"{{seed}} and ${PARAM_ENV_PREFIX}SEED)")
        same = self._run("method", "check", {**method.params, **at}, first)
        values = (self._decisive(base), self._decisive(same))
        if None in values:
            return Equivalence("metrics", False, f"not checked: a check run at seed {first} failed")
        if values[0] != values[1]:
            return Equivalence("metrics", False, f"their {metric} differs at seed {first} ({values[0]!r}, {values[1]!r})")
        found = Equivalence("metrics", True, f"both report {metric} {values[0]!r} at seed {first}")
        if not allow_noop:
            raise ConfigError(noop_refusal(name, found))
        return found

    def tuning_start(self, arm: ExternalArm) -> TuningStart:
        """The tuned parameter as the tuner's learning rate; a run's other settings are the
        command's own (the tuner moves only ``lr``)."""
        assert self.plan.param is not None
        config = TrainConfig(steps=1, batch_size=1, seq_len=1, lr=float(arm.params[self.plan.param]))
        return TuningStart(config, [], partial(self._score, arm), None)

    def _score(self, arm: ExternalArm, runs: Sequence[RunSpec]) -> Scores:
        """Each tuning run's decisive metric, signed so that lower is better (None: failed)."""
        scores = Scores({}, set(), {})
        records = self._runs(arm.label, "tune", [(self._at(arm, spec.config.lr), spec.seed) for spec in runs])
        for index, record in enumerate(records):
            value = self._decisive(record)
            scores.values[index] = None if value is None else value if self.spec.lower_is_better else -value
            scores.paths[index] = "subprocess"
            if record["cached"]:
                scores.hits.add(index)
        return scores

    def _at(self, arm: ExternalArm, value: float) -> dict[str, Value]:
        assert self.plan.param is not None
        return {**arm.params, self.plan.param: _coerce(self.plan.param, value, self.spec.params[self.plan.param])}

    def at_choice(self, arm: ExternalArm, start: TuningStart, choice: ArmChoice) -> ExternalArm:
        return replace(arm, params=self._at(arm, choice.config.lr))

    def report(self, arm: ExternalArm, seeds: Sequence[int]) -> Iterator[tuple[int, dict]]:
        records = self._runs(arm.label, "report", [(arm.params, seed) for seed in seeds])
        yield from zip(seeds, records, strict=True)

    def check_budget(self, baseline: ExternalArm, method: ExternalArm, runs: dict[str, dict[int, dict]],
                     seeds: Sequence[int]) -> None:
        """Nothing llmevo can count (``NOT_APPLICABLE["equal_budget"]``): both arms had the same
        tuner and seeds by construction."""


def noop_refusal(name: str, found: Equivalence) -> str:
    """The one-line refusal of external arms that compute the same thing."""
    return (f"the arms of {name} compute the same thing ({found.reason}): the script may ignore the setting "
            "that differs, or map it onto the other arm's (a typo?); fix the arm, or pass --allow-noop to run "
            "it classed no-op")


FamilyReader = Callable[[Path, Mapping[str, Any]], dict]


def _arm_tuning(block: Mapping[str, Any] | None, param: str | None, label: str) -> dict[str, Any] | None:
    """An arm's tuning in short (``{param, chosen, grid_means}``) from the tuner's block."""
    if block is None or param is None:
        return None
    arm = block["arms"][label]
    return {"param": param, "chosen": arm["chosen"]["lr"],
            "grid_means": {repr(setting["lr"]): setting["mean"] for setting in arm["settings"]},
            "on_edge": arm["chosen_on_edge"]}


def _post_checks(plan: ExternalPlan, per_seed: Sequence[Mapping[str, Any]], equivalence: Equivalence,
                 runner: SubprocessRunner) -> Equivalence:
    """The seed and no-op checks again on every report seed, where the checks before the runs
    could not decide (a check run that failed): identical values are refused as there."""
    metric, name = plan.experiment.spec.metric, plan.experiment.spec.name
    baseline = [row["baseline"][metric] for row in per_seed]
    if runner.seed_check is None or runner.seed_check["differ"] is None:
        if len(baseline) >= 2 and len(set(baseline)) == 1:
            raise ConfigError(f"{name}: {metric} does not change with {{seed}} (every report seed gave {baseline[0]!r}); "
                              "pass the seed to the script's initialisation and data order")
    if equivalence.reason.startswith("not checked") and per_seed and all(
            row["baseline"][metric] == row["method"][metric] for row in per_seed):
        found = Equivalence("metrics", True, f"both report the same {metric} at every report seed")
        if not plan.request.allow_noop:
            raise ConfigError(noop_refusal(f"'{name}'", found))
        return found
    return equivalence


def compare_external(plan: ExternalPlan, base_env: Mapping[str, str], on_run: RunEvent = lambda record: None,
                     created: str | None = None, family: FamilyReader | None = None) -> dict:
    """Run the comparison of ``plan`` through ``runner.compare.compare_arms`` over a
    ``SubprocessRunner`` and write its artifact (and README); returns it.

    ``base_env`` is the environment every run starts from (the command line passes its own);
    ``on_run`` sees each run's record as it completes. ``family`` (published comparisons
    only): the artifact's ``family`` block from its path and contents
    (``external_family.publish_reading``: Holm over the experiment's published comparisons)."""
    request = plan.request
    if request.run.publish and family is None:
        raise ConfigError("a published comparison needs its family's reading: run it through "
                          "llmevo.experiments.external_family.run_comparison")
    spec = plan.experiment.spec
    runner = SubprocessRunner(plan, base_env, on_run)
    arms = [ExternalArm(label, settings, {**spec.params, **settings})
            for label, settings in (("baseline", plan.baseline), ("method", plan.method))]
    name = f"'{spec.name}' ({plan.labels['method']} vs {plan.labels['baseline']})"
    withheld: list[str] = []
    try:
        paired = compare_arms(name, runner, *arms, request.seeds, metric=spec.metric, tuner=plan.tuner,
                              allow_noop=request.allow_noop)
    except DivergedError as error:  # every tuning setting of an arm had a failed run
        paired = None
        withheld.append(f"every {plan.param} of the {str(error).split(' arm')[0]}'s tuning had a failed run")
    runs = {"baseline": {}, "method": {}} if paired is None else paired.runs
    values: dict[str, dict[int, dict[str, float]]] = {"baseline": {}, "method": {}}
    for seed in request.seeds:
        for arm in ("baseline", "method"):
            record = runs[arm].get(seed)
            if record is None:
                continue
            if record["metrics"] is None:
                withheld.append(f"the {arm}'s report seed {seed} failed: {record['error']}")
            else:
                values[arm][seed] = record["metrics"]
    paired_seeds = [seed for seed in request.seeds if seed in values["baseline"] and seed in values["method"]]
    per_seed = [{"seed": seed, "baseline": values["baseline"][seed], "method": values["method"][seed]}
                for seed in paired_seeds]
    equivalence = None if paired is None else _post_checks(plan, per_seed, paired.equivalence, runner)
    statistics = None
    if per_seed:  # the metrics every paired report run gave
        common = set.intersection(*(set(row[arm]) for row in per_seed for arm in ("baseline", "method")))
        statistics = build_statistics(per_seed, sorted(common))
    tuning = None if paired is None else paired.tuning
    if tuning is not None:
        tuning["parameter"] = plan.param  # the tuner's ``lr`` entries are this parameter's values
        if not spec.lower_is_better:
            tuning["minimized"] = f"-{spec.metric} (higher is better: the tuner's means are its negation)"
    outcome = None
    if not withheld and spec.metric in (statistics or {}):
        outcome = _verdict(plan, per_seed, statistics, tuning, equivalence)
    elif not withheld:
        withheld.append(f"no relative change of {spec.metric} (a baseline value of 0)")
    not_applicable = dict(NOT_APPLICABLE)
    if plan.tuner is None:
        not_applicable["tuning"] = ("the file declares no [tune] table" if spec.tune is None else
                                    "--no-tune: the arms ran at their parameters as given")
    if runner.seed_check is None:
        not_applicable["seed_check"] = "one seed in all: no second seed to compare"
    if len(per_seed) < 4:
        not_applicable["fragile_and_stalled"] = (f"{len(per_seed)} paired seed(s): leaving one out, and telling "
                                                 "a stalled seed from the rest, need 4 or more")
    arm_blocks = {}
    for arm, given in zip(("baseline", "method"), arms, strict=True):
        chosen = given if paired is None else getattr(paired, arm)
        decisive = [metrics[spec.metric] for metrics in values[arm].values()]
        arm_blocks[arm] = {"label": plan.labels[arm], "settings": given.settings, "params": chosen.params,
                           "tuning": _arm_tuning(tuning, plan.param, arm),
                           "report": summarize(decisive) if decisive else None}
    changed = check_source_unchanged(plan.experiment, plan.source, request.run.repo_root, request.run.publish,
                                     request.run.allow_dirty, plan.artifact)  # before any write
    artifact = {
        "schema": SCHEMA,
        "name": spec.name,
        "created": created or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": request.run.command or "",
        "experiment": {"file": str(plan.experiment.path), "sha256": plan.experiment.sha256,
                       "command": spec.command, "files": sorted(plan.experiment.files),
                       "metric": spec.metric, "direction": spec.direction,
                       "read": spec.read.model_dump(by_alias=True, exclude_none=True),
                       "params": spec.params, "derived": spec.derived},
        "protocol": {"report_seeds": request.seeds,
                     "tuning": None if plan.tuner is None else {
                         "protocol": "grid", "param": plan.param, "grid": list(plan.tuner.grid),
                         "seeds": list(plan.tuner.seeds), "confirm_seeds": list(plan.tuner.confirm_seeds),
                         "extend_edges": plan.tuner.extend_edges, "probe": plan.tuner.probe},
                     "timeout_s": plan.timeout, "margin_percent": request.margin, "allow_noop": request.allow_noop},
        "tuned": tuning is not None,
        "tuning": tuning,
        "baseline": arm_blocks["baseline"],
        "method": arm_blocks["method"],
        "checks": {"seed": runner.seed_check,
                   "no_op": None if equivalence is None else {
                       "how": equivalence.how, "same_function": equivalence.same_function,
                       "reason": equivalence.reason,
                       "allowed_noop": request.allow_noop and equivalence.same_function}},
        "not_applicable": not_applicable,
        "runs": runner.records,
        "wall_seconds": wall_summary(runner.records)["total_s"],  # cached runs at the time they took when they ran
        "wall": wall_summary(runner.records),
        "per_seed": per_seed,
        "statistics": statistics,
        "verdict": outcome,
        "verdict_withheld": "; ".join(withheld) or None,
        "family": None,
        "provenance": {"files": plan.experiment.files,
                       "git": {key: plan.source[key] for key in ("commit", "dirty", "files_dirty")},
                       "llmevo": plan.source["llmevo"],
                       "published": {"allow_dirty": request.run.allow_dirty} if request.run.publish else None,
                       "libraries": library_versions(), **({} if changed is None else {"code_changed": changed})},
    }
    if request.run.publish and family is not None:  # the published family, this comparison in it
        artifact["family"] = family(plan.artifact, artifact)
    plan.artifact.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(plan.artifact, artifact)
    if request.report:
        write_text_atomic(plan.artifact.with_suffix(".md"), readme(artifact))
    return artifact


def _verdict(plan: ExternalPlan, per_seed: Sequence[Mapping[str, Any]], statistics: Mapping[str, Any],
             tuning: Mapping[str, Any] | None, equivalence: Equivalence | None) -> dict[str, Any]:
    """``eval.stats.decide`` (every verdict's function: the class, no-op, stalled seeds), the
    fragile seeds (``eval.stats.fragile_seeds``) and a tuned choice on its grid's edge, in the
    verdict's own sentence."""
    spec, request = plan.experiment.spec, plan.request
    noop = equivalence.reason if equivalence is not None and equivalence.same_function else None
    outcome = decide(spec.metric, per_seed, statistics, request.margin, plan.labels["method"],
                     lower_is_better=spec.lower_is_better, noop_reason=noop)
    classification = outcome.get("classification")
    if classification is not None and classification != "no-op" and len(per_seed) >= 4:
        fragile = fragile_seeds([row["seed"] for row in per_seed], [row["baseline"][spec.metric] for row in per_seed],
                                [row["method"][spec.metric] for row in per_seed], classification, request.margin,
                                spec.lower_is_better)
        outcome["fragile_seeds"] = fragile
        if fragile:
            outcome["summary"] += (f" Fragile: leaving out seed {', '.join(map(str, fragile))} changes the class.")
    edges = [] if tuning is None else [
        f"the {arm} chose {plan.param} {block['chosen']['lr']:g}, on the "
        f"{'top' if block['chosen']['lr'] >= max(s['lr'] for s in block['settings']) else 'bottom'} edge of its grid"
        + (" after extending it" if block["extended"] else "")
        for arm, block in tuning["arms"].items() if block["chosen_on_edge"]]
    if edges:  # a choice on the grid's edge is said in the verdict's own sentence
        outcome["summary"] += f" Tuning: {'; '.join(edges)}; a wider grid may move the choice and the verdict."
    return outcome


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
        chosen = {arm: "none (no setting trained)" if artifact[arm]["tuning"] is None
                  else artifact[arm]["tuning"]["chosen"] for arm in ("baseline", "method")}
        lines += [f"Tuned `{tuning['param']}` over {tuning['grid']} on seeds {tuning['seeds']} (both arms); "
                  f"chosen: baseline {chosen['baseline']}, method {chosen['method']}.", ""]
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
