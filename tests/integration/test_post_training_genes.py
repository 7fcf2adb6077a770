"""An evolution genome's post-training gene and a post-training reproduction's arm take the
same step (issue 33, item 3): ``runner.run.post_train_and_evaluate`` post-trains and
evaluates both, so a genome that post-trains records the held-out metrics a reproduction
records, to the bit, for the same pretraining, stage and seed."""

from __future__ import annotations

import torch

from llmevo.components.post_training.tasks import load_post_train_data
from llmevo.experiments import ReproductionRequest
from llmevo.experiments.post_training import run_post_training_reproduction
from llmevo.runner.run import run_arm, seed_runs
from llmevo.runner.views import load_views

HELD_OUT = ("heldout_preference_accuracy", "arithmetic_exact_match", "arithmetic_error_rate",
            "post_training_loss", "lm_loss")


def test_a_post_training_gene_records_what_the_reproduction_records(tmp_path, data_dir, cache_dir):
    plan = ReproductionRequest(name="sft", preset="smoke", steps=12, seeds=[42], data_dir=data_dir,
                               cache_dir=cache_dir, device="cpu", threads=1, report=False,
                               out=tmp_path / "sft.json").plan()
    reproduced = run_post_training_reproduction(plan).runs["method"][42]

    # the genome's path: run_arm trains the method arm from scratch and post-trains it
    _, preset, views = load_views(plan.preset, ["bpe"], plan.data_dir, plan.cache_dir)
    data, stage = views["bpe"], preset.post_training
    assert plan.post_training is not None and plan.post_training.settings == stage
    post_data = load_post_train_data(plan.data_dir, data.codec, preset.train.seq_len, stage.arithmetic,
                                     None, stage.held_out_pairs)
    arm = plan.comparison.method
    assert arm.post_training is not None and arm.post_training.name == "sft"
    (gene,) = run_arm(arm, data, preset, seed_runs(arm, data, preset, [42]), torch.device("cpu"),
                      post_data=lambda: post_data)

    assert set(HELD_OUT) <= set(gene.validation) and set(HELD_OUT[:3]) <= set(gene.test)
    for name in HELD_OUT:
        assert gene.validation[name] == reproduced.validation[name], name
    for name in HELD_OUT[:3]:
        assert gene.test[name] == reproduced.test[name], name
    assert gene.stage is not None and gene.stage.examples == stage.examples
