"""Does the best learning rate move less across widths under μP than under the standard
parametrization (issue 35, item 2)? llama_modern at each rung of the size dial (its quick
training budget), under ``--param standard`` and ``--param mup``, trained at every lr of a
half-decade lattice (3e-3 x 3^(k/2)) on the tuning seeds, scored on the validation split as
the ladder's tuning scores it (``runner.tuning.tune_arm``: the best at a grid edge extends the
grid once; the arm cache keeps every run). Prints one line per (parametrization, rung) and the
drift of the chosen lr in half-decade steps; --json writes every value. The coordinate check
(``--plot``) draws ``llmevo.diagnostics.coordinates`` at widths 64..512 and depths 2..16.

    .venv/bin/python scripts/mup_lr_transfer.py --rungs=-2,-1,0 --ks=-2,-1,0,1,2 --seeds 0 \
        [--json out.json] [--threads 1] [--plot coordinate-check.png]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE_LR = 3e-3  # quick's lr; the lattice's k = 0


def tune(param: str, rung: int, ks: list[int], seeds: list[int], data_dir: Path, cache_dir: Path,
         threads: int) -> dict[str, object]:
    from llmevo.eval.lm import evaluate_lm
    from llmevo.experiments.pipeline import ReproductionRequest
    from llmevo.experiments.reproduction import cache_code_modules
    from llmevo.runner.cache import ArmCache
    from llmevo.runner.run import build_arm_model
    from llmevo.runner.tuning import GridTuner, tune_arm
    from llmevo.runner.views import load_views

    grid = tuple(BASE_LR * 3 ** (k / 2) for k in ks)
    request = ReproductionRequest(name="rope", preset="quick", rung=rung, param=param, seeds=[42],
                                  tune=True, tune_seeds=seeds, report=False,
                                  data_dir=data_dir, cache_dir=cache_dir, device="cpu", threads=threads)
    plan = request.plan()
    arm = plan.comparison.method  # rope: llama_modern itself
    corpus, preset, views = load_views(plan.preset, [arm.data], plan.data_dir, plan.cache_dir, None)
    data = views[arm.data]
    metric = plan.comparison.metric
    config = preset.train.model_copy(update={"optimizer": arm.optimizer})
    cache = ArmCache.open(plan.cache_dir, plan.device, plan.execution, "use", cache_code_modules())
    entries = None if cache is None else cache.tuning(arm, data, preset, metric, plan.comparison.objective)

    def evaluate(model) -> float:
        return evaluate_lm(model, data.validation, preset.train.seq_len, plan.device, data.token_bytes,
                           batch_size=preset.eval_batch_size, max_windows=preset.eval_max_windows)[metric]

    result = tune_arm(f"{param} rung {rung}", lambda: build_arm_model(arm), data.stream, config,
                      GridTuner(grid, tuple(seeds)), evaluate, plan.device, execution=plan.execution,
                      cache=entries)
    values = {s.lr: math.inf if None in s.values.values() else sum(s.values.values()) / len(s.values)
              for s in result.settings}  # a diverged seed (None) makes its lr the worst
    best = min(values, key=values.__getitem__)
    per_seed = {f"{s.lr:.4g}": {str(seed): v for seed, v in s.values.items()}
                for s in sorted(result.settings, key=lambda s: s.lr)}
    return {"param": param, "rung": rung, "d_model": arm.model.d_model, "metric": metric,
            "values": {f"{lr:.4g}": v for lr, v in sorted(values.items())}, "per_seed": per_seed,
            "best_lr": best,
            "best_k": round(2 * math.log(best / BASE_LR) / math.log(3)), "cached": len(result.cached)}


def plot_coordinates(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llmevo.diagnostics.coordinates import coordinate_check, depth_check

    widths, depths = (64, 128, 256, 512), (2, 4, 8, 16)
    figure, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    for axis, param in zip(axes[:2], ("standard", "mup"), strict=True):
        coordinates = coordinate_check(widths, param)
        for key in ("block0", "block1", "logits"):
            axis.plot(widths, [coordinates[w][key] for w in widths], marker="o", label=key)
        axis.set_title(f"--param {param}: across width (depth 2)")
        axis.set_xlabel("width (d_model)")
        axis.set_xticks(widths, [str(w) for w in widths])
    for param, style in (("mup", "--"), ("completep", "-")):
        coordinates = depth_check(depths, param)
        axes[2].plot(depths, [coordinates[d]["last"] for d in depths], style, marker="o",
                     label=f"{param}: last block")
    axes[2].set_title("across depth (width 64)")
    axes[2].set_xlabel("layers")
    axes[2].set_xticks(depths, [str(d) for d in depths])
    for axis in axes:
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.legend(fontsize=8)
    axes[0].set_ylabel("mean |x| after 3 AdamW steps (lr 1e-2)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rungs", default="-2,-1,0")
    parser.add_argument("--ks", default="-2,-1,0,1,2", help="lattice steps: lr = 3e-3 x 3^(k/2)")
    parser.add_argument("--seeds", default="0", help="tuning seeds")
    parser.add_argument("--params", default="standard,mup")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None, help="draw the coordinate check here and stop")
    args = parser.parse_args()
    import torch

    from llmevo.errors import LlmevoError

    torch.set_num_threads(args.threads)
    if args.plot is not None:
        plot_coordinates(args.plot)
        print(f"coordinate check: {args.plot}")
        return 0
    data_dir = Path(os.environ.get("LLMEVO_DATA", ROOT.parent / "shared" / "data"))
    cache_dir = Path(os.environ.get("LLMEVO_CACHE", ".cache/llmevo"))
    rows = []
    try:
        for param in args.params.split(","):
            for rung in (int(r) for r in args.rungs.split(",")):
                shared = next((r for r in rows if r["rung"] == 0 == rung), None)
                if param == "mup" and shared is not None:  # the standard model at rung 0 (tested)
                    rows.append({**shared, "param": "mup", "shared_with_standard": True})
                    print("mup      rung +0: the standard model bit for bit (its row above)")
                    continue
                row = tune(param, rung, [int(k) for k in args.ks.split(",")],
                           [int(s) for s in args.seeds.split(",")], data_dir, cache_dir, args.threads)
                rows.append(row)
                print(f"{param:8s} rung {rung:+d} (d_model {row['d_model']}): best lr {row['best_lr']:.3g} "
                      f"(k {row['best_k']:+d}); " + ", ".join(f"{lr} {v:.4f}" for lr, v in row["values"].items()),
                      flush=True)
                if args.json is not None:
                    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    except LlmevoError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for param in args.params.split(","):
        ks = [row["best_k"] for row in rows if row["param"] == param]
        print(f"{param}: chosen lr steps {ks}; drift over the rungs {max(ks) - min(ks)} half-decade step(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
