"""The size dial (runner.size): rung 0 is quick's llama_modern exactly, every rung's size is
checked against a hand count, the tokens-per-parameter ratio holds, bad sizes are refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmevo.catalog import full_registry
from llmevo.errors import ConfigError
from llmevo.evolve import EvolutionSettings
from llmevo.experiments import ReproductionRequest
from llmevo.experiments.pipeline import artifact_filename
from llmevo.model.config import ModelConfig
from llmevo.runner import size as size_module
from llmevo.runner.presets import get_preset
from llmevo.runner.size import (
    RUNGS,
    TOKENS_PER_PARAMETER,
    Geometry,
    parameter_count,
    resize_model,
    rung_table,
    size_at,
    size_label,
)
from llmevo.train.trainer import TrainConfig

VOCAB = 512


def hand_count(d: int, layers: int, hidden: int, matrices: int, kv_width: int | None = None) -> int:
    """llama_modern's parameters written out: tied embeddings (V x d); per layer q and o
    (d x d each), k and v (d x kv_width each), a feed-forward of ``matrices`` d x hidden
    matrices and two RMSNorm gains (d each); the final RMSNorm gain (d). RoPE has none."""
    kv = d if kv_width is None else kv_width
    per_layer = 2 * d * d + 2 * d * kv + matrices * d * hidden + 2 * d
    return VOCAB * d + layers * per_layer + d


def test_rung_0_is_quick_with_llama_modern_exactly():
    size = size_at(0)
    quick = get_preset("quick")
    assert size.parameters == 139_584
    assert size.model == ModelConfig()
    assert size.preset == quick
    for field in TrainConfig.model_fields:  # every training value, one by one
        assert getattr(size.preset.train, field) == getattr(quick.train, field), field
    assert (size.preset.train.steps, size.preset.train.batch_size, size.preset.train.warmup_steps) == (330, 48, 30)
    assert size.training_tokens == 1_013_760 and size.compute == 6 * 139_584 * 1_013_760


@pytest.mark.parametrize("rung", sorted(RUNGS))
def test_each_rung_matches_a_hand_count(rung):
    shape = RUNGS[rung]
    d = shape.d_model
    assert size_at(rung).parameters == hand_count(d, shape.n_layers, hidden=3 * d, matrices=3)


def test_a_non_zero_rung_by_hand():
    # rung 1: d 96, 2 layers; 512*96 + 2*(2*96*96*2 + 3*96*288 + 2*96) + 96
    assert size_at(1).parameters == 49_152 + 2 * (36_864 + 82_944 + 192) + 96 == 289_248


def test_component_sizes_follow_the_width_and_heads():
    size = size_at(1)  # d 96 (1.5x), 6 heads
    assert size.model.feedforward.config["hidden"] == 288  # SwiGLU 192 at d 64: 3 x d_model
    assert size.model.attention.config["kv_heads"] == 6
    plain = resize_model(ModelConfig().with_slot("feedforward", "relu2"), RUNGS[1])
    assert plain.feedforward.config["hidden"] == 432  # its declared 288 (4.5 x d) at d 96
    assert parameter_count(plain) == hand_count(96, 2, hidden=432, matrices=2)
    grouped = resize_model(ModelConfig().with_slot("attention", "mha:kv_heads=2"), RUNGS[2])
    assert grouped.attention.config["kv_heads"] == 4  # half the heads stays half
    assert parameter_count(grouped) == hand_count(128, 2, hidden=384, matrices=3, kv_width=64)
    rotary = resize_model(ModelConfig().with_slot("position", "rope:rotary_dim=8"), Geometry(64, 2, 2))
    assert rotary.position.config["rotary_dim"] == 16  # half the head dimension stays half
    windowed = resize_model(ModelConfig().with_slot("attention", "sliding_window:window=24"), RUNGS[3])
    assert windowed.attention.config["window"] == 24  # a length in tokens: the sequence stays 64
    assert size_at(2).model.max_seq_len == ModelConfig().max_seq_len


def test_a_new_components_declared_sizes_scale_with_no_edit_to_the_dial(monkeypatch):
    """The dial knows no field by name: a component defined here, with sizes the dial has
    never seen, scales by what its fields declare."""
    from typing import Annotated

    from pydantic import PositiveInt

    from llmevo.registry import Scaling, StrictModel

    class Wide(StrictModel):
        inner: Annotated[PositiveInt, Scaling.WIDTH] = 96  # 1.5 x d_model
        groups: Annotated[PositiveInt, Scaling.HEADS] = 2  # half the heads
        slice_dim: Annotated[PositiveInt, Scaling.HEAD_DIM] = 4  # a quarter of a head
        span: Annotated[PositiveInt, Scaling.KEPT] = 7
        share: Annotated[PositiveInt, Scaling.DIVIDES_HEADS] = 2
        optional: Annotated[PositiveInt | None, Scaling.HEADS] = 4  # an int | None is a size too
        note: str = "not a size"

    real = full_registry()

    class Bare(StrictModel):
        width: PositiveInt | None = 8  # a size with no declaration

    class Spec:
        def __init__(self, config_cls):
            self.config_cls = config_cls

    class Registry:
        def get(self, slot, name):
            return {"wide": Spec(Wide), "bare": Spec(Bare)}.get(name) or real.get(slot, name)

    monkeypatch.setattr(size_module, "full_registry", lambda: Registry())
    model = ModelConfig().with_slot("feedforward", "wide")  # d_model 64, 4 heads of 16
    scaled = resize_model(model, Geometry(128, 2, 8)).feedforward.config
    assert scaled["inner"] == 192 and scaled["groups"] == 4 and scaled["slice_dim"] == 4
    assert scaled["span"] == 7 and scaled["share"] == 2 and scaled["optional"] == 8 and "note" not in scaled
    with pytest.raises(ConfigError, match="wide.groups=2 at 4 does not scale to a whole size at 3"):
        resize_model(model, Geometry(48, 2, 3))
    with pytest.raises(ConfigError, match="wide.share=2 does not divide the 3 head"):
        resize_model(ModelConfig().with_slot("feedforward", "wide:groups=4"), Geometry(48, 2, 3))
    # an integer with no declaration (a plugin that never ran the contract suite) is refused,
    # never kept silently at a size that no longer fits
    with pytest.raises(ConfigError, match="'bare': its integer field 'width' declares no Scaling"):
        resize_model(ModelConfig().with_slot("feedforward", "bare"), Geometry(128, 2, 8))


def test_tokens_per_parameter_ratio_is_held():
    assert TOKENS_PER_PARAMETER == pytest.approx(7.2627, abs=1e-4)
    for row in rung_table():
        half_step = row["batch"] * 64 / 2
        assert abs(row["tokens"] - TOKENS_PER_PARAMETER * row["parameters"]) <= half_step
        assert row["compute"] == 6 * row["parameters"] * row["tokens"]


def test_the_docstring_table_is_the_computed_one():
    text = size_module.__doc__ or ""
    documented = [line.split() for line in text.splitlines() if re.match(r"^\s+-?\d+\s+\d+\s", line)]
    computed = [[str(row["rung"]), str(row["d_model"]), str(row["layers"]), str(row["heads"]),
                 f"{row['parameters']:,}", str(row["batch"]), f"{row['steps']:,}",
                 f"{row['tokens']:,}", f"{row['compute']:.3e}"] for row in rung_table()]
    assert documented == computed


def test_parameters_about_double_per_rung_and_span_the_ladder():
    counts = [size_at(rung).parameters for rung in sorted(RUNGS) if rung > -3]
    assert all(1.6 < later / earlier < 2.5 for earlier, later in zip(counts, counts[1:], strict=False))
    assert 2.5 < size_at(-2).parameters / size_at(-3).parameters < 3  # one 16-dimension head: no narrower
    assert size_at(2).parameters / size_at(-2).parameters >= 8  # the issue's >= 8x over rungs -2..2
    assert size_at(0).parameters / size_at(-3).parameters >= 8  # and over four rungs, -3..0
    assert size_at(0).compute / size_at(-3).compute >= 64  # >= 64x compute
    assert size_at(7).parameters >= 10_000_000  # a GPU rung


def test_explicit_sizes_replace_the_rung_and_the_rest_follows():
    size = size_at(1, d_model=128, n_layers=3, n_heads=4)
    assert (size.model.d_model, size.model.n_layers, size.model.n_heads) == (128, 3, 4)
    assert size.model.feedforward.config["hidden"] == 384
    assert size.parameters == hand_count(128, 3, hidden=384, matrices=3)
    assert size.preset.train.batch_size == 64  # the rung's batch
    assert abs(size.training_tokens - TOKENS_PER_PARAMETER * size.parameters) <= 64 * 64 / 2
    assert size_label(size) == "d128-l3-h4" and size_label(size_at(1)) == "rung1"
    assert size_label(size_at(0)) is None  # rung 0 is quick: its files keep their names


def test_a_sized_reproduction_scales_both_arms_and_names_its_files(tmp_path):
    plan = ReproductionRequest(name="relu2", preset="quick", rung=-1, data_dir=tmp_path).plan()
    assert plan.comparison.baseline.model.feedforward.config == {"hidden": 216}  # gelu 288 at d 48
    assert plan.comparison.method.model.feedforward.config == {"hidden": 216}
    assert plan.preset.train.steps == 300 and plan.preset.train.batch_size == 32
    assert plan.size is not None and plan.size.rung == -1
    assert plan.outputs.artifact.name == "public-quick-rung-1-tuned-seeds42-46.json"
    assert artifact_filename("quick", [42], size="rung2") == "public-quick-rung2-seed42.json"
    unsized = ReproductionRequest(name="relu2", preset="quick", data_dir=tmp_path).plan()
    assert unsized.size is None and unsized.outputs.artifact.name == "public-quick-tuned-seeds42-46.json"
    with_steps = ReproductionRequest(name="rope", preset="quick", rung=1, steps=2, batch_size=8,
                                     data_dir=tmp_path).plan()
    assert (with_steps.preset.train.steps, with_steps.preset.train.batch_size) == (2, 8)


def test_a_sized_evolution_searches_around_the_sized_baseline(tmp_path):
    settings = EvolutionSettings(rung=1, trial_steps=2, data_dir=tmp_path)
    trial, final = settings.presets()
    assert trial.train.batch_size == final.train.batch_size == 64
    assert settings.base_model().d_model == 96 and settings.study_name() == "evolve-quick-rung1-s2"
    assert EvolutionSettings(data_dir=tmp_path).base_model() == ModelConfig()


BAD_SIZES = [
    ({"rung": 99}, "--rung 99: unknown rung; known: -3..7"),
    ({"rung": 0, "heads": 5}, "--heads 5 does not divide --d-model 64"),
    ({"d_model": 90}, "--heads 4 does not divide --d-model 90"),
    ({"rung": -2, "batch_size": 100_000}, "less than one step of batch 100000"),
    ({"rung": 1, "preset": "smoke"}, "scale the quick preset (rung 0 is quick); got --preset smoke"),
    ({"d_model": 0}, "--d-model 0: Input should be greater than or equal to 1"),
    ({"rung": 2, "heads": 6, "name": "rope"}, "--heads 6 does not divide --d-model 128"),
    # heads of odd width: RoPE rotates channel pairs (this ended in a traceback at the first step)
    ({"d_model": 15, "heads": 3}, "rope: the head dimension 5 (d_model 15 / 3 heads) is odd"),
    ({"d_model": 30, "heads": 4}, "--heads 4 does not divide --d-model 30"),
    ({"rung": -3, "heads": 16}, "rope: the head dimension 1 (d_model 16 / 16 heads) is odd"),
]


@pytest.mark.parametrize(("values", "message"), BAD_SIZES)
def test_bad_sizes_are_refused_by_the_request(values, message, tmp_path):
    with pytest.raises(ConfigError) as error:
        ReproductionRequest(**{"name": "rope", "preset": "quick", "data_dir": tmp_path, **values})
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(("values", "message"), [case for case in BAD_SIZES if "batch_size" not in case[0]])
def test_bad_sizes_are_refused_by_the_evolution_settings(values, message, tmp_path):
    values = {key: value for key, value in values.items() if key != "name"}
    with pytest.raises(ConfigError) as error:
        EvolutionSettings(**{"preset": "quick", "data_dir": tmp_path, **values})
    assert message in str(error.value)


def test_whole_architectures_and_unscalable_sizes_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="blt architecture has sizes of its own"):
        ReproductionRequest(name="blt", preset="quick", rung=1, data_dir=tmp_path).plan()
    with pytest.raises(ConfigError, match="kv_heads=2 at 4 does not scale to a whole size at 3"):
        size_at(-1, base_model=ModelConfig().with_slot("attention", "mha:kv_heads=2"))
    with pytest.raises(ConfigError):
        ReproductionRequest(name="rope", preset="quick", rung=1,
                            base_model=ModelConfig(architecture="blt"), data_dir=Path(tmp_path))


def test_context_length_grows_from_rung_one():
    from llmevo.runner.size import context_length

    assert [context_length(r) for r in (-2, -1, 0, 1, 2, 3, 4)] == [64, 64, 64, 96, 128, 176, 256]


def test_a_longer_window_keeps_the_tokens_and_widens_the_model():
    from llmevo.runner.size import size_at

    size = size_at(1, seq_len=128)
    assert size.preset.train.seq_len == 128 and size.model.max_seq_len == 128
    # the rung's tokens (about 7.26 per parameter) in steps of batch x 128
    assert size.preset.train.steps == round(TOKENS_PER_PARAMETER * size.parameters / (64 * 128))
    with pytest.raises(ConfigError, match="--seq-len 4: need"):
        size_at(0, seq_len=4)


def test_a_growing_context_ladder_plans_each_rungs_window(tmp_path):
    from llmevo.experiments.ladder import LadderRequest

    plan = LadderRequest(name="rope", rungs=[0, 1, 2], context="grow", data_dir=tmp_path,
                         out=tmp_path / "ladder").plan()
    assert [r.plan.preset.train.seq_len for r in plan.rungs] == [64, 96, 128]
    assert [r.size.preset.train.seq_len for r in plan.rungs] == [64, 96, 128]
    assert LadderRequest(name="rope", data_dir=tmp_path).plan().folder.name == "2104.09864-rope"
    assert LadderRequest(name="rope", context="grow", data_dir=tmp_path).plan().folder.name.endswith("-context-grow")
