"""Regret of multi-fidelity tuning at equal budget (issue 34, item 3): halving's choice vs full's.

For each comparison (default: the five of the selection-noise study, ten arms: rope, lion,
peri_ln, soap, qk_norm) at ``--preset`` (default smoke) with ``--steps`` (default 300), each
arm is tuned as a reproduction tunes it (``runner.tuner.tune_arms``: the default lr grid, edge
extension, stability-edge confirmation on 2 seeds; or ``--tune-space full`` with ``--trials``)
once under ``--tune-fidelity full`` and once under ``halving`` (eta 3), for each tuning seed in
``--tune-seeds`` (each seed an independent replicate of the whole selection). Per arm and seed:

- the two choices and their **tuning-seed regret**: the full-length tuning-seed mean of the
  halving choice minus that of the full choice, in % of the latter (every setting the halving
  run chose trained to full length under ``full`` too, so both numbers are full-length runs);
- the **held-out regret**: where the choices differ, both are trained on the ``--heldout``
  seeds (new seeds, neither tuning nor report seeds) and compared the same way (0 where they
  agree): the selection's cost on seeds that did not choose it;
- the **steps**: what each tuning asks for (cache hits counted as if trained: rungs, replays,
  extension and confirmation runs), and the share halving saves.

The arm cache (on) makes the halving survivors' full-length runs the full tuning's entries;
the steps are counted from the records, not from what this process trained. Each finished
(comparison, seed) is appended to ``--runs`` (JSON lines) and skipped on a rerun;
``--table-only`` prints the table from that file.

    LLMEVO_DATA=/work/shared/data PYTHONPATH=src python scripts/fidelity_regret.py --runs regret.jsonl \\
        [--names rope,lion,peri_ln,soap,qk_norm] [--preset smoke] [--steps 300] \\
        [--tune-seeds 1000,2000,3000] [--heldout 5000,5001] [--space] [--trials 8] [--threads 1] [--path sequential] [--lr 1.8e-3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from measure_common import SELECTION_NOISE, data_and_cache_dirs, done_records, ints

ROOT = Path(__file__).resolve().parents[1]




def run_all(args: argparse.Namespace) -> None:
    import torch

    from llmevo.experiments import ReproductionRequest
    from llmevo.experiments.reproduction import cache_code_modules
    from llmevo.runner.arm_runner import InProcessRunner
    from llmevo.runner.cache import ArmCache
    from llmevo.runner.fidelity import check_fidelity
    from llmevo.runner.tuner import tune_arms
    from llmevo.runner.tuning import GridTuner, default_grid, grid_tuner, tune_arm
    from llmevo.runner.tuning_space import space_tuner
    from llmevo.runner.views import load_views

    if args.threads:
        torch.set_num_threads(args.threads)
    data_dir, cache_dir = data_and_cache_dirs()
    done = {(r["name"], r["tune_seed"], r["protocol"]) for r in done_records(args.runs) if r.get("lr") == args.lr}
    protocol = "space" if args.space else "grid"
    for name in args.names.split(","):
        request = ReproductionRequest(name=name, preset=args.preset, steps=args.steps, tune=True, lr=args.lr,
                                      data_dir=data_dir, cache_dir=cache_dir, device="cpu", path=args.path,
                                      **({"tune_space": "full"} if args.space else {}))
        plan = request.plan()
        comparison = plan.comparison
        if any(arm.prepare is not None for arm in comparison.arms):
            print(f"{name}: an arm prepared from the data is not measured here; skipped", flush=True)
            continue
        _, preset, views = load_views(plan.preset, [arm.data for arm in comparison.arms], plan.data_dir,
                                      plan.cache_dir)
        cache = ArmCache.open(plan.cache_dir, plan.device, plan.execution, "use", cache_code_modules())
        for seed in ints(args.tune_seeds):
            if (name, seed, protocol) in done:
                continue
            blocks, clocks = {}, {}
            for kind in ("full", "halving"):
                fidelity = check_fidelity(kind)
                grid = default_grid(preset.train.lr)
                tuner = (space_tuner("full", args.trials, [seed], plan.seeds, grid=grid, fidelity=fidelity)
                         if args.space else grid_tuner(grid, [seed], plan.seeds, confirm=2, fidelity=fidelity))
                started = time.perf_counter()
                runner = InProcessRunner(views, preset, plan.device, comparison.metric, comparison.objective,
                                         plan.execution, cache,
                                         presets={arm.label: preset for arm in comparison.arms})
                tuned = tune_arms(runner, comparison.arms, tuner, comparison.metric)
                clocks[kind] = time.perf_counter() - started
                blocks[kind] = tuned.block
            for arm in comparison.arms:
                full, half = blocks["full"]["arms"][arm.label], blocks["halving"]["arms"][arm.label]
                full_lr, half_lr = full["chosen"]["lr"], half["chosen"]["lr"]
                by_lr = {}
                for s in full["settings"]:
                    by_lr.setdefault(s["lr"], s["validation"].get(str(seed)))
                if args.space:  # a trial's full-length tuning-seed value: same settings, either tuning
                    chosen_full = next(s for s in full["settings"] if s.get("trial") == full["chosen_trial"])
                    chosen_half = next(s for s in half["settings"] if s.get("trial") == half["chosen_trial"])
                    v_full, v_half = chosen_full["validation"][str(seed)], chosen_half["validation"][str(seed)]
                    same = chosen_full["values"] == chosen_half["values"]
                else:
                    v_full = by_lr[full_lr]
                    v_half = by_lr.get(half_lr)
                    if v_half is None:  # an lr only the halving run reached (its own extension)
                        v_half = next(s["validation"][str(seed)] for s in half["settings"] if s["lr"] == half_lr)
                    same = full_lr == half_lr
                heldout = {"full": None, "halving": None, "regret_percent": 0.0}
                if not same and not args.space:
                    from llmevo.catalog import build_recipe
                    from llmevo.eval.lm import evaluate_lm
                    from llmevo.runner.run import arm_train_config, build_arm_model
                    from llmevo.runner.views import arm_stream

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
                                      GridTuner(tuple(sorted({full_lr, half_lr})), tuple(ints(args.heldout)),
                                                extend_edges=False),
                                      evaluate, plan.device, execution=plan.execution, cache=entries)
                    means = {s.lr: s.mean for s in record.settings}
                    heldout = {"full": means[full_lr], "halving": means[half_lr],
                               "regret_percent": (None if means[full_lr] is None or means[half_lr] is None
                                                  else 100.0 * (means[half_lr] - means[full_lr]) / means[full_lr])}
                steps = preset.train.steps
                row = {"name": name, "protocol": protocol, "lr": args.lr, "arm": arm.label, "tune_seed": seed,
                       "preset": preset.name, "steps": steps, "full_lr": full_lr, "halving_lr": half_lr,
                       "same": same, "full_value": v_full, "halving_value": v_half,
                       "regret_percent": (None if v_full is None or v_half is None
                                          else 100.0 * (v_half - v_full) / v_full),
                       "heldout": heldout,
                       "steps_full": full["budget"]["runs"] * steps,  # every run at full length
                       "steps_halving": half["budget"]["steps_asked"],
                       "stopped": sum(1 for s in half["settings"] if s.get("status") == "stopped"),
                       "budget_full": full["budget"], "budget_halving": half["budget"],
                       "wall_full": round(clocks["full"], 1), "wall_halving": round(clocks["halving"], 1)}
                with args.runs.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row) + "\n")
                print(f"{name} {arm.label} seed {seed}: full {full_lr:.3g} ({v_full:.4f}) halving {half_lr:.3g} "
                      f"({v_half:.4f}) regret {row['regret_percent']:+.2f}% held-out "
                      f"{heldout['regret_percent']}; steps {row['steps_halving']}/{row['steps_full']}",
                      flush=True)


def table(rows: list[dict]) -> str:
    lines = ["| comparison | arm | tuning seed | full lr | halving lr | tuning-seed regret % | held-out regret % "
             "| steps halving / full | saved % |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        held = r["heldout"]["regret_percent"]
        lines.append(f"| {r['name']} | {r['arm']} | {r['tune_seed']} | {r['full_lr']:.3g} | {r['halving_lr']:.3g} | "
                     f"{r['regret_percent']:+.2f} | {'—' if held is None else f'{held:+.2f}'} | "
                     f"{r['steps_halving']} / {r['steps_full']} | "
                     f"{100 * (1 - r['steps_halving'] / r['steps_full']):.1f} |")
    regrets = [r["regret_percent"] for r in rows if r["regret_percent"] is not None]
    held = [r["heldout"]["regret_percent"] for r in rows if r["heldout"]["regret_percent"] is not None]
    asked_h, asked_f = sum(r["steps_halving"] for r in rows), sum(r["steps_full"] for r in rows)
    if regrets:
        lines.append("")
        lines.append(f"{len(rows)} (arm, seed) pairs; choice changed in {sum(not r['same'] for r in rows)}; "
                     f"tuning-seed regret mean {statistics.fmean(regrets):+.3f}%, max {max(regrets):+.3f}%, "
                     f"over 1%: {sum(x > 1.0 for x in regrets)}; held-out regret mean "
                     f"{statistics.fmean(held):+.3f}%, max {max(held):+.3f}%, over 1%: "
                     f"{sum(x > 1.0 for x in held)}; steps {asked_h} / {asked_f} "
                     f"({100 * (1 - asked_h / asked_f):.1f}% saved)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--names", default=SELECTION_NOISE)
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--tune-seeds", default="1000")
    parser.add_argument("--heldout", default="5000,5001")
    parser.add_argument("--space", action="store_true", help="--tune-space full instead of the lr grid")
    parser.add_argument("--trials", type=int, default=8)
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
