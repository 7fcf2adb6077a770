"""Experiment trackers: where a comparison's runs show up (TensorBoard, W&B, trackio).

One interface, three implementations. A ``Tracker`` starts named runs
(``start(name, config)``); a ``TrackerRun`` takes scalars at a step (``log``), a summary
(``summary``: numbers and text, e.g. the verdict) and ends (``finish``):

- ``tensorboard``: one event file per run under ``<dir>/<group>/<name>`` (``TensorBoardRun``,
  written through the guarded write path); a summary is scalars and text at the last step.
  Needs the ``tensorboard`` package (``pip install 'llmevo[hf]'``).
- ``wandb``: Weights & Biases in offline mode (no network, no login): one run per name in
  ``<dir>/wandb/offline-run-*``, grouped by ``group``, in project ``llmevo``; a summary goes
  to the run's summary. ``wandb sync <dir>/wandb/offline-run-*`` uploads them later.
  Needs ``pip install 'llmevo[wandb]'``.
- ``trackio``: local-first, one SQLite database per project in ``<dir>`` (trackio's own
  default, ``~/.cache/huggingface/trackio``, when no dir is given; ``trackio show --project
  llmevo`` opens it); a summary is logged as ``summary/<key>`` at the last step (trackio has
  no summary of its own). Needs ``pip install 'llmevo[trackio]'``. trackio reads its folder
  once, when first imported (``TRACKIO_DIR``): a process logs to one trackio folder.

``Tracking`` adapts a tracker to the trainer's ``RunLogs`` (``train.logging``): each run's
per-step records (``train/loss``, ``train/lr``, ``train/grad_norm``) and evaluation metrics
(``validation/lm_loss``, ...) become ``log`` calls; runs stay open until ``finish()``, so
that ``summary(verdict)`` reaches every run of the comparison once its verdict is known.

Public API: ``TRACKERS``, ``Tracker``, ``TrackerRun``, ``Tracking``, ``check_tracker``,
``open_tracker``, ``tracker_group``, ``verdict_summary``, ``track_external``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from llmevo.errors import ConfigError
from llmevo.train.logging import StepRecord, TensorBoardRun

TrackerName = Literal["none", "tensorboard", "wandb", "trackio"]
TRACKERS: tuple[str, ...] = ("none", "tensorboard", "wandb", "trackio")
PROJECT = "llmevo"  # the W&B / trackio project every run goes to; runs are grouped per comparison
DEFAULT_DIR = {"tensorboard": Path("runs/tensorboard"), "wandb": Path("runs")}  # trackio: its own
_EXTRA = {"tensorboard": ("tensorboard", "hf"), "wandb": ("wandb", "wandb"), "trackio": ("trackio", "trackio")}


class TrackerRun(Protocol):
    """One run in a tracker: scalars per step, a summary, the end."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...
    def summary(self, values: Mapping[str, Any]) -> None: ...
    def finish(self) -> None: ...


class Tracker(Protocol):
    def start(self, name: str, config: Mapping[str, Any]) -> TrackerRun: ...


def _scalars(values: Mapping[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in values.items()
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)}


def _texts(values: Mapping[str, Any]) -> dict[str, str]:
    return {key: value if isinstance(value, str) else json.dumps(value)
            for key, value in values.items() if key not in _scalars(values) and value is not None}


@contextlib.contextmanager
def _quiet() -> Any:
    """A tracker's own chatter (trackio prints where it logs) kept off this command's output."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


# --- TensorBoard ------------------------------------------------------------------------------

class _TensorBoardTrackerRun:
    def __init__(self, log_dir: Path, config: Mapping[str, Any]):
        self.events = TensorBoardRun(log_dir)
        self.step = 0
        if config:
            self.events.log_text("config", json.dumps(dict(config), default=str), 0)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.step = max(self.step, step)
        self.events.log_metrics_flat(_scalars(metrics), step)

    def summary(self, values: Mapping[str, Any]) -> None:
        self.events.log_metrics_flat(_scalars(values), self.step)
        for key, text in _texts(values).items():
            self.events.log_text(key, text, self.step)

    def finish(self) -> None:
        self.events.close()


class TensorBoardTracker:
    def __init__(self, root: Path, group: str):
        self.root, self.group = root, group

    def start(self, name: str, config: Mapping[str, Any]) -> _TensorBoardTrackerRun:
        return _TensorBoardTrackerRun(self.root / self.group / name, config)


# --- Weights & Biases (offline) ---------------------------------------------------------------

class WandbTracker:
    """Offline W&B runs under ``root`` (``root/wandb/offline-run-*``), several open at once."""

    def __init__(self, root: Path, group: str):
        import wandb

        self.wandb, self.root, self.group = wandb, root, group

    def start(self, name: str, config: Mapping[str, Any]) -> Any:
        self.root.mkdir(parents=True, exist_ok=True)
        settings = self.wandb.Settings(mode="offline", silent=True, console="off", save_code=False,
                                       x_disable_stats=True)
        return _WandbRun(self.wandb.init(project=PROJECT, name=name, group=self.group, config=dict(config),
                                         dir=str(self.root), reinit="create_new", settings=settings))


class _WandbRun:
    def __init__(self, run: Any):
        self.run = run

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def summary(self, values: Mapping[str, Any]) -> None:
        self.run.summary.update(dict(values))

    def finish(self) -> None:
        self.run.finish()


# --- trackio (local) --------------------------------------------------------------------------

class TrackioTracker:
    """trackio runs in project ``llmevo`` of the local store ``root`` (trackio's default when None)."""

    def __init__(self, root: Path | None, group: str):
        if root is not None:
            wanted = root.resolve()
            loaded = sys.modules.get("trackio.utils")
            if loaded is not None and Path(loaded.TRACKIO_DIR).resolve() != wanted:
                raise ConfigError(f"--tracker-dir {root}: trackio was already loaded in this process with "
                                  f"its folder at {loaded.TRACKIO_DIR}; one process logs to one trackio folder")
            os.environ["TRACKIO_DIR"] = str(wanted)  # read by trackio once, as it is imported
        import trackio

        self.trackio, self.group = trackio, group

    def start(self, name: str, config: Mapping[str, Any]) -> Any:
        with _quiet():
            run = self.trackio.init(project=PROJECT, name=name, group=self.group, config=dict(config),
                                    embed=False, auto_log_cpu=False, auto_log_gpu=False)
        return _TrackioRun(run)


class _TrackioRun:
    def __init__(self, run: Any):
        self.run, self.step = run, 0

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.step = max(self.step, step)
        self.run.log(dict(metrics), step=step)

    def summary(self, values: Mapping[str, Any]) -> None:
        entries = {f"summary/{key}": value for key, value in {**_scalars(values), **_texts(values)}.items()}
        self.run.log(entries, step=self.step)

    def finish(self) -> None:
        from trackio import context_vars

        with _quiet():
            self.run.finish()
        if context_vars.current_run.get() is self.run:  # else trackio finishes it again at exit, aloud
            context_vars.current_run.set(None)


# --- choosing one -----------------------------------------------------------------------------

def check_tracker(tracker: str) -> None:
    """A known tracker whose package is installed, else a one-line ``ConfigError`` naming the
    pip extra; before any work."""
    if tracker not in TRACKERS:
        raise ConfigError(f"unknown tracker '{tracker}'; expected one of: {', '.join(TRACKERS)}")
    if tracker == "none":
        return
    module, extra = _EXTRA[tracker]
    if importlib.util.find_spec(module) is None:  # found, not imported: trackio reads its folder on import
        raise ConfigError(f"--tracker {tracker} needs the {module} package: "
                          f"pip install 'llmevo[{extra}]' (or pip install {module})")


def open_tracker(tracker: str, tracker_dir: Path | None, group: str) -> Tracker | None:
    """The tracker ``tracker`` names (None for ``none``), its runs grouped under ``group`` (one
    comparison), in ``tracker_dir`` (default: ``runs/tensorboard``, ``runs`` for W&B, trackio's
    own folder)."""
    check_tracker(tracker)
    if tracker == "none":
        return None
    folder = tracker_dir if tracker_dir is not None else DEFAULT_DIR.get(tracker)
    if tracker == "tensorboard":
        assert folder is not None
        return TensorBoardTracker(folder, group)
    if tracker == "wandb":
        assert folder is not None
        return WandbTracker(folder, group)
    return TrackioTracker(folder, group)


# --- the trainer's RunLogs over a tracker -----------------------------------------------------

class TrackedRun:
    """A ``RunLogger`` (``train.logging``) writing to one tracker run."""

    def __init__(self, run: TrackerRun):
        self.run = run

    def log_step(self, record: StepRecord) -> None:
        self.run.log(record.step + 1, {"train/loss": record.loss, "train/lr": record.lr,
                                       "train/grad_norm": record.grad_norm})

    def log_metrics(self, group: str, metrics: Mapping[str, Any], step: int) -> None:
        scalars = _scalars({f"{group}/{name}": value for name, value in metrics.items()})
        if scalars:
            self.run.log(step, scalars)

    def log_text(self, tag: str, text: str, step: int) -> None:
        self.run.summary({tag: text})

    def close(self) -> None:
        """Nothing: the run stays open for the comparison's summary; ``Tracking.finish`` ends it."""


class Tracking:
    """``RunLogs`` over a ``Tracker``: ``run(name)`` starts a tracker run (``config``: the
    comparison's settings, with the run's name); ``summary`` goes to every run started;
    ``finish`` ends them all."""

    def __init__(self, tracker: Tracker, config: Mapping[str, Any] | None = None):
        self.tracker, self.config = tracker, dict(config or {})
        self.runs: dict[str, TrackerRun] = {}

    def run(self, name: str) -> TrackedRun:
        if name not in self.runs:
            self.runs[name] = self.tracker.start(name, {**self.config, "run": name})
        return TrackedRun(self.runs[name])

    def summary(self, values: Mapping[str, Any]) -> None:
        for run in self.runs.values():
            run.summary(values)

    def finish(self) -> None:
        """End every run, each even where another failed (a full disk: each removes its own
        file); the first failure is raised."""
        runs, self.runs = list(self.runs.values()), {}
        failures = []
        for run in runs:
            try:
                run.finish()
            except Exception as failure:  # noqa: BLE001  (raised below, after the others end)
                failures.append(failure)
        if failures:
            raise failures[0]


def verdict_summary(verdict: Mapping[str, Any] | None, statistics: Mapping[str, Any] | None,
                    withheld: str | None = None) -> dict[str, Any]:
    """A comparison's verdict as a flat summary: ``verdict`` (its sentence), its class, metric,
    significance and margin, and the paired relative change of its metric with the interval
    (``verdict/change_percent``, ``verdict/ci_low``, ``verdict/ci_high``)."""
    if verdict is None:
        return {"verdict": f"withheld: {withheld or 'no verdict'}"}
    summary: dict[str, Any] = {"verdict": verdict.get("summary")}
    for key in ("classification", "metric", "significant", "margin_percent", "noise_floor_percent"):
        if verdict.get(key) is not None:
            summary[f"verdict/{key}"] = verdict[key]
    change = ((statistics or {}).get(verdict.get("metric")) or {}).get("paired_relative_change_percent")
    if change:
        summary |= {"verdict/change_percent": change.get("mean"), "verdict/ci_low": change.get("ci_low"),
                    "verdict/ci_high": change.get("ci_high")}
    return {key: value for key, value in summary.items() if value is not None}


def tracker_group(artifact: Path) -> str:
    """A comparison's group in a tracker: its artifact's folder and file stem
    (``runs/rope-rope/smoke-42-46-tuned.json`` -> ``rope-rope/smoke-42-46-tuned``)."""
    return f"{artifact.parent.name}/{artifact.stem}"


class ExternalTracking:
    """An external experiment's report runs and verdict in a tracker (``track_external``)."""

    def __init__(self, logs: Tracking | None):
        self.logs = logs

    def run(self, record: Mapping[str, Any]) -> None:
        """One run record of ``experiments.external`` as the tracker run ``<arm>-seed<seed>``: its
        parameters and final metrics (``final/<metric>``), its status and error. Report runs only.
        The script's per-step curve is not seen: llmevo reads the metrics it prints at the end."""
        if self.logs is None or record.get("phase") != "report":
            return
        run = self.logs.run(f"{record['arm']}-seed{record['seed']}")
        if record.get("metrics"):
            run.log_metrics("final", record["metrics"], 0)
        run.run.summary({"params": json.dumps(record.get("params") or {}, default=str),
                         "status": record["status"], **({"error": record["error"]} if record.get("error") else {})})

    def verdict(self, artifact: Mapping[str, Any]) -> None:
        if self.logs is not None:
            self.logs.summary(verdict_summary(artifact.get("verdict"), artifact.get("statistics"),
                                              artifact.get("verdict_withheld")))


@contextlib.contextmanager
def track_external(tracker: str, tracker_dir: Path | None, artifact: Path,
                   config: Mapping[str, Any]) -> Iterator[ExternalTracking]:
    """The tracker for an external comparison whose artifact is ``artifact`` (checked and
    opened before its first run); its runs finished on the way out."""
    if tracker == "none" and tracker_dir is not None:
        raise ConfigError("--tracker-dir is where --tracker writes; add --tracker (tensorboard, wandb or "
                          "trackio) or drop it")
    opened = open_tracker(tracker, tracker_dir, tracker_group(artifact))
    logs = None if opened is None else Tracking(opened, config)
    try:
        yield ExternalTracking(logs)
    finally:
        if logs is not None:
            logs.finish()
