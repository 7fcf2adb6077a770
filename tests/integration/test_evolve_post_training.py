"""An evolution trial whose genome carries a post-training gene runs the stage."""

from __future__ import annotations

import torch
from evolve_support import tiny_settings

from llmevo.catalog import ensure_registered
from llmevo.evolve import engine
from llmevo.evolve.objective import train_and_validate
from llmevo.evolve.space import build_search_space

BASELINE = {"rope", "mha", "swiglu", "rmsnorm", "pre_norm", "adamw"}


def test_a_trial_with_sft_post_trains_before_validation(tmp_path, data_dir, cache_dir):
    settings = tiny_settings(f"sqlite:///{tmp_path}/s.db", data_dir, cache_dir)
    space = build_search_space(ensure_registered(), settings.preset,
                               promoted=frozenset(BASELINE | {"sft"}))
    context = engine.prepare_context(settings, space)
    assert callable(context.post_data)  # loaded lazily, by the first trial that post-trains
    params = space.to_params(space.baseline)
    plain_status, plain = train_and_validate(space.baseline, context, 42)
    params["post_training"] = "sft"
    genome = space.to_genome(params)
    torch.manual_seed(0)
    status, record = train_and_validate(genome, context, 42)
    assert plain_status == status == "complete"
    assert "post_training_loss" not in plain and record["post_training_loss"] > 0
    assert record["token_stream_sha256"] == plain["token_stream_sha256"]  # same pretraining
    assert record["instruction_loss"] != plain["instruction_loss"]


def test_a_fair_trial_grid_post_trains_each_run(tmp_path, data_dir, cache_dir):
    """Fair trials (every lr of the grid through ``train_many``) run the genome's stage too."""
    from llmevo.evolve.fair import train_genome

    settings = tiny_settings(f"sqlite:///{tmp_path}/s.db", data_dir, cache_dir)
    space = build_search_space(ensure_registered(), settings.preset,
                               promoted=frozenset(BASELINE | {"sft"}))
    context = engine.prepare_context(settings, space)
    params = space.to_params(space.baseline)
    params["post_training"] = "sft"
    genome = space.to_genome(params)
    lr = genome.train.lr
    [(plain_status, plain)] = train_genome(space.baseline, context.data, context.preset,
                                           [(lr, 42)], context.device, post_data=context.post_data)
    [(status, record)] = train_genome(genome, context.data, context.preset, [(lr, 42)],
                                      context.device, post_data=context.post_data)
    assert plain_status == status == "complete"
    assert "post_training_loss" not in plain and record["post_training_loss"] > 0
    assert record["token_stream_sha256"] == plain["token_stream_sha256"]  # same pretraining
    assert record["validation"]["instruction_loss"] != plain["validation"]["instruction_loss"]
