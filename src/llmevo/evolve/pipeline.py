"""The evolution pipeline as one typed function: ``run(settings) -> EvolutionSummary``.

``EvolutionSettings`` names the search (preset, study, storage, sampler, trials, workers,
population, ...) and the final evaluation (seeds, report folder); ``run`` builds the search
space from the promoted components, runs the Optuna study (resumable: finished trials
count), picks the champion on validation, evaluates champion and baseline once on test,
collects provenance and writes ``summary.json``, the README and the plots under
``runs/evolve/<study>/`` (``publish``: ``docs/evolution/<study>/``, refused from a checkout
with uncommitted changes unless ``allow_dirty``, the same policy as ``llmevo reproduce``).

The command line (``llmevo evolve``) only turns its options into settings and prints what
``run`` reports through ``notify``; from Python::

    from llmevo.evolve import EvolutionSettings, run
    summary = run(EvolutionSettings(preset="smoke", trials=4, data_dir="data"))

Public API: ``EvolutionSettings``, ``EvolutionSummary``, ``run``, ``explain``, ``search_space``,
``PROMOTION_RULES``, ``masked``.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import optuna
import torch
from optuna.trial import FrozenTrial
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmevo.artifacts.io import write_json_atomic
from llmevo.artifacts.provenance import (
    CodeState,
    capture_code_state,
    check_publishable,
    collect_provenance,
    module_files,
)
from llmevo.catalog import ensure_registered
from llmevo.errors import ConfigError
from llmevo.evolve import engine
from llmevo.evolve.champion import baseline_trial, final_evaluation, select_champion
from llmevo.evolve.fair import (
    DEFAULT_TRIAL_LR_FACTORS,
    knockout_lines,
    knockout_variants,
    trial_lr_grid,
    tuned_final_evaluation,
)
from llmevo.evolve.fair import explain as explain_genes
from llmevo.evolve.genome import Genome
from llmevo.evolve.report import build_summary, write_report
from llmevo.evolve.space import SearchSpace, build_search_space
from llmevo.promotion import Promotion, promotions
from llmevo.registry import RequestModel
from llmevo.runner import tuning
from llmevo.runner.presets import Preset, get_preset
from llmevo.runner.tuning import TuningPlan
from llmevo.train.device import accelerator_name, resolve_device
from llmevo.train.many import Execution, check_path

REPO_ROOT = Path(__file__).resolve().parents[3]
IMPLEMENTATION_MODULES = (
    "llmevo.evolve.genome", "llmevo.evolve.space", "llmevo.evolve.sampler",
    "llmevo.evolve.pruner", "llmevo.evolve.objective", "llmevo.evolve.engine",
    "llmevo.evolve.champion", "llmevo.evolve.report", "llmevo.model.transformer",
    "llmevo.train.trainer", "llmevo.eval.lm", "llmevo.eval.suites", "llmevo.eval.metrics",
    "llmevo.eval.stats", "llmevo.runner.presets", "llmevo.runner.run",
    "llmevo.runner.data", "llmevo.evolve.fair", "llmevo.runner.tuning",
)

PROMOTION_RULES: dict[str, Callable[[dict[str, Promotion]], frozenset[str]]] = {
    "evidence": lambda decisions: frozenset(n for n, d in decisions.items() if d.promoted),
    "manifest": lambda decisions: frozenset(
        n for n, d in decisions.items() if d.reason.startswith("declared")),
}


def masked(url: str) -> str:
    """The storage URL with any password replaced by ***."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


class EvolutionSettings(RequestModel):
    """One evolution run. ``study`` defaults to ``evolve-<preset>[-s<trial_steps>]``,
    ``storage`` to ``sqlite:///runs/evolve/<study>.db``, ``out`` to ``runs/evolve/<study>``
    (``publish``: ``docs/evolution/<study>``, refused from a dirty checkout of ``repo_root``
    unless ``allow_dirty``, which provenance records), ``threads`` to CPU cores / workers;
    ``seeds`` are the final evaluation's (and
    ``explain``'s) report seeds. Each trial trains at its lr times each of
    ``trial_lr_factors`` and is scored by the best (empty: one lr, with hurdles);
    ``final_tune`` tunes champion and baseline on ``tune_grid`` (default: 5 from lr/3 to
    3*lr) under ``tune_seeds`` before the final comparison (a best at the stability edge is
    confirmed on ``tune_confirm`` more seeds, as in ``llmevo.runner.tuning``)."""

    preset: str = "quick"
    trials: int = Field(default=24, ge=1)
    workers: int = Field(default=1, ge=1)
    storage: str | None = None
    study: str | None = None
    sampler: str = "regularized"
    seeds: list[int] = Field(default_factory=lambda: list(tuning.DEFAULT_REPORT_SEEDS), min_length=1)
    population: int = Field(default=8, ge=1)
    tournament: int = Field(default=3, ge=1)
    rescore_seeds: int = Field(default=2, ge=0)
    score_k: float = 1.0
    data_dir: Path
    cache_dir: Path = Path(".cache/llmevo")
    device: str = "auto"  # auto, cpu, cuda or mps (checked by resolve_device)
    trial_steps: int | None = Field(default=None, ge=1)
    eval_windows: int | None = Field(default=None, ge=1)
    heartbeat: int = Field(default=5, ge=1)
    grace_period: int = Field(default=20, ge=1)
    sampler_seed: int | None = None
    out: Path | None = None
    report: bool = True
    threads: int | None = Field(default=None, ge=1)
    promotion: Literal["evidence", "manifest"] = "evidence"
    docs: Path = Path("docs")
    tensorboard: Path | None = None
    trial_lr_factors: list[float] = Field(default_factory=lambda: list(DEFAULT_TRIAL_LR_FACTORS))
    final_tune: bool = True
    tune_grid: list[float] | None = None
    tune_seeds: list[int] = Field(default_factory=lambda: [2000])
    tune_confirm: int | None = None  # None: tuning.DEFAULT_CONFIRM
    path: str = "auto"  # how rescoring and final seeds train: auto or sequential (llmevo.train.many)
    replicas_max: int | None = None  # (checked by check_path) at most this many seeds of a genome at once
    publish: bool = False
    allow_dirty: bool = False
    command: str | None = None
    repo_root: Path = REPO_ROOT

    def study_name(self) -> str:
        if self.study is not None:
            return self.study
        return f"evolve-{self.preset}" + (f"-s{self.trial_steps}" if self.trial_steps else "")

    def storage_url(self) -> str:
        return self.storage if self.storage is not None else f"sqlite:///runs/evolve/{self.study_name()}.db"

    def report_folder(self) -> Path:
        if self.out is not None:
            return self.out
        return Path("docs/evolution" if self.publish else "runs/evolve") / self.study_name()

    def presets(self) -> tuple[Preset, Preset]:
        """(trial preset, final-evaluation preset): ``trial_steps`` applies to both,
        ``eval_windows`` to the trials only."""
        base = get_preset(self.preset)
        return (base.override({"steps": self.trial_steps, "eval_max_windows": self.eval_windows}),
                base.override({"steps": self.trial_steps}))


class EvolutionSummary(BaseModel):
    """``summary.json`` of an evolution run (schema v2 style; extra keys kept)."""

    model_config = ConfigDict(extra="allow")

    schema_version: int
    kind: Literal["evolution"]
    study: str
    settings: dict[str, Any]
    search_space: dict[str, Any]
    dataset: dict[str, Any]
    trial_counts: dict[str, int]
    champion: dict[str, Any]
    baseline: dict[str, Any] | None
    final_evaluation: dict[str, Any]
    evaluation_protocol: dict[str, Any]
    trials: list[dict[str, Any]]
    provenance: dict[str, Any]

    @property
    def verdict(self) -> str:
        """The champion-vs-baseline verdict on test fitness."""
        return str(self.final_evaluation["verdict"]["test"]["summary"])


def search_space(settings: EvolutionSettings) -> tuple[SearchSpace, dict[str, Promotion]]:
    """The space the study searches, and each component's promotion decision."""
    engine.check_sampler(settings.sampler)
    trial_preset, _ = settings.presets()
    registry = ensure_registered()
    decisions = promotions(registry, settings.docs)
    promoted = PROMOTION_RULES[settings.promotion](decisions)
    return build_search_space(registry, trial_preset, promoted=promoted), decisions


def _ignore(message: str) -> None:
    return None


@dataclass(frozen=True)
class _Prepared:
    """Everything ``run`` and ``explain`` check and build before any work."""

    space: SearchSpace
    engine: engine.EvolveSettings
    final_preset: Preset
    plan: TuningPlan | None
    execution: Execution
    factors: tuple[float, ...]


def _prepare(settings: EvolutionSettings) -> _Prepared:
    space, decisions = search_space(settings)
    execution = Execution(settings.path, settings.replicas_max)
    check_path(execution.path, execution.replicas_max)
    promoted = PROMOTION_RULES[settings.promotion](decisions)
    trial_preset, final_preset = settings.presets()
    factors = tuple(settings.trial_lr_factors)
    if factors:
        trial_lr_grid(1.0, factors)  # refuses a bad grid before any work
    plan = tuning.check_plan(
        settings.tune_grid or tuning.default_grid(final_preset.train.lr), settings.tune_seeds,
        settings.seeds, confirm=tuning.DEFAULT_CONFIRM if settings.tune_confirm is None
        else settings.tune_confirm) if settings.final_tune else None
    if not settings.final_tune and settings.tune_confirm is not None:
        raise ConfigError("--tune-confirm needs the final tuning: drop --no-final-tune")
    if not Path(settings.data_dir).is_dir():
        raise ConfigError(f"data directory {settings.data_dir} does not exist")
    resolve_device(settings.device)  # refuses an unavailable device before any work
    if settings.publish:
        check_publishable(settings.repo_root, settings.allow_dirty)  # before any work
    engine.check_storage_url(settings.storage_url())
    engine_settings = engine.EvolveSettings(
        study_name=settings.study_name(), storage_url=settings.storage_url(), preset=trial_preset,
        sampler=settings.sampler, trials=settings.trials, workers=settings.workers,
        population=settings.population, tournament=settings.tournament,
        rescore_seeds=settings.rescore_seeds, score_k=settings.score_k,
        sampler_seed=settings.sampler_seed, data_dir=Path(settings.data_dir).resolve(),
        cache_dir=Path(settings.cache_dir).resolve(), device=settings.device,
        promoted=tuple(sorted(promoted)),
        threads_per_worker=settings.threads or max(1, (os.cpu_count() or 1) // settings.workers),
        heartbeat_interval=settings.heartbeat, grace_period=settings.grace_period, lr_factors=factors,
        execution_path=execution.path, replicas_max=execution.replicas_max,
        tensorboard_dir=settings.tensorboard.resolve() if settings.tensorboard is not None else None,
    )
    return _Prepared(space, engine_settings, final_preset, plan, execution, factors)


def _champion_genome(champion: FrozenTrial) -> Genome:
    return Genome.from_json(champion.user_attrs.get("tuned_genome") or champion.user_attrs["genome"])


def _code_state(settings: EvolutionSettings) -> CodeState:
    """The code this invocation runs, read before any training (a commit or an edit made
    while the study trains must not reach the report's provenance)."""
    return capture_code_state(
        module_files([importlib.import_module(m) for m in IMPLEMENTATION_MODULES]),
        Path(engine.__file__), settings.repo_root)


def run(settings: EvolutionSettings, notify: Callable[[str], None] = _ignore) -> EvolutionSummary | None:
    """Run (or resume) the study, then evaluate the champion and write the report.

    Returns the summary, or None with ``settings.report`` off (search only). ``notify``
    receives one line per stage (study state, search done, champion, report path).
    Interrupting (KeyboardInterrupt) leaves the study resumable: run the same settings again."""
    prepared = _prepare(settings)
    engine_settings = prepared.engine
    study_name, storage_url = engine_settings.study_name, engine_settings.storage_url
    logs = None
    if settings.tensorboard is not None:
        from llmevo.train.logging import TensorBoardLogs

        logs = TensorBoardLogs(settings.tensorboard)  # checks that tensorboard is installed, before any work
    engine.quiet_optuna()
    engine.prepare_context(engine_settings, prepared.space)  # data files verified before the study file exists
    opened = engine.open_study(engine_settings, prepared.space, engine.open_storage(engine_settings))  # errors before training
    code = _code_state(settings)
    already = len(engine.finished_trials(opened))
    notify(f"study {study_name} at {masked(storage_url)}: {already} of {settings.trials} trials "
           f"finished; {settings.workers} worker(s), {engine_settings.threads_per_worker} thread(s) each")
    started = time.perf_counter()
    engine.run_workers(engine_settings)
    search_seconds = time.perf_counter() - started
    finished = engine.finished_trials(opened)
    notify(f"search: {len(finished)} finished trials, {search_seconds:.0f} s")
    if not settings.report:
        return None
    summary = _final_report(settings, prepared, opened, code, search_seconds, notify, logs)
    try:
        return EvolutionSummary.model_validate(summary)
    except ValidationError as error:  # a bug in build_summary, not user input
        raise AssertionError(f"evolution summary does not match its schema: {error}") from error


def _final_report(settings: EvolutionSettings, prepared: _Prepared, opened: optuna.Study, code: CodeState,
                  search_seconds: float, notify: Callable[[str], None],
                  logs: Any = None) -> dict[str, Any]:
    """Pick the study's champion, train it and llama_modern again under ``settings.seeds``,
    evaluate both once on test and write the report (``summary.json``, README, plots) into
    ``settings.report_folder()``; returns the summary. Same study, seeds and data: the same
    numbers, so a removed report is rebuilt as it was (provenance aside)."""
    space, engine_settings, final_preset = prepared.space, prepared.engine, prepared.final_preset
    study_name, storage_url = engine_settings.study_name, engine_settings.storage_url
    champion = select_champion(opened)
    baseline = baseline_trial(opened)
    notify(f"champion: trial {champion.number} score {champion.user_attrs['score']:.4f}"
           f" ({champion.user_attrs.get('label')})")
    torch.set_num_threads(settings.threads or os.cpu_count() or 1)
    context_settings = engine.EvolveSettings(**{**engine_settings.__dict__, "preset": final_preset})
    context = engine.prepare_context(context_settings, space)
    device = resolve_device(settings.device)
    seeds = list(settings.seeds)
    final_tuning = None
    if prepared.plan is not None:
        final, final_tuning, _ = tuned_final_evaluation(
            _champion_genome(champion), space.baseline, context.data, context.preset, seeds,
            prepared.plan, device, logs=logs, execution=prepared.execution,
            post_data=context.post_data)
    else:
        final = final_evaluation(_champion_genome(champion), space.baseline, context.data,
                                 context.preset, seeds, device, logs=logs, execution=prepared.execution,
                                 post_data=context.post_data)
    folder = settings.report_folder()
    provenance = collect_provenance(
        command=settings.command or f"python: llmevo.evolve.run(study={study_name!r})",
        code=code, dataset_fingerprint=context.data.fingerprint,
        accelerator=accelerator_name(device), artifact_path=str(folder / "summary.json"),
        allow_dirty=settings.allow_dirty if settings.publish else None,
    )
    summary = build_summary(
        opened,
        settings={"sampler": settings.sampler, "preset": settings.preset,
                  "trial_preset": engine_settings.preset.model_dump(mode="json"),
                  "final_preset": context.preset.model_dump(mode="json"), "trials": settings.trials,
                  "workers": settings.workers, "population": settings.population,
                  "tournament": settings.tournament, "rescore_seeds": settings.rescore_seeds,
                  "score_k": settings.score_k, "search_seed": engine_settings.search_seed,
                  "final_seeds": seeds, "storage_display": masked(storage_url),
                  "study": study_name, "search_wall_seconds_this_invocation": search_seconds,
                  "trial_lr_factors": list(prepared.factors)},
        space=space.describe(), champion=champion, baseline=baseline, final=final,
        provenance=provenance,
        dataset={"fingerprint": context.data.fingerprint, "variant": final_preset.variant,
                 "train_stream_tokens": int(context.data.stream.numel()),
                 "validation_tokens": int(context.data.validation.numel()),
                 "test_tokens": int(context.data.test.numel())},
    )
    if final_tuning is not None:
        summary["final_tuning"] = final_tuning
    paths = write_report(summary, opened, folder)
    notify(f"report: {paths['readme']}")
    return summary


def explain(settings: EvolutionSettings, genes: list[str] | None = None,
            notify: Callable[[str], None] = _ignore) -> dict[str, Any]:
    """Knock out each gene (or only ``genes``) where the study's champion differs from
    llama_modern, train each variant under ``settings.seeds``, write ``knockouts.json`` into
    the report folder and merge the knockouts into the study report (``summary.json`` and
    its README). A missing report (a removed folder, a fresh clone) is rebuilt first as
    ``run`` writes it: the final evaluation is not kept in the study, so champion and
    llama_modern are trained and tested again (same seeds and data: the same numbers);
    with ``settings.report`` off only ``knockouts.json`` is written.

    Returns the knockouts block; ``notify`` receives its table, one line at a time."""
    prepared = _prepare(settings)
    engine_settings, space = prepared.engine, prepared.space
    engine.quiet_optuna()
    database = engine.sqlite_path(engine_settings.storage_url)
    if database is not None and not database.exists():  # opening would create an empty one
        raise ConfigError(f"no study '{engine_settings.study_name}': {database} does not exist; "
                          "run `llmevo evolve --study NAME` first, or pass --storage")
    storage = engine.open_storage(engine_settings, heartbeat=False)
    if engine_settings.study_name not in optuna.get_all_study_names(storage=storage):
        raise ConfigError(f"no study '{engine_settings.study_name}' in "
                          f"{masked(engine_settings.storage_url)}; run `llmevo evolve` first or "
                          "pass --study/--storage")
    opened = engine.open_study(engine_settings, space, storage)
    champion = select_champion(opened)
    genome = _champion_genome(champion)
    variants = knockout_variants(genome, space.baseline, space, genes)  # an unknown gene: ConfigError now
    folder = settings.report_folder()
    summary_path = folder / "summary.json"
    rebuild = settings.report and not summary_path.exists()
    code = _code_state(settings) if rebuild else None
    seeds = list(settings.seeds)
    notify(f"explaining trial {champion.number}: {len(variants)} variant(s) x {len(seeds)} seed(s)")
    torch.set_num_threads(settings.threads or os.cpu_count() or 1)
    context = engine.prepare_context(
        engine.EvolveSettings(**{**engine_settings.__dict__, "preset": prepared.final_preset}), space)
    knockouts = explain_genes(genome, space.baseline, space, context.data, prepared.final_preset,
                              seeds, resolve_device(settings.device), genes, post_data=context.post_data)
    knockouts["champion_trial"] = champion.number
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "knockouts.json", knockouts)
    if code is not None:
        notify(f"no study report in {folder}: evaluating the champion and llama_modern on test "
               "to rebuild it")
        summary: dict[str, Any] | None = _final_report(settings, prepared, opened, code, 0.0, notify)
    elif summary_path.exists():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    else:
        summary = None
    if summary is not None:
        summary["knockouts"] = knockouts
        write_report(summary, opened, folder)
    for line in knockout_lines(knockouts):
        notify(line)
    notify(f"knockouts: {folder / 'knockouts.json'}")
    return knockouts
