"""Decay branches against standalone runs (issue 48, item 3b): one seed of one arm at several
horizons, trained as warmup-stable-decay branches of one trunk (``run_arm`` under ``Execution.branches``)
and as one standalone report run per horizon (``run_arm``), side by side in one process at one
thread: training only (``train_horizons`` against one ``train()`` per horizon), then report runs
(each evaluated on validation and test; the standalone side first), after an untimed warm-up
run; wall and CPU seconds of each side, and a check that both give the same numbers. A benchmark, not a test: its figures depend
on the machine and its load, which it prints.

    LLMEVO_DATA=../shared/data PYTHONPATH=src python scripts/bench_decay_branches.py \\
        --preset quick --rung -3 --multiples 1,2,3

The arm is the comparison's baseline (``--name``'s ablation: llama_modern with AdamW for rope)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch
from measure_common import data_and_cache_dirs, ints

from llmevo.artifacts.provenance import cpu_identity
from llmevo.catalog import build_optimizer, build_recipe
from llmevo.experiments import ReproductionRequest
from llmevo.runner.cache import ArmCache
from llmevo.runner.run import arm_train_config, build_arm_model, run_arm, seed_runs
from llmevo.runner.views import arm_stream, load_views
from llmevo.train.execution import Execution
from llmevo.train.trainer import branch_point, train, train_horizons

CPU = torch.device("cpu")


def _timed(work):
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="rope")
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--rung", type=int, default=None)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--multiples", type=ints, default=[1, 2, 3])
    parser.add_argument("--wsd-decay", type=float, default=0.2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data_dir, cache_dir = data_and_cache_dirs()
    request = ReproductionRequest(name=args.name, preset=args.preset, rung=args.rung, seeds=[args.seed],
                                  data_dir=data_dir, cache_dir=cache_dir, device="cpu", threads=1,
                                  report=False, schedule="wsd", wsd_decay=args.wsd_decay)
    plan = request.plan()
    _, preset, views = load_views(plan.preset, ["bpe"], plan.data_dir, plan.cache_dir)
    arm, objective = plan.comparison.baseline, plan.comparison.objective
    data = views[arm.data]
    base = preset.train.steps
    horizons = [base * multiple for multiple in args.multiples]
    sequential = Execution("sequential")

    def at(steps: int):
        return preset.model_copy(update={"train": preset.train.model_copy(update={"steps": steps})})

    stream = arm_stream(build_recipe(arm.recipe), data)
    config = arm_train_config(arm, data, preset)

    def fresh():
        torch.manual_seed(args.seed)
        return build_arm_model(arm)

    run_arm(arm, data, at(2), seed_runs(arm, data, at(2), [args.seed]), CPU, objective=objective,
            execution=sequential)  # warm-up, untimed: imports, first evaluation
    # training only (no evaluation): the trunk and its decays against one train() per horizon
    _, train_branch_wall, train_branch_cpu = _timed(lambda: train_horizons(
        fresh(), stream, config, horizons, args.seed, CPU, build_optimizer))
    _, train_alone_wall, train_alone_cpu = _timed(lambda: [train(
        fresh(), stream, config.model_copy(update={"steps": steps}), args.seed, CPU,
        build_optimizer(config.optimizer)) for steps in horizons])
    # report runs (training and evaluation), the standalone side first this time
    alone, alone_wall, alone_cpu = _timed(lambda: [run_arm(
        arm, data, at(steps), seed_runs(arm, data, at(steps), [args.seed]), CPU, objective=objective,
        execution=sequential)[0] for steps in horizons])
    branching = Execution("sequential", branches=tuple(horizons))
    with tempfile.TemporaryDirectory() as folder:  # the branches are kept in an arm cache, read back below
        cache = ArmCache.open(Path(folder), CPU, branching, "use")
        assert cache is not None

        def trunk_and_branches():
            return run_arm(arm, data, at(max(horizons)), seed_runs(arm, data, at(max(horizons)), [args.seed]),
                           CPU, objective=objective, execution=branching,
                           cache=cache.report(arm, data, at(max(horizons)), "lm_loss", objective))

        _, branch_wall, branch_cpu = _timed(trunk_and_branches)
        branches = [run_arm(arm, data, at(steps), seed_runs(arm, data, at(steps), [args.seed]), CPU,
                            objective=objective, execution=branching,
                            cache=cache.report(arm, data, at(steps), "lm_loss", objective))[0] for steps in horizons]
        assert all(run.cached for run in branches)
    longest = config.model_copy(update={"steps": max(horizons)})
    points = {h: branch_point(longest.model_copy(update={"steps": h}), longest) for h in horizons if h != max(horizons)}
    trunk = max(horizons)
    same = all(b.validation == a.validation and b.test == a.test and b.train.losses == a.train.losses
               for b, a in zip(branches, alone, strict=True))
    print(json.dumps({
        "preset": args.preset, "rung": args.rung, "arm": arm.name, "schedule": "wsd",
        "wsd_decay": args.wsd_decay, "warmup_steps": preset.train.warmup_steps, "horizons": horizons,
        "parameters": branches[0].parameters, "tokens_per_step": preset.train.tokens_per_step,
        "training_only": {"branches": {"wall_s": round(train_branch_wall, 2), "cpu_s": round(train_branch_cpu, 2)},
                          "standalone": {"wall_s": round(train_alone_wall, 2), "cpu_s": round(train_alone_cpu, 2)},
                          "ratio_wall": round(train_branch_wall / train_alone_wall, 3),
                          "ratio_cpu": round(train_branch_cpu / train_alone_cpu, 3)},
        "report_runs": {"branches": {"wall_s": round(branch_wall, 2), "cpu_s": round(branch_cpu, 2)},
                        "standalone": {"wall_s": round(alone_wall, 2), "cpu_s": round(alone_cpu, 2)},
                        "ratio_wall": round(branch_wall / alone_wall, 3), "ratio_cpu": round(branch_cpu / alone_cpu, 3)},
        "training_steps": {"branches": trunk + sum(h - point for h, point in points.items()),
                           "standalone": sum(horizons)},
        "same_numbers": same,
        "final_lm_loss": [round(run.validation["lm_loss"], 4) for run in branches],
        "machine": {"cpu": cpu_identity().get("model", platform.machine()), "cores": os.cpu_count(),
                    "load_1_5_15": [round(x, 2) for x in os.getloadavg()], "torch": torch.__version__,
                    "threads": torch.get_num_threads()},
    }, indent=1))


if __name__ == "__main__":
    main()
