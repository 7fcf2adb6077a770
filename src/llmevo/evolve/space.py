"""The evolution search space, built from the registry at run time.

Genes are flat, named Optuna distributions:

- ``<slot>`` (``position``, ``attention``, ``feedforward``, ``norm``, ``block``,
  ``optimizer``, ``post_training``, ``data``): the registered component for the slot, among
  the promoted ones (the baseline has no post-training stage and trains on the preset's
  fixed concatenation, ``concat``);
- ``<slot>.<component>.<key>``: a hyperparameter from that component's manifest
  ``search_space`` (active only when the component is chosen);
- ``train.lr``, ``train.warmup_steps``, ``train.weight_decay``: training genes around the
  preset's values.

The baseline (``llama_modern`` trained with the preset's settings) is always a point of the
space: a baseline value missing from a manifest's choices is added to them. Constraint: a
genome's parameter count lies within ``budget_ratio`` of the baseline's (139,584 for
``llama_modern``). Public API: ``SearchSpace``, ``build_search_space``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
)

from llmevo.catalog import build_model
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import MODEL_SLOTS, ComponentChoice, Registry, SearchDimension
from llmevo.runner.genome import FIXED_DATA, NO_POST_TRAINING, Genome, TrainGenes
from llmevo.runner.optuna_private import suggest
from llmevo.runner.presets import Preset

GENOME_SLOTS = (*MODEL_SLOTS, "optimizer", "post_training", "data")
TRAIN_GENES = ("train.lr", "train.warmup_steps", "train.weight_decay")
DEFAULT_BUDGET_RATIO = 0.25


def _distribution(dimension: SearchDimension, baseline: Any) -> BaseDistribution:
    """An Optuna distribution for a manifest dimension, widened to contain ``baseline``."""
    if dimension.choices is not None:
        choices = list(dimension.choices)
        if baseline not in choices:
            choices.append(baseline)
        return CategoricalDistribution(choices)
    if dimension.low is None or dimension.high is None:
        raise ConfigError("a search dimension needs either choices or both low and high")
    low, high = dimension.low, dimension.high
    if isinstance(baseline, int | float) and baseline is not None:
        low, high = min(low, baseline), max(high, baseline)
    if dimension.integer:
        return IntDistribution(int(low), int(high), log=dimension.log)
    return FloatDistribution(float(low), float(high), log=dimension.log)


def _train_distributions(preset: Preset) -> dict[str, BaseDistribution]:
    """Training genes around the preset: lr within x/÷4 (log), warmup 0..2x, weight decay."""
    train = preset.train
    warmups = sorted({0, train.warmup_steps // 2, train.warmup_steps, 2 * train.warmup_steps})
    decays = sorted({0.0, 0.01, 0.1, float(train.weight_decay)})
    return {
        "train.lr": FloatDistribution(train.lr / 4.0, train.lr * 4.0, log=True),
        "train.warmup_steps": CategoricalDistribution(warmups),
        "train.weight_decay": CategoricalDistribution(decays),
    }


@dataclass
class SearchSpace:
    """Flat genes plus the structure that says which are active for a genome."""

    genes: dict[str, BaseDistribution]
    components: dict[str, tuple[str, ...]]  # slot -> eligible component names
    component_genes: dict[tuple[str, str], tuple[str, ...]]  # (slot, name) -> gene names
    base_model: ModelConfig
    baseline_parameters: int
    min_parameters: int
    max_parameters: int
    baseline: Genome
    _parameter_cache: dict[str, int] = field(default_factory=dict, repr=False)

    def active_genes(self, params: dict[str, Any]) -> list[str]:
        """The genes a genome with these slot choices uses, in suggestion order."""
        names = list(GENOME_SLOTS)
        for slot in GENOME_SLOTS:
            names.extend(self.component_genes.get((slot, params[slot]), ()))
        return names + list(TRAIN_GENES)

    def to_genome(self, params: dict[str, Any]) -> Genome:
        missing = [name for name in self.active_genes(params) if name not in params]
        if missing:
            raise ConfigError(f"genome parameters are missing genes: {', '.join(missing)}")
        choices: dict[str, ComponentChoice] = {}
        for slot in GENOME_SLOTS:
            name = params[slot]
            config = {
                gene.rsplit(".", 1)[1]: params[gene]
                for gene in self.component_genes.get((slot, name), ())
            }
            choices[slot] = ComponentChoice(name=name, config=config)
        model = self.base_model.model_copy(update={slot: choices[slot] for slot in MODEL_SLOTS})
        train = TrainGenes(
            lr=float(params["train.lr"]),
            warmup_steps=int(params["train.warmup_steps"]),
            weight_decay=float(params["train.weight_decay"]),
        )
        return Genome(model=model, optimizer=choices["optimizer"], train=train,
                      post_training=choices["post_training"], data=choices["data"])

    def to_params(self, genome: Genome, whole: bool = True) -> dict[str, Any]:
        """The genome's genes: each slot's component, its genes, then the training genes
        (``whole`` False: a gene the component's config does not set is left out)."""
        params: dict[str, Any] = {}
        for slot in GENOME_SLOTS:
            choice = genome_choice(genome, slot)
            params[slot] = choice.name
            for gene in self.component_genes.get((slot, choice.name), ()):
                key = gene.rsplit(".", 1)[1]
                if whole or key in choice.config:
                    params[gene] = choice.config[key]
        params.update({f"train.{key}": value for key, value in genome.train.model_dump().items()})
        return params

    def outside(self, params: dict[str, Any]) -> str | None:
        """Why ``params`` are not a point of the space (a slot or gene missing, a key that is
        no active gene, a component or value outside its distribution), or None when they
        are. The budget (``check``) is judged apart, as for a sampled genome."""
        for slot in GENOME_SLOTS:
            if slot not in params:
                return f"no component for slot '{slot}'"
            if not _holds(self.genes[slot], params[slot]):
                return (f"{slot} '{params[slot]}' is not in the space (there: "
                        f"{', '.join(self.components[slot])})")
        active = self.active_genes(params)
        missing = [name for name in active if name not in params]
        if missing:
            return f"no value for gene{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
        unknown = sorted(set(params) - set(active))
        if unknown:
            return (f"{', '.join(unknown)} {'are not genes' if len(unknown) > 1 else 'is not a gene'} "
                    "of this genome's components")
        for name in active[len(GENOME_SLOTS):]:
            distribution = self.genes[name]
            if not _holds(distribution, params[name]):
                return f"gene {name} = {params[name]!r} is outside {_shown(distribution)}"
        return None

    def genome_params(self, genome: Genome) -> dict[str, Any]:
        """The genes of a genome given whole (``reproduce --genome``'s format): ConfigError
        when it is not a point of the space, a gene missing from a component's config or a
        setting that no gene holds (the model's width, a component key that is not a gene)."""
        params = self.to_params(genome, whole=False)
        reason = self.outside(params)
        if reason is not None:
            raise ConfigError(reason)
        rebuilt = self.to_genome(params)
        if rebuilt != genome:
            difference = describe_difference(genome.model_dump(mode="json"),
                                             rebuilt.model_dump(mode="json"))
            raise ConfigError(f"the genome sets what no gene of the space holds ({difference})")
        return params

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Suggest the active genes of one genome on an Optuna trial (slots first)."""
        params: dict[str, Any] = {}
        for slot in GENOME_SLOTS:
            params[slot] = suggest(trial, slot, self.genes[slot])
        for name in self.active_genes(params)[len(GENOME_SLOTS):]:
            params[name] = suggest(trial, name, self.genes[name])
        return params

    def parameters(self, genome: Genome) -> int:
        """Parameter count of the genome's model; ``build_model`` rejects invalid genomes."""
        key = genome.model.fingerprint()
        if key not in self._parameter_cache:
            model = build_model(genome.model)
            self._parameter_cache[key] = sum(p.numel() for p in model.parameters())
        return self._parameter_cache[key]

    def check(self, genome: Genome) -> int:
        """Reject an invalid or over/under-budget genome before training; return its size."""
        count = self.parameters(genome)
        if not self.min_parameters <= count <= self.max_parameters:
            raise ConfigError(
                f"genome {genome.hash()} has {count:,} parameters; the budget is "
                f"{self.min_parameters:,}..{self.max_parameters:,} (around the baseline's "
                f"{self.baseline_parameters:,})"
            )
        return count

    def describe(self) -> dict[str, Any]:
        """A JSON-able description: compared when a study is resumed, printed by --list-space.
        A data slot holding only ``concat`` is left out, so a study made before the data gene
        existed resumes."""
        fixed = ["data"] if self.components["data"] == (FIXED_DATA.name,) else []
        return {
            "genes": {name: json.loads(distribution_to_json(d)) for name, d in self.genes.items()
                      if name not in fixed},
            "components": {slot: list(names) for slot, names in self.components.items()
                           if slot not in fixed},
            "parameter_budget": [self.min_parameters, self.max_parameters],
            "baseline_parameters": self.baseline_parameters,
            "baseline_genome": self.baseline.hash(),
        }


def _holds(distribution: BaseDistribution, value: Any) -> bool:
    """Whether ``value`` is a point of ``distribution`` (a choice of the same kind, or a
    finite number in range; an integer gene takes whole numbers only)."""
    if isinstance(distribution, CategoricalDistribution):
        return any(value == choice and isinstance(value, bool) == isinstance(choice, bool)
                   and (value is None) == (choice is None) for choice in distribution.choices)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    if isinstance(distribution, IntDistribution) and not float(value).is_integer():
        return False
    return distribution.low <= value <= distribution.high


def _shown(distribution: BaseDistribution) -> str:
    if isinstance(distribution, CategoricalDistribution):
        return "{" + ", ".join(repr(choice) for choice in distribution.choices) + "}"
    return f"[{distribution.low:g}, {distribution.high:g}]"


def describe_difference(given: Any, expected: Any, where: str = "") -> str:
    """The first place two JSON values differ, as ``path: given X, the space's Y``."""
    if isinstance(given, dict) and isinstance(expected, dict):
        for key in sorted(set(given) | set(expected)):
            if given.get(key) != expected.get(key):
                return describe_difference(given.get(key), expected.get(key),
                                           f"{where}.{key}" if where else str(key))
    return f"{where or 'genome'}: {given!r}, the space's {expected!r}"


def genome_choice(genome: Genome, slot: str) -> ComponentChoice:
    """The genome's choice for one of ``GENOME_SLOTS``."""
    if slot == "optimizer":
        return genome.optimizer
    if slot == "post_training":
        return genome.post_training
    if slot == "data":
        return genome.data
    return getattr(genome.model, slot)


def _baseline_value(slot: str, choice: ComponentChoice, key: str, registry: Registry) -> Any:
    if key in choice.config:
        return choice.config[key]
    config_cls = registry.get(slot, choice.name).config_cls
    return config_cls.model_fields[key].default


def build_search_space(
    registry: Registry,
    preset: Preset,
    base_model: ModelConfig | None = None,
    base_optimizer: ComponentChoice | None = None,
    budget_ratio: float = DEFAULT_BUDGET_RATIO,
    promoted: frozenset[str] | None = None,
) -> SearchSpace:
    """The space of promoted components, their manifest hyperparameters and the training
    genes, with the baseline inside it.

    ``promoted`` names the components that enter (``llmevo.promotion.promotions`` decides
    it from published reproductions); ``None`` takes the manifests' ``baseline`` flags.
    """
    base_model = base_model or ModelConfig()
    base_optimizer = base_optimizer or ComponentChoice(name="adamw")
    base_choices = {slot: getattr(base_model, slot) for slot in MODEL_SLOTS}
    base_choices["optimizer"] = base_optimizer
    base_choices["post_training"] = NO_POST_TRAINING
    base_choices["data"] = FIXED_DATA
    genes: dict[str, BaseDistribution] = {}
    components: dict[str, tuple[str, ...]] = {}
    component_genes: dict[tuple[str, str], tuple[str, ...]] = {}
    for slot in GENOME_SLOTS:
        eligible = [
            name for name in registry.names(slot)
            if (name in promoted if promoted is not None
                else registry.get(slot, name).manifest.baseline)
        ]
        base_name = base_choices[slot].name
        if base_name not in eligible:
            eligible.append(base_name)  # the baseline is always a point of the space
        components[slot] = tuple(sorted(eligible))
        genes[slot] = CategoricalDistribution(list(components[slot]))
        for name in components[slot]:
            spec = registry.get(slot, name)
            names = []
            for key, dimension in sorted(spec.manifest.search_space.items()):
                reference = base_choices[slot] if name == base_name else ComponentChoice(name=name)
                gene = f"{slot}.{name}.{key}"
                genes[gene] = _distribution(dimension, _baseline_value(slot, reference, key, registry))
                names.append(gene)
            component_genes[(slot, name)] = tuple(names)
    genes.update(_train_distributions(preset))
    baseline_params: dict[str, Any] = {slot: base_choices[slot].name for slot in GENOME_SLOTS}
    for slot in GENOME_SLOTS:
        for gene in component_genes[(slot, base_choices[slot].name)]:
            key = gene.rsplit(".", 1)[1]
            baseline_params[gene] = _baseline_value(slot, base_choices[slot], key, registry)
    baseline_params["train.lr"] = preset.train.lr
    baseline_params["train.warmup_steps"] = preset.train.warmup_steps
    baseline_params["train.weight_decay"] = float(preset.train.weight_decay)
    space = SearchSpace(
        genes=genes, components=components, component_genes=component_genes,
        base_model=base_model, baseline_parameters=0, min_parameters=0, max_parameters=0,
        baseline=Genome(model=base_model, optimizer=base_optimizer, train=TrainGenes(
            lr=preset.train.lr, warmup_steps=preset.train.warmup_steps,
            weight_decay=float(preset.train.weight_decay))),
    )
    space.baseline = space.to_genome(baseline_params)
    count = space.parameters(space.baseline)
    space.baseline_parameters = count
    space.min_parameters = int(count * (1.0 - budget_ratio))
    space.max_parameters = int(count * (1.0 + budget_ratio))
    return space
