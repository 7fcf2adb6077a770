"""A tuner's scorer over a fake trainer, for the tuning tests.

The tuners receive one ``Scorer`` (``runner.run.score_arm`` bound to an arm). Here the real
``score_arm`` runs (the arm cache's hits, stores and paths included) with ``runner.run.run_arm``
replaced by a stand-in: each run's "model" is ``model(spec)`` and its validation score is
``evaluate(model)``, so a test states its objective as a function of the settings trained.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import torch

from llmevo.runner import run
from llmevo.runner.arm_run import Scorer
from llmevo.runner.cache import TuningEntries
from llmevo.train.execution import RunSpec


def spec_model(spec: RunSpec) -> SimpleNamespace:
    """What a fake run remembers: its lr, seed, steps trained and whole training settings."""
    return SimpleNamespace(lr=spec.config.lr, seed=spec.seed, steps=spec.stop_after or spec.config.steps,
                           config=spec.config)


def scorer(monkeypatch: Any, evaluate: Callable[[Any], float], *, calls: list | None = None,
           note: Callable[[RunSpec], Any] = lambda spec: spec, diverge_above: float = math.inf,
           model: Callable[[RunSpec], Any] = spec_model, cache: TuningEntries | None = None,
           diverges: Callable[[RunSpec], bool] = lambda spec: False) -> Scorer:
    """``score_arm`` over a fake ``run_arm``: every call appends ``[note(spec) ...]`` to
    ``calls``; a run above ``diverge_above`` or for which ``diverges(spec)`` holds diverges;
    the others score ``evaluate(model(spec))``."""

    def fake_run_arm(arm, data, preset, runs, device, *, score, **options):
        if calls is not None:
            calls.append([note(spec) for spec in runs])
        finished = []
        for spec in runs:
            diverged = spec.config.lr > diverge_above or diverges(spec)
            value = None if diverged else float(evaluate(model(spec)))
            finished.append(SimpleNamespace(validation={} if diverged else {score: value}, path="sequential"))
        return finished

    monkeypatch.setattr(run, "run_arm", fake_run_arm)
    arm = SimpleNamespace(label="arm")  # the stand-in reads no arm, data view or preset
    return partial(run.score_arm, arm, None, None, device=torch.device("cpu"), metric="lm_loss", cache=cache)
