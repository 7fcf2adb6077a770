"""What a comparison trains under, resolved and checked once, in the runner that runs it.

- ``TuningSection``: whether and how each arm is tuned (an lr grid or a declared space), the
  request section every pipeline shares (re-exported by ``experiments.sections``, where the
  other sections are declared); ``tuner`` makes its tuner (``runner.tuner.Tuner``).
- ``ComparisonSettings``: made from a base preset, the request's overrides, the two arms, the
  report seeds and (for a tuned comparison) the tuning section, it resolves the preset at its
  overrides and the tuner around the preset's learning rate, and checks the tuner against the
  arms (an axis no arm declares), all when it is made: a request's plan holds what it built
  (``preset``, ``tuner``) and hands it to ``runner.compare``. The request layer never calls
  ``Preset.override``, a tuner's constructor or its ``check_arms`` itself, so a learning rate
  given on the command line goes down into the runner once and no value derived from it (the
  preset, the grid) is handed back up to be handed down again (``scripts/count_lr_flow.py``).
  Nothing here reads data: a bad tuning option is refused before any data is loaded.

Public API: ``TuningSection``, ``ComparisonSettings``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from llmevo.errors import ConfigError
from llmevo.registry import RequestSection, Seeds

if TYPE_CHECKING:  # the section imports no torch: the commands' options are made from it at once
    from llmevo.runner.arm import Arm
    from llmevo.runner.presets import Preset
    from llmevo.runner.tuner import Tuner


def _tuning() -> Any:
    from llmevo.runner import tuning

    return tuning


GRID_ONLY = ("tune_grid", "tune_probe")  # the lr grid's own fields
SPACE_ONLY = ("tune_trials", "tune_sampler")  # a space search's own fields


class TuningSection(RequestSection):
    """How each arm is tuned before the report seeds train. ``tune`` (None: the pipeline's
    default) tunes each arm's learning rate on ``tune_grid`` (default: 5 from lr/3 to 3*lr)
    under ``tune_seeds``; the best and the settings within the seed noise of it (``tune_noise``,
    percent of the best's mean; None: measured over two or more tuning seeds, else 1.42), and a
    best at the stability edge with its lower neighbour, are re-scored on ``tune_confirm``
    further seeds (default 2; ``runner.tuning``), under either protocol; ``tune_space`` (``"full"`` or axes such as ``"lr,beta2"``) instead
    tunes each arm over its components' declared space with ``tune_trials`` trials (default
    8) per arm, Sobol points or, with ``tune_sampler`` ``tpe`` or ``gp``, a Sobol start and then
    that sequential sampler, then the default lr grid as its floor (``runner.tuning_space``).
    ``tune_fidelity`` (None: ``full``) ``halving`` stops the worse candidates of either protocol
    early by successive halving (``runner.fidelity``), the same schedule for every arm.
    ``tune_probe`` (None: on) trains the lr grid's adequacy probe two lattice steps above its
    top and extends the grid toward it when it beats the best at all (re-scoring within the seed
    noise then decides)
    (``runner.tuning.adequacy_probe``); False: off, as the artifact then says. The lr grid
    only: a space search extends its own axes."""

    tune: bool | None = Field(default=None, description=(
        "Tune each arm's learning rate on the same grid first (default: the pipeline's; for reproduce "
        "on for quick and standard, off for smoke, refused for post-training methods); report seeds "
        "default to 42..46."))
    tune_grid: list[float] | None = Field(default=None, description=(
        "Learning rates to tune over, e.g. 1e-3,3e-3,1e-2 (default: 5 from lr/3 to 3*lr)."))
    tune_seeds: Seeds = Field(default_factory=lambda: list(_tuning().DEFAULT_TUNING_SEEDS), description=(
        "Tuning seeds, disjoint from the report seeds (default 1000; evolve's final comparison 2000)."))
    tune_confirm: int | None = Field(default=None, ge=0, description=(
        "With tuning (grid or space): extra tuning seeds (default 2, at most 16) on which the best and "
        "the settings within the seed noise of it (at most 3; a best lr at the stability edge with its "
        "lower neighbour) are re-scored, the lowest mean over all seeds chosen; 0 turns this off."))
    tune_noise: float | None = Field(default=None, ge=0, description=(
        "With tuning: the seed noise, percent of the best's mean, within which runners-up are re-scored "
        "on the --tune-confirm seeds (default: measured over two or more tuning seeds, else 1.42, the "
        "baseline's seed-to-seed spread at quick; 0: only a best at the stability edge)."))
    tune_space: str | None = Field(default=None, description=(
        "Tune each arm over its components' declared tuning space instead of one lr grid: 'full' "
        "(AdamW: lr, beta2, weight_decay, warmup; Muon: lr, momentum, adamw_lr; Lion: lr, beta2, "
        "weight_decay) or axes such as lr,beta2; Sobol trials (Optuna QMCSampler), the same number per "
        "arm; files say -tuned-space."))
    tune_trials: int | None = Field(default=None, ge=2, description=(  # at most MAX_TRIALS: space_tuner
        "With --tune-space, or with --all for its optimizer comparisons: trials per arm (default 8, at "
        "least 2), each under every tuning seed; the last quarter extends an axis whose best lies on "
        "its edge."))
    tune_sampler: Literal["sobol", "tpe", "gp"] | None = Field(default=None, description=(
        "With --tune-space (or --all): who chooses the declared trials. sobol (default): Sobol points; "
        "tpe or gp: the first half are the same Sobol points, the rest proposed two at a time by "
        "Optuna's TPESampler or GPSampler from the results so far."))
    tune_fidelity: Literal["full", "halving"] | None = Field(default=None, description=(
        "How far each tuning candidate trains. full (default): every grid point or trial to full "
        "length; halving: successive halving (factor 3), the worse candidates stopped at a third (a "
        "ninth, ...) of the steps by their validation there, the same schedule for every arm."))
    tune_probe: bool | None = Field(default=None, description=(
        "With the lr grid: after it has chosen (and extended), train each arm once two grid steps above "
        "the grid's top (x3 on the default grid) on the tuning seeds; one that beats the best at all "
        "extends the grid toward it (default on; the artifact says when it was off)."))

    @model_validator(mode="after")
    def _one_protocol(self) -> TuningSection:
        if self.tune_grid is not None and not self.tune_grid:  # not "the default grid"
            raise ConfigError("--tune-grid: no learning rate given; e.g. --tune-grid 1e-3,3e-3,1e-2 "
                              "(or leave it out for the default grid)")
        if self.tune is False and self.tune_grid is not None:
            raise ConfigError("--tune-grid needs tuning; drop --no-tune (tune=False with a tune_grid)")
        if self.tune is False and self.tune_fidelity is not None:
            raise ConfigError(f"--tune-fidelity {self.tune_fidelity} needs tuning; drop --no-tune")
        if self.tune_space is not None:
            if self.tune is False:
                raise ConfigError("--tune-space needs tuning; drop --no-tune")
            if self.tune_grid is not None:
                raise ConfigError("--tune-grid and --tune-space are two protocols; give one "
                                  "(a space search is floored by the default lr grid)")
        if self.tune is False and self.tune_noise is not None:
            raise ConfigError("--tune-noise needs tuning; drop --no-tune")
        if self.tune_probe is not None:
            spelled = "--tune-probe" if self.tune_probe else "--no-tune-probe"
            if self.tune is False:
                raise ConfigError(f"{spelled} needs tuning; drop --no-tune")
            if self.tune_space is not None:
                raise ConfigError(f"{spelled}: the adequacy probe guards the lr grid; a --tune-space search "
                                  "extends its own axes past their edges (drop one of them)")
        if self.tune_noise is not None and self.tune_confirm == 0:
            raise ConfigError("--tune-noise chooses the settings re-scored on the confirmation seeds; "
                              "--tune-confirm 0 turns re-scoring off (drop one of them)")
        return self

    def for_protocol(self, space: str | None) -> TuningSection:
        """This section for one comparison tuned by ``space`` (None: the lr grid), e.g. each of
        ``--all``'s: tuned, the other protocol's fields (``GRID_ONLY`` or ``SPACE_ONLY``) left out."""
        other = GRID_ONLY if space is not None else SPACE_ONLY
        return self.model_copy(update={"tune": True, "tune_space": space, **dict.fromkeys(other)})

    def check_trials(self) -> None:
        """One comparison: trials and their sampler count only with a space (``--all`` gives
        them to its space-tuned comparisons alone)."""
        if self.tune_trials is not None and self.tune_space is None:
            raise ConfigError("--tune-trials needs --tune-space (e.g. --tune-space full); the "
                              "learning-rate grid's size is --tune-grid")
        if self.tune_sampler is not None and self.tune_space is None:
            raise ConfigError(f"--tune-sampler {self.tune_sampler} needs --tune-space (e.g. --tune-space "
                              "full): it chooses a space search's trials; the learning-rate grid has none")

    def given(self) -> set[str]:
        """The fields given a value other than their default."""
        return {name for name in self.model_fields_set
                if getattr(self, name) != type(self).model_fields[name].get_default(call_default_factory=True)}

    def wanted(self, tuned_by_default: bool) -> bool:
        """Whether the arms are tuned: ``tune`` when given, else when a grid or a space is
        given, else the pipeline's default."""
        if self.tune is not None:
            return self.tune
        return self.tune_space is not None or self.tune_grid is not None or tuned_by_default

    def tuner(self, base_lr: float, report_seeds: list[int],
             grid: list[float] | None = None) -> Tuner:
        """The tuner for a preset learning rate ``base_lr``: the space's trials, or the
        lr grid (``grid`` where a caller chooses it, e.g. a ladder's lr rule; else
        ``tune_grid``; else the default grid around ``base_lr``), its seeds disjoint from
        ``report_seeds``."""
        from llmevo.runner.fidelity import check_fidelity
        from llmevo.runner.tuning import DEFAULT_CONFIRM, grid_tuner
        from llmevo.runner.tuning_space import DEFAULT_SAMPLER, DEFAULT_TRIALS, space_tuner

        fidelity = check_fidelity(self.tune_fidelity or "full")
        confirm = DEFAULT_CONFIRM if self.tune_confirm is None else self.tune_confirm
        if self.tune_space is not None:
            return space_tuner(self.tune_space, self.tune_trials or DEFAULT_TRIALS,
                               self.tune_seeds, report_seeds, grid=grid or (), around=base_lr,
                               sampler=self.tune_sampler or DEFAULT_SAMPLER, fidelity=fidelity,
                               confirm=confirm, noise=self.tune_noise)
        return grid_tuner(grid or self.tune_grid, self.tune_seeds, report_seeds, confirm=confirm,
                          fidelity=fidelity, around=base_lr, noise=self.tune_noise,
                          probe=self.tune_probe is not False)

    def refuse_untuned(self, why: str) -> None:
        """An untuned run: refuse the tuning options that were given (``why``: what to do)."""
        for option in ("tune_confirm", "tune_seeds", "tune_fidelity", "tune_noise", "tune_probe"):
            if option in self.model_fields_set and getattr(self, option) is not None:
                spelled = "--no-tune-probe" if option == "tune_probe" and not self.tune_probe else self.option(option)
                raise ConfigError(f"{spelled} needs tuning: {why}")


@dataclass(frozen=True)
class ComparisonSettings:
    """The preset both arms train under and their tuner, resolved and checked when made (see
    the module docstring): ``base`` at ``overrides`` (``Preset.override``: a bad value is one
    ``ConfigError`` line); with ``tuning``, its plan around that preset's learning rate with
    seeds disjoint from ``report_seeds``, checked against ``arms``; without, no tuner."""

    base: InitVar[Preset]
    overrides: InitVar[Mapping[str, Any]]
    arms: InitVar[Sequence[Arm]]
    report_seeds: InitVar[Sequence[int]]
    tuning: InitVar[TuningSection | None] = None
    preset: Preset = field(init=False)
    tuner: Tuner | None = field(init=False)

    def __post_init__(self, base: Preset, overrides: Mapping[str, Any], arms: Sequence[Arm],
                      report_seeds: Sequence[int], tuning: TuningSection | None) -> None:
        preset = base.override(dict(overrides))
        tuner = None
        if tuning is not None:
            tuner = tuning.tuner(preset.train.lr, list(report_seeds))
            tuner.check_arms(arms, preset)  # e.g. an axis no arm declares fails here
        object.__setattr__(self, "preset", preset)
        object.__setattr__(self, "tuner", tuner)
