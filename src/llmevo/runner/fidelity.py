"""Multi-fidelity tuning: successive halving over one arm's candidates (issue 34, item 3).

Under ``--tune-fidelity halving`` an arm's candidates (the lr grid's settings, or one phase of
a space search's trials) are not all trained to full length. Successive halving (Jamieson &
Talwalkar 2016, arXiv 1502.07943; Li et al., Hyperband, arXiv 1603.06560, one bracket) with
reduction factor ``eta``: for ``n`` candidates there are ``K = floor(log_eta n)`` reduced rungs;
rung ``i`` (0 .. K-1) trains its candidates for ``steps // eta**(K - i)`` steps, scores each by
its mean validation over the tuning seeds at that step (a diverged run counts as worst; ties:
the earlier candidate), and keeps the best ``ceil(count / eta)``; the last rung trains the
survivors to full length. Fewer than ``eta`` candidates (an edge extension, a confirmation)
train to full length, as under ``full``.

**A rung reading is the same run's**: a run stopped at a rung is trained with the full run's
settings (its step count, so its lr schedule and an optimizer's horizon are the full run's)
and stopped after ``stop_after`` steps (``RunSpec.stop_after``; ``train()``'s ``on_step``
hook), then evaluated where the optimizer says it is evaluated. So its reading is the full
run's validation at that step. A survivor is *replayed* from step 0 to the next rung: the
trainer keeps no checkpoint to resume from, and replay is exact on the CPU (same seed, same
settings, same windows). Its earlier steps are counted again in the budget (``steps_trained``).

**The arm cache** keys a stopped run by its step count too (``runner.cache.run_key``'s
``stop_after``), so a rung reading is never loaded as a full run's number nor the reverse; a
survivor's full-length run is the same entry as under ``full``.

Why not Optuna's pruners: ``SuccessiveHalvingPruner`` and ``WilcoxonPruner`` decide *inside*
a running trial (``trial.report``/``should_prune`` from ``on_step``), comparing it with trials
that reached the rung earlier. That needs the runs to train one after another in the process
that holds the study: the parallel workers (the CPU default) and batched replicas train an
arm's runs at once, and the choice would depend on the order the runs finished. The
synchronous rung schedule here gives the same choice on every execution path, and both arms
of a comparison the same schedule for the same number of candidates.

Public API: ``Fidelity``, ``FIDELITIES``, ``DEFAULT_ETA``, ``check_fidelity``, ``rung_schedule``,
``Halving``, ``halve``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from llmevo.errors import ConfigError
from llmevo.runner.arm_run import Scorer
from llmevo.train.execution import RunSpec

FIDELITIES = ("full", "halving")
DEFAULT_ETA = 3
MAX_ETA = 16


@dataclass(frozen=True)
class Fidelity:
    """How far each tuning candidate trains: ``full`` (every candidate to full length, the
    protocol's default) or ``halving`` with reduction factor ``eta``."""

    kind: Literal["full", "halving"] = "full"
    eta: int = DEFAULT_ETA

    @property
    def halving(self) -> bool:
        return self.kind == "halving"

    def record(self) -> dict[str, Any]:
        """The artifact's ``tuning.fidelity``."""
        return {"kind": self.kind, "eta": self.eta,
                "method": ("successive halving, one bracket: floor(log_eta n) reduced rungs at "
                           "steps // eta**k, the best ceil(n / eta) by mean validation over the "
                           "tuning seeds continue (replayed from step 0); fewer than eta "
                           "candidates train to full length")}


def check_fidelity(kind: str, eta: int = DEFAULT_ETA) -> Fidelity:
    """A validated fidelity; a problem is one ``ConfigError`` line."""
    if kind not in FIDELITIES:
        raise ConfigError(f"--tune-fidelity {kind!r}: choose one of {', '.join(FIDELITIES)}")
    if isinstance(eta, bool) or not isinstance(eta, int) or not 2 <= eta <= MAX_ETA:
        raise ConfigError(f"--tune-eta {eta!r}: the halving factor must be an integer 2 .. {MAX_ETA}")
    return Fidelity(kind, eta)  # type: ignore[arg-type]


def rung_schedule(candidates: int, steps: int, fidelity: Fidelity) -> list[tuple[int, int]]:
    """``[(candidates trained, steps)]`` per rung, the last at full length: one rung
    ``(candidates, steps)`` under ``full`` or with fewer than ``eta`` candidates. A reduced
    rung that would train no step, or as long as the next, is dropped."""
    if not fidelity.halving or candidates < fidelity.eta:
        return [(candidates, steps)]
    levels = 0
    while fidelity.eta ** (levels + 1) <= candidates:
        levels += 1
    rungs, count = [], candidates
    for level in range(levels, 0, -1):
        rung_steps = steps // fidelity.eta ** level
        if rung_steps >= 1 and (not rungs or rung_steps > rungs[-1][1]) and rung_steps < steps:
            rungs.append((count, rung_steps))
            count = -(-count // fidelity.eta)
    rungs.append((count, steps))
    return rungs


@dataclass
class Halving:
    """One call's outcome, by position in the flat ``specs`` (candidate-major, ``group``
    runs per candidate): each run's last reading (full length for a survivor, the rung's for a
    stopped one), the positions loaded from the arm cache, how each trained, the step a
    stopped candidate was stopped at (by candidate index), each rung's record, the steps
    actually trained (cache hits excluded, replays included) and the steps asked (cache hits
    counted as trained: the call's cost from a cold cache)."""

    values: dict[int, float | None]
    hits: set[int]
    paths: dict[int, str]
    stopped: dict[int, int] = field(default_factory=dict)
    rungs: list[dict[str, Any]] = field(default_factory=list)
    steps_trained: int = 0
    steps_asked: int = 0


def _rank_key(values: Sequence[float | None], index: int) -> tuple[float, int]:
    if any(v is None or not math.isfinite(v) for v in values):
        return (math.inf, index)
    return (math.fsum(values) / len(values), index)  # type: ignore[arg-type]


def halve(specs: Sequence[RunSpec], group: int, fidelity: Fidelity, score: Scorer) -> Halving:
    """Score ``specs`` (``group`` consecutive runs per candidate, all at one step count) with
    ``score`` (``runner.run.score_arm`` bound to the arm) under ``fidelity``'s rung
    schedule; under ``full`` this is one ``score`` call."""
    if group < 1 or len(specs) % group:
        raise ValueError(f"{len(specs)} runs do not split into candidates of {group}")
    count = len(specs) // group
    steps = specs[0].config.steps
    schedule = rung_schedule(count, steps, fidelity)
    result = Halving({}, set(), {})
    alive = list(range(count))
    for number, (_, rung_steps) in enumerate(schedule):
        final = number == len(schedule) - 1
        positions = [c * group + k for c in alive for k in range(group)]
        call = [specs[p] if final else replace(specs[p], stop_after=rung_steps) for p in positions]
        scores = score(call)
        for local, position in enumerate(positions):
            result.values[position] = scores.values[local]
            if local in scores.paths:
                result.paths[position] = scores.paths[local]
            result.hits.discard(position)
            result.steps_asked += rung_steps
            if local in scores.hits:
                result.hits.add(position)
            else:
                result.steps_trained += rung_steps
        ranked = sorted(alive, key=lambda c: _rank_key([result.values[c * group + k] for k in range(group)], c))
        keep = ranked if final else ranked[:schedule[number + 1][0]]
        result.rungs.append({"steps": rung_steps, "candidates": list(alive), "kept": sorted(keep)})
        if not final:
            for candidate in alive:
                if candidate not in keep:
                    result.stopped[candidate] = rung_steps
            alive = sorted(keep)
    return result
