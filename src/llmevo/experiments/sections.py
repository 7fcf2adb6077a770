"""The sections every pipeline request is built from, each declared once.

A request (``ReproductionRequest``, ``LadderRequest``, ``EvidenceRequest``,
``EvolutionSettings``) holds what is its own (the component, the rungs, the table's filter,
the study) and these sections, which the pipelines share and pass on whole (a ladder hands
its ``run`` section to every rung, ``--all`` to every comparison):

- ``RunSection``: where and how runs go: data, cache, device, threads, execution path, the
  arm cache, publishing, the command provenance records; and the run prologue, once.
- ``TrainingSection``: the preset's training settings a request overrides.
- ``TuningSection``: whether and how each arm is tuned (an lr grid or a declared space);
  declared in ``runner.settings`` (the runner owns tuning) and re-exported here.
- ``SizeSection``: the size dial (a rung, or explicit width, depth and heads).
- ``PostTrainingSection``: a post-training method's stage and task options.

Field names are unique across sections: each is also its option (``tune_grid`` ->
``--tune-grid``) and the request's flat keyword (``ReproductionRequest(name="rope",
data_dir="data", threads=1)`` puts ``data_dir`` and ``threads`` into ``run``). A pipeline that
does not read a section field lists it in ``refused``; giving it is an error
(``registry.SectionedRequest``).

Public API: ``RunSection``, ``TrainingSection``, ``TuningSection``, ``SizeSection``,
``PostTrainingSection``, ``prologue``.
"""

from __future__ import annotations

import json
import re
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_origin

from pydantic import Field, model_validator

from llmevo.artifacts.provenance import (
    IMPORTS_MEMO_FILE,
    REPO_ROOT,
    check_dirty_needs_publish,
    check_publishable,
    use_imports_memo,
)
from llmevo.errors import ConfigError
from llmevo.registry import RequestSection
from llmevo.runner.settings import (
    TuningSection as TuningSection,  # declared in the runner, re-exported
)

if TYPE_CHECKING:  # the sections import no torch: the commands' options are made from them at once
    from llmevo.model.config import ModelConfig
    from llmevo.runner.presets import Preset
    from llmevo.runner.size import Size
    from llmevo.train.execution import Execution

# model.parametrization.PARAMETRIZATIONS, spelled here torch-free (a test checks they agree)
Parametrization = Literal["standard", "mup", "completep"]


class RunSection(RequestSection):
    """Where and how a pipeline's runs go. ``path`` (auto, sequential, batched, parallel,
    parallel-batched) and ``replicas_max`` choose how an arm's seeds train; ``tracker`` and
    ``tracker_dir`` where its runs are logged (``train.tracking``); ``val_every`` gives
    each report run a validation curve (``train.trainer.ValidationProbe``, read by time to target); ``arm_cache``
    loads runs trained before identically (``runner.cache``); ``publish`` writes under
    ``docs/`` from a clean checkout of ``repo_root`` (``allow_dirty``: or not, recorded);
    ``replace`` lets an artifact replace one that holds more; ``command`` is what provenance
    records as the command that ran; ``branches`` keeps each run's decay branches at shorter
    horizons in the arm cache (``runner.run.run_arm``)."""

    data_dir: Path = Field(description="Data directory (else $LLMEVO_DATA, else the user's cache folder, filled on first use).")
    cache_dir: Path = Field(default=Path(".cache/llmevo"), description=(
        "Tokenizers, token arrays and trained arms ($LLMEVO_CACHE)."))
    device: Literal["auto", "cpu", "cuda", "mps"] = Field(default="auto", description="Where to run the model.")
    threads: int | None = Field(default=None, ge=1, description=(
        "CPU threads for torch (default: torch's choice; pass 1 on a shared machine)."))
    path: Literal["auto", "sequential", "batched", "parallel", "parallel-batched"] = Field(
        default="auto", description="How an arm's seeds train.")
    replicas_max: int | None = Field(default=None, ge=1, description=(
        "At most this many seeds of an arm train at once (memory)."))
    val_every: int | None = Field(default=None, ge=1, description=(
        "Evaluate each report run's validation loss every N steps and at the last, on 32 fixed "
        "validation windows (a curve; time to target reads it); off by default."))
    arm_cache: bool = Field(default=True, description=(
        "Load tuning and report runs trained before with identical settings, code and data from "
        "$LLMEVO_CACHE/arms (default .cache/llmevo/arms) instead of retraining them (the artifact "
        "lists them); --no-arm-cache retrains everything. Off with --tracker."))
    tracker: Literal["none", "tensorboard", "wandb", "trackio"] = Field(default="none", description=(
        "Log every report run (one per arm and seed: per-step loss, lr and grad norm, the final metrics, "
        "the verdict as a summary) to this tracker: tensorboard, wandb (offline) or trackio (local); "
        "on every training path. Turns the arm cache off."))
    tracker_dir: Path | None = Field(default=None, description=(
        "Where the tracker writes (default: runs/tensorboard for tensorboard, runs/wandb for wandb, "
        "trackio's own folder for trackio)."))
    publish: bool = Field(default=False, description=(
        "Write under docs/ instead of runs/; refuses when llmevo's own git checkout (the code that "
        "runs, recorded in provenance) has uncommitted changes."))
    allow_dirty: bool = Field(default=False, description=(
        "With --publish: publish from a tree with uncommitted changes (recorded in provenance)."))
    replace: bool = Field(default=False, description=(
        "Replace an artifact at the output path even when it holds more (blocks, seeds, trials) "
        "than this run's."))
    command: str | None = Field(default=None, description="The command provenance records.")
    repo_root: Path = Field(default=REPO_ROOT, description="The checkout --publish checks.")
    branches: list[int] | None = Field(default=None, description=(
        "Also train each run's decay branches at these shorter step counts (from one trunk: with "
        "--schedule wsd each costs its decay) and keep them in the arm cache as the runs of those "
        "steps, so a later request at those steps loads them. Needs --path sequential and the arm cache."))

    @model_validator(mode="after")
    def _dirty_needs_publish(self) -> RunSection:
        check_dirty_needs_publish(self.publish, self.allow_dirty)
        if self.branches is not None:  # branches train in this process and live only in the cache
            if min(self.branches, default=0) < 1 or len(set(self.branches)) != len(self.branches):
                raise ConfigError(f"--branches needs distinct positive step counts, got {self.branches}")
            if self.path != "sequential" or not self.arm_cache or self.tracker != "none":
                raise ConfigError("--branches trains each run's branches in this process and keeps them in the "
                                  "arm cache: use --path sequential, with the arm cache on and no --tracker")
        return self

    def execution(self) -> Execution:
        """How an arm's seeds train, checked (``train.execution.check_path``)."""
        from llmevo.train.execution import Execution, check_path

        check_path(self.path, self.replicas_max)
        return Execution(self.path, self.replicas_max, self.val_every, tuple(self.branches or ()))

    def prologue(self, check_publish: bool = True, output: Path | None = None) -> None:
        """The run prologue (``prologue``) for this section."""
        prologue(Path(self.data_dir), self.threads, self.publish and check_publish, self.allow_dirty,
                 self.repo_root, output, cache_dir=Path(self.cache_dir))


def prologue(data_dir: Path, threads: int | None, publish: bool, allow_dirty: bool,
             repo_root: Path | None, output: Path | None = None, *,
             cache_dir: Path | None = None) -> None:
    """What every pipeline does before its first run, in one place: the data folder exists,
    torch's CPU threads are set, and a published run comes from a clean checkout of
    ``repo_root`` (``allow_dirty``: or not; ``output``: a folder of the run's own that may be
    there, uncommitted). ``publish`` False where a caller checked the checkout already.
    ``cache_dir``: the parsed import lists provenance and the arm cache read are kept there
    (``artifacts.provenance.use_imports_memo``)."""
    import torch

    if not Path(data_dir).is_dir():
        raise ConfigError(f"data directory {data_dir} does not exist")
    if cache_dir is not None:
        use_imports_memo(Path(cache_dir) / IMPORTS_MEMO_FILE)
    if threads:
        torch.set_num_threads(threads)
    if publish:
        check_publishable(repo_root, allow_dirty, output)


class TrainingSection(RequestSection):
    """The preset's training settings a request overrides (None: the preset's)."""

    steps: int | None = Field(default=None, ge=1, description="Override the preset's training steps.")
    batch_size: int | None = Field(default=None, ge=1, description="Override the batch size.")
    lr: float | None = Field(default=None, gt=0, description="Override the learning rate.")
    warmup_steps: int | None = Field(default=None, ge=0, description="Override the warmup steps.")
    weight_decay: float | None = Field(default=None, ge=0, description="Override the weight decay.")
    schedule: Literal["constant", "cosine", "wsd"] | None = Field(default=None, description=(
        "Override the learning-rate schedule (wsd: warmup, stable, then a linear decay)."))
    wsd_decay: float | None = Field(default=None, gt=0, le=1, description=(
        "With --schedule wsd: the fraction of the post-warmup steps that decays (default 0.2)."))
    suite: Literal["core", "public"] | None = Field(default=None, description="Override the benchmark suite.")

    @model_validator(mode="after")
    def _wsd(self) -> TrainingSection:
        if self.wsd_decay is not None and self.schedule != "wsd":  # no preset's schedule is wsd
            raise ConfigError("--wsd-decay applies to --schedule wsd (the decay of warmup-stable-decay)")
        return self

    def overrides(self) -> dict[str, Any]:
        """For ``Preset.override``: every setting, None where the preset's stays."""
        return self.model_dump()

    def given(self) -> list[str]:
        """The options given (``--steps``, ...), for refusals."""
        return [self.option(name) for name, value in self.model_dump().items() if value is not None]


class SizeSection(RequestSection):
    """The size dial (``runner.size``): ``rung`` (0: quick's llama_modern), or explicit
    ``d_model``, ``layers`` and ``heads`` replacing the rung's geometry;
    ``tokens_per_parameter`` (default quick's ~7.26) and ``seq_len`` (quick's 64) set the
    training tokens and the window at that size. Quick only. ``param``: how init, output and
    attention scales and per-parameter learning rates follow the width
    (``model/parametrization.py``: ``standard``, or ``mup``, anchored at quick's width so
    that it is the standard model at rung 0); it applies with or without a size. ``match``: what
    the two arms' budgets hold equal, ``tokens`` (the default) or ``flops`` (their training
    FLOPs, counted per token by ``runner.flops``; the method arm's steps are set to spend the
    baseline's); it too applies with or without a size."""

    rung: int | None = Field(default=None, description=(
        "Model size: rung 0 is quick's llama_modern (139,584 parameters); each rung about doubles it "
        "(-3..7), with the components' sizes, training tokens (7.26 per parameter), batch and warmup "
        "following. Quick preset only."))
    d_model: int | None = Field(default=None, ge=1, description="Model width (replaces the rung's; components follow).")
    layers: int | None = Field(default=None, ge=1, description="Model depth (replaces the rung's).")
    heads: int | None = Field(default=None, ge=1, description="Attention heads, dividing --d-model (replaces the rung's).")
    tokens_per_parameter: float | None = Field(default=None, gt=0, description=(
        "With the size dial: training tokens per parameter (default quick's, about 7.26)."))
    seq_len: int | None = Field(default=None, description=(
        "With the size dial: the training and evaluation window in tokens (default quick's 64)."))
    param: Parametrization = Field(default="standard", description=(
        "Parametrization: standard; mup (Maximal Update Parametrization, Tensor Programs V Table 8: "
        "hidden weights at init std 0.02/sqrt(m) and lr/m, logits x 1/m, m = d_model/64; the standard "
        "model at rung 0); completep (mup plus residual branches x 2/layers, CompleteP alpha=1). "
        "Adam-family optimizers and the transformer's slots only."))
    match: Literal["tokens", "flops"] = Field(default="tokens", description=(
        "What the two arms' budgets hold equal: tokens (default: the same steps on the same tokens), "
        "or flops (each arm's training FLOPs per token counted on one forward and backward pass, "
        "routed experts at their active share; the method trains the steps that spend the baseline's "
        "FLOPs, tuning included; files say -flops). Model-slot comparisons only."))

    def resolve(self, preset: str | Preset, batch_size: int | None = None,
                base_model: ModelConfig | None = None) -> Size | None:
        """The size dial resolved (``runner.size.size_dial``), or None when no size is asked
        for; an unknown rung, heads that do not divide the width or zero steps fail here."""
        from llmevo.model.config import ModelConfig
        from llmevo.runner.size import size_dial

        return size_dial(self.rung, self.d_model, self.layers, self.heads, preset, batch_size,
                         base_model or ModelConfig(), self.tokens_per_parameter, self.seq_len)

    def given(self) -> list[str]:
        """The size options given (``--param`` and ``--match`` are not sizes; a pipeline reads
        them apart)."""
        return [self.option(name) for name, value in self.model_dump(exclude={"param", "match"}).items()
                if value is not None]


MAX_JOBS = 512  # workers of one piece of shared work; more is a typo, not a cluster


class LaunchSection(RequestSection):
    """Where the workers of shared work run (``experiments.launcher``): ``launcher`` submits
    ``jobs`` workers through submitit, as ``local`` processes on this machine or a ``slurm`` job
    array (``slurm_partition``; ``job_minutes`` each, after which Slurm requeues the job); the
    work's queue is the request's ``storage``, its single source of truth. ``launcher_folder``
    holds submitit's job files and logs (default: beside the work's own outputs)."""

    launcher: Literal["local", "slurm"] | None = Field(default=None, description=(
        "Run the shared work (--storage) as submitit jobs: local processes, or a Slurm job array; "
        "this command waits for them."))
    jobs: int = Field(default=2, ge=1, le=MAX_JOBS, description="With --launcher: how many worker jobs.")
    slurm_partition: str | None = Field(default=None, description="With --launcher slurm: the partition.")
    job_minutes: int = Field(default=24 * 60, ge=1, description=(
        "With --launcher: each job's time limit in minutes (Slurm requeues a job at its limit)."))
    launcher_folder: Path | None = Field(default=None, description=(
        "With --launcher: submitit's job files and logs (default: <the work's folder>/submitit)."))

    def check(self, storage: str | None) -> None:
        """Refuse, before any work, a launch without a queue and options that need another."""
        if self.launcher is None:
            given = sorted(self.option(name) for name in self.model_fields_set if name != "launcher")
            if given:
                raise ConfigError(f"{', '.join(given)} applies to --launcher only")
            return
        if storage is None:
            raise ConfigError("--launcher needs --storage: the work's queue every job reaches (e.g. "
                              "postgresql://user:pass@host/db; sqlite:///path.db for local jobs on one machine)")
        if self.slurm_partition is not None and self.launcher != "slurm":
            raise ConfigError("--slurm-partition applies to --launcher slurm")


class PostTrainingSection(RequestSection):
    """A post-training method's stage (steps, batch, lr, the stage seed's offset from the run
    seed) and task options: majority vote over k = 1, 4, 8 samples (``self_consistency``),
    DPO's pairs from a JSONL file of ``{"chosen", "rejected"}`` instead of HH-RLHF
    (``preference_file``), GRPO's operands 0..N (``arithmetic_max_operand``). None: the
    preset's."""

    post_steps: int | None = Field(default=None, ge=1, description="Post-training methods: the stage's steps.")
    post_batch_size: int | None = Field(default=None, ge=1, description="Post-training: examples per step.")
    post_lr: float | None = Field(default=None, gt=0, description="Post-training: learning rate.")
    post_seed_offset: int | None = Field(default=None, description=(
        "Post-training: the stage's seed is the run seed plus this."))
    self_consistency: bool | None = Field(default=None, description=(
        "Post-training: also score held-out arithmetic by majority vote over k = 1, 4, 8 sampled "
        "answers (accuracy and generated tokens)."))
    preference_file: Path | None = Field(default=None, description=(
        'DPO: a JSONL file of {"chosen", "rejected"} dialogues instead of HH-RLHF helpful-base.'))
    arithmetic_max_operand: int | None = Field(default=None, description=(
        "GRPO: the arithmetic difficulty (operands 0..N)."))

    def stage_overrides(self) -> dict[str, Any]:
        """For ``PostTrainSettings.override``."""
        return {"steps": self.post_steps, "batch_size": self.post_batch_size, "lr": self.post_lr,
                "seed_offset": self.post_seed_offset, "self_consistency": self.self_consistency,
                "arithmetic.max_operand": self.arithmetic_max_operand}

    def given(self) -> list[str]:
        """The options given, ``--post-steps (post_steps)`` style, for refusals."""
        return [f"{self.option(name)} ({name})" for name, value in self.model_dump().items()
                if value is not None]


# --- what a pipeline takes of the sections, declared here where a request lives in a module that
# imports torch: its command generates options from the sections at import time, and lists only
# what the pipeline takes (``cli.common.section_options``); the request declares the same by these.
DIAGNOSE_TAKES = frozenset({"data_dir", "device", "threads", "publish", "allow_dirty", "replace", "command",
                            "repo_root"})  # diagnostics.pipeline.DiagnoseRequest.takes
EVOLUTION_REFUSED: dict[str, str] = {  # evolve.pipeline.EvolutionSettings.refused
    "arm_cache": "evolution trains every trial itself (its runs are the study's)",
    "tracker": "a study logs its trials, seeds and final runs to --tensorboard",
    "tracker_dir": "a study logs its trials, seeds and final runs to --tensorboard",
    "val_every": "a study records no validation curve (--val-every is for reproduce and ladder)",
    "tune": "the final comparison is tuned unless --no-final-tune",
    "tune_space": "the final comparison tunes the learning rate on --tune-grid",
    "tune_trials": "the final comparison tunes the learning rate on --tune-grid",
    "tune_sampler": "the final comparison tunes the learning rate on --tune-grid",
    "tune_fidelity": "the final comparison trains every grid point to full length",
    "tokens_per_parameter": "a study's trials train for the preset's steps (--trial-steps)",
    "seq_len": "a study trains at the preset's window",
    "param": "a study's genomes train under the standard parametrization (--param is for reproduce and ladder)",
    "match": "a study's trials and its final comparison hold tokens equal (--match is for reproduce and ladder)",
}

LADDER_REFUSED: dict[str, str] = {  # experiments.ladder.LadderRequest.refused
    "tune": "a ladder tunes every rung",
    "tune_grid": "each rung's grid is the full default grid or the learning-rate rule's (--full-grid-rungs)",
    "tune_space": "a ladder tunes the learning rate on each rung's grid",
    "tune_trials": "a ladder tunes the learning rate on each rung's grid",
    "tune_sampler": "a ladder tunes the learning rate on each rung's grid",
    "tune_fidelity": "a ladder trains each rung's grid to full length (its fits read every point)",
    **{field: "--rungs chooses each rung's size" for field in ("rung", "d_model", "layers", "heads")},
    "seq_len": "--context chooses the window (fixed, or growing with the rung)",
    "steps": "each rung's steps follow its size (--tokens-per-parameter)",
    "batch_size": "each rung's batch follows its size",
}


# --- the experiment file: a request's serialized form --------------------------------------
# A TOML file holding what is the request's own at the top (``name``, ``against``, ``seeds``,
# ``preset``, ...) and its sections as tables (``[run]``, ``[train]``, ``[tuning]``, ``[size]``,
# ``[post_training]``, ``[launch]``): ``llmevo reproduce FILE.toml`` (and ``ladder``,
# ``evolve``) validate it as the request (``SectionedRequest``), options and ``--set`` over it.
# Where this machine keeps its data, cache and checkout is never in a file.
MACHINE_FIELDS: dict[str, str] = {  # field -> why it is never in a file (nor set by --set, but data_dir)
    "data_dir": "where this machine keeps its data is no part of an experiment; give --data-dir or $LLMEVO_DATA",
    "cache_dir": "where this machine caches is no part of an experiment; set $LLMEVO_CACHE",
    "command": "llmevo records the command that ran",
    "repo_root": "llmevo checks the checkout it runs from",
}


def check_value(where: str, info: Any, value: Any) -> None:
    """``value`` (a file's or ``--set``'s, TOML-typed) for the field ``info``, strictly: a
    boolean field takes true or false only (never "yes" or 1), a number field a number (never
    text or a boolean), an integer field an integer; then the field's own rules. A problem is
    one line starting with ``where`` (``FILE: [tuning] tune``)."""
    from pydantic import TypeAdapter, ValidationError

    from llmevo.registry import kinds_of

    kinds = kinds_of(info.annotation)
    if any(get_origin(kind) is list for kind in kinds) and not isinstance(value, list):
        raise ConfigError(f"{where}: {value!r} is not a list; write one, e.g. [{json.dumps(value, default=str)}]")
    for item in value if isinstance(value, list) else [value]:
        if bool in kinds and str not in kinds and not isinstance(item, bool):
            raise ConfigError(f"{where}: {item!r} is not true or false")
        if kinds & {int, float} and bool not in kinds and str not in kinds:
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise ConfigError(f"{where}: {item!r} is not a number")
            if float not in kinds and not isinstance(item, int):
                raise ConfigError(f"{where}: {item!r} is not an integer")
    try:
        TypeAdapter(Annotated[(info.annotation, *info.metadata)] if info.metadata else
                    info.annotation).validate_python(value)
    except ValidationError as error:
        first = error.errors()[0]
        raise ConfigError(f"{where}: {value!r}: {first['msg']}") from None


# How the command running gave each field, where it was not by the field's own option: ``--set
# size.rung=99`` or a file's ``[size] rung = 99`` (field -> (where, what), None: by its option;
# ``cli.common.section_options`` keeps one per command). The library's refusals name a field by its
# option (``--rung 99: unknown rung``); ``as_given`` adds what the user wrote.
GIVEN: ContextVar[dict[str, tuple[str, str] | None] | None] = ContextVar("GIVEN", default=None)


def note_given(field: str, how: tuple[str, str] | None, over: bool = True) -> None:
    """Record how ``field`` was given (see ``GIVEN``); a file's (``over=False``) never
    replaces the command line's."""
    given = GIVEN.get()
    if given is not None and (over or field not in given):
        given[field] = how


def as_given(error: ConfigError) -> ConfigError:
    """``error`` led by what the user wrote for each field whose option it names (``--set
    size.rung=99: --rung 99: unknown rung; ...``, ``FILE: [size] rung = 99: ...``); as it
    is when it names none, or already says where its value came from."""
    text, wrote = str(error), {}
    for field, how in (GIVEN.get() or {}).items():
        if how is not None and re.search(rf"(?<![\w-])--(no-)?{field.replace('_', '-')}(?![\w-])", text):
            wrote.setdefault(how[0], []).append(how[1])
    if not wrote or any(where in text for where in wrote):
        return error
    return ConfigError("; ".join(", ".join(f"--set {one}" for one in said) if where == "--set" else
                                 f"{where}: {', '.join(said)}" for where, said in wrote.items()) + f": {text}")


def read_toml(path: Path, where: str) -> dict[str, Any]:
    """The TOML file at ``path``; a missing file, a folder, bytes that are not UTF-8 or bad
    TOML is one line starting with ``where`` saying which and what to do (the experiment
    files of both kinds, ``read_experiment`` and ``experiment_file.load_experiment``)."""
    import tomllib

    if path.is_dir():
        raise ConfigError(f"{where}: a folder, not a file; give the experiment's FILE.toml")
    if not path.exists():
        raise ConfigError(f"{where}: no such file; check the path"
                          + ("" if path.is_absolute() else f" (relative to {Path.cwd()})"))
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"{where}: not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start}); "
                          "save it as UTF-8") from None
    except OSError as error:
        raise ConfigError(f"{where}: cannot be read ({error.strerror or error.__class__.__name__})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{where}: not valid TOML ({error})") from None


def read_experiment(path: Path, request: type) -> dict[str, Any]:
    """The experiment file at ``path`` as ``request``'s keywords, each section's fields flat
    (options and ``--set`` then override them by name). Every problem is one line naming the
    file and the key (``FILE: [tuning] tune: 'yes' is not true or false``), before any data is
    read: an unreadable or empty file, bad TOML, a table that is no section of the request, a
    key that is no field of its table (a section's field outside its table), a value of the
    wrong type (checked strictly: ``check_value``), what is the machine's and never a file's
    (``MACHINE_FIELDS``), and a file of a request with a ``name`` that does not name it."""
    data = read_toml(Path(path), f"experiment file {path}")
    sections = request.sections()
    if not data:
        raise ConfigError(f"experiment file {path}: empty; it holds {request.__name__}'s fields"
                          + (' (name = "rope", ...)' if "name" in request.model_fields else "")
                          + f", its sections as tables ({', '.join(f'[{name}]' for name in sections)})")
    owner = {field: name for name, section in sections.items() for field in section.model_fields}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in sections and not isinstance(value, dict):  # train = 3, or [[train]]
            raise ConfigError(f"{path}: {key}: the {key} section is one table, not a value; write [{key}] "
                              f"and its fields under it ({', '.join(sections[key].model_fields)})")
        if isinstance(value, dict):
            if key not in sections:
                raise ConfigError(f"experiment file {path}: [{key}] is no section of {request.__name__} "
                                  f"(its sections: {', '.join(sections)})")
            fields = sections[key].model_fields
            for field, item in value.items():
                where = f"{path}: [{key}] {field}"
                if field not in fields:
                    raise ConfigError(f"{where}: no field of the {key} section (its fields: {', '.join(fields)})")
                if field in MACHINE_FIELDS:
                    raise ConfigError(f"{where}: not in an experiment file: {MACHINE_FIELDS[field]}")
                check_value(where, fields[field], item)
                values[field] = item
                note_given(field, (str(path), f"[{key}] {field} = {json.dumps(item, default=str)}"), over=False)
            continue
        where = f"{path}: {key}"
        if key in owner:
            raise ConfigError(f"{where}: a field of the {owner[key]} section; put it under [{owner[key]}]")
        if key not in request.model_fields or key in sections:
            raise ConfigError(f"{where}: no field of {request.__name__} (its own: "
                              f"{', '.join(name for name in request.model_fields if name not in sections)}; "
                              f"its sections as tables: {', '.join(f'[{name}]' for name in sections)})")
        check_value(where, request.model_fields[key], value)
        values[key] = value
        note_given(key, (str(path), f"{key} = {json.dumps(value, default=str)}"), over=False)
    if "name" in request.model_fields and "name" not in values:
        raise ConfigError(f"experiment file {path}: no name; a {request.__name__} file names its component "
                          '(name = "rope")')
    return values


def experiment_of(request: Any) -> dict[str, Any]:
    """The resolved experiment file of ``request`` (what its artifact records): every field
    given a value other than its default, and the request's own fields given at all (its name),
    sections as tables, JSON values, without where this
    machine keeps things (``MACHINE_FIELDS``); read back by ``read_experiment``."""
    dumped = request.model_dump(mode="json", exclude_defaults=True)
    given = set(request.model_fields_set) - set(request.sections())  # given, even at a default (name="rope")
    dumped.update({key: value for key, value in request.model_dump(mode="json", include=given).items()
                   if value is not None})
    for name in request.sections():
        table = {key: value for key, value in dumped.pop(name, {}).items() if key not in MACHINE_FIELDS}
        if table:
            dumped[name] = table
    return dumped


def experiment_toml(experiment: dict[str, Any]) -> str:
    """``experiment_of``'s dict as TOML text (scalars and lists at the top, then one table per
    section); a value TOML cannot hold (None) is left out."""
    import json

    def value(item: Any) -> str:
        if isinstance(item, bool):
            return "true" if item else "false"
        if isinstance(item, list):
            return "[" + ", ".join(value(x) for x in item) + "]"
        if isinstance(item, dict):
            return "{" + ", ".join(f"{k} = {value(v)}" for k, v in item.items() if v is not None) + "}"
        return json.dumps(item)  # str (escaped), int, float

    tables = {key: item for key, item in experiment.items() if isinstance(item, dict)}
    lines = [f"{key} = {value(item)}" for key, item in experiment.items()
             if key not in tables and item is not None]
    for key, table in tables.items():
        lines += ["", f"[{key}]", *(f"{k} = {value(v)}" for k, v in table.items() if v is not None)]
    return "\n".join(lines) + "\n"
