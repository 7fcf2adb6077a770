"""An evolution trial whose genome carries a post-training gene runs the stage."""

from __future__ import annotations

import torch
from evolve_support import tiny_plan

from llmevo.catalog import full_registry
from llmevo.evolve.objective import trial_record, validate_genome
from llmevo.evolve.space import build_search_space
from llmevo.evolve.workers import prepare_context

BASELINE = {"rope", "mha", "swiglu", "rmsnorm", "pre_norm", "adamw"}


def _keep_training(model):
    return lambda step, loss: True


def test_a_trial_with_sft_post_trains_before_validation(tmp_path, data_dir, cache_dir):
    """A search trial (sequential, with its hurdle hook) runs the genome's stage."""
    plan = tiny_plan(f"sqlite:///{tmp_path}/s.db", data_dir, cache_dir)
    space = build_search_space(full_registry(), plan.trial_preset,
                               promoted=frozenset(BASELINE | {"sft"}))
    context = prepare_context(plan, space)
    assert callable(context.post_data)  # loaded lazily, by the first trial that post-trains
    params = space.to_params(space.baseline)
    lr = space.baseline.train.lr
    [plain] = validate_genome(space.baseline, context, [(lr, 42)], _keep_training)
    params["post_training"] = "sft"
    genome = space.to_genome(params)
    torch.manual_seed(0)
    [run] = validate_genome(genome, context, [(lr, 42)], _keep_training)
    plain, record = trial_record(plain), trial_record(run)
    assert plain["training_path"] == record["training_path"] == "sequential"
    assert "post_training_loss" not in plain and record["post_training_loss"] > 0
    assert record["token_stream_sha256"] == plain["token_stream_sha256"]  # same pretraining
    assert record["instruction_loss"] != plain["instruction_loss"]


def test_a_fair_trial_grid_post_trains_each_run(tmp_path, data_dir, cache_dir):
    """Fair trials (every lr of the grid through ``train_many``) run the genome's stage too."""
    plan = tiny_plan(f"sqlite:///{tmp_path}/s.db", data_dir, cache_dir)
    space = build_search_space(full_registry(), plan.trial_preset,
                               promoted=frozenset(BASELINE | {"sft"}))
    context = prepare_context(plan, space)
    params = space.to_params(space.baseline)
    params["post_training"] = "sft"
    genome = space.to_genome(params)
    lr = genome.train.lr
    [plain] = validate_genome(space.baseline, context, [(lr, 42), (2 * lr, 42)])[:1]
    [run] = validate_genome(genome, context, [(lr, 42), (2 * lr, 42)])[:1]
    assert plain.status == run.status == "complete"
    assert plain.stage is None and run.stage is not None and run.stage.post_training_loss > 0
    assert run.train.token_stream_sha256 == plain.train.token_stream_sha256  # same pretraining
    assert run.validation["instruction_loss"] != plain.validation["instruction_loss"]
