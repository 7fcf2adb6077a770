"""Re-scoring the contenders against the stability-edge confirmation alone (issue 34, item 2).

For each comparison (default: the five of the selection-noise study, ten arm slots: rope,
lion, peri_ln, soap, qk_norm) at ``--preset`` (default smoke) with ``--steps`` (default 300)
and the default lr grid around ``--lr``, each arm is tuned as a reproduction tunes it
(``runner.tuner.tune_arms``: the grid, one edge extension, 2 confirmation seeds) twice per
tuning seed: with ``--tune-noise 0`` (the earlier protocol: only a best at the stability edge
is retrained, with its lower neighbour) and with the default noise (the best and the
runners-up within the seed noise of it, at most 3). Per arm and tuning seed:

- both choices, the settings each re-scored and the runs each cost (``budget.runs``);
- where the choices differ, the **held-out difference**: both choices trained on the
  ``--heldout`` seeds (neither tuning, confirmation nor report seeds), the new choice's mean
  minus the old one's in % of the old (negative: re-scoring chose better).

The arm cache (on) shares every run the two tunings have in common. Each finished
(comparison, seed) is appended to ``--runs`` (JSON lines) and skipped on a rerun;
``--table-only`` prints the table from that file.

    LLMEVO_DATA=/work/shared/data PYTHONPATH=src python scripts/rescore_regret.py --runs rescore.jsonl \\
        [--names rope,lion,peri_ln,soap,qk_norm] [--preset smoke] [--steps 300] [--lr 1.8e-3] \\
        [--tune-seeds 1000,2000] [--heldout 5000,5001] [--threads 1] [--path sequential]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from measure_common import SELECTION_NOISE, data_and_cache_dirs, done_records, ints

ROOT = Path(__file__).resolve().parents[1]




def run_all(args: argparse.Namespace) -> None:
    import torch

    from llmevo.catalog import build_recipe
    from llmevo.eval.lm import evaluate_lm
    from llmevo.experiments import ReproductionRequest
    from llmevo.experiments.reproduction import cache_code_modules
    from llmevo.runner.arm_runner import InProcessRunner
    from llmevo.runner.cache import ArmCache
    from llmevo.runner.run import arm_train_config, build_arm_model
    from llmevo.runner.tuner import tune_arms
    from llmevo.runner.tuning import GridTuner, default_grid, grid_tuner, tune_arm
    from llmevo.runner.views import arm_stream, load_views

    if args.threads:
        torch.set_num_threads(args.threads)
    data_dir, cache_dir = data_and_cache_dirs()
    done = {(r["name"], r["tune_seed"]) for r in done_records(args.runs) if r.get("lr") == args.lr}
    for name in args.names.split(","):
        request = ReproductionRequest(name=name, preset=args.preset, steps=args.steps, tune=True, lr=args.lr,
                                      data_dir=data_dir, cache_dir=cache_dir, device="cpu", path=args.path)
        plan = request.plan()
        comparison = plan.comparison
        if any(arm.prepare is not None for arm in comparison.arms):
            print(f"{name}: an arm prepared from the data is not measured here; skipped", flush=True)
            continue
        _, preset, views = load_views(plan.preset, [arm.data for arm in comparison.arms], plan.data_dir,
                                      plan.cache_dir)
        cache = ArmCache.open(plan.cache_dir, plan.device, plan.execution, "use", cache_code_modules())
        for seed in ints(args.tune_seeds):
            if (name, seed) in done:
                continue
            blocks = {}
            for kind, noise in (("edge", 0.0), ("noise", None)):
                tuner = grid_tuner(default_grid(preset.train.lr), [seed], plan.seeds, confirm=2, noise=noise)
                runner = InProcessRunner(views, preset, plan.device, comparison.metric, comparison.objective,
                                         plan.execution, cache,
                                         presets={arm.label: preset for arm in comparison.arms})
                blocks[kind] = tune_arms(runner, comparison.arms, tuner, comparison.metric).block
            for arm in comparison.arms:
                old, new = blocks["edge"]["arms"][arm.label], blocks["noise"]["arms"][arm.label]
                old_lr, new_lr = old["chosen"]["lr"], new["chosen"]["lr"]
                heldout = {"edge": None, "noise": None, "difference_percent": 0.0}
                if old_lr != new_lr:
                    data = views[arm.data]
                    config = arm_train_config(arm, data, preset)  # what tune_arms trains

                    def evaluate(model, data=data, config=config, device=plan.device, preset=preset,
                                 metric=comparison.metric):
                        return evaluate_lm(model, data.validation, config.seq_len, device, data.token_bytes,
                                           batch_size=preset.eval_batch_size,
                                           max_windows=preset.eval_max_windows)[metric]

                    entries = cache.tuning(arm, data, preset, comparison.metric, comparison.objective)
                    record = tune_arm(arm.label, lambda arm=arm: build_arm_model(arm),
                                      arm_stream(build_recipe(arm.recipe), data), config,
                                      GridTuner(tuple(sorted({old_lr, new_lr})), tuple(ints(args.heldout)),
                                                extend_edges=False),
                                      evaluate, plan.device, execution=plan.execution, cache=entries)
                    means = {s.lr: s.mean for s in record.settings}
                    heldout = {"edge": means[old_lr], "noise": means[new_lr],
                               "difference_percent": (None if means[old_lr] is None or means[new_lr] is None
                                                      else 100.0 * (means[new_lr] - means[old_lr]) / means[old_lr])}
                row = {"name": name, "lr": args.lr, "arm": arm.label, "tune_seed": seed, "preset": preset.name,
                       "steps": preset.train.steps, "edge_lr": old_lr, "noise_lr": new_lr,
                       "edge_rescored": old.get("confirmed", []), "noise_rescored": new.get("confirmed", []),
                       "edge_runs": old["budget"]["runs"], "noise_runs": new["budget"]["runs"],
                       "next_gap_percent": (new["rescoring"]["next"] or {}).get("gap_percent"),
                       "heldout": heldout}
                with args.runs.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row) + "\n")
                print(f"{name} {arm.label} seed {seed}: edge {old_lr:.3g} noise {new_lr:.3g} re-scored "
                      f"{row['noise_rescored']} runs {row['edge_runs']} -> {row['noise_runs']} held-out "
                      f"{heldout['difference_percent']}", flush=True)


def table(rows: list[dict]) -> str:
    lines = ["| comparison | arm | tuning seed | re-scored (noise) | lr edge-only | lr noise | runs edge / noise "
             "| held-out Δ % |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        held = r["heldout"]["difference_percent"]
        rescored = ", ".join(f"{lr:.3g}" for lr in r["noise_rescored"]) or "—"
        lines.append(f"| {r['name']} | {r['arm']} | {r['tune_seed']} | {rescored} | {r['edge_lr']:.3g} | "
                     f"{r['noise_lr']:.3g} | {r['edge_runs']} / {r['noise_runs']} | "
                     f"{'—' if held is None else f'{held:+.2f}'} |")
    if rows:
        changed = [r for r in rows if r["edge_lr"] != r["noise_lr"]]
        held = [r["heldout"]["difference_percent"] for r in changed if r["heldout"]["difference_percent"] is not None]
        runs_old, runs_new = sum(r["edge_runs"] for r in rows), sum(r["noise_runs"] for r in rows)
        lines.append("")
        lines.append(f"{len(rows)} (arm, seed) pairs; re-scored beyond the edge rule in "
                     f"{sum(len(r['noise_rescored']) > len(r['edge_rescored']) for r in rows)}; choice changed in "
                     f"{len(changed)}; held-out difference where changed: "
                     + (f"mean {statistics.fmean(held):+.3f}%, min {min(held):+.3f}%, max {max(held):+.3f}%"
                        if held else "none") + f"; tuning runs {runs_old} -> {runs_new} "
                     f"(+{100 * (runs_new / runs_old - 1):.1f}%)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--names", default=SELECTION_NOISE)
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--tune-seeds", default="1000")
    parser.add_argument("--heldout", default="5000,5001")
    parser.add_argument("--lr", type=float, default=None,
                        help="the preset lr the default grid centres on (lr/3 .. 3 lr); default: the preset's")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--path", default="sequential", help="training path (sequential: one process)")
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.table_only:
        sys.path.insert(0, str(ROOT / "src"))
        run_all(args)
    print(table(done_records(args.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
