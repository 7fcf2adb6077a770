"""The component registry: every mechanism is chosen by its registered name, per slot.

A component is a class that owns a small typed ``Config`` (pydantic, unknown keys
rejected) and a ``Manifest`` describing the paper it comes from, what it is compared
against (its ablation), how far it has been reproduced and which hyperparameters the
evolution engine may search. Registration is explicit: ``llmevo.catalog`` imports each
component and architecture module by name, and registering a name twice in a slot is an
error. This module imports no component, so every layer may import it.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from llmevo.errors import ConfigError, LlmevoError

SLOTS = (
    "position",
    "attention",
    "feedforward",
    "norm",
    "block",
    "optimizer",
    "kv_cache",
    "architecture",
    "post_training",
    "data",
)

ImplementationStatus = Literal["component_only", "integrated", "full"]


class Scaling(enum.Enum):
    """How a size-bearing integer of a model component's config follows the model's size,
    declared on the field itself (``hidden: Annotated[PositiveInt, Scaling.WIDTH] = 192``);
    the size dial (``runner.size``) reads the declaration and knows no field by name.
    ``scaling_of`` reads it; the contract suite requires one on every integer field of a
    model component's config."""

    WIDTH = "width"  # a width: scales with d_model (a feed-forward hidden size, a latent rank)
    HEADS = "heads"  # a number of heads: scales with the heads (key/value heads)
    HEAD_DIM = "head_dim"  # a part of a head: scales with the head dimension (rotary dims)
    KEPT = "kept"  # a count or a length in tokens: the same at every size (experts, a window)
    DIVIDES_HEADS = "divides_heads"  # a ratio of heads: kept, and must divide the heads


def scaling_of(info: Any) -> Scaling | None:
    """The ``Scaling`` a config field (a pydantic ``FieldInfo``) declares, or None."""
    return next((item for item in info.metadata if isinstance(item, Scaling)), None)


def kinds_of(annotation: Any) -> set[Any]:
    """Every type an annotation names, nested ones too (``int | None`` is
    ``Union[Annotated[int, Gt], None]``; ``list[int]`` names ``int``)."""
    found = {annotation}
    for arg in typing.get_args(annotation):
        found |= kinds_of(typing.get_args(arg)[0] if typing.get_origin(arg) is Annotated else arg)
    return found


def integer_fields(config_cls: type[BaseModel] | None) -> dict[str, Scaling | None]:
    """A component config's integer fields (``int`` or ``int | None``, not ``bool``) and the
    ``Scaling`` each declares (None: none)."""
    kinds = kinds_of
    fields = config_cls.model_fields.items() if config_cls is not None else ()
    return {name: scaling_of(info) for name, info in fields
            if int in (found := kinds(info.annotation)) and bool not in found}


class StrictModel(BaseModel):
    """Base for typed configs: unknown keys are rejected, values are validated."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ComponentChoice(StrictModel):
    """A component by registered name, with its hyperparameters."""

    name: str
    config: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> ComponentChoice:
        """``"rope"`` or ``"rope:theta=500000,rotary_dim=8"`` (values parsed as JSON)."""
        name, _, rest = text.partition(":")
        config: dict[str, Any] = {}
        for item in filter(None, rest.split(",")):
            key, _, raw = item.partition("=")
            try:
                config[key.strip()] = json.loads(raw)
            except json.JSONDecodeError:
                config[key.strip()] = raw
        return cls(name=name.strip(), config=config)

    def label(self) -> str:
        if not self.config:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in sorted(self.config.items()))


MODEL_SLOTS = ("position", "attention", "feedforward", "norm", "block")
"""The slots of a transformer model config (``ModelConfig``); the others are whole-run choices."""


def one_line_error(
    error: ValidationError,
    subject: str,
    *,
    within: str = "",
    kind: type[LlmevoError] = ConfigError,
) -> LlmevoError:
    """The first problem of a failed validation as one line, ``<subject>: <field>: <problem>``
    (``<subject>: <problem>`` when the whole value is at fault), to raise ``from None``.

    ``within`` is the path of the validated value inside a larger document (``model`` for a
    checkpoint's ``config.json``); ``kind`` is the error type (``ArtifactError`` for a file).
    """
    first = error.errors()[0]
    where = ".".join(str(part) for part in (within, *first["loc"]) if part != "")
    return kind(f"{subject}: {where}: {first['msg']}" if where else f"{subject}: {first['msg']}")


MAX_SEED = 2**63 - 1  # seeds are torch generator seeds: 0 .. 2**63-1


def seeds_problem(seeds: list[int]) -> str | None:
    """What is wrong with seeds of one kind (report, tuning, ...), or None: at least one, each
    in 0 .. 2**63-1, each once. The command line and the typed requests apply this one rule."""
    if not seeds:
        return "no seeds given"
    outside = [s for s in seeds if isinstance(s, bool) or not 0 <= s <= MAX_SEED]
    if outside:
        return f"seed {outside[0]} is out of range; seeds are integers 0 .. 2**63-1"
    duplicates = sorted({s for s in seeds if seeds.count(s) > 1})
    if duplicates:
        return f"duplicate seeds {duplicates}; each seed must appear once"
    return None


def check_seeds(seeds: list[int], option: str = "--seeds") -> list[int]:
    """``seeds_problem`` as one line naming ``option`` (the command line's seeds)."""
    problem = seeds_problem(seeds)
    if problem is not None:
        raise ConfigError(f"{option}: {problem}" + (f"; pass e.g. {option} 42,43,44" if not seeds else ""))
    return seeds


def _seeds_rule(seeds: list[int]) -> list[int]:
    # a field's rule: a validation error, which the request names by its option
    # (``--seeds: no seeds given; ...``), a file by its key and ``--set`` by itself
    # (``sections.check_value``), each where the value came from
    problem = seeds_problem(seeds)
    if problem is not None:
        raise PydanticCustomError("seeds", problem + ("; give at least one, e.g. [42, 43, 44]" if not seeds else ""))
    return seeds


# report seeds and tuning seeds as request fields: ``seeds_problem`` applied where they are declared
Seeds = Annotated[list[int], AfterValidator(_seeds_rule)]


class RequestModel(StrictModel):
    """A typed request to a pipeline: an invalid value is a one-line ``ConfigError`` that
    names the command-line option and the field (``--steps 0: Input should be greater than
    or equal to 1 (ReproductionRequest.steps)``), so the command line, which only parses and
    hands its values over, and the Python API refuse the same input in the same words."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """A bool where a number is expected (``threads=True``, ``seeds=[True]``) is refused:
        pydantic's lax mode takes it as 0 or 1, which no one means (a field that may hold a
        bool, such as ``tune: bool | None``, takes it)."""
        items = value if isinstance(value, list | tuple) else [value]
        if not any(isinstance(item, bool) for item in items) or info.field_name is None:
            return value
        kinds = kinds_of(cls.model_fields[info.field_name].annotation)
        if bool not in kinds and kinds & {int, float}:
            given = next(item for item in items if isinstance(item, bool))
            raise PydanticCustomError("bool_not_number", f"a boolean ({given}) where a number is expected")
        return value

    def __init__(self, *args: Any, **values: Any) -> None:
        if args:  # pydantic's own TypeError would be a traceback, not a line
            raise ConfigError(f"{type(self).__name__} takes keywords only (e.g. name='rope'); got "
                              f"{len(args)} positional value(s)")
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise request_error(error, type(self)) from None

    @classmethod
    def option(cls, field: str) -> str:
        """The command-line option of ``field`` (``batch_size`` -> ``--batch-size``)."""
        return "--" + field.replace("_", "-")


def request_error(error: ValidationError, request: type[RequestModel]) -> ConfigError:
    """The first problem of a request's validation as one line (see ``RequestModel``); a
    field of a section (``SectionedRequest``) is named by its own option."""
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    if not loc or loc[0] not in request.model_fields:
        return one_line_error(error, request.__name__)
    field = loc[0]
    section = SectionedRequest.section_type(request, field)
    if section is not None and len(loc) > 1 and loc[1] in section.model_fields:
        field = loc[1]
    if first["type"] == "seeds":  # the command line's own words (``check_seeds``): both doors alike
        return ConfigError(f"{request.option(field)}: {first['msg']}")
    value = first.get("input")
    shown = f" {value}" if isinstance(value, int | float | str) and not isinstance(value, bool) else ""
    return ConfigError(f"{request.option(field)}{shown}: {first['msg']} "
                       f"({request.__name__}.{'.'.join(loc)})")


class RequestSection(RequestModel):
    """A group of a request's fields declared once and shared by the pipelines that read it
    (``experiments.sections``: where runs go, tuning, size, post-training). Field names are
    unique across sections, so each is also the request's flat keyword and its option
    (``threads`` -> ``--threads``)."""


def _section_default(field: str, value: Any) -> bool | None:
    """Whether ``value`` is the default of ``field`` in the section declaring it (None: no
    section declares it): a default asks for nothing, wherever it is given."""
    for section in _all_sections():
        if field in section.model_fields:
            default = section.model_fields[field]
            return not default.is_required() and value == default.get_default(call_default_factory=True)
    return None


def _all_sections() -> list[type[RequestSection]]:
    found, todo = [], list(RequestSection.__subclasses__())
    while todo:
        section = todo.pop()
        found.append(section)
        todo.extend(section.__subclasses__())
    return found


class SectionedRequest(RequestModel):
    """A request built from sections. Besides ``run=RunSection(...)``, each section field may
    be given flat (``ReproductionRequest(name="rope", data_dir="data", tune_grid=[...])``): a
    keyword that is no field of the request but a field of exactly one of its sections goes
    into that section. Which section fields the pipeline reads is declared: ``takes`` (None: every
    field of its sections), and ``refused`` names a field it does not read with the reason;
    giving a field it does not read (of its sections, or of another request's section) is a
    one-line error in ``untaken``'s words, the same from Python and the command line, never
    silently ignored."""

    refused: ClassVar[dict[str, str]] = {}  # section field -> why this pipeline does not read it
    takes: ClassVar[frozenset[str] | None] = None  # the section fields it reads; None: all of its sections'
    untaken: ClassVar[str] = "{options} does not apply to {request}"

    @classmethod
    def refuse_untaken(cls, options: list[str]) -> None:
        """Refuse ``options`` (given, not read by this pipeline) in ``untaken``'s words."""
        if options:
            raise ConfigError(cls.untaken.format(options=", ".join(options), request=cls.__name__))

    @staticmethod
    def spelled(field: str, value: Any) -> str:
        """A given field as its option, a False flag by its negative (``--no-arm-cache``)."""
        option = RequestModel.option(field)
        return f"--no-{option[2:]}" if value is False else option

    @classmethod
    def _reads(cls, field: str) -> bool:
        return field not in cls.refused and (cls.takes is None or field in cls.takes)

    @staticmethod
    def section_type(request: type[BaseModel], field: str) -> type[RequestSection] | None:
        info = request.model_fields.get(field)
        annotation = info.annotation if info is not None else None
        return annotation if isinstance(annotation, type) and issubclass(annotation, RequestSection) else None

    @classmethod
    def sections(cls) -> dict[str, type[RequestSection]]:
        """The request's section fields and their types."""
        return {name: section for name in cls.model_fields
                if (section := cls.section_type(cls, name)) is not None}

    @model_validator(mode="before")
    @classmethod
    def _route_flat(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        sections = cls.sections()
        owner = {field: name for name, section in sections.items() for field in section.model_fields}
        # a section field this pipeline does not read (another pipeline's section's, or one it does
        # not take), given flat at other than its default: every one refused in one line
        cls.refuse_untaken([cls.spelled(key, value) for key, value in values.items()
                            if key not in cls.model_fields and key not in cls.refused
                            and (key not in owner or not cls._reads(key)) and _section_default(key, value) is False])
        routed = {k: v for k, v in values.items() if (k not in owner or k in cls.model_fields)  # a foreign
                  and (k in owner or k in cls.model_fields or _section_default(k, v) is None)}  # default: dropped
        for key, value in values.items():
            if key in owner and key not in cls.model_fields:
                name = owner[key]
                if name in values:  # both the section and one of its fields: which one is meant?
                    raise ConfigError(f"{key} is a field of the {name} section, which is given too; "
                                      f"give it in {name}=... or flat, not both")
                current = routed.get(name)
                if isinstance(current, BaseModel):
                    current = current.model_dump(exclude_unset=True)
                routed[name] = {**(current or {}), key: value}
        return routed

    @model_validator(mode="after")
    def _refuse_unread(self) -> SectionedRequest:
        untaken = []
        for name in self.sections():
            section = getattr(self, name)
            for field in type(section).model_fields:  # a default is no choice
                value = getattr(section, field)
                if field not in section.model_fields_set or self._reads(field) or \
                        value == type(section).model_fields[field].get_default(call_default_factory=True):
                    continue
                if field in self.refused:
                    raise ConfigError(f"{self.option(field)} does not apply here: {self.refused[field]}")
                untaken.append(self.spelled(field, value))
        self.refuse_untaken(untaken)
        return self

    def updated(self, *args: Any, **changes: Any) -> Any:
        """A copy with ``changes`` (a section's fields flat too; a section given whole replaces
        it), validated again: what was given stays given (the refusals read it), what was not
        keeps its default. A section and one of its fields in the same changes is an error."""
        if args:
            raise ConfigError(f"{type(self).__name__}.updated takes keywords only (e.g. steps=3); "
                              f"got {len(args)} positional value(s)")
        sections = self.sections()
        owner = {field: name for name, section in sections.items() for field in section.model_fields}
        values: dict[str, Any] = {name: getattr(self, name) for name in self.model_fields_set
                                  if name not in sections}
        for name in sections:
            if name in changes:  # replaced whole (checked against its fields below)
                continue
            section = getattr(self, name)
            values[name] = {field: getattr(section, field) for field in section.model_fields_set}
        for key, value in changes.items():
            name = owner.get(key) if key not in type(self).model_fields else None
            if name is not None and name not in changes:  # a section field, flat: into its section
                values[name] = {**values[name], key: value}
            else:
                values[key] = value
        return type(self)(**values)

    def flat(self, exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
        """Every field, sections flattened (JSON values): what the request asks, as one dict."""
        dumped = self.model_dump(mode="json", exclude=set(exclude))
        for name in self.sections():
            dumped.update({k: v for k, v in dumped.pop(name, {}).items() if k not in exclude})
        return dumped


class Paper(StrictModel):
    arxiv_id: str
    title: str
    url: str
    organization: str


class SearchDimension(StrictModel):
    """One searchable hyperparameter: a list of choices, or a numeric range."""

    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False


class TuningAxis(StrictModel):
    """One axis of a component's tuning space (``runner.tuning_space``, issue 22): the real
    setting it moves, its bounds and scale.

    ``target`` ``train`` moves a ``TrainConfig`` field (``lr``, ``weight_decay``,
    ``warmup_steps``); ``optimizer`` a field of the optimizer component's config (set through
    ``TrainConfig.optimizer.config``). With ``relative_to`` the bounds (and limits) are
    multiples of the preset's ``lr`` or ``steps``. ``scale``: ``linear``, ``log`` (uniform in
    log value) or ``log1m`` (uniform in log(1 - value): momentum-like settings near 1).
    ``limit_low``/``limit_high``: the hard range an edge extension never crosses (absent:
    unbounded on that side; a log axis stays positive, a log1m axis below 1)."""

    target: Literal["train", "optimizer"]
    setting: str
    low: float
    high: float
    scale: Literal["linear", "log", "log1m"] = "linear"
    relative_to: Literal["lr", "steps"] | None = None
    integer: bool = False
    limit_low: float | None = None
    limit_high: float | None = None

    @model_validator(mode="after")
    def _bounds(self) -> TuningAxis:
        if not self.low < self.high:
            raise ValueError(f"low {self.low} must be below high {self.high}")
        if self.scale == "log" and self.low <= 0:
            raise ValueError(f"a log axis needs low > 0, got {self.low}")
        if self.scale == "log1m" and self.high >= 1:
            raise ValueError(f"a log1m axis needs high < 1, got {self.high}")
        if self.limit_low is not None and self.limit_low > self.low:
            raise ValueError(f"limit_low {self.limit_low} is above low {self.low}")
        if self.limit_high is not None and self.limit_high < self.high:
            raise ValueError(f"limit_high {self.limit_high} is below high {self.high}")
        return self


LR_AXIS = TuningAxis(target="train", setting="lr", low=1 / 3, high=3.0, scale="log", relative_to="lr")
"""The learning rate, lr/3 .. 3·lr of the preset's (the default grid's span): the lr axis of
AdamW-like optimizers, whose good region sits around the preset's AdamW lr."""
HIGH_LR_AXIS = TuningAxis(target="train", setting="lr", low=5e-3, high=5e-2, scale="log")
"""The learning rate of an optimizer whose good region lies well above AdamW's (Muon, NorMuon,
SOAP: their lr grids chose 1.56e-2 at quick, Muon's ladder 2.7e-2 to 4.7e-2), declared in
absolute terms rather than as multiples of the preset's AdamW lr: 5e-3 .. 5e-2 puts those
choices inside the range, not at an edge an extension has to reach (issue 34)."""
WARMUP_AXIS = TuningAxis(target="train", setting="warmup_steps", low=0.0, high=0.2, relative_to="steps",
                         integer=True, limit_low=0.0, limit_high=0.5)
"""Linear warmup, 0 .. 20% of the steps (an extension stops at 0 and at half the run)."""
WEIGHT_DECAY_AXIS = TuningAxis(target="train", setting="weight_decay", low=0.0, high=0.2, limit_low=0.0)
"""Decoupled weight decay, 0 .. 0.2 (the value the optimizer's build receives)."""
PAPER_WEIGHT_DECAY_AXIS = TuningAxis(target="train", setting="weight_decay", low=0.0, high=1.0,
                                     limit_low=0.0)
"""Decoupled weight decay, 0 .. 1 (the value the optimizer's build receives): the range the
optimizer studies at scale search (Wen et al. 2509.02046 choose 0.1 for AdamW and 0.6-0.7 for
Lion), for ``--tune-space paper`` (issue 48, dial a)."""


class Manifest(StrictModel):
    name: str
    slot: str
    manifest_ref: str
    paper: Paper | None = None
    ablation: str | None = Field(
        default=None, description="The component of the same slot used in the baseline arm."
    )
    implementation_status: ImplementationStatus = "integrated"
    baseline: bool = Field(
        default=False,
        description="Part of the baseline design (llama_modern or an ablation it is compared "
        "with): enters the search space without a reproduction. The tier a component reached "
        "and whether it is promoted come from its published artifacts (llmevo.promotion).",
    )
    evolve_integrated: bool = False
    scope: str = ""
    search_space: dict[str, SearchDimension] = Field(default_factory=dict)
    tuning_space: dict[str, TuningAxis] = Field(
        default_factory=dict,
        description="What a reproduction's space tuning (--tune-space) tunes for this component: "
        "an optimizer's whole space (it must include lr); another component's axes add to its "
        "arm's optimizer space (none declared: lr only, the optimizer's).",
    )
    paper_tuning_space: dict[str, TuningAxis] = Field(
        default_factory=dict,
        description="What --tune-space paper tunes for this component: what the method's own paper "
        "(or the independent study that tuned it, e.g. Wen et al. 2509.02046) tunes, in the same "
        "form as tuning_space; none declared: its tuning_space (issue 48, dial a).",
    )
    supports_kv_cache: bool = True
    supports_replicas: bool = Field(
        default=True,
        description="Can run as batched replicas (llmevo.train.replicas); False: sequential only.",
    )


class EmptyConfig(StrictModel):
    """For components without hyperparameters."""


@dataclass(frozen=True)
class ComponentSpec:
    """A registered component: its class, config type and manifest."""

    cls: type
    config_cls: type[StrictModel]
    manifest: Manifest
    origin: str = "builtin"  # or the distribution of the plugin that registered it

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def slot(self) -> str:
        return self.manifest.slot

    def make_config(self, values: dict[str, Any] | StrictModel | None) -> StrictModel:
        """Validate ``values`` against this component's config; errors name the component."""
        if isinstance(values, self.config_cls):
            return values
        try:
            return self.config_cls.model_validate(dict(values or {}))
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '<config>'}: {e['msg']}"
                for e in error.errors()
            )
            raise ConfigError(f"{self.slot} component '{self.name}': {problems}") from None


class Registry:
    """Components by slot and name. A duplicate name within a slot is an error.

    A component may be *declared* before it is registered (``declare``: its slot, name and
    module): its module is imported when a lookup first needs it, so a run imports the
    components it names and not the other fifty (docs/LOG.md, 2026-12-05, seventeenth
    session). ``names`` and ``all`` import every declared module they cover; ``all`` lists
    declared components in their declaration order, then the others as registered."""

    def __init__(self) -> None:
        self._specs: dict[str, dict[str, ComponentSpec]] = {slot: {} for slot in SLOTS}
        self._modules: dict[str, dict[str, str]] = {slot: {} for slot in SLOTS}  # declared

    def _check_slot(self, slot: str) -> None:
        if slot not in self._specs:
            raise ConfigError(f"unknown slot '{slot}'; slots are: {', '.join(SLOTS)}")

    def declare(self, slot: str, name: str, module: str) -> None:
        """``slot``/``name`` is registered by importing ``module`` (on first lookup)."""
        self._check_slot(slot)
        if self._modules[slot].setdefault(name, module) != module:
            raise ConfigError(f"{slot} component '{name}' is declared twice "
                              f"({self._modules[slot][name]} and {module})")

    def _load(self, slot: str, names: Iterable[str]) -> None:
        """Import the declared modules of ``names`` (in ``slot``) that have not registered yet."""
        for name in names:
            module = self._modules[slot].get(name)
            if module is None or name in self._specs[slot]:
                continue
            importlib.import_module(module)
            if name not in self._specs[slot]:
                raise ConfigError(f"{slot} component '{name}': its module {module} registered no "
                                  "component of that name")

    def add(self, spec: ComponentSpec) -> None:
        slot = spec.slot
        self._check_slot(slot)
        declared = self._modules[slot].get(spec.name)
        if spec.name in self._specs[slot] or declared not in (None, spec.cls.__module__):
            raise ConfigError(f"{slot} component '{spec.name}' is registered twice")
        self._specs[slot][spec.name] = spec

    def get(self, slot: str, name: str) -> ComponentSpec:
        self._check_slot(slot)
        self._load(slot, [name])
        try:
            return self._specs[slot][name]
        except KeyError:
            known = ", ".join(self.names(slot)) or "(none: import llmevo.catalog first)"
            raise ConfigError(f"unknown {slot} component '{name}'; known: {known}") from None

    def has(self, slot: str, name: str) -> bool:
        """Whether ``slot``/``name`` is registered or declared (imports nothing)."""
        return name in self._specs[slot] or name in self._modules[slot]

    def find(self, name: str) -> ComponentSpec:
        """Look a component up by name alone (names are unique across slots in practice)."""
        slots = [slot for slot in SLOTS if name in self._specs[slot] or name in self._modules[slot]]
        if len(slots) == 1:
            return self.get(slots[0], name)
        if not slots:
            known = ", ".join(sorted(spec.name for spec in self.all()))
            raise ConfigError(f"unknown component '{name}'; known: {known}")
        raise ConfigError(f"component name '{name}' is ambiguous (slots: {', '.join(slots)})")

    def set_origin(self, slot: str, name: str, origin: str) -> None:
        """Record that a plugin (its distribution name) registered ``slot``/``name``."""
        self._specs[slot][name] = dataclasses.replace(self._specs[slot][name], origin=origin)

    def names(self, slot: str) -> list[str]:
        self._load(slot, list(self._modules[slot]))
        return sorted(self._specs[slot])

    def all(self) -> list[ComponentSpec]:
        specs = []
        for slot in SLOTS:
            declared = list(self._modules[slot])
            self._load(slot, declared)
            order = {name: index for index, name in enumerate(declared)}
            specs += sorted(self._specs[slot].values(), key=lambda spec: order.get(spec.name, len(order)))
        return specs


REGISTRY = Registry()


def register(
    *,
    slot: str,
    name: str,
    config: type[StrictModel] = EmptyConfig,
    **manifest_fields: Any,
) -> Callable[[type], type]:
    """Class decorator: register a component under ``slot``/``name`` with its manifest."""

    def decorate(cls: type) -> type:
        manifest = Manifest(
            name=name,
            slot=slot,
            manifest_ref=manifest_fields.pop("manifest_ref", f"reproduction:{name}"),
            **manifest_fields,
        )
        REGISTRY.add(ComponentSpec(cls=cls, config_cls=config, manifest=manifest))
        cls.component_name = name  # type: ignore[attr-defined]
        cls.Config = config  # type: ignore[attr-defined]
        return cls

    return decorate

