"""A cache of arm results: a run trained before under identical settings is loaded, not retrained.

Many reproductions share an arm exactly: muon, lion, post_norm, sandwich, layernorm and every
``--against`` run of alibi, relu2 and geglu compare with ``llama_modern`` itself; relu2 and
geglu share the GELU baseline. A tuned reproduction trains each arm over a learning-rate grid
under tuning seeds and then under the report seeds, so half of such a run would recompute
numbers that already exist. This module stores three kinds of entry and gives them back:

- a *tuning run* (arm, lr, tuning seed) -> its validation metric, or "diverged";
- a *report run* (arm, report seed) -> everything ``runner.ArmRun`` holds (validation and
  test metrics, the ``TrainResult``, parameter count, architecture stats, resolved training
  settings, execution path) plus the trained model's ``state_dict``, so a hit rebuilds the
  model with ``build_model`` and loads it (``--save-checkpoints`` works from a hit).
- a *no-op check* (the two arms of a comparison, its seed) -> what ``runner.equivalence``
  found: the check trains both arms a few steps and is, in a warm run whose arms all come
  from here, most of the time the comparison takes (docs/LOG.md, 2026-12-05).

**The key** is a sha256 over a canonical JSON (sorted keys, exact float reprs) of everything
that can change a number: the arm (its model config, every component resolved to its full
typed config and spelled one way, ``canonical_model``: ``mha`` and ``mha:kv_heads=4`` at 4
heads are one network and one key; its optimizer choice, post-training gene, data view and
data recipe), the run's resolved ``TrainConfig`` (lr, steps, batch, seq_len,
warmup, schedule, weight decay, clipping, precision, optimizer), the seed, the preset's
evaluation settings (every preset field but ``train``: suite, eval batch size, max windows,
data budgets, …) with the comparison's objective and metric, a digest of the data itself
(the training stream and every training source a recipe may draw from, validation, test
and token-byte tensors, and the fingerprints of both suites), and the machine context: torch
version, device and accelerator name, the CPU itself (vendor, model, a digest of its feature
flags: the same code and seed on an AMD EPYC and an Intel Xeon, both "AVX512" to torch, give
different last bits, and near the stability edge different numbers; docs/LOG.md,
2026-12-05), the CPU's kernel capability and architecture, the intra-op thread count,
float32 matmul precision, the resolved
execution path and ``replicas_max``, and a sha256 over the source of every llmevo module the
caching pipeline reaches through its imports (``code_modules``: for a reproduction, what
``llmevo.experiments.reproduction`` imports, every component and architecture included;
``artifacts.provenance.pipeline_modules`` derives the list from the import statements).
A change to any of those invalidates every entry; code the runs cannot reach (the command
line, reports, the ladder's fits and plots) does not, so a long ladder or evidence table
started in the background survives an edit to its report code. Without ``code_modules``
every ``.py`` file of the package counts.

**Why a hit is the number recomputation would give.** On a CPU, training and evaluation are
deterministic given all of the above (same command, same seed, same numbers). A run's
numbers must also not depend on the runs it is trained *with*: that holds on the sequential
path and on the parallel path at one thread (each run is a fresh ``train()`` call, in a
single-thread worker or, when it is alone, in this process), so there a partial hit trains
only the missing runs. On the other paths it does not hold exactly: batched replicas share
one vmapped step (last-bit differences with the group), and a parallel path with several
intra-op threads trains a lone run in this process with those threads. There the key also
names every run of the ``train_many`` call (and the CPU count, which sizes the groups), and
one missing run sends the whole call back to training (``ArmCache.independent``). On a GPU,
recomputation itself is not bit-reproducible; a hit is the number one computation gave.

**Storage**: ``<cache_dir>/arms/<key[:2]>/<key>.json`` (and ``<key>.pt``, the state_dict of
a report run). Each file is written atomically (temporary file, then ``os.replace``); the
``.pt`` first, then the ``.json``, which records the ``.pt``'s sha256 and a sha256 of its
own payload. An entry that is missing, unreadable, truncated, altered or does not fit the
model is a miss: the run is recomputed and the entry overwritten, never an error and never a
wrong number. A write that fails (disk full, read-only cache) is skipped. State dicts load
with ``weights_only=True``.

A hit's wall time and tokens/s are those of the original run. Tests that monkeypatch
training must turn the cache off or give it their own ``cache_dir``: the key sees the
source files, not patched functions.

Public API: ``CacheUse``, ``CacheContext``, ``ArmCache``, ``TuningEntries``,
``ReportEntries``, ``CheckEntry``, ``CachedMetric``, ``run_key``, ``source_sha256``,
``data_sha256``, ``canonical_json``, ``canonical_model``, ``resolved_choice``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
from torch import nn

from llmevo.artifacts.io import write_bytes_atomic
from llmevo.artifacts.provenance import cpu_identity, module_path
from llmevo.catalog import full_registry
from llmevo.components.base import ModelDims, SpelledOneWay
from llmevo.errors import WriteError
from llmevo.model.config import ModelConfig
from llmevo.registry import MODEL_SLOTS, ComponentChoice
from llmevo.runner.arm import CONCAT, Arm
from llmevo.runner.arm_run import ArmRun
from llmevo.runner.presets import Preset
from llmevo.runner.views import DataView
from llmevo.train.device import accelerator_name
from llmevo.train.execution import Execution, RunSpec, default_path
from llmevo.train.trainer import TrainConfig, TrainResult

ENTRY_VERSION = 1
ARMS_FOLDER = "arms"
EQUIVALENCE = "equivalence"  # the entry kind of a no-op check's outcome
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # src/llmevo
# "use": read and write; "refresh": recompute everything, write what it trained; "off": neither
CacheUse = Literal["use", "refresh", "off"]
_Hit = TypeVar("_Hit")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces; floats as their exact shortest repr."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def source_sha256(root: Path = PACKAGE_ROOT, modules: Sequence[str] | None = None) -> str:
    """One sha256 over the ``.py`` files (relative path and content) of ``modules`` (dotted
    names of llmevo modules), or of every ``.py`` file under ``root`` when None."""
    digest = hashlib.sha256()
    if modules is None:
        files = list(root.rglob("*.py"))
    else:
        files = []
        for name in modules:
            path = module_path(name, root)
            if path is None:
                raise ValueError(f"no source file for module {name} under {root}")
            files.append(path)
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _tensor_digest(digest: Any, tensor: torch.Tensor) -> None:
    array = tensor.detach().contiguous().cpu()
    digest.update(f"{array.dtype}:{tuple(array.shape)}:".encode())
    digest.update(array.numpy().tobytes())


def data_sha256(data: DataView) -> str:
    """A sha256 of what an arm trains and is evaluated on: its tensors (the concatenated
    stream and every training source), validation, test and suite fingerprints."""
    digest = hashlib.sha256()
    digest.update(canonical_json({
        "kind": data.kind, "seq_len": data.seq_len, "fingerprint": data.fingerprint,
        "suite_validation": data.suite_validation.fingerprint,
        "suite_test": data.suite_test.fingerprint,
    }).encode())
    for tensor in (data.stream, data.validation, data.test, data.token_bytes):
        _tensor_digest(digest, tensor)
    for name in sorted(data.sources):  # every training source a data recipe may draw from
        digest.update(f"source:{name}:".encode())
        _tensor_digest(digest, data.sources[name])
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheContext:
    """What every key of one reproduction shares: the code and the machine's numerics."""

    code_sha256: str
    torch_version: str
    device: str  # the device type
    accelerator: str  # e.g. "CPU", "CUDA (NVIDIA H200)"
    cpu: str  # the CPU itself (``provenance.cpu_identity``): vendor, model, flags
    cpu_capability: str  # the CPU kernels torch dispatches to (e.g. AVX2, AVX512)
    machine: str  # x86_64, arm64, ...
    threads: int  # intra-op threads of this process (evaluation, lone in-process runs)
    float32_matmul_precision: str
    path: str  # the resolved train_many path
    replicas_max: int | None

    @classmethod
    def capture(cls, device: torch.device, execution: Execution,
                code_modules: Sequence[str] | None = None) -> CacheContext:
        """The context of this process now (call after ``torch.set_num_threads``);
        ``code_modules``: the modules whose source the key covers (None: the whole package)."""
        return cls(
            code_sha256=source_sha256(modules=code_modules),
            torch_version=torch.__version__,
            device=device.type,
            accelerator=accelerator_name(device),
            cpu=canonical_json(cpu_identity()),
            cpu_capability=str(torch.backends.cpu.get_cpu_capability()),
            machine=platform.machine(),
            threads=torch.get_num_threads(),
            float32_matmul_precision=torch.get_float32_matmul_precision(),
            path=default_path(device) if execution.path == "auto" else execution.path,
            replicas_max=execution.replicas_max,
        )

    @property
    def independent(self) -> bool:
        """Whether a run's numbers do not depend on the other runs of its ``train_many`` call."""
        return self.path == "sequential" or (self.path == "parallel" and self.threads == 1)


def resolved_choice(slot: str, choice: ComponentChoice, dims: ModelDims | None = None) -> dict[str, Any]:
    """A component choice with every hyperparameter its typed config fills in, so that
    ``rope`` and ``rope:theta=10000.0`` (its default) are one network and one key; with
    ``dims`` (a model's sizes) a ``SpelledOneWay`` config in its canonical spelling, so that
    ``mha`` and ``mha:kv_heads=4`` at 4 heads are one too."""
    config = full_registry().get(slot, choice.name).make_config(choice.config)
    if dims is not None and isinstance(config, SpelledOneWay):
        config = config.canonical(dims)
    return {"name": choice.name, "config": config.model_dump(mode="json")}


def canonical_model(model: ModelConfig) -> dict[str, Any]:
    """A model genome as the cache keys it: a transformer's components resolved to their full
    typed configs, each spelled one way at the model's sizes (equal models, one dict); other
    architectures as written."""
    parts = model.model_dump(mode="json")
    if parts.get("architecture") == "transformer":
        dims = ModelDims(vocab_size=model.vocab_size, d_model=model.d_model, n_layers=model.n_layers,
                         n_heads=model.n_heads, max_seq_len=model.max_seq_len)
        for slot in MODEL_SLOTS:
            parts[slot] = resolved_choice(slot, getattr(model, slot), dims)
    return parts


def arm_parts(arm: Arm) -> dict[str, Any]:
    """What is built and how it is fed: model config (``canonical_model``), optimizer,
    post-training gene, data view, the data recipe (other than ``concat``), and the starting
    weights' sha256 of an arm that starts from a checkpoint."""
    parts = {
        "model": canonical_model(arm.model),
        "optimizer": resolved_choice("optimizer", arm.optimizer),
        "post_training": None if arm.post_training is None else arm.post_training.model_dump(mode="json"),
        "data_view": arm.data,
    }
    if arm.init is not None:  # the starting weights (absent otherwise: earlier keys unchanged)
        parts["init_weights_sha256"] = arm.init.weights_sha256
    if arm.recipe != CONCAT:  # the data recipe, its typed config in full (concat: as before)
        parts["data_recipe"] = resolved_choice("data", arm.recipe)
    return parts


def evaluation_parts(preset: Preset, metric: str, objective: str) -> dict[str, Any]:
    """The preset's settings other than ``train`` (evaluation, suite, budgets, post-training
    stage) and the comparison's metric and objective."""
    return {"preset": preset.model_dump(mode="json", exclude={"train"}), "metric": metric,
            "objective": objective}


def run_key(
    kind: Literal["tuning", "report"],
    context: CacheContext,
    arm: Mapping[str, Any],
    data: str,
    evaluation: Mapping[str, Any],
    config: TrainConfig,
    seed: int,
    trained_with: Sequence[RunSpec] | None = None,
    stop_after: int | None = None,
) -> str:
    """The sha256 key of one run. ``arm`` is ``arm_parts(arm)``, ``data`` is ``data_sha256``,
    ``evaluation`` is ``evaluation_parts``; ``trained_with``: every run of the ``train_many``
    call, named when the context is not ``independent``; ``stop_after``: a run stopped early
    (``runner.fidelity``) is its own entry, never a full run's (None adds nothing: the keys of
    full runs are unchanged)."""
    parts: dict[str, Any] = {
        "version": ENTRY_VERSION, "kind": kind, "context": dataclasses.asdict(context),
        "arm": dict(arm), "data_sha256": data, "evaluation": dict(evaluation),
        "train": config.model_dump(mode="json"), "seed": seed,
    }
    if stop_after is not None:
        parts["stop_after"] = stop_after
    if not context.independent:
        parts["trained_with"] = {
            "cpu_count": os.cpu_count(),
            "runs": [[spec.seed, spec.config.model_dump(mode="json")]
                     + ([] if spec.stop_after is None else [spec.stop_after]) for spec in trained_with or ()],
        }
    return hashlib.sha256(canonical_json(parts).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedMetric:
    """A tuning run's validation metric; ``value`` None: the run diverged. ``path``: how the
    original run trained (None in entries written before 2026-12-05)."""

    value: float | None
    path: str | None = None


class ArmCache:
    """One reproduction's handle on the cache: where entries live, whether hits are read
    (``use``) or only written (``refresh``), and the context every key includes."""

    def __init__(self, root: Path, context: CacheContext, read: bool = True):
        self.root = Path(root)
        self.context = context
        self.read = read

    @classmethod
    def open(cls, cache_dir: Path, device: torch.device, execution: Execution,
             use: CacheUse = "use", code_modules: Sequence[str] | None = None) -> ArmCache | None:
        """The cache under ``cache_dir/arms`` (None for ``off``); ``code_modules`` as in
        ``CacheContext.capture``."""
        if use == "off":
            return None
        return cls(Path(cache_dir) / ARMS_FOLDER,
                   CacheContext.capture(device, execution, code_modules), read=use == "use")

    @property
    def independent(self) -> bool:
        return self.context.independent

    def tuning(self, arm: Arm, data: DataView, preset: Preset, metric: str,
               objective: str) -> TuningEntries:
        return TuningEntries(self, "tuning", arm_parts(arm), data_sha256(data),
                             evaluation_parts(preset, metric, objective))

    def report(self, arm: Arm, data: DataView, preset: Preset, metric: str,
               objective: str) -> ReportEntries:
        return ReportEntries(self, "report", arm_parts(arm), data_sha256(data),
                             evaluation_parts(preset, metric, objective))

    def equivalence(self, baseline: Arm, method: Arm, views: Mapping[str, DataView],
                    preset: Preset, seed: int, settings: Mapping[str, Any]) -> CheckEntry:
        """The entry of a no-op check (``runner.equivalence``) of these two arms: keyed by both
        arms, both data views' digests, the whole preset (the probes train at its settings),
        the seed, the check's own settings (probe steps, windows, tolerance) and the context."""
        parts = {"version": ENTRY_VERSION, "kind": EQUIVALENCE,
                 "context": dataclasses.asdict(self.context),
                 "arms": [arm_parts(baseline), arm_parts(method)],
                 "data_sha256": [data_sha256(views[baseline.data]), data_sha256(views[method.data])],
                 "preset": preset.model_dump(mode="json"), "seed": seed, "settings": dict(settings)}
        return CheckEntry(self, hashlib.sha256(canonical_json(parts).encode("utf-8")).hexdigest())

    # --- files ---------------------------------------------------------------------------

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]
        return folder / f"{key}.json", folder / f"{key}.pt"

    def _load(self, key: str, kind: str) -> tuple[dict[str, Any], Path] | None:
        """The payload of a well-formed entry (None: absent, unreadable, altered or not read)."""
        if not self.read:
            return None
        entry_path, state_path = self._paths(key)
        try:
            entry = json.loads(entry_path.read_text(encoding="utf-8"))
            payload = entry["payload"]
            intact = (entry["version"] == ENTRY_VERSION and entry["key"] == key
                      and entry["kind"] == kind and entry["payload_sha256"] == _sha256_text(
                          canonical_json(payload)))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return (payload, state_path) if intact and isinstance(payload, dict) else None

    def _store(self, key: str, kind: str, payload: dict[str, Any], state: bytes | None = None) -> None:
        """Write an entry (the state first; the JSON last, naming it); a failed write is skipped.

        Skipped, not an error: an entry is stored after its run has trained, so refusing here
        would throw away the run it caches (the artifact is written through the same guarded
        writer and does refuse). Each file is atomic, so a skipped entry leaves at most a
        state file without its JSON, which is a miss.
        """
        entry_path, state_path = self._paths(key)
        try:
            if state is not None:
                write_bytes_atomic(state_path, state)
                payload = {**payload, "state_sha256": hashlib.sha256(state).hexdigest()}
            text = canonical_json(payload)
            entry = {"version": ENTRY_VERSION, "key": key, "kind": kind,
                     "payload_sha256": _sha256_text(text), "payload": json.loads(text)}
            write_bytes_atomic(entry_path, (canonical_json(entry) + "\n").encode("utf-8"))
        except (WriteError, TypeError, ValueError):  # unwritable cache, unserialisable stats
            return


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CheckEntry:
    """One no-op check's stored outcome (a JSON object), read and written like a run's."""

    cache: ArmCache
    key: str

    def load(self) -> dict[str, Any] | None:
        hit = self.cache._load(self.key, EQUIVALENCE)
        return None if hit is None else hit[0]

    def store(self, payload: dict[str, Any]) -> None:
        self.cache._store(self.key, EQUIVALENCE, payload)


@dataclass
class _Entries:
    cache: ArmCache
    kind: Literal["tuning", "report"]
    arm: dict[str, Any]
    data: str
    evaluation: dict[str, Any]

    @property
    def partial_hits_exact(self) -> bool:
        """Whether training only the missing runs of a call gives the numbers of the whole call."""
        return self.cache.independent

    def key(self, spec: RunSpec, call: Sequence[RunSpec]) -> str:
        return run_key(self.kind, self.cache.context, self.arm, self.data, self.evaluation,
                       spec.config, spec.seed, call, spec.stop_after)

    def hits(self, call: Sequence[RunSpec], load: Callable[[RunSpec], _Hit | None]) -> dict[int, _Hit]:
        """The cached runs of one ``train_many`` call, by position in ``call``. Where a run's
        numbers depend on its call-mates, a call with any run missing gets none: it trains whole."""
        found = {index: hit for index, spec in enumerate(call) if (hit := load(spec)) is not None}
        return found if len(found) == len(call) or self.partial_hits_exact else {}


class TuningEntries(_Entries):
    """Tuning runs of one arm: (lr, seed) -> validation metric or diverged."""

    def load(self, spec: RunSpec, call: Sequence[RunSpec]) -> CachedMetric | None:
        found = self.cache._load(self.key(spec, call), self.kind)
        if found is None:
            return None
        value, path = found[0].get("value"), found[0].get("path")
        if not (value is None or isinstance(value, float)) or not (path is None or isinstance(path, str)):
            return None
        return CachedMetric(value, path)

    def store(self, spec: RunSpec, call: Sequence[RunSpec], value: float | None,
              path: str | None = None) -> None:
        """Keep the run's value and how it trained (``RunOutcome.path``); the key is unchanged."""
        payload: dict[str, Any] = {"value": value}
        if path is not None:
            payload["path"] = path
        self.cache._store(self.key(spec, call), self.kind, payload)


class ReportEntries(_Entries):
    """Report runs of one arm: seed -> everything ``ArmRun`` holds, and the model's state."""

    def load(self, spec: RunSpec, call: Sequence[RunSpec], build: Callable[[], nn.Module],
             curve: Mapping[str, int] | None = None) -> ArmRun | None:
        """The cached run with ``build()`` (called after ``torch.manual_seed(spec.seed)``)
        loaded from its state_dict; None when the entry is missing or does not fit.

        ``curve`` (``ValidationProbe.settings``: the validation curve asked for): an entry
        without that curve is a miss (the run trains again, with it, and overwrites the
        entry). The curve is no part of the key: a run trains and evaluates to the bit with or
        without it (tests/unit/test_validation_curve.py), so one entry serves both, and a run
        asked for without a curve loads without one (a stored curve is dropped), so what a
        command records never depends on what the cache held."""
        found = self.cache._load(self.key(spec, call), self.kind)
        if found is None:
            return None
        payload, state_path = found
        try:
            state_bytes = state_path.read_bytes()
            if hashlib.sha256(state_bytes).hexdigest() != payload["state_sha256"]:
                return None
            state = torch.load(io.BytesIO(state_bytes), weights_only=True, map_location="cpu")
            torch.manual_seed(spec.seed)
            model = build()
            model.load_state_dict(state)
            train = TrainResult(**payload["train"])
            run = ArmRun(
                seed=spec.seed, validation=dict(payload["validation"]), test=dict(payload["test"]), train=train,
                parameters=int(payload["parameters"]),
                architecture_stats=dict(payload["architecture_stats"]), model=model,
                train_config=dict(payload["train_config"]), path=str(payload["path"]), cached=True,
            )
        except Exception:  # noqa: BLE001  (any unreadable or unfitting entry is a miss)
            return None
        if run.parameters != sum(p.numel() for p in model.parameters()) or train.status != "complete":
            return None
        stored = train.validation_curve
        if curve is None:
            train.validation_curve = None
        elif stored is None or any(stored.get(name) != value for name, value in curve.items()):
            return None
        return run

    def store(self, spec: RunSpec, call: Sequence[RunSpec], run: ArmRun) -> None:
        buffer = io.BytesIO()
        torch.save({name: value.detach().cpu() if isinstance(value, torch.Tensor) else value
                    for name, value in run.model.state_dict().items()}, buffer)
        payload = {
            "validation": run.validation, "test": run.test, "train": dataclasses.asdict(run.train),
            "parameters": run.parameters, "architecture_stats": run.architecture_stats,
            "train_config": run.train_config, "path": run.path,
        }
        self.cache._store(self.key(spec, call), self.kind, payload, buffer.getvalue())
