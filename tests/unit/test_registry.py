"""The registry: duplicate names, unknown names, config validation, manifests."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import PositiveInt, ValidationError

from llmevo.catalog import build_model, full_registry
from llmevo.errors import ArtifactError, ConfigError
from llmevo.model.config import ModelConfig
from llmevo.registry import (
    MODEL_SLOTS,
    ComponentChoice,
    ComponentSpec,
    EmptyConfig,
    Manifest,
    Registry,
    RequestModel,
    StrictModel,
    one_line_error,
)

REGISTRY = full_registry()
SRC = Path(__file__).resolve().parents[2] / "src"
# Module docstrings that do not yet name the reference their component was checked against
# (owned elsewhere; listed so that the check holds for every new component).
DOCSTRING_GAPS = {"block:pre_norm"}


def _spec(name: str, slot: str = "position") -> ComponentSpec:
    return ComponentSpec(cls=object, config_cls=EmptyConfig, manifest=Manifest(name=name, slot=slot, manifest_ref=f"reproduction:{name}"))


def test_duplicate_name_in_a_slot_is_an_error() -> None:
    registry = Registry()
    registry.add(_spec("a"))
    registry.add(_spec("a", slot="attention"))  # same name, other slot: allowed
    with pytest.raises(ConfigError, match="position component 'a' is registered twice"):
        registry.add(_spec("a"))


def test_unknown_slot_is_an_error() -> None:
    with pytest.raises(ConfigError, match="unknown slot 'colour'; slots are: position"):
        Registry().add(_spec("a", slot="colour"))


def test_unknown_component_lists_the_known_ones_of_its_slot() -> None:
    with pytest.raises(ConfigError) as error:
        build_model(ModelConfig().with_slot("position", "wavelet"))
    message = str(error.value)
    assert message.startswith("unknown position component 'wavelet'; known: ")
    for name in ("alibi", "learned", "nope", "rope", "sinusoidal"):
        assert name in message
    assert "swiglu" not in message  # only that slot's names


def test_find_by_name_and_ambiguity() -> None:
    assert REGISTRY.find("muon").slot == "optimizer"
    with pytest.raises(ConfigError, match="unknown component 'nonexistent'; known: "):
        REGISTRY.find("nonexistent")
    registry = Registry()
    registry.add(_spec("x"))
    registry.add(_spec("x", slot="norm"))
    with pytest.raises(ConfigError, match="ambiguous"):
        registry.find("x")


def test_the_components_table_declares_what_each_module_registers() -> None:
    """``llmevo.components.COMPONENTS`` and the catalog's ``ARCHITECTURES`` (a run imports
    only the modules it names) against the ``@register`` decorators: with every module
    imported, each built-in component is declared under its slot and name with the module
    that registered it, and nothing built-in is registered without a declaration."""
    from llmevo.catalog import ARCHITECTURES
    from llmevo.components import COMPONENTS

    declared = [(slot, name, f"llmevo.components.{module}") for slot, name, module in COMPONENTS]
    declared += [("architecture", name, module) for name, module in ARCHITECTURES.items()]
    registered = {(spec.slot, spec.name, spec.cls.__module__)
                  for spec in REGISTRY.all() if spec.origin == "builtin"}
    assert len(declared) == len(set(declared)) and set(declared) == registered


def test_a_declared_component_is_imported_on_first_lookup_and_listed_in_declared_order() -> None:
    """In a fresh interpreter: looking up ``alibi`` imports its module and not rope's or
    another slot's; ``all()`` then lists the position slot in the table's order (rope first,
    though alibi was imported first), each module imported once."""
    code = (
        "import sys\n"
        "from llmevo.catalog import full_registry\n"
        "registry = full_registry()\n"
        "assert registry.get('position', 'alibi').name == 'alibi'\n"
        "assert registry.has('position', 'rope') and not registry.has('position', 'wavelet')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('llmevo.components.') and m.count('.') == 3)\n"
        "print(loaded)\n"
        "print([s.name for s in registry.all() if s.slot == 'position'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(SRC)})
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, order = done.stdout.splitlines()
    assert "llmevo.components.position.alibi" in loaded
    for other in ("position.rope", "attention.mha", "optim.adamw", "optim.muon", "post_training.dpo"):
        assert f"llmevo.components.{other}'" not in loaded
    assert order == str(["rope", "alibi", "learned", "nope", "sinusoidal"])


def test_a_declared_name_is_refused_from_another_module_and_must_be_registered_by_its_own() -> None:
    registry = Registry()
    registry.declare("norm", "rmsnorm", "llmevo.components.norm.rmsnorm")
    spec = ComponentSpec(cls=object, config_cls=EmptyConfig,  # object's module is builtins
                         manifest=Manifest(name="rmsnorm", slot="norm", manifest_ref="reproduction:x"))
    with pytest.raises(ConfigError, match="norm component 'rmsnorm' is registered twice"):
        registry.add(spec)
    with pytest.raises(ConfigError, match="declared twice"):
        registry.declare("norm", "rmsnorm", "elsewhere")
    registry.declare("norm", "ghost", "llmevo.errors")  # a module that registers nothing
    with pytest.raises(ConfigError, match="its module llmevo.errors registered no component"):
        registry.get("norm", "ghost")


def test_unknown_config_keys_and_bad_values_are_rejected_with_the_component_named() -> None:
    with pytest.raises(ConfigError, match="position component 'alibi': slope: Extra inputs"):
        build_model(ModelConfig().with_slot("position", "alibi:slope=1"))
    with pytest.raises(ConfigError, match="position component 'alibi': max_bias"):
        build_model(ModelConfig().with_slot("position", "alibi:max_bias=-1"))
    with pytest.raises(ConfigError, match="position component 'sinusoidal'.*base must be > 1"):
        build_model(ModelConfig().with_slot("position", "sinusoidal:base=1"))


def test_configs_are_strict() -> None:
    for spec in REGISTRY.all():
        assert issubclass(spec.config_cls, StrictModel)
        assert spec.config_cls.model_config.get("extra") == "forbid"
        required = [n for n, field in spec.config_cls.model_fields.items() if field.is_required()]
        if required:  # e.g. blt-bytes: target_mean_patch_size comes from the tokenizer's data
            with pytest.raises(ConfigError, match=required[0]):
                spec.make_config({})
        else:
            spec.make_config({})  # every other default config is valid


@pytest.mark.parametrize("spec", REGISTRY.all(), ids=lambda spec: f"{spec.slot}:{spec.name}")
def test_manifest_is_complete(spec: ComponentSpec) -> None:
    manifest = spec.manifest
    assert manifest.manifest_ref.endswith(f":{manifest.name}")
    assert spec.cls.component_name == manifest.name
    assert manifest.scope, "scope must say what is and is not reproduced"
    if manifest.ablation is not None:
        # a name, or "name:key=value" (the same component with the mechanism switched off)
        assert manifest.ablation != manifest.name, "a component cannot be its own ablation"
        ablation = ComponentChoice.parse(manifest.ablation)
        REGISTRY.get(manifest.slot, ablation.name).make_config(ablation.config)
    for key in manifest.search_space:
        assert key in spec.config_cls.model_fields, f"search_space key {key} is not a config field"
    assert not manifest.baseline or manifest.implementation_status == "full"
    if manifest.paper is not None:
        assert re.fullmatch(r"\d{4}\.\d{4,5}", manifest.paper.arxiv_id)
        assert manifest.paper.arxiv_id in manifest.paper.url
        doc = importlib.import_module(spec.cls.__module__).__doc__ or ""
        assert manifest.paper.arxiv_id in doc or manifest.paper.title.split(":")[0] in doc, (
            f"{spec.cls.__module__} docstring does not cite its paper"
        )
        names_a_reference = "reference" in doc.lower()
        if f"{spec.slot}:{spec.name}" in DOCSTRING_GAPS:
            assert not names_a_reference, "gap fixed: remove it from DOCSTRING_GAPS"
        else:
            assert names_a_reference, f"{spec.cls.__module__} docstring names no reference test"


def test_model_slots_each_have_alternatives() -> None:
    assert all(len(REGISTRY.names(slot)) >= 2 for slot in MODEL_SLOTS)
    total = sum(len(REGISTRY.names(slot)) for slot in (*MODEL_SLOTS, "optimizer"))
    assert total >= 20


def test_one_architecture_registry_one_meaning_per_name() -> None:
    from llmevo.model.blt import BLTSettings, BLTStandin, ByteLatentTransformer, StandinSettings
    from llmevo.model.transformer import Transformer

    specs = {name: REGISTRY.get("architecture", name) for name in REGISTRY.names("architecture")}
    assert {name: spec.cls for name, spec in specs.items()} == {
        "transformer": Transformer, "blt-bytes": ByteLatentTransformer, "blt": BLTStandin,
    }
    assert specs["blt-bytes"].config_cls is BLTSettings and specs["blt"].config_cls is StandinSettings
    assert ModelConfig().architecture == "transformer"


def test_build_model_checks_the_architecture_and_its_settings() -> None:
    with pytest.raises(ConfigError, match="unknown architecture 'blt_standin'; known: blt, blt-bytes, transformer"):
        build_model(ModelConfig(architecture="blt_standin"))
    with pytest.raises(ConfigError, match="architecture component 'transformer': bogus"):
        build_model(ModelConfig(extra={"bogus": 1}))


def test_a_failed_validation_is_one_line_naming_the_first_field() -> None:
    class Settings(StrictModel):
        steps: PositiveInt = 1
        inner: EmptyConfig = EmptyConfig()

    with pytest.raises(ValidationError) as caught:
        Settings.model_validate({"steps": 0, "inner": {"x": 1}})
    error = one_line_error(caught.value, "settings")
    assert type(error) is ConfigError
    assert str(error) == "settings: steps: Input should be greater than 0"
    nested = one_line_error(caught.value, "config.json", within="model", kind=ArtifactError)
    assert type(nested) is ArtifactError
    assert str(nested) == "config.json: model.steps: Input should be greater than 0"

    class Request(RequestModel):
        steps: PositiveInt = 1

    with pytest.raises(ConfigError, match=r"^--steps 0: Input should be greater than 0 \(Request.steps\)$"):
        Request(steps=0)
    with pytest.raises(ConfigError, match=r"^Request: stepz: Extra inputs are not permitted$"):
        Request(stepz=3)
