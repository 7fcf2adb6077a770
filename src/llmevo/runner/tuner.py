"""One tuner interface: how each arm's training settings are chosen before its report seeds train.

A *tuner* decides before any training which runs each arm trains on tuning seeds
(disjoint from the report seeds), how they are scored on the validation split, and which
settings the arm keeps. Every arm of a comparison gets the same tuner, so the same budget.
Two implement the interface:

- ``runner.tuning.GridTuner``: one learning-rate grid shared by both arms (the protocol's
  default), extended once past an edge, a best at the stability edge confirmed on further
  seeds. A ladder's lr rule is this tuner with its grid bound late, once the rungs below are
  done (``with_grid``).
- ``runner.tuning_space.SpaceTuner``: trials over each arm's declared space
  (``--tune-space``), the same number per arm: Sobol points, or a Sobol start and then a
  sequential sampler (``--tune-sampler tpe|gp``, a field of the tuner).

``tune_arms`` is the one function that tunes the arms of a comparison, whichever the tuner
and whoever runs the arms: the arm runner (``runner.arm_runner.ArmRunner``, through the part
of it tuning uses, ``Tunable``) gives each arm's starting settings and its scorer
(``TuningStart``: a built-in's is ``runner.run.score_arm`` bound to the arm, its data view,
preset, metric and arm-cache entries; an external arm's runs its command), so a tuner hands it
``RunSpec``s and gets ``Scores`` back, and never sees a model, a stream, a device, a command or
the cache; the tuner chooses, and the runner gives the arm back at the choice. A new tuner
implements ``Tuner`` and nothing above the runner changes; a new way of choosing a space's
trials is a ``SpaceTuner.sampler`` (TPE and GP were added so, with no change to ``Tuner``).

Not a tuner: evolve's trial grid (each trial at its genome's lr times a few factors, scored by
its best fitness), which is the search's objective rather than a comparison's tuning.

Public API: ``Tuner``, ``ArmChoice``, ``TunedArms``, ``TuningStart``, ``Tunable``, ``tune_arms``,
``model_components``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from llmevo.artifacts.schema import CachedTuningRun
from llmevo.registry import MODEL_SLOTS, ComponentChoice
from llmevo.runner.arm import Arm
from llmevo.runner.arm_run import Scorer
from llmevo.runner.presets import Preset
from llmevo.runner.resources import CpuClock
from llmevo.train.trainer import TrainConfig


@dataclass
class ArmChoice:
    """One arm's tuning, whichever tuner made it: the training settings it keeps (its
    optimizer's config inside), the tuner's record of every run (for the artifact's block)
    and the runs loaded from the arm cache instead of trained."""

    config: TrainConfig
    record: Any  # the tuner's own: runner.tuning.ArmTuning, runner.tuning_space.ArmSpaceTuning
    cached: list[CachedTuningRun]
    runs: int  # tuning runs of this arm, cached included (under halving some stopped early)
    # halving: (steps actually trained, steps asked with cache hits counted); None: runs x steps
    steps_trained: tuple[int, int] | None = None


class Tuner(Protocol):
    """How each arm of a comparison is tuned (see the module docstring)."""

    @property
    def kind(self) -> Literal["grid", "space"]:
        """The protocol's name in artifacts and file names (``tuning.protocol``)."""
        ...

    @property
    def seeds(self) -> tuple[int, ...]:
        """The tuning seeds, disjoint from the report seeds."""
        ...

    def runs_at_once(self) -> int:
        """The most runs of one arm that one ``train_many`` call trains (the memory check)."""
        ...

    def check_arms(self, arms: Sequence[Arm], preset: Preset) -> None:
        """Refuse, before any training, arms this tuner cannot tune (e.g. an axis no arm declares)."""
        ...

    def with_grid(self, grid: Sequence[float], report_seeds: Sequence[int]) -> Tuner:
        """This tuner on the learning-rate grid ``grid`` (a ladder rung's, chosen late)."""
        ...

    def tune(self, label: str, config: TrainConfig, components: Sequence[ComponentChoice],
             score: Scorer) -> ArmChoice:
        """Tune one arm: ``config`` its training settings, ``components`` its model's
        components; ``score`` trains a call of ``RunSpec``s of this arm (or loads them from the
        arm cache) and gives each run's validation score (lower is better, None: diverged)."""
        ...

    def block(self, metric: str, records: dict[str, Any]) -> dict[str, Any]:
        """The artifact's ``tuning`` block from each arm's ``ArmChoice.record``."""
        ...


@dataclass
class TunedArms:
    """The arms at their choices (each arm as its runner gives it back at the tuner's choice),
    the artifact's ``tuning`` block, and per arm the runs that came from a cache."""

    arms: list[Any]
    block: dict[str, Any]
    cached: dict[str, list[CachedTuningRun]]


@dataclass
class TuningStart:
    """What a tuner receives for one arm from the arm runner: the training settings it starts
    from (``config``; an external arm's tuned parameter rides in ``config.lr``), the arm's
    model components (a space's axes; none for an external arm), its scorer, and the steps
    one run trains (the budget block; None where the runner does not know them)."""

    config: TrainConfig
    components: list[ComponentChoice]
    score: Scorer
    steps_per_run: int | None


class Tunable(Protocol):
    """The part of an arm runner (``runner.arm_runner.ArmRunner``) that tuning uses."""

    def tuning_start(self, arm: Any) -> TuningStart:
        """The arm's starting settings, components and scorer."""
        ...

    def at_choice(self, arm: Any, start: TuningStart, choice: ArmChoice) -> Any:
        """The arm at the tuner's choice (the runner keeps whatever else the choice moved)."""
        ...


def model_components(arm: Arm) -> list[ComponentChoice]:
    """The components of the arm's model, slot by slot (an architecture without a slot skips it)."""
    return [getattr(arm.model, slot) for slot in MODEL_SLOTS
            if isinstance(getattr(arm.model, slot, None), ComponentChoice)]


def tune_arms(runner: Tunable, arms: Sequence[Any], tuner: Tuner, metric: str) -> TunedArms:
    """Tune every arm with ``tuner`` through its arm runner (``runner.tuning_start`` gives the
    settings, components and scorer: an in-process arm's runs train here, an external arm's are
    commands). The block records each arm's budget (``budget``: runs, trained, steps per run,
    CPU and wall seconds of its tuning), so equal budgets are auditable."""
    choices: dict[str, ArmChoice] = {}
    budgets: dict[str, dict[str, Any]] = {}
    tuned = []
    for arm in arms:
        start = runner.tuning_start(arm)
        clock = CpuClock()
        choice = tuner.tune(arm.label, start.config, start.components, start.score)
        cpu, wall = clock.read()
        choices[arm.label] = choice
        budgets[arm.label] = {"runs": choice.runs, "trained": choice.runs - len(choice.cached),
                              "steps_per_run": start.steps_per_run, "cpu_seconds": round(cpu, 3),
                              "wall_seconds": round(wall, 3)}
        if choice.steps_trained is not None:  # halving: what was trained, beside the full-length cost
            trained, asked = choice.steps_trained
            budgets[arm.label].update(steps_trained=trained, steps_asked=asked,
                                      steps_full_fidelity=choice.runs * (start.steps_per_run or 0))
        tuned.append(runner.at_choice(arm, start, choice))
    block = tuner.block(metric, {label: c.record for label, c in choices.items()})
    for label, budget in budgets.items():  # each arm's tuning budget, auditable beside the other's
        block["arms"][label]["budget"] = budget
    return TunedArms(tuned, block, {label: c.cached for label, c in choices.items()})
