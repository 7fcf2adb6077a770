"""The post-training stage: data splits, methods on a tiny model, and bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from llmevo.catalog import build_model, full_registry
from llmevo.cli import main
from llmevo.components.post_training.evaluate import evaluate_post_training
from llmevo.components.post_training.stage import (
    PostTrainSettings,
    PretrainedModel,
    run_post_training,
)
from llmevo.components.post_training.tasks import (
    ArithmeticConfig,
    PostTrainData,
    TokenPair,
    arithmetic_problems,
    hh_pairs_by_split,
    read_preference_file,
)
from llmevo.data.codec import ByteCodec
from llmevo.data.hh_rlhf import PreferencePair
from llmevo.data.suites import build_sequence
from llmevo.errors import ConfigError, DataError
from llmevo.experiments.plans import plan_comparison, post_training_request
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice
from llmevo.runner.presets import get_preset

CPU = torch.device("cpu")
METHODS = full_registry().names("post_training")


def test_arithmetic_held_out_is_disjoint_from_training_by_construction():
    for config in (ArithmeticConfig(max_operand=9), ArithmeticConfig(max_operand=30, subtraction=True)):
        splits = arithmetic_problems(config)
        prompts = {split: {p.prompt for p in problems} for split, problems in splits.items()}
        assert not prompts["train"] & prompts["validation"]
        assert not prompts["train"] & prompts["test"]
        assert not prompts["validation"] & prompts["test"]
        total = sum(len(p) for p in prompts.values())
        operators = 2 if config.subtraction else 1
        expected = (config.max_operand + 1) ** 2 + (
            (config.max_operand + 1) * (config.max_operand + 2) // 2 if operators == 2 else 0)
        assert total == expected  # every problem lands in exactly one split
        assert splits == arithmetic_problems(config)  # stable
    # harder settings add problems but never move an existing one to another split
    easy, hard = arithmetic_problems(ArithmeticConfig(max_operand=9)), arithmetic_problems(
        ArithmeticConfig(max_operand=19))
    for split in easy:
        assert set(easy[split]) <= set(hard[split])
    problem = hard["train"][0]
    assert problem.answer == str(problem.left + problem.right)


def test_hh_split_keeps_one_prompt_on_one_side():
    codec = ByteCodec()
    pairs = [PreferencePair(i, f"\n\nHuman: q{i % 40}\n\nAssistant: good {i}",
                            f"\n\nHuman: q{i % 40}\n\nAssistant: bad {i}") for i in range(400)]
    splits = hh_pairs_by_split(pairs, codec, 64, 0.3, first_line=0)
    sides = {}
    for split, items in splits.items():
        for pair in items:
            prompt = bytes(pair.chosen.tokens[1:pair.chosen.response_start]).decode()
            sides.setdefault(prompt, set()).add(split)
    assert all(len(s) == 1 for s in sides.values())
    assert splits["train"] and (splits["validation"] or splits["test"])


def _tiny_data() -> PostTrainData:
    codec = ByteCodec()
    instruction = tuple(build_sequence(codec, f"say {w}:", f" {w}", 24) for w in ("a", "bb", "ccc"))
    pairs = tuple(
        TokenPair(
            build_sequence(codec, f"q{i}?", " yes", 24), build_sequence(codec, f"q{i}?", " no", 24))
        for i in range(6))
    problems = arithmetic_problems(ArithmeticConfig(max_operand=5))
    return PostTrainData(codec, 24, instruction, pairs, {"validation": pairs[:3], "test": pairs[3:]},
                         {k: tuple(v) for k, v in problems.items()}, "synthetic")


def _pretrained(seed: int = 0) -> PretrainedModel:
    torch.manual_seed(seed)
    config = ModelConfig(vocab_size=259, d_model=32, n_layers=1, n_heads=4, max_seq_len=32,
                         feedforward=ComponentChoice(name="swiglu", config={"hidden": 64}))
    return PretrainedModel(build_model(config), steps_done=1)


TASK = {"none": "instruction", "sft": "instruction", "neftune": "instruction",
        "dpo": "preference", "grpo": "arithmetic"}


@pytest.mark.parametrize("name", METHODS)
def test_every_method_runs_deterministically_at_its_budget(name):
    settings = PostTrainSettings(steps=4, batch_size=3, lr=1e-2, max_new_tokens=3)
    choice = ComponentChoice(name=name, config={"group_size": 3} if name == "grpo" else {})
    data = _tiny_data()
    results = []
    for _ in range(2):
        pretrained = _pretrained()
        before = [p.detach().clone() for p in pretrained.model.parameters()]
        result = run_post_training(pretrained, choice, data, TASK[name], settings, 7, CPU)
        changed = any(not torch.equal(a, b) for a, b in zip(before, pretrained.model.parameters(), strict=True))
        results.append((result, changed, pretrained.model))
    (first, changed, model), (second, _, _) = results
    assert first.losses == second.losses and first.rewards == second.rewards
    assert changed == (name != "none")
    assert first.examples == (0 if name == "none" else settings.examples)
    assert all(math.isfinite(loss) for loss in first.losses)
    # one gradient norm per recorded step (GRPO: its first update), positive and reproducible
    assert len(first.grad_norms) == len(first.losses) and first.grad_norms == second.grad_norms
    assert all(math.isfinite(norm) and norm >= 0 for norm in first.grad_norms)
    # SFT steps always carry a gradient; a GRPO step whose groups all tie (and sit on the
    # reference) has none, so its norm may be exactly 0
    assert all(norm > 0 for norm, phase in zip(first.grad_norms, first.phases, strict=True)
               if phase in ("sft", "neftune", "dpo"))
    assert 0.0 <= first.reward_bearing_group_rate <= 1.0
    if name == "grpo":
        assert len(first.rewards) == len(first.reward_bearing_rates) == 2  # half SFT warm-up
    else:
        assert first.reward_bearing_group_rate == 0.0
    if name == "dpo":
        assert first.post_training_loss == pytest.approx(
            sum(first.losses[2:]) / 2) and first.post_training_loss > 0
    metrics = evaluate_post_training(model, data, "validation", CPU, max_new_tokens=3)
    assert 0.0 <= metrics["heldout_preference_accuracy"] <= 1.0
    assert 0.0 <= metrics["arithmetic_exact_match"] <= 1.0


def test_every_method_has_a_manifest():
    registry = full_registry()
    for name in METHODS:
        manifest = registry.get("post_training", name).manifest
        assert manifest.scope
        if name != "none":
            assert manifest.paper is not None and manifest.ablation in METHODS
    assert registry.get("post_training", "sft").manifest.ablation == "none"


def test_post_training_without_pretraining_is_refused():
    with pytest.raises(ConfigError, match="pretrained stage"):
        run_post_training(None, ComponentChoice(name="sft"), _tiny_data(), "instruction",
                          PostTrainSettings(), 0, CPU)
    with pytest.raises(ConfigError, match="pretrained stage"):
        run_post_training(PretrainedModel(_pretrained().model, 0), ComponentChoice(name="sft"),
                          _tiny_data(), "instruction", PostTrainSettings(), 0, CPU)


def test_bad_method_options_name_the_option():
    dpo, grpo = plan_comparison("dpo"), plan_comparison("grpo")
    smoke = get_preset("smoke").post_training
    with pytest.raises(ConfigError, match="beta"):
        post_training_request(dpo, smoke, {}, {"beta": 0})
    with pytest.raises(ConfigError, match="beta"):
        post_training_request(dpo, smoke, {}, {"beta": -0.1})
    with pytest.raises(ConfigError, match="group_size"):
        post_training_request(grpo, smoke, {}, {"group_size": 1})
    with pytest.raises(ConfigError, match="steps"):
        post_training_request(dpo, smoke, {"steps": 0})


def test_bad_preference_files(tmp_path: Path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match=r"empty\.jsonl: no preference pairs"):
        read_preference_file(empty, None)
    malformed = tmp_path / "pairs.jsonl"
    malformed.write_text('{"chosen": "a", "rejected": "b"}\n{"rejected": "b"}\n')
    with pytest.raises(DataError, match=r"pairs\.jsonl: line 1 lacks string 'chosen'"):
        read_preference_file(malformed, None)


def _exit_code(args: list[str]) -> int:
    try:
        main(args)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


@pytest.mark.parametrize(("extra", "message"), [
    (["dpo", "--method-config", "beta=0"], "beta"),
    (["grpo", "--method-config", "group_size=1"], "group_size"),
    (["dpo", "--preference-file", "EMPTY"], "no preference pairs"),
    (["sft", "--tune"], "--tune is not available for post-training method 'sft'"),
    (["grpo", "--tune-grid", "1e-3,3e-3"], "--tune is not available"),
])
def test_cli_bad_input_is_one_line_and_exit_2(extra, message, tmp_path, capsys, data_dir):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = tmp_path / "artifact.json"
    args = ["reproduce", *[str(empty) if a == "EMPTY" else a for a in extra], "--preset", "smoke",
            "--seed", "42", "--data-dir", str(data_dir), "--out", str(out), "--no-report"]
    assert _exit_code(args) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1
    assert not out.exists()


def test_post_training_is_an_evolution_gene():
    from llmevo.evolve.space import build_search_space
    from llmevo.runner.genome import Genome

    registry = full_registry()
    preset = get_preset("smoke")
    plain = build_search_space(registry, preset, promoted=frozenset({"rope", "mha", "swiglu",
                                                                     "rmsnorm", "pre_norm", "adamw"}))
    assert plain.components["post_training"] == ("none",)
    space = build_search_space(registry, preset, promoted=frozenset({
        "rope", "mha", "swiglu", "rmsnorm", "pre_norm", "adamw", "sft", "dpo"}))
    assert space.components["post_training"] == ("dpo", "none", "sft")
    assert "post_training.dpo.beta" in space.genes
    params = space.to_params(space.baseline)
    assert params["post_training"] == "none"
    params.update({"post_training": "dpo", "post_training.dpo.beta": 0.2,
                   "post_training.dpo.sft_fraction": 0.5})
    genome = space.to_genome(params)
    assert genome.post_training == ComponentChoice(name="dpo", config={"beta": 0.2, "sft_fraction": 0.5})
    assert space.to_params(genome) == params
    assert "post:dpo" in genome.label() and genome.hash() != space.baseline.hash()
    # a genome without post-training hashes as before the gene existed
    legacy = Genome(model=space.baseline.model, optimizer=space.baseline.optimizer,
                    train=space.baseline.train)
    assert "post_training" not in legacy.canonical_json()


def test_a_genome_post_training_gene_runs_the_stage():
    pretrained = _pretrained()
    stage = run_post_training(pretrained, ComponentChoice(name="sft"), _tiny_data(), "instruction",
                              get_preset("smoke").post_training, 42, CPU)
    assert stage.examples == 16 and stage.post_training_loss > 0


@pytest.mark.parametrize("grad_clip", [0.0, 0.05])
def test_recorded_grad_norm_is_the_first_steps_norm_before_clipping(grad_clip):
    """The stage's first SFT step, recomputed by hand on the same seeded batch."""
    import copy

    from llmevo.components.post_training.objectives import masked_mean_nll
    from llmevo.components.post_training.stage import StageContext, batch_sequences

    settings = PostTrainSettings(steps=2, batch_size=3, lr=1e-2, grad_clip=grad_clip)
    data = _tiny_data()
    pretrained = _pretrained()
    reference = copy.deepcopy(pretrained.model).train()
    result = run_post_training(pretrained, ComponentChoice(name="sft"), data, "instruction",
                               settings, 7, CPU)
    context = StageContext(reference, data, "instruction", settings, 7, CPU)  # same generator seed
    demonstrations = data.demonstrations("instruction")
    batch = batch_sequences([demonstrations[i] for i in context.draw(len(demonstrations))],
                            data.codec.pad_id, CPU)
    masked_mean_nll(reference(batch.inputs), batch.targets, batch.mask).backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in reference.parameters()
                          if p.grad is not None))
    assert result.grad_norms[0] == pytest.approx(float(norm), rel=1e-5)
    if grad_clip:
        assert result.grad_norms[0] > grad_clip  # recorded before clipping, not after
