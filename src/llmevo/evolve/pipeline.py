"""The evolution pipeline as one typed function: ``run(settings) -> EvolutionSummary``.

``EvolutionSettings`` names the search (preset, study, storage, sampler, trials, workers,
population, ...) and the final evaluation (seeds, report folder); ``EvolutionSettings.plan()``
checks it and resolves it once into an ``EvolutionPlan`` (``evolve.plan``), which the
workers receive. ``run`` builds the search space from the promoted components, prepares
the data once, runs the Optuna study (resumable: finished trials count), picks the
champion on validation, compares it with llama_modern as ``reproduce --genome`` does (the one
comparison path, ``experiments.reproduction``: the typed ``final-comparison.json`` with its
margin class; each run's test split evaluated once), collects provenance and writes ``summary.json``, the README and the plots under ``runs/evolve/<study>/``
(``publish``: ``docs/evolution/<study>/``, refused from a checkout with uncommitted
changes unless ``allow_dirty``, the same policy as ``llmevo reproduce``).

The command line (``llmevo evolve``) only turns its options into settings and prints what
``run`` reports through ``notify``; from Python::

    from llmevo.evolve import EvolutionSettings, run
    summary = run(EvolutionSettings(preset="smoke", trials=4, data_dir="data"))

Public API: ``EvolutionSettings``, ``EvolutionSummary``, ``run``, ``explain``, ``search_space``,
``PROMOTION_RULES``, ``masked``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

import optuna
import torch
from optuna.trial import FrozenTrial
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from llmevo.artifacts.io import save_artifact, write_json_atomic
from llmevo.artifacts.provenance import (
    CodeState,
    capture_code_state,
    collect_provenance,
    module_sources,
    pipeline_modules,
)
from llmevo.artifacts.schema import ReproductionArtifact
from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.evolve import workers
from llmevo.evolve.champion import (
    FINAL_COMPARISON,
    FinalEvaluation,
    baseline_trial,
    comparison_plan,
    select_champion,
)
from llmevo.evolve.knockouts import explain as explain_genes
from llmevo.evolve.knockouts import knockout_lines, knockout_variants
from llmevo.evolve.lr_grid import DEFAULT_TRIAL_LR_FACTORS, trial_lr_grid
from llmevo.evolve.objective import SEARCH_SEED, TrialContext
from llmevo.evolve.plan import EvolutionPlan
from llmevo.evolve.proposer import DEFAULT_TIMEOUT as DEFAULT_PROPOSER_TIMEOUT
from llmevo.evolve.proposer import proposer_summary, resolve_proposer
from llmevo.evolve.report import build_summary, write_report
from llmevo.evolve.space import SearchSpace, build_search_space
from llmevo.evolve.study import (
    SAMPLER_ATTR,
    SAMPLER_SEED_ATTR,
    SEARCH_SETTINGS,
    SEARCH_SETTINGS_ATTR,
    check_sampler,
    finished_trials,
    open_storage,
    open_study,
)
from llmevo.experiments import reproduction
from llmevo.experiments.sections import (
    EVOLUTION_REFUSED,
    LaunchSection,
    RunSection,
    SizeSection,
    TuningSection,
    prologue,
)
from llmevo.model.config import ModelConfig
from llmevo.promotion import Promotion, promotions
from llmevo.registry import SectionedRequest, Seeds
from llmevo.runner import tuning
from llmevo.runner.genome import Genome
from llmevo.runner.presets import Preset, get_preset
from llmevo.runner.resources import check_memory
from llmevo.runner.size import Size, size_label
from llmevo.runner.storage import check_storage_url, quiet_optuna, sqlite_path
from llmevo.train.device import accelerator_name, resolve_device
from llmevo.train.logging import RunLogs

REPO_ROOT = Path(__file__).resolve().parents[3]

PROMOTION_RULES: dict[str, Callable[[dict[str, Promotion]], frozenset[str]]] = {
    "evidence": lambda decisions: frozenset(n for n, d in decisions.items() if d.promoted),
    "manifest": lambda decisions: frozenset(
        n for n, d in decisions.items() if d.reason.startswith("declared")),
}


def masked(url: str) -> str:
    """The storage URL with any password replaced by ***."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


DEFAULT_SAMPLER_SEED = 0  # fixed: the same command proposes the same genomes (one worker)
FINAL_TUNING_SEEDS = (2000,)  # the final comparison's tuning seed: none of the trials' or the report's
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class EvolutionSettings(SectionedRequest):
    """One evolution run. ``study`` defaults to ``evolve-<preset>[-s<trial_steps>]``,
    ``storage`` to ``sqlite:///runs/evolve/<study>.db``, ``out`` to ``runs/evolve/<study>``
    (``publish``: ``docs/evolution/<study>``, refused from a dirty checkout of ``repo_root``
    unless ``allow_dirty``, which provenance records), ``threads`` to CPU cores / workers;
    ``seeds`` are the final evaluation's (and
    ``explain``'s) report seeds. Each trial trains at its lr times each of
    ``trial_lr_factors`` and is scored by the best (empty: one lr, with hurdles);
    ``final_tune`` tunes champion and baseline on ``tune_grid`` (default: 5 from lr/3 to
    3*lr) under ``tune_seeds`` (default 2000) before the final comparison (a best at the
    seed noise ``tune_noise`` of the best, and a best at the stability edge, are re-scored on
    ``tune_confirm`` more seeds, as in ``llmevo.runner.tuning``; ``tune_probe`` False: no
    adequacy probe above the grid's top).
    ``proposer`` (a command line) chooses each trial's genome in place of the sampler
    (``evolve.proposer``; each call may take ``proposer_timeout`` seconds); the options that
    configure only the sampler, and more than one worker, are refused with it.

    Sections (``experiments.sections``, each field also flat): ``run`` (``path`` is how
    rescoring and final seeds train: auto or sequential), ``tuning`` (the final comparison's),
    ``size`` (the dial: ``rung``, or ``d_model``/``layers``/``heads``) and ``launch``
    (``launcher``: the workers are ``jobs`` submitit jobs on the study's storage instead of
    ``workers`` local processes; this process waits for them, then writes the report)."""

    refused: ClassVar[dict[str, str]] = EVOLUTION_REFUSED  # declared torch-free: evolve lists no refused option

    preset: str = "quick"
    trials: int = Field(default=24, ge=1)
    workers: int = Field(default=1, ge=1)
    storage: str | None = None
    study: str | None = None
    sampler: str = "regularized"
    seeds: Seeds = Field(default_factory=lambda: list(tuning.DEFAULT_REPORT_SEEDS))
    population: int = Field(default=8, ge=2)
    tournament: int = Field(default=3, ge=1)
    rescore_seeds: int = Field(default=2, ge=0)
    score_k: float = Field(default=1.0, ge=0)
    trial_steps: int | None = Field(default=None, ge=1)
    eval_windows: int | None = Field(default=None, ge=1)
    heartbeat: int = Field(default=5, ge=1)
    grace_period: int = Field(default=20, ge=1)
    sampler_seed: int = Field(default=DEFAULT_SAMPLER_SEED, ge=0, le=2**32 - 1)  # numpy seeds Optuna's samplers
    out: Path | None = None
    report: bool = True
    promotion: Literal["evidence", "manifest"] = "evidence"
    docs: Path = Path("docs")
    tensorboard: Path | None = None
    trial_lr_factors: list[float] = Field(default_factory=lambda: list(DEFAULT_TRIAL_LR_FACTORS))
    final_tune: bool = True
    proposer: str | None = None  # a command choosing each genome in place of the sampler
    proposer_timeout: float = Field(default=DEFAULT_PROPOSER_TIMEOUT, gt=0)
    run: RunSection
    tuning: TuningSection = Field(default_factory=TuningSection)
    size: SizeSection = Field(default_factory=SizeSection)
    launch: LaunchSection = Field(default_factory=LaunchSection)
    _resolved: Size | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _resolve_size(self) -> EvolutionSettings:
        # resolved once: an unknown rung, heads that do not divide d_model, zero steps fail here
        self._resolved = self.size.resolve(self.preset)
        return self

    @property
    def resolved_size(self) -> Size | None:
        """The size dial resolved (``runner.size.size_dial``), or None when no size is asked for."""
        return self._resolved

    def base_model(self) -> ModelConfig:
        """The baseline genome's model: llama_modern, at the dial's size when one is asked for."""
        return ModelConfig() if self._resolved is None else self._resolved.model

    @property
    def final_tuning_seeds(self) -> list[int]:
        """The final comparison's tuning seeds: ``tune_seeds`` when given, else 2000."""
        return list(self.tuning.tune_seeds) if "tune_seeds" in self.tuning.given() \
            else list(FINAL_TUNING_SEEDS)

    @model_validator(mode="after")
    def _tournament_fits(self) -> EvolutionSettings:
        if self.tournament > self.population:
            raise ConfigError(f"--tournament {self.tournament} exceeds --population {self.population}")
        if self.grace_period <= self.heartbeat:  # a live trial would be failed between two beats
            raise ConfigError(f"--grace-period {self.grace_period} must exceed --heartbeat {self.heartbeat}: "
                              "a running trial beats every heartbeat, and one silent for the grace "
                              "period is failed and retried")
        if "docs" in self.model_fields_set and not Path(self.docs).is_dir():  # silently: no evidence
            raise ConfigError(f"--docs {self.docs}: no such folder (where the published reproductions "
                              "that promote components are found)")
        name = self.study_name()  # a study name becomes a file name: a name, never a path
        if not STUDY_NAME.fullmatch(name) or ".." in name:
            raise ConfigError(f"--study '{name[:60]}': expected a name of letters, digits, '.', '_' "
                              "or '-' (at most 100, no path separators)")
        return self

    @model_validator(mode="after")
    def _proposer_applies(self) -> EvolutionSettings:
        """A proposer replaces the sampler: an option that configures only the sampler is
        refused with it, as is more than one worker (each genome is proposed from the whole
        history, so trials finish one after another)."""
        given = self.model_fields_set
        if self.proposer is None:
            if "proposer_timeout" in given:
                raise ConfigError("--proposer-timeout applies to --proposer; drop it")
            return self
        for field, option in (("sampler", "--sampler"), ("sampler_seed", "--sampler-seed"),
                              ("tournament", "--tournament")):
            if field in given:
                raise ConfigError(f"{option} configures the sampler, which --proposer replaces; drop it")
        if "population" in given and self.trial_lr_factors:
            raise ConfigError("--population sizes the sampler's population and the hurdles' "
                              "reference, and trials scored on --trial-lr-factors have no hurdles: "
                              "with --proposer it would be ignored; drop it")
        if self.workers > 1:
            raise ConfigError(f"--workers {self.workers}: a proposer study runs one worker (each "
                              "genome is proposed from the whole history of finished trials); "
                              "drop --workers")
        if self.launch.launcher is not None and self.launch.jobs > 1:
            raise ConfigError(f"--jobs {self.launch.jobs}: a proposer study runs one worker (each "
                              "genome is proposed from the whole history of finished trials); --jobs 1")
        return self

    @model_validator(mode="after")
    def _launch_applies(self) -> EvolutionSettings:
        self.launch.check(self.storage_url())
        if self.launch.launcher is not None and "workers" in self.model_fields_set and self.workers > 1:
            raise ConfigError("--workers counts local worker processes; with --launcher each job is one "
                              "worker: give --jobs instead")
        return self

    @classmethod
    def option(cls, field: str) -> str:
        """The command-line option of ``field``; evolve sets its path by ``--sequential``."""
        return "--sequential" if field == "path" else super().option(field)

    def given(self, *names: str) -> list[str]:
        """The options of ``names`` (fields of the settings or of a section) given a value other
        than their default, as options (``--seeds``): an explicit default asks for nothing, so
        a refusal reads this, never whether a value was merely passed."""
        found = []
        for name in names:
            owner = self if name in type(self).model_fields else next(
                getattr(self, section) for section, kind in self.sections().items() if name in kind.model_fields)
            default = type(owner).model_fields[name].get_default(call_default_factory=True)
            value = getattr(owner, name)
            if name in owner.model_fields_set and value != default:  # a flag by its spelling given
                found.append(f"--no-{self.option(name)[2:]}" if value is False and default is True
                             else self.option(name))
        return found

    def study_name(self) -> str:
        if self.study is not None:
            return self.study
        label = size_label(self._resolved)
        return (f"evolve-{self.preset}" + (f"-{label}" if label else "")
                + (f"-s{self.trial_steps}" if self.trial_steps else ""))

    def storage_url(self) -> str:
        return self.storage if self.storage is not None else f"sqlite:///runs/evolve/{self.study_name()}.db"

    def report_folder(self) -> Path:
        if self.out is not None:
            return self.out
        return Path("docs/evolution" if self.run.publish else "runs/evolve") / self.study_name()

    def presets(self) -> tuple[Preset, Preset]:
        """(trial preset, final-evaluation preset): ``trial_steps`` applies to both,
        ``eval_windows`` to the trials only; the size dial sets quick's batch, steps and warmup."""
        size = self._resolved
        base = get_preset(self.preset) if size is None else size.preset
        return (base.override({"steps": self.trial_steps, "eval_max_windows": self.eval_windows}),
                base.override({"steps": self.trial_steps}))

    def plan(self) -> EvolutionPlan:
        """The request checked and resolved once, before any work: the sampler, both
        presets, the components the space holds, how seeds train, the trial lr grid, the
        final tuning plan; the data folder, the device, a publishable checkout and the
        storage URL are checked here too."""
        check_sampler(self.sampler)
        trial_preset, final_preset = self.presets()
        promoted = PROMOTION_RULES[self.promotion](promotions(full_registry(), self.docs))
        run = self.run
        execution = run.execution()
        factors = tuple(self.trial_lr_factors)
        if factors:
            trial_lr_grid(1.0, factors)  # refuses a bad grid
        given = self.tuning
        if not self.final_tune:
            for option in ("tune_confirm", "tune_grid", "tune_seeds", "tune_noise", "tune_probe"):
                if option in given.given():
                    raise ConfigError(f"{given.option(option)} needs the final tuning: drop --no-final-tune")
        final_tuning = given.model_copy(update={"tune_seeds": self.final_tuning_seeds}).tuner(
            final_preset.train.lr, list(self.seeds)) if self.final_tune else None
        # the prologue (threads are the workers'); the study's own report may be there,
        # uncommitted (then --explain)
        prologue(Path(run.data_dir), None, run.publish, run.allow_dirty, run.repo_root, self.report_folder(),
                 cache_dir=Path(run.cache_dir))
        device = resolve_device(run.device)  # refuses an unavailable device
        # the memory check a reproduction makes: llama_modern at the study's size, as many runs
        # at once as the workers train (each trial trains its genome at every lr factor at once)
        check_memory("evolution: llama_modern at the study's size", self.base_model(), trial_preset.train,
                     device, self.workers * max(1, len(factors)))
        study_name, storage_url = self.study_name(), self.storage_url()
        check_storage_url(storage_url)
        return EvolutionPlan(
            study_name=study_name, storage_url=storage_url, sampler=self.sampler,
            trials=self.trials, workers=self.workers,
            threads_per_worker=run.threads or max(1, (os.cpu_count() or 1) // self.workers),
            population=self.population, tournament=self.tournament,
            sampler_seed=self.sampler_seed, heartbeat=self.heartbeat,
            grace_period=self.grace_period, trial_preset=trial_preset, promoted=promoted,
            base_model=self.base_model(), rung=self.size.rung, size=self._resolved,
            rescore_seeds=self.rescore_seeds, score_k=self.score_k,
            lr_factors=factors, execution=execution,
            tensorboard=self.tensorboard.resolve() if self.tensorboard is not None else None,
            final_preset=final_preset, seeds=tuple(self.seeds), tuning=final_tuning,
            threads=run.threads or os.cpu_count() or 1, report=self.report,
            report_folder=self.report_folder(), run=run,
            proposer=None if self.proposer is None else resolve_proposer(
                self.proposer, self.proposer_timeout, Path.cwd()),
        )


# what only the final comparison reads (how its arms are tuned), and the rest only the report reads
FINAL_TUNING = ("final_tune", "tune_grid", "tune_seeds", "tune_confirm", "tune_noise", "tune_probe")
REPORT_ONLY = ("seeds", *FINAL_TUNING, "publish", "allow_dirty")
# what only a search reads: --explain trains the knockouts of a study's champion (the sampler,
# its budget and its workers, the trials' scoring and heartbeats, TensorBoard curves of trials)
SEARCH_ONLY = ("trials", "workers", "sampler", "population", "tournament", "sampler_seed", "rescore_seeds",
               "score_k", "heartbeat", "grace_period", "tensorboard")

REPORT_FILES = ("summary.json", FINAL_COMPARISON, "README.md", "fitness.png", "fitness_vs_parameters.png")


def check_report_files(folder: Path, names: tuple[str, ...] = REPORT_FILES) -> None:
    """Before any work: each file the report writes in ``folder`` is absent or a regular file.
    A folder there failed the write after the search and the final comparison, with the files
    before it written; a FIFO was silently replaced. Checked by ``stat`` (opening a FIFO
    blocks), with or without ``--replace`` (neither can be replaced by a file)."""
    for name in names:
        path = folder / name
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            continue
        except OSError as error:
            raise ConfigError(f"{path}: {error.strerror or error}; move it away or pass --out another folder") from None
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise ConfigError(f"{path} is {kind}, where the study report writes a file; move it away "
                              "or pass --out another folder")


def read_summary(summary: Path, what_to_do: str = "move it away, pass --out another folder, or --replace"
                 ) -> dict[str, Any]:
    """A study report's ``summary.json`` as a dict; one that does not read as one is a line."""
    try:
        old = json.loads(summary.read_text(encoding="utf-8"))
        int(old["trial_counts"]["complete"])
        {int(seed) for seed in old["final_evaluation"]["seeds"]}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise ConfigError(f"{summary} is there and is not a readable evolution summary; {what_to_do}") from None
    return old


def check_report_replacement(summary: Path, storage_url: str, trials: int, seeds: list[int],
                             replace: bool) -> None:
    """A study report is never replaced by one that holds less, unless ``replace``: checked
    before any work, as a reproduction's artifact is. Less: final-comparison seeds the new
    report lacks, or more complete trials than a study on a new SQLite file can reach (a study
    whose storage holds its trials keeps them, and its report lists them again). A file there
    that is not a readable summary is replaced only when asked too."""
    check_report_files(summary.parent)
    if replace or not summary.is_file():
        return
    old = read_summary(summary)
    complete = int(old["trial_counts"]["complete"])
    old_seeds = {int(seed) for seed in old["final_evaluation"]["seeds"]}
    lost = []
    database = sqlite_path(storage_url)
    if database is not None and not database.exists() and trials < complete:
        lost.append(f"{complete} complete trials (a new study here runs {trials})")
    missing = sorted(old_seeds - set(seeds))
    if missing:
        lost.append(f"final-comparison seed{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}")
    if lost:
        raise ConfigError(f"{summary} holds {' and '.join(lost)}, which this run's report would not; "
                          "pass --replace to replace it, or --out another folder")


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
        """The champion-vs-baseline verdict of record: the final comparison artifact's
        (``final_evaluation.verdict_of_record``, on its validation metric, with its class); a
        summary written before the final comparison had an artifact gives its test-fitness one."""
        final = self.final_evaluation
        return str((final.get("verdict_of_record") or final["verdict"]["test"])["summary"])


def search_space(settings: EvolutionSettings) -> tuple[SearchSpace, dict[str, Promotion]]:
    """The space the study searches, and each component's promotion decision."""
    check_sampler(settings.sampler)
    trial_preset, _ = settings.presets()
    registry = full_registry()
    decisions = promotions(registry, settings.docs)
    promoted = PROMOTION_RULES[settings.promotion](decisions)
    return (build_search_space(registry, trial_preset, base_model=settings.base_model(),
                               promoted=promoted), decisions)


def _ignore(message: str) -> None:
    return None


def _champion_genome(champion: FrozenTrial) -> Genome:
    return Genome.from_json(champion.user_attrs.get("tuned_genome") or champion.user_attrs["genome"])


def _code_state(plan: EvolutionPlan) -> CodeState:
    """The code this invocation runs, read before any training (a commit or an edit made
    while the study trains must not reach the report's provenance): the modules the
    pipeline reaches through its imports, and the architecture every genome builds (reached
    through the catalog, which ``pipeline_modules`` does not follow)."""
    modules = pipeline_modules("llmevo.evolve.pipeline", "llmevo.model.transformer")
    return capture_code_state(module_sources(modules),
                              Path(workers.__file__), plan.repo_root)


def run(settings: EvolutionSettings, notify: Callable[[str], None] = _ignore) -> EvolutionSummary | None:
    """Run (or resume) the study, then evaluate the champion and write the report.

    Returns the summary, or None with ``settings.report`` off (search only). ``notify``
    receives one line per stage (study state, search done, champion, report path).
    Interrupting (KeyboardInterrupt) leaves the study resumable: run the same settings again."""
    plan = settings.plan()
    if not plan.report:  # a search with --no-report writes no report: each was silently ignored
        ignored = settings.given("out", "replace", *REPORT_ONLY)
        if ignored:
            raise ConfigError(f"{', '.join(ignored)} {'applies' if len(ignored) == 1 else 'apply'} to the "
                              "study report, and --no-report writes none (nor its final comparison); drop "
                              f"{'it' if len(ignored) == 1 else 'them'} or --no-report")
    if plan.report:  # before any work: the report folder's summary is not replaced by less
        check_report_replacement(plan.report_folder / "summary.json", plan.storage_url, plan.trials,
                                 list(plan.seeds), settings.run.replace)
    quiet_optuna()
    space = workers.build_space(plan)
    context = workers.prepare_context(plan, space)  # data files verified before the study file exists
    opened = open_study(plan, space, open_storage(plan))  # errors before training
    code = _code_state(plan)
    already = len(finished_trials(opened))
    notify(f"study {plan.study_name} at {masked(plan.storage_url)}: {already} of {plan.trials} trials "
           f"finished; {plan.workers} worker(s), {plan.threads_per_worker} thread(s) each")
    started = time.perf_counter()
    if settings.launch.launcher is not None:  # the workers are launched jobs on the study's storage
        from llmevo.experiments.launcher import job_folder, launch

        launch([functools.partial(workers.worker_main, plan, index) for index in range(settings.launch.jobs)],
               settings.launch, job_folder(settings.launch, plan.report_folder), f"llmevo-{plan.study_name}",
               notify)
    else:
        workers.run_workers(plan, context)
    search_seconds = time.perf_counter() - started
    finished = finished_trials(opened)
    notify(f"search: {len(finished)} finished trials, {search_seconds:.0f} s")
    if not plan.report:
        return None
    summary = _final_report(plan, context, opened, code, search_seconds, notify, context.logs)
    try:
        return EvolutionSummary.model_validate(summary)
    except ValidationError as error:  # a bug in build_summary, not user input
        raise AssertionError(f"evolution summary does not match its schema: {error}") from error


def _size_settings(plan: EvolutionPlan) -> dict[str, Any]:
    """The size dial in the summary's settings (none without it): the rung and the sizes."""
    model = plan.base_model
    if model == ModelConfig():
        return {} if plan.rung is None else {"rung": plan.rung}
    return {"rung": plan.rung, "d_model": model.d_model, "layers": model.n_layers,
            "heads": model.n_heads}


def _search_settings(plan: EvolutionPlan, opened: optuna.Study, rebuilt: bool) -> dict[str, Any]:
    """The search's settings for the report: this invocation's, or, for a report rebuilt by
    ``--explain`` (which searches nothing), those the study was created with (None where a
    study from before they were stored does not hold them; ``rebuilt_by`` says so)."""
    sampler = "proposer" if plan.proposer is not None else plan.sampler
    if not rebuilt:
        return {"sampler": sampler, **{name: getattr(plan, name) for name in SEARCH_SETTINGS},
                "sampler_seed": plan.sampler_seed}
    stored = opened.user_attrs.get(SEARCH_SETTINGS_ATTR) or {}
    return {"sampler": opened.user_attrs.get(SAMPLER_ATTR),
            **{name: stored.get(name) for name in SEARCH_SETTINGS},
            "sampler_seed": opened.user_attrs.get(SAMPLER_SEED_ATTR), "rebuilt_by": "explain"}


def _final_report(plan: EvolutionPlan, context: TrialContext, opened: optuna.Study, code: CodeState,
                  search_seconds: float, notify: Callable[[str], None],
                  logs: RunLogs | None = None, rebuilt: bool = False) -> dict[str, Any]:
    """Pick the study's champion, compare it with llama_modern under ``plan.seeds`` through the
    one comparison path (``champion.comparison_plan`` -> ``reproduction.run_reproduction``:
    tuned arms, paired seeds, statistics, the classed verdict), write its typed artifact
    (``final-comparison.json``) and the report (``summary.json``, README, plots) into
    ``plan.report_folder``; returns the summary. Same study, seeds and data: the same
    numbers, so a removed report is rebuilt as it was (provenance aside)."""
    space = context.space
    champion = select_champion(opened)
    baseline = baseline_trial(opened)
    notify(f"champion: trial {champion.number} score {champion.user_attrs['score']:.4f}"
           f" ({champion.user_attrs.get('label')})")
    compared = comparison_plan(plan, _champion_genome(champion), champion.number, plan.final_preset,
                               context.device)  # a champion it cannot compare: refused before training
    torch.set_num_threads(plan.threads)
    seeds = list(plan.seeds)
    outcome = reproduction.run_reproduction(compared, logs=logs)
    final = FinalEvaluation.from_runs(outcome.runs, seeds)
    folder = plan.report_folder

    def provenance_of(path: Path) -> dict[str, Any]:
        return collect_provenance(
            command=plan.command, code=code, dataset_fingerprint=context.data.fingerprint,
            accelerator=accelerator_name(context.device), artifact_path=str(path),
            allow_dirty=plan.allow_dirty if plan.publish else None, publish=plan.publish)

    artifact_path = folder / FINAL_COMPARISON
    # both files' provenance before either is written: code changed since the start refuses
    # publishing with nothing written (artifacts.provenance.check_code_unchanged)
    comparison_provenance = provenance_of(artifact_path)
    summary_provenance = provenance_of(folder / "summary.json")
    folder.mkdir(parents=True, exist_ok=True)
    artifact = save_artifact(outcome.record(comparison_provenance), artifact_path)
    assert isinstance(artifact, ReproductionArtifact)
    notify(f"final comparison: {artifact_path}")
    summary = build_summary(
        opened,
        settings={**_search_settings(plan, opened, rebuilt), "preset": plan.trial_preset.name,
                  "trial_preset": plan.trial_preset.model_dump(mode="json"),
                  "final_preset": context.final_preset.model_dump(mode="json"),
                  "search_seed": SEARCH_SEED,
                  "study_sampler_seed": opened.user_attrs.get(SAMPLER_SEED_ATTR),
                  "final_seeds": seeds, "storage_display": masked(plan.storage_url),
                  "study": plan.study_name, "search_wall_seconds_this_invocation": search_seconds,
                  "trial_lr_factors": list(plan.lr_factors), **_size_settings(plan)},
        space=space.describe(), champion=champion, baseline=baseline, final=final,
        provenance=summary_provenance,
        dataset={"fingerprint": context.data.fingerprint, "variant": plan.final_preset.variant,
                 "train_stream_tokens": int(context.data.stream.numel()),
                 "validation_tokens": int(context.data.validation.numel()),
                 "test_tokens": int(context.data.test.numel())},
        comparison=artifact,
        proposer=proposer_summary(opened, plan.proposer, plan.trials),
    )
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
    plan = settings.plan()
    # each silently ignored before; without a report to rebuild, the final comparison's
    # options and how its seeds train are not read either (the knockouts train one at a time)
    ignored = settings.given(*SEARCH_ONLY, *(() if plan.report else (*FINAL_TUNING, "path", "replicas_max")))
    if ignored:
        raise ConfigError(f"{', '.join(ignored)} {'does' if len(ignored) == 1 else 'do'} not apply to --explain, "
                          "which trains the knockouts of the study's champion" +
                          ("" if plan.report else " and, with --no-report, rebuilds no report"))
    if settings.run.replace:  # silently ignored before
        raise ConfigError("--replace applies to a search's study report; --explain adds its knockouts "
                          "to the report and replaces nothing (drop --replace)")
    # before any work: what the knockouts will be written beside (a FIFO, a folder or a
    # summary that does not read failed after the knockouts trained, or hung)
    check_report_files(plan.report_folder, ("knockouts.json", *REPORT_FILES))
    summary_path = plan.report_folder / "summary.json"
    existing = read_summary(summary_path, "move it away or pass --out another folder") if summary_path.exists() else None
    quiet_optuna()
    database = sqlite_path(plan.storage_url)
    if database is not None and not database.exists():  # opening would create an empty one
        raise ConfigError(f"no study '{plan.study_name}': {database} does not exist; "
                          "run `llmevo evolve --study NAME` first, or pass --storage")
    storage = open_storage(plan, heartbeat=False)
    if plan.study_name not in optuna.get_all_study_names(storage=storage):
        raise ConfigError(f"no study '{plan.study_name}' in "
                          f"{masked(plan.storage_url)}; run `llmevo evolve` first or "
                          "pass --study/--storage")
    space = workers.build_space(plan)
    opened = open_study(plan, space, storage)
    champion = select_champion(opened)
    genome = _champion_genome(champion)
    variants = knockout_variants(genome, space.baseline, space, genes)  # an unknown gene: ConfigError now
    folder = plan.report_folder
    summary_path = folder / "summary.json"
    rebuild = plan.report and not summary_path.exists()
    code = _code_state(plan) if rebuild else None
    seeds = list(plan.seeds)
    notify(f"explaining trial {champion.number}: {len(variants)} variant(s) x {len(seeds)} seed(s)")
    torch.set_num_threads(plan.threads)
    context = workers.prepare_context(plan, space)
    # at the final comparison's preset resolved on the data (a one-epoch preset: its steps)
    knockouts = explain_genes(genome, space.baseline, space, context.data, context.final_preset,
                              seeds, context.device, genes, post_data=context.post_data)
    knockouts["champion_trial"] = champion.number
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "knockouts.json", knockouts)
    if code is not None:
        notify(f"no study report in {folder}: evaluating the champion and llama_modern on test "
               "to rebuild it")
        summary: dict[str, Any] | None = _final_report(plan, context, opened, code, 0.0, notify,
                                                       rebuilt=True)
    elif existing is not None:
        summary = existing
    else:
        summary = None
    if summary is not None:
        summary["knockouts"] = knockouts
        write_report(summary, opened, folder)
    for line in knockout_lines(knockouts):
        notify(line)
    notify(f"knockouts: {folder / 'knockouts.json'}")
    return knockouts
