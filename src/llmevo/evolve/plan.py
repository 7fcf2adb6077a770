"""One evolution, resolved once from its request: ``EvolutionSettings.plan()`` (in
``evolve.pipeline``) turns the request into an ``EvolutionPlan``, and every part of the
evolution reads that plan and plans nothing again.

The plan names the study (its name and storage, the sampler and population), the trial and
final presets, the components the search space holds, how a trial trains and is scored,
and the final comparison with its report. It is frozen and picklable: the command makes it
once and hands it to every worker process, and each process prepares its trial context
from it once (``workers.prepare_context``: the space, the data, the presets resolved on the
data, the device).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmevo.experiments.sections import RunSection
from llmevo.model.config import ModelConfig
from llmevo.runner.presets import Preset
from llmevo.runner.size import Size
from llmevo.runner.tuning import GridTuner
from llmevo.train.execution import Execution


@dataclass(frozen=True)
class ProposerSpec:
    """An external proposer's command resolved once (``proposer.resolve_proposer``): its
    words as given, the sha256 of every word that names a file, its identity, timeout and
    working folder."""

    argv: tuple[str, ...]
    files: Mapping[str, str]  # word as given -> sha256 of the file it names
    identity: str  # sha256 over the words and the files' sha256
    timeout: float
    cwd: Path

    def describe(self) -> dict[str, Any]:
        return {"command": list(self.argv), "files": dict(self.files), "identity": self.identity}


@dataclass(frozen=True)
class EvolutionPlan:
    """Everything an evolution's processes need, resolved from ``EvolutionSettings``."""

    # the study
    study_name: str
    storage_url: str  # any SQLAlchemy URL (checked by study.check_storage_url)
    sampler: str  # a name of study.GENOME_SAMPLERS
    trials: int  # finished trials the study should reach
    workers: int  # local worker processes
    threads_per_worker: int  # torch's CPU threads in each worker (and its parallel path's processes)
    population: int
    tournament: int
    sampler_seed: int
    heartbeat: int  # seconds
    grace_period: int  # seconds; a trial silent this long is failed and retried
    # a trial
    trial_preset: Preset  # as requested: a one-epoch preset gets its steps on the data
    promoted: frozenset[str]  # the components the search space holds
    base_model: ModelConfig  # the baseline genome's model (llama_modern at the size dial's size)
    rung: int | None  # the size dial's rung (None: no rung asked for)
    rescore_seeds: int  # extra seeds for a would-be champion
    score_k: float  # score = mean - k standard errors
    lr_factors: tuple[float, ...]  # each trial at lr x each factor, scored by its best; (): one lr
    execution: Execution  # how the seeds (and lrs) of one genome train
    tensorboard: Path | None  # per-step TensorBoard runs of every trial, seed and final run
    # the final comparison and its report (the command's own process)
    final_preset: Preset  # the trial steps, the whole validation split
    seeds: tuple[int, ...]  # report seeds of the final comparison and the knockouts
    tuning: GridTuner | None  # both arms tuned on one lr grid first; None: untuned
    threads: int  # torch's CPU threads for the final comparison and the knockouts
    report: bool  # evaluate the champion on test and write the report
    report_folder: Path
    # where and how runs go, the request's own section (``experiments.sections.RunSection``):
    # data, cache, device, publish, provenance's command and checkout; read through the
    # properties below, never copied
    run: RunSection
    # the size dial resolved (``EvolutionSettings.resolved_size``): the final comparison's
    # artifact records its rung, parameters and tokens; None: no size asked for (or not passed)
    size: Size | None = None
    # an external command that chooses each trial's genome in place of the sampler (one worker)
    proposer: ProposerSpec | None = None

    @property
    def data_dir(self) -> Path:
        return Path(self.run.data_dir).resolve()

    @property
    def cache_dir(self) -> Path:
        return Path(self.run.cache_dir).resolve()

    @property
    def device(self) -> str:
        """auto, cpu, cuda or mps; each process resolves it once."""
        return self.run.device

    @property
    def publish(self) -> bool:
        """The report under docs/evolution/, from a clean checkout (or ``allow_dirty``)."""
        return self.run.publish

    @property
    def allow_dirty(self) -> bool:
        return self.run.allow_dirty

    @property
    def repo_root(self) -> Path:
        """The llmevo checkout provenance reads."""
        return self.run.repo_root

    @property
    def command(self) -> str:
        """What provenance records as the command that ran."""
        return self.run.command or f"python: llmevo.evolve.run(study={self.study_name!r})"
