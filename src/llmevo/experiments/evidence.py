"""The whole evidence table in one command: ``reproduce --all``.

``run_evidence(EvidenceRequest(preset="quick"))`` runs, one after another, the tuned
reproduction of every registered component against its declared ablation and of the
declared ``--against`` comparisons (``evidence_entries``), each exactly as ``llmevo
reproduce NAME [--against OTHER]`` would (``ReproductionRequest`` with ``tune=True``: the
same grid, seeds and artifact). Then, when published, it regenerates the leaderboard and the
README's evidence table (``reports.leaderboard.regenerate``).

**Which comparisons.** Every component with an ablation, except: post-training methods
(their arms share one pretraining, so they have no tuned verdict), components built for
diagnostics only (``implementation_status == "component_only"``), and the reverse of a pair
already in the table (swiglu vs gelu is gelu vs swiglu read backwards: the entry is the one
that is *not* llama_modern's own choice). Plus llama_modern's own choice as the baseline where
the declared ablation is another component (alibi vs rope, relu2 and geglu vs swiglu). Each
row is an experiment file in ``experiments/`` (``EXPERIMENTS``), the table the files there.

**How each is tuned: the protocol of record.** A comparison of optimizers (its file's ``tune_space``)
searches each arm's declared tuning space with the same number of Sobol trials (``reproduce NAME
--tune-space full --tune-trials 8``; an optimizer's verdict moves with more than its lr, Wen et
al. 2509.02046); every other comparison tunes each arm's lr over the grid (``reproduce NAME``;
an architecture component declares only lr). So the table rebuilt by one command is the table
published, artifact for artifact (``Entry.tune_space``).

**Shared arms train once**: through the arm cache (``runner.cache``), a baseline arm that
several comparisons share (llama_modern itself, for every optimizer, attention, norm and
block component) is trained under each setting once.

**Resuming.** A state file (``<out>/evidence-state.json``, written atomically after each
comparison) records each finished comparison with its artifact, the artifact's sha256, the
digest of the code its runs reach (the arm cache's code digest) and the digest of its request
(``request_sha256``: preset, seeds, tuning, steps, data; not the command, the cache folder or
the thread count). A comparison finished under the same code and request digests, whose
artifact is still there with the same sha256, is not run again (other seeds or another trial
count run it again): a table killed midway and restarted continues where it stopped (and the arm cache
keeps the runs of the comparison that was interrupted).

**Time limit.** With ``time_limit_minutes`` each comparison runs in a child process that is
stopped at the limit (its training workers die with it); it is recorded as ``timed_out``
and the table goes on with the next. The runs it finished are in the arm cache.

**Several machines** (``storage``): the comparisons become items of a work queue on an
Optuna RDB study (``experiments.work_queue``, the storage ``evolve`` and shared ladders use);
each worker pops one, runs it and stores its artifact's bytes on the trial; the worker that
finds every item complete writes every artifact (and regenerates the table when published).
A comparison with an arm an earlier comparison also has waits until the first comparison
with that arm is complete (``shared_arm_needs``), so two workers never train a shared arm
at once: with one arm cache (one machine, or a cache folder the machines share) every run
is trained once. Workers with separate caches each train a shared arm they need.

Public API: ``Entry``, ``evidence_entries``, ``EXPERIMENTS``, ``EvidenceRequest``,
``EvidencePlan``, ``EntryOutcome``, ``EntryEvent``, ``run_evidence``, ``shared_arm_needs``,
``request_sha256``, ``STATE_FILE``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import stat
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from llmevo.artifacts.io import check_output_dir, write_bytes_atomic, write_json_atomic
from llmevo.artifacts.provenance import REPO_ROOT, CodeState
from llmevo.artifacts.schema import read_json
from llmevo.catalog import full_registry
from llmevo.digests import sha256_file
from llmevo.errors import ConfigError
from llmevo.experiments.pipeline import ReproductionRequest, code_state, reproduce
from llmevo.experiments.plans import ReproductionPlan
from llmevo.experiments.sections import (
    LaunchSection,
    RunSection,
    SizeSection,
    TrainingSection,
    TuningSection,
    read_experiment,
)
from llmevo.registry import SectionedRequest, Seeds
from llmevo.runner.cache import arm_parts, canonical_json
from llmevo.runner.presets import Preset
from llmevo.train.trainer import Progress

EXPERIMENTS = REPO_ROOT / "experiments"  # the evidence table: one experiment file per row
ROW_FIELDS = frozenset({"name", "against", "preset", "tune", "tune_space"})  # a row's own; the table sets the rest
STATE_FILE = "evidence-state.json"
Status = Literal["finished", "timed_out", "failed"]


@dataclass(frozen=True)
class Entry:
    """One comparison of the table: ``name`` against its ablation, or against ``against``;
    ``tune_space``: ``"full"`` where its protocol of record is space tuning, else None (lr)."""

    name: str
    against: str | None = None
    tune_space: str | None = None

    @property
    def label(self) -> str:
        return self.name if self.against is None else f"{self.name} --against {self.against}"


def evidence_entries(only: Sequence[str] | None = None, folder: Path = EXPERIMENTS) -> list[Entry]:
    """The table's rows: one experiment file each in ``folder`` (``experiments/`` at the
    repository root; each is also ``llmevo reproduce FILE``), read as reproduction requests, in
    the registry's order with the ``--against`` rows last; ``only``: just these names' rows (an
    unknown name is an error)."""
    order = {spec.name: index for index, spec in enumerate(full_registry().all())}
    entries = []
    for path in sorted(Path(folder).glob("*.toml")):
        row = read_experiment(path, ReproductionRequest)  # validated whole when its comparison is planned
        other = sorted(set(row) - ROW_FIELDS)
        if other or "name" not in row:
            raise ConfigError(f"{path}: a row of the evidence table holds {', '.join(sorted(ROW_FIELDS))} "
                              f"(name at least); {', '.join(other) or 'no name'} is the table's to set")
        entries.append(Entry(row["name"], row.get("against"), row.get("tune_space")))
    if not entries:
        raise ConfigError(f"no experiment file (*.toml) in {folder}: the evidence table's rows")
    entries.sort(key=lambda entry: (entry.against is not None, order.get(entry.name, len(order)), entry.label))
    if only is not None:
        known = {entry.name for entry in entries}
        unknown = [name for name in only if name not in known]
        if unknown:
            raise ConfigError(f"--only {unknown[0]}: not a comparison of the evidence table; "
                              f"known: {', '.join(sorted(known))}")
        entries = [entry for entry in entries if entry.name in set(only)]
    return entries


class EvidenceRequest(SectionedRequest):
    """The whole table at ``preset`` (default quick), tuned as every reproduction of record.
    ``only``: component names to run (every comparison of each); ``seeds``, the ``run`` and
    ``train`` sections, the size (``--rung``, ``--tokens-per-parameter``, ...), ``tune_seeds``,
    ``tune_confirm`` and ``tune_noise`` pass to each reproduction, ``tune_grid`` and ``tune_probe`` to each lr-tuned one, ``tune_trials`` and ``tune_sampler`` to each
    space-tuned one (defaults: the reproduction's; see the module docstring for which is which);
    ``time_limit_minutes``: a comparison still running at the limit is stopped and recorded
    ``timed_out``; ``out``: the folder of the state file (default ``runs/evidence/<preset>``);
    ``publish``: artifacts under docs/ and the leaderboard and README table regenerated at
    the end, with ``references`` (default: the ``reference-artifacts`` folder beside
    ``data_dir``, when it exists, as ``llmevo leaderboard`` reads it); ``storage``: share the
    table with other workers (see the module docstring)."""

    # the section fields the table reads; any other (a comparison's own size, training, seeds
    # of tuning, ...) applies to one comparison and is refused, from Python as from the CLI
    takes: ClassVar[frozenset[str] | None] = frozenset({
        *RunSection.model_fields.keys() - {"replace", "replicas_max", "val_every", "arm_cache"},
        "steps", *TuningSection.model_fields.keys() - {"tune_seeds"}, *LaunchSection.model_fields,
        *SizeSection.model_fields.keys() - {"param", "match"}})
    untaken: ClassVar[str] = "--all runs the whole table; {options} applies to one comparison"
    refused: ClassVar[dict[str, str]] = {
        "tune": "--all tunes every comparison",
        "tune_space": ("--all tunes each comparison by its protocol of record (optimizers over their "
                       "declared space, the rest over the lr grid); --tune-space applies to one comparison"),
    }

    preset: str | Preset = "quick"
    only: list[str] | None = None
    seeds: Seeds | None = None
    time_limit_minutes: float | None = Field(default=None, gt=0)
    out: Path | None = None
    storage: str | None = None
    study: str | None = None
    regenerate: bool = True  # with publish: the leaderboard and the README table at the end
    references: list[Path] | None = None  # reference artifacts in the leaderboard (None: beside the data)
    run: RunSection
    train: TrainingSection = Field(default_factory=TrainingSection)
    tuning: TuningSection = Field(default_factory=TuningSection)
    size: SizeSection = Field(default_factory=SizeSection)
    launch: LaunchSection = Field(default_factory=LaunchSection)

    @field_validator("only")
    @classmethod
    def _only(cls, only: list[str] | None) -> list[str] | None:
        if only is not None and not only:  # an empty filter is not "no filter": nothing would be chosen
            raise ConfigError("--only: give at least one component, e.g. --only rope,muon")
        return only

    def request(self, entry: Entry) -> ReproductionRequest:
        """The reproduction of one comparison of the table: this table's run, training and
        tuning sections, the grid's options to an lr-tuned comparison, the trials to a
        space-tuned one."""
        command = f"{self.run.command or 'python: llmevo.experiments.run_evidence'} ({entry.label})"
        return ReproductionRequest(
            name=entry.name, against=entry.against, preset=self.preset, seeds=self.seeds,
            run=self.run.model_copy(update={"command": command}), train=self.train,
            tuning=self.tuning.for_protocol(entry.tune_space), size=self.size)

    def plan(self) -> EvidencePlan:
        """Every comparison planned once, before any work (``ReproductionRequest.plan``)."""
        if self.study is not None and self.storage is None:
            raise ConfigError("--study applies to --storage only")
        self.launch.check(self.storage)
        preset_name = self.preset if isinstance(self.preset, str) else self.preset.name
        folder = self.out or Path("runs/evidence") / preset_name
        check_output_dir(folder, "--out")
        check_state_file(folder / STATE_FILE)  # before any work, not after the first comparison
        entries, digests, arm_keys = [], [], []
        for entry in evidence_entries(only=self.only):
            request = self.request(entry)
            plan = request.plan()
            entries.append((entry, plan))
            digests.append(request_sha256(request))
            arm_keys.append(tuple(canonical_json(arm_parts(arm)) for arm in plan.comparison.arms))
        if not entries:
            raise ConfigError("no comparison to run")
        for option, value in (("--tune-trials", self.tuning.tune_trials), ("--tune-sampler", self.tuning.tune_sampler)):
            if value is not None and all(entry.tune_space is None for entry, _ in entries):
                raise ConfigError(f"{option} applies to the space-tuned (optimizer) comparisons; none is "
                                  "chosen (the others tune lr over --tune-grid)")
        return EvidencePlan(request=self, folder=folder, entries=entries, digests=digests, arm_keys=arm_keys)


def shared_arm_needs(arm_keys: Sequence[Sequence[str]]) -> dict[int, list[int]]:
    """For each comparison (by index), the earlier comparisons it waits for: for every arm an
    earlier comparison also has, the first comparison that has it (its trainer)."""
    first: dict[str, int] = {}
    needs: dict[int, list[int]] = {}
    for index, keys in enumerate(arm_keys):
        needs[index] = sorted({first[key] for key in keys if key in first})
        for key in keys:
            first.setdefault(key, index)
    return needs


@dataclass(frozen=True)
class EvidencePlan:
    request: EvidenceRequest
    folder: Path
    entries: list[tuple[Entry, ReproductionPlan]]  # each comparison planned once
    digests: list[str]  # per comparison, what it asks (``request_sha256``)
    arm_keys: list[tuple[str, ...]]  # per comparison, its arms (``runner.cache.arm_parts``)

    @property
    def state_path(self) -> Path:
        return self.folder / STATE_FILE


@dataclass(frozen=True)
class EntryOutcome:
    """What became of one comparison: its artifact and verdict class, or why it has none."""

    label: str
    status: Status
    artifact: str | None = None
    artifact_sha256: str | None = None
    classification: str | None = None
    change_percent: float | None = None
    wall_seconds: float = 0.0
    message: str | None = None
    code_sha256: str | None = None
    cpu_seconds: float | None = None  # the verdict's cost (setup.cpu_seconds of its artifact)
    request_sha256: str | None = None  # what was asked (``request_sha256``); None: not recorded
    skipped: bool = False  # finished before, under the same code: not run again


@dataclass(frozen=True)
class EntryEvent:
    """A progress display's view: comparison ``index`` of ``total`` starts (outcome None) or ends."""

    index: int
    total: int
    label: str
    elapsed_seconds: float
    eta_seconds: float | None
    outcome: EntryOutcome | None = None


def _code_sha256() -> str:
    from llmevo.experiments.reproduction import cache_code_modules
    from llmevo.runner.cache import source_sha256

    return source_sha256(modules=cache_code_modules())


def check_state_file(path: Path) -> None:
    """The state file's path before any work: absent, or a regular file that reads as a state
    file (a folder, a FIFO, a device or an unreadable file there is refused, never replaced);
    its folder must be writable (``check_output_dir`` of the folder checks that)."""
    try:
        mode = path.stat().st_mode  # stat, not open: opening a FIFO would block
    except FileNotFoundError:
        if path.is_symlink():
            raise ConfigError(f"state file {path} is a broken symbolic link; remove it or pass "
                              "another --out") from None
        return
    except OSError as error:
        raise ConfigError(f"state file {path}: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ConfigError(f"state file {path} is {kind}; move it away or pass another --out")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"state file {path} is not readable; fix its permissions or pass another --out")
    _load_state(path)  # a file that is not a state file fails now too


def _load_state(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        raise ConfigError(f"{path}: not an evidence-table state file; move it away or pass another --out")
    return data["entries"]


REQUEST_FIELDS_NOT_DIGESTED = {"command", "cache_dir", "threads"}  # how it runs, not what it measures


def request_sha256(request: ReproductionRequest) -> str:
    """The digest of what a comparison asks for (every field, sections flattened, but
    ``REQUEST_FIELDS_NOT_DIGESTED``)."""
    asked = request.flat(exclude=REQUEST_FIELDS_NOT_DIGESTED)
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()


def _still_finished(record: dict[str, Any] | None, code: str, request: str) -> bool:
    """A state record of a comparison that need not run again: finished under ``code`` for the
    same ``request`` digest, its artifact still there with the recorded digest."""
    if (not record or record.get("status") != "finished" or record.get("code_sha256") != code
            or record.get("request_sha256") != request):
        return False
    artifact = Path(record.get("artifact") or "")
    return artifact.is_file() and sha256_file(artifact) == record.get("artifact_sha256")


def _outcome(entry: Entry, artifact_path: Path, wall: float, code: str) -> EntryOutcome:
    from llmevo.artifacts.schema import load_artifact

    artifact = load_artifact(artifact_path)
    verdict = getattr(artifact, "verdict", None)
    change = getattr(artifact, "headline_change", (None, None, None, None))[1]
    return EntryOutcome(entry.label, "finished", str(artifact_path), sha256_file(artifact_path),
                        verdict.classification if verdict else None, change, wall, code_sha256=code,
                        cpu_seconds=artifact.setup.cpu_seconds)


def _child(plan: ReproductionPlan, results: Any, code_state: CodeState | None) -> None:
    """A comparison in a child process (time-limited runs): its artifact path, or its error."""
    try:
        reproduce(plan, code=code_state)
        results.put(("ok", str(plan.outputs.artifact if plan.outputs else "")))
    except BaseException as error:  # reported to the parent as one line
        lines = str(error).strip().splitlines() or [type(error).__name__]
        results.put(("error", lines[0] if isinstance(error, ConfigError) else
                     f"{type(error).__name__}: {lines[0]} ({traceback.format_exc(limit=1).splitlines()[-1]})"))


def _run_entry(entry: Entry, plan: ReproductionPlan, time_limit: float | None, code: str,
               progress: Progress | None, code_state: CodeState | None = None) -> EntryOutcome:
    """One comparison, in this process or (``time_limit``) in a child; ``code_state``: what
    its provenance records, read when the table started (see ``table_code_states``)."""
    started = time.perf_counter()
    artifact_path = plan.outputs.artifact  # type: ignore[union-attr]
    if time_limit is None:
        try:
            reproduce(plan, progress, code=code_state)
        except ConfigError as error:
            return EntryOutcome(entry.label, "failed", wall_seconds=time.perf_counter() - started,
                                message=str(error))
        return _outcome(entry, artifact_path, time.perf_counter() - started, code)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_child, args=(plan, results, code_state), daemon=False)
    child.start()
    child.join(time_limit * 60)
    wall = time.perf_counter() - started
    if child.is_alive():
        child.terminate()
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
        return EntryOutcome(entry.label, "timed_out", wall_seconds=wall,
                            message=f"stopped at the {time_limit:g}-minute limit (its finished runs are in the arm cache)")
    kind, value = results.get() if not results.empty() else ("error", f"exit status {child.exitcode}")
    if kind != "ok":
        return EntryOutcome(entry.label, "failed", wall_seconds=wall, message=value)
    return _outcome(entry, Path(value), wall, code)


def run_evidence(request: EvidenceRequest | EvidencePlan, progress: Progress | None = None,
                 on_entry: Callable[[EntryEvent], None] | None = None,
                 on_status: Callable[[str], None] | None = None) -> list[EntryOutcome]:
    """Run every comparison not finished before under the same code (see the module
    docstring), record each in the state file as it ends, and, when published, regenerate
    the leaderboard and the README table; return every comparison's outcome in table order.
    With a launcher (``launch``), submitted jobs are the workers (``experiments.launcher``;
    ``on_status`` gets the jobs' states) and this process waits for them."""
    plan = request.plan() if isinstance(request, EvidenceRequest) else request
    ask = plan.request
    ask.run.prologue()
    if ask.launch.launcher is not None:
        return _launched(plan, on_status)
    code = _code_sha256()
    states = table_code_states(plan)
    if ask.storage is not None:
        outcomes = _run_shared(plan, code, progress, on_entry, states)
    else:
        state = _load_state(plan.state_path)
        outcomes, started, durations = [], time.perf_counter(), []
        for index, (entry, reproduction) in enumerate(plan.entries):
            remaining = len(plan.entries) - index
            eta = sum(durations) / len(durations) * remaining if durations else None
            if on_entry is not None:
                on_entry(EntryEvent(index, len(plan.entries), entry.label, time.perf_counter() - started, eta))
            record, asked = state.get(entry.label), plan.digests[index]
            if _still_finished(record, code, asked):
                outcome = EntryOutcome(**{**record, "skipped": True})  # type: ignore[arg-type]
            else:
                outcome = replace(_run_entry(entry, reproduction, ask.time_limit_minutes, code, progress,
                                             states[entry.label]), request_sha256=asked)
                durations.append(outcome.wall_seconds)
                state[entry.label] = {k: v for k, v in asdict(outcome).items() if k != "skipped"}
                write_json_atomic(plan.state_path, {"preset": str(ask.preset if isinstance(ask.preset, str)
                                                                   else ask.preset.name),
                                                    "entries": state})
            outcomes.append(outcome)
            if on_entry is not None:
                remaining = len(plan.entries) - index - 1
                eta = sum(durations) / len(durations) * remaining if durations else None
                on_entry(EntryEvent(index, len(plan.entries), entry.label, time.perf_counter() - started,
                                    eta, outcome))
    if ask.run.publish and ask.regenerate:
        from llmevo.reports.leaderboard import regenerate

        regenerate(ask.run.repo_root, references=reference_folders(ask))
    return outcomes


def _launched(plan: EvidencePlan, on_status: Callable[[str], None] | None) -> list[EntryOutcome]:
    """The table run by launched jobs, each a worker of its queue (``storage``) with the same
    request; the leaderboard regenerated once here, after every job."""
    from llmevo.experiments.launcher import job_folder, launch
    from llmevo.experiments.work_queue import queue_progress

    ask = plan.request
    worker = ask.updated(launch={}, regenerate=False)
    labels = dict(enumerate(entry.label for entry, _ in plan.entries))
    study, _ = _queue_study(plan, _code_sha256())  # the one the workers open: the same request and code

    def describe() -> str | None:
        return queue_progress(ask.storage or "", study, labels, "comparison", _finished_line)

    outcomes = launch(functools.partial(run_evidence, worker), ask.launch,
                      job_folder(ask.launch, plan.folder), f"llmevo-evidence-{plan.folder.name}", on_status,
                      describe)
    if ask.run.publish and ask.regenerate:
        from llmevo.reports.leaderboard import regenerate

        regenerate(ask.run.repo_root, references=reference_folders(ask))
    return outcomes


def table_code_states(plan: EvidencePlan) -> dict[str, CodeState]:
    """Each comparison's code state, all read now, before the first artifact is written:
    a published comparison's artifact makes the tree dirty, so a state read when the next
    comparison starts would refuse to publish it (or, allowed, record it dirty)."""
    return {entry.label: code_state(reproduction) for entry, reproduction in plan.entries}


def reference_folders(request: EvidenceRequest) -> list[Path]:
    """The reference artifacts the regenerated leaderboard keeps (``llmevo leaderboard``'s)."""
    if request.references is not None:
        return list(request.references)
    beside = Path(request.run.data_dir).parent / "reference-artifacts"
    return [beside] if beside.is_dir() else []


def _queue_study(plan: EvidencePlan, code: str) -> tuple[str, dict[str, Any]]:
    """The table's work-queue study: its name (``--study``, else one derived from the
    description) and its description (what makes two workers' tables the same)."""
    ask = plan.request
    labels = [entry.label for entry, _ in plan.entries]
    description = {"kind": "evidence table", "comparisons": labels, "code_sha256": code,
                   "preset": ask.preset if isinstance(ask.preset, str) else ask.preset.model_dump(mode="json"),
                   "seeds": ask.seeds, "tune_grid": ask.tuning.tune_grid, "tune_confirm": ask.tuning.tune_confirm,
                   "tune_trials": ask.tuning.tune_trials, "steps": ask.train.steps, "publish": ask.run.publish,
                   **({} if ask.tuning.tune_sampler is None else {"tune_sampler": ask.tuning.tune_sampler}),
                   **({} if ask.tuning.tune_fidelity is None else {"tune_fidelity": ask.tuning.tune_fidelity}),
                   **({} if ask.tuning.tune_noise is None else {"tune_noise": ask.tuning.tune_noise}),
                   **({} if ask.tuning.tune_probe is None else {"tune_probe": ask.tuning.tune_probe})}
    digest = hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:12]
    return ask.study or f"evidence-{digest}", description


def _finished_line(trial: Any) -> str | None:
    """A finished comparison's part of the launched table's progress line."""
    outcome = trial.user_attrs.get("outcome") or {}
    if outcome.get("status") != "finished":
        return None if not outcome else f"{outcome.get('label')} {outcome.get('status')}"
    change = outcome.get("change_percent")
    return (f"{outcome.get('label')} {outcome.get('classification')}"
            + ("" if change is None else f" {change:+.2f}%"))


def _run_shared(plan: EvidencePlan, code: str, progress: Progress | None,
                on_entry: Callable[[EntryEvent], None] | None,
                states: dict[str, CodeState]) -> list[EntryOutcome]:
    """This worker's share of the table on the work queue; every artifact written at the end."""
    from llmevo.experiments.work_queue import open_work_queue, run_work_queue

    ask = plan.request
    labels = [entry.label for entry, _ in plan.entries]
    name, description = _queue_study(plan, code)
    study = open_work_queue(ask.storage or "", name, description, list(range(len(labels))), 5, 20)
    started = time.perf_counter()

    def run(index: int, _: dict) -> dict[str, Any]:
        entry, reproduction = plan.entries[index]
        if on_entry is not None:
            on_entry(EntryEvent(index, len(labels), entry.label, time.perf_counter() - started, None))
        outcome = _run_entry(entry, reproduction, ask.time_limit_minutes, code, progress,
                             states[entry.label])
        attrs: dict[str, Any] = {"outcome": asdict(outcome)}
        if outcome.artifact is not None:
            attrs["artifact_text"] = Path(outcome.artifact).read_text(encoding="utf-8")
        if on_entry is not None:
            on_entry(EntryEvent(index, len(labels), entry.label, time.perf_counter() - started, None, outcome))
        return attrs

    done = run_work_queue(study, list(range(len(labels))), shared_arm_needs(plan.arm_keys), run,
                          grace_period=20, poll_seconds=2.0, wait_timeout=24 * 3600, noun="comparison")
    outcomes = []
    for index in range(len(labels)):
        attrs = done[index].user_attrs
        outcome = EntryOutcome(**attrs["outcome"])
        if outcome.artifact is not None and "artifact_text" in attrs:
            path = Path(outcome.artifact)
            data = attrs["artifact_text"].encode("utf-8")
            if not path.is_file() or path.read_bytes() != data:
                write_bytes_atomic(path, data)
        outcomes.append(outcome)
    return outcomes
