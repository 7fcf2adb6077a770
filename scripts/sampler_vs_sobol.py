"""Sequential sampler vs Sobol at equal trials (issue 34, item 2): the tuning-seed best each reaches.

For each arm of a comparison (default: ``muon`` at smoke with 300 steps: its AdamW baseline and
its Muon arm), each trial budget (``--trials``), each sampler (``--samplers``) and each sampler
seed (``--sampler-seeds``), the arm is space-tuned (``--tune-space full``, its whole declared
space, tuning seed 1000) exactly as a reproduction tunes it (``runner.tuner.tune_arms`` with a
``SpaceTuner``), without the lr-grid floor: the floor is the same runs for every sampler, and
what is compared is what each sampler's search finds. The number per run is the search's best:
the lowest mean validation loss over the tuning seeds among the arm's trials (the extension
phase included, the floor not). The arm cache (on by default) makes the shared Sobol start of
every sampler, and every rerun, free.

Each finished (arm, trials, sampler, seed) is appended to ``--runs`` (JSON lines) and skipped
on a rerun; the table is printed from that file, so ``--table-only`` reprints it. Per arm and
budget: each sampler's mean best over the seeds (and its seed-to-seed standard deviation), the
paired gap of each sequential sampler against Sobol (same seed: the same Sobol start), in % of
Sobol's best (negative: the sampler found lower) with its 95% t-interval over the seeds, and
how many seeds each wins (a tie: both found the same trial, e.g. a shared Sobol start point).

    LLMEVO_DATA=/work/shared/data PYTHONPATH=src .venv/bin/python scripts/sampler_vs_sobol.py \\
        --runs sampler-runs.jsonl [--name muon] [--preset smoke] [--steps 300] [--trials 8,16] \\
        [--samplers sobol,tpe] [--sampler-seeds 0,1,2] [--threads 1] [--table-only]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from measure_common import data_and_cache_dirs, done_records, ints


def run_all(args: argparse.Namespace) -> None:
    """Tune every (trials, sampler, seed) not yet in ``args.runs`` and append its row."""
    import torch

    from llmevo.experiments import ReproductionRequest
    from llmevo.experiments.reproduction import cache_code_modules
    from llmevo.runner.arm_runner import InProcessRunner
    from llmevo.runner.cache import ArmCache
    from llmevo.runner.tuner import tune_arms
    from llmevo.runner.tuning_space import space_tuner
    from llmevo.runner.views import load_views

    if args.threads:
        torch.set_num_threads(args.threads)
    data_dir, cache_dir = data_and_cache_dirs()
    request = ReproductionRequest(name=args.name, preset=args.preset, steps=args.steps, tune_space="full",
                                  data_dir=data_dir, cache_dir=cache_dir, device="cpu", path="auto")
    plan = request.plan()
    comparison = plan.comparison
    if any(arm.prepare is not None for arm in comparison.arms):
        raise SystemExit(f"{args.name}: an arm prepared from the data (a data recipe) is not measured here")
    _, preset, views = load_views(plan.preset, [arm.data for arm in comparison.arms], plan.data_dir,
                                  plan.cache_dir)
    cache = ArmCache.open(plan.cache_dir, plan.device, plan.execution, "use", cache_code_modules())
    done = {(r["arm"], r["trials"], r["sampler"], r["sampler_seed"]) for r in done_records(args.runs)}
    for trials in ints(args.trials):
        for seed in ints(args.sampler_seeds):
            for sampler in args.samplers.split(","):
                arms = [arm for arm in comparison.arms
                        if (arm.optimizer.name, trials, sampler, seed) not in done]
                if not arms:
                    continue
                tuner = space_tuner("full", trials, [1000], plan.seeds, sampler_seed=seed, sampler=sampler)
                started = time.perf_counter()
                runner = InProcessRunner(views, preset, plan.device, comparison.metric, comparison.objective,
                                         plan.execution, cache, presets={arm.label: preset for arm in arms})
                tuned = tune_arms(runner, arms, tuner, comparison.metric)
                wall = time.perf_counter() - started
                for arm in arms:
                    block = tuned.block["arms"][arm.label]
                    searched = [s for s in block["settings"] if s["phase"] != "grid"]
                    finite = [s for s in searched if s["mean"] is not None]
                    best = min(finite, key=lambda s: (s["mean"], s["trial"])) if finite else None
                    row = {"arm": arm.optimizer.name, "label": arm.label, "trials": trials,
                           "sampler": sampler, "sampler_seed": seed, "name": args.name,
                           "preset": preset.name, "steps": preset.train.steps,
                           "best": None if best is None else best["mean"],
                           "best_trial": None if best is None else best["trial"],
                           "best_phase": None if best is None else best["phase"],
                           "best_values": None if best is None else best["values"],
                           "means": [s["mean"] for s in searched],
                           "diverged": sum(1 for s in searched if s["mean"] is None),
                           "trained": block["budget"]["trained"], "wall_seconds": round(wall, 1)}
                    with args.runs.open("a", encoding="utf-8") as handle:
                        handle.write(json.dumps(row) + "\n")
                    print(f"{arm.optimizer.name} trials {trials} {sampler} seed {seed}: best {row['best']} "
                          f"(trial {row['best_trial']}, {row['best_phase']}); trained {row['trained']}",
                          flush=True)


def _interval(gaps: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t-interval of paired gaps (nan bounds with fewer than two)."""
    from scipy.stats import t

    mean = statistics.fmean(gaps)
    if len(gaps) < 2:
        return mean, math.nan, math.nan
    half = t.ppf(0.975, len(gaps) - 1) * statistics.stdev(gaps) / math.sqrt(len(gaps))
    return mean, mean - half, mean + half


def table(rows: list[dict], samplers: list[str]) -> str:
    """The markdown table: per arm and budget, each sampler's mean best ± sd over the sampler
    seeds, Sobol's seed-to-seed sd in % of its mean, and each sequential sampler's paired gap
    to Sobol (mean and 95% t-interval over seeds, in % of Sobol's best; negative: lower, i.e.
    better) with its wins / exact ties (the same trial found) / Sobol's wins."""
    sequential = [s for s in samplers if s != "sobol"]
    lines = ["| arm | trials | seeds | " + " | ".join(f"{s} best (mean ± sd)" for s in samplers)
             + " | sobol sd % | " + " | ".join(f"{s} − sobol, % [95% CI] | {s} wins / ties / sobol wins"
                                               for s in sequential) + " |"]
    lines.append("|" + "---|" * (4 + len(samplers) + 2 * len(sequential)))
    keyed = {(r["arm"], r["trials"], r["sampler"], r["sampler_seed"]): r for r in rows}
    for arm, trials in sorted({(r["arm"], r["trials"]) for r in rows}, key=lambda k: (k[0] != "adamw", k)):
        seeds = sorted({r["sampler_seed"] for r in rows if (r["arm"], r["trials"]) == (arm, trials)
                        and all((arm, trials, s, r["sampler_seed"]) in keyed for s in samplers)})
        if not seeds:
            continue
        cells = [arm, str(trials), str(len(seeds))]
        spread = math.nan
        for sampler in samplers:
            finite = [b for b in (keyed[(arm, trials, sampler, seed)]["best"] for seed in seeds) if b is not None]
            sd = statistics.stdev(finite) if len(finite) > 1 else math.nan
            if sampler == "sobol" and finite:
                spread = 100.0 * sd / statistics.fmean(finite)
            cells.append(f"{statistics.fmean(finite):.4f} ± {sd:.4f}" if finite else "diverged")
        cells.append(f"{spread:.2f}")
        for sampler in sequential:
            gaps, wins = [], [0, 0, 0]
            for seed in seeds:
                mine, sobol = keyed[(arm, trials, sampler, seed)]["best"], keyed[(arm, trials, "sobol", seed)]["best"]
                if mine is None or sobol is None:
                    continue
                gaps.append(100.0 * (mine - sobol) / sobol)
                wins[0 if mine < sobol else 1 if mine == sobol else 2] += 1
            if gaps:
                mean, low, high = _interval(gaps)
                cells.append(f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]")
            else:
                cells.append("n/a")
            cells.append(" / ".join(map(str, wins)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def origins(rows: list[dict], samplers: list[str]) -> str:
    """Where each sampler's best trial came from, per arm and budget: the Sobol start (the
    trials every sampler shares), the proposed trials (Sobol's own later declared points, or the
    sequential sampler's), or the extension phase."""
    from llmevo.runner.tuning_space import space_tuner

    lines = ["| arm | trials | sampler | best in the start | best proposed | best in the extension |",
             "|---|---|---|---|---|---|"]
    for arm, trials in sorted({(r["arm"], r["trials"]) for r in rows}, key=lambda k: (k[0] != "adamw", k)):
        for sampler in samplers:
            mine = [r for r in rows if (r["arm"], r["trials"], r["sampler"]) == (arm, trials, sampler)
                    and r["best_trial"] is not None]
            if not mine:
                continue
            start = space_tuner("full", trials, [1000], [42], sampler="tpe").startup_trials
            counts = [sum(1 for r in mine if r["best_phase"] == "declared" and r["best_trial"] < start),
                      sum(1 for r in mine if r["best_phase"] == "declared" and r["best_trial"] >= start),
                      sum(1 for r in mine if r["best_phase"] == "extension")]
            lines.append(f"| {arm} | {trials} | {sampler} | " + " | ".join(map(str, counts)) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="JSON lines: one per finished tuning")
    parser.add_argument("--name", default="muon", help="the comparison whose two arms are tuned")
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--steps", type=int, default=300, help="training steps per trial")
    parser.add_argument("--trials", default="8,16", help="trial budgets per arm")
    parser.add_argument("--samplers", default="sobol,tpe", help="sobol first, then the sequential ones")
    parser.add_argument("--sampler-seeds", default="0,1,2")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--table-only", action="store_true", help="print the table from --runs, train nothing")
    args = parser.parse_args()
    samplers = args.samplers.split(",")
    if samplers[0] != "sobol":
        parser.error("--samplers: sobol first (the gaps are against it)")
    if not args.table_only:
        from llmevo.errors import LlmevoError

        try:
            run_all(args)
        except LlmevoError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    rows = done_records(args.runs)
    print(table(rows, samplers))
    print()
    print(origins(rows, samplers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
