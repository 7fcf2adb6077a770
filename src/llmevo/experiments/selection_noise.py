"""Selection noise (issue 22, item 2): how often a grid-tuned arm's chosen learning rate
changes when its grid is scored under another tuning seed.

A tuned artifact chose each arm's lr on one tuning seed (1000 by default). Here every arm's
grid (the lrs of its ``tuning`` settings, extension included) is trained again under each
``seed`` given (new tuning seeds, disjoint from the artifact's tuning, confirmation and report
seeds) at the artifact's training settings, through ``runner.tuning.tune_arm`` with neither
extension nor confirmation, and with the arm cache (a run trained before is loaded). Per arm,
the lr with the lowest value under each seed alone is compared with the one under the
artifact's first tuning seed; the *change rate* is the share of (arm, new seed) pairs whose
choice differs, and the *regret* is how much worse the reference's choice scores under the
new seed than that seed's own best (% of the best). Together they decide how many tuning
seeds the protocol needs (LOG).

``chosen_per_seed`` and ``selection_changes`` are the measurement (pure, tested);
``retrain_grid`` trains.

Public API: ``chosen_per_seed``, ``selection_changes``, ``SelectionNoise``, ``retrain_grid``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from llmevo.artifacts.schema import ArmTuning, ReproductionArtifact
from llmevo.errors import ConfigError
from llmevo.experiments.pipeline import ReproductionRequest
from llmevo.experiments.plans import PREPARATIONS
from llmevo.experiments.reproduction import cache_code_modules
from llmevo.runner.cache import ArmCache
from llmevo.runner.run import arm_train_config, score_arm
from llmevo.runner.tuning import GridTuner, tune_arm
from llmevo.runner.views import load_views


def chosen_per_seed(values: Mapping[float, Mapping[int, float | None]]) -> dict[int, float | None]:
    """``{seed: lr with the lowest value under that seed alone}`` over the seeds every lr has
    (a diverged run, None, counts as worst; ties: the lower lr; None: every lr diverged)."""
    seeds = set.intersection(*(set(v) for v in values.values())) if values else set()
    chosen: dict[int, float | None] = {}
    for seed in sorted(seeds):
        finite = [(v[seed], lr) for lr, v in values.items() if v[seed] is not None]
        chosen[seed] = min(finite)[1] if finite else None
    return chosen


@dataclass(frozen=True)
class SelectionNoise:
    """One arm: its choice under the reference seed and under each other seed."""

    arm: str
    reference_seed: int
    reference: float | None
    chosen: dict[int, float | None]  # every other seed's choice
    changed: tuple[int, ...]  # the seeds whose choice differs from the reference's
    # per other seed: how much worse, in % of that seed's best, the reference's choice scored
    # under it (0 where the choice held; None where the reference's lr diverged under it)
    regret_percent: dict[int, float | None]

    @property
    def change_rate(self) -> float:
        return len(self.changed) / len(self.chosen) if self.chosen else 0.0


def selection_changes(arm: str, values: Mapping[float, Mapping[int, float | None]],
                      reference_seed: int) -> SelectionNoise:
    """How often ``arm``'s choice (``chosen_per_seed``) differs from ``reference_seed``'s."""
    chosen = chosen_per_seed(values)
    if reference_seed not in chosen:
        raise ConfigError(f"{arm}: reference seed {reference_seed} is not a seed of every lr")
    reference = chosen.pop(reference_seed)
    changed = tuple(seed for seed, lr in chosen.items() if lr != reference)
    regret: dict[int, float | None] = {}
    for seed, lr in chosen.items():
        kept = None if reference is None else values[reference][seed]
        best = None if lr is None else values[lr][seed]
        regret[seed] = (None if kept is None or best is None
                        else 100.0 * (kept - best) / abs(best))
    return SelectionNoise(arm, reference_seed, reference, chosen, changed, regret)


def recorded_values(tuning: ArmTuning) -> dict[float, dict[int, float | None]]:
    """An arm's grid as ``{lr: {seed: value}}`` from its tuning block."""
    return {s.lr: {int(seed): value for seed, value in s.validation.items()} for s in tuning.settings}


def request_for(artifact: ReproductionArtifact, data_dir: Path, cache_dir: Path,
                device: str = "cpu") -> ReproductionRequest:
    """The request that reproduces ``artifact``'s training settings (no report, no output)."""
    setup = artifact.setup
    if setup.preset is None:
        raise ConfigError("the artifact records no preset; selection noise needs its settings")
    return ReproductionRequest(
        name=artifact.name, against=setup.against, preset=setup.preset, rung=setup.rung,
        steps=setup.steps_per_variant, batch_size=setup.batch_size, lr=setup.learning_rate,
        warmup_steps=setup.warmup_steps, weight_decay=setup.weight_decay, schedule=setup.schedule,
        seeds=list(artifact.evaluation_protocol.seeds), data_dir=data_dir, cache_dir=cache_dir,
        device=device, tune=False, report=False)


def retrain_grid(artifact: ReproductionArtifact, seeds: Sequence[int], data_dir: Path,
                 cache_dir: Path, device: str = "cpu") -> dict[str, dict[float, dict[int, float | None]]]:
    """Each arm's recorded grid with the validation values of ``seeds`` added (trained, or
    loaded from the arm cache); ``seeds`` must be new tuning seeds."""
    tuning = artifact.tuning
    if tuning is None or tuning.protocol != "grid":
        raise ConfigError("selection noise needs a learning-rate-grid tuned artifact (tuning block, "
                          "protocol grid)")
    taken = set(tuning.seeds) | set(tuning.confirm_seeds) | set(artifact.evaluation_protocol.seeds)
    if not seeds or set(seeds) & taken:
        raise ConfigError(f"--seeds: give new tuning seeds, none of {sorted(taken)}")
    plan = request_for(artifact, data_dir, cache_dir, device).plan()
    comparison, metric = plan.comparison, plan.comparison.metric
    corpus, preset, views = load_views(plan.preset, [arm.data for arm in comparison.arms],
                                       plan.data_dir, plan.cache_dir, None)
    cache = ArmCache.open(plan.cache_dir, plan.device, plan.execution, "use", cache_code_modules())
    values = {}
    for arm in comparison.arms:
        if arm.prepare is not None:
            arm = replace(arm, model=PREPARATIONS[arm.prepare](arm, views[arm.data], corpus,
                                                               plan.cache_dir, plan.seeds[0]))
        data = views[arm.data]
        recorded = recorded_values(tuning.arms[arm.label])
        grid = GridTuner(tuple(sorted(recorded)), tuple(seeds), extend_edges=False)
        entries = None if cache is None else cache.tuning(arm, data, preset, metric, comparison.objective)
        result = tune_arm(arm.label, arm_train_config(arm, data, preset), grid,
                          partial(score_arm, arm, data, preset, device=plan.device, metric=metric,
                                  execution=plan.execution, cache=entries))
        for setting in result.settings:
            recorded[setting.lr].update(setting.values)
        values[arm.label] = recorded
    return values
