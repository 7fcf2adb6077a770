"""What the re-scoring rule (``runner.tuning.contenders``) would have re-scored in published
artifacts, read from their tuning blocks (nothing is trained): per arm, the contenders on the
tuning seeds under a given seed noise, and the extra runs they would cost on ``--confirm``
further seeds, beside the tuning runs the artifact recorded.

    python scripts/rescore_cost.py docs/reproductions/*/metrics/public-quick-tuned*.json [--noise 1.42] [--confirm 2]

A setting's mean here is over the block's tuning ``seeds`` alone (confirmation seeds left out),
as the rule reads it before re-scoring; the stability-edge neighbour is counted where the
artifact's best on those seeds is the highest lr that trained (grid protocol only).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from llmevo.runner.tuning import DEFAULT_NOISE, DEFAULT_RESCORE_TOP, contenders, seed_noise


def _first_means(block: dict, seeds: list[str]) -> dict[int, tuple[float, float | None]]:
    """Each full-length setting's (lr, mean over ``seeds``) by its index (None: diverged)."""
    found = {}
    for index, setting in enumerate(block["settings"]):
        if setting.get("stopped_at") is not None:
            continue
        values = [setting["validation"].get(seed) for seed in seeds]
        finite = all(v is not None and math.isfinite(v) for v in values)
        found[index] = (setting["lr"], math.fsum(values) / len(values) if finite else None)
    return found


def arm_cost(block: dict, seeds: list[str], noise_given: float | None, top: int, confirm: int,
             grid: bool) -> dict:
    settings = _first_means(block, seeds)
    means = {index: mean for index, (_, mean) in settings.items() if mean is not None}
    best = min(means, key=lambda i: (means[i], i))
    noise = seed_noise(noise_given, [[block["settings"][i]["validation"].get(s) for s in seeds] for i in means],
                       len(seeds))
    neighbour = None
    if grid:
        ordered = sorted(settings, key=lambda i: settings[i][0])
        place = ordered.index(best)
        at_edge = place == len(ordered) - 1 or settings[ordered[place + 1]][1] is None
        below = [i for i in ordered[:place] if i in means]
        neighbour = below[-1] if at_edge and below else None
    picked = contenders(means, best, noise.threshold, top, neighbour)
    retrain = len(picked) >= 2 or neighbour is not None
    runs = sum(len(s["validation"]) for s in block["settings"])
    return {"contenders": len(picked), "extra_runs": confirm * len(picked) if retrain else 0,
            "recorded_runs": runs, "threshold": noise.threshold, "source": noise.source,
            "next_gap": min((100 * (m - means[best]) / means[best] for i, m in means.items() if i not in picked),
                            default=None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifacts", nargs="+", type=Path)
    parser.add_argument("--noise", type=float, default=None, help=f"percent (default: measured, else {DEFAULT_NOISE})")
    parser.add_argument("--confirm", type=int, default=2)
    parser.add_argument("--top", type=int, default=DEFAULT_RESCORE_TOP)
    args = parser.parse_args()
    total_extra = total_runs = rescored = arms = 0
    print("| artifact | arm | protocol | contenders | extra runs | recorded runs | next gap % |")
    print("|---|---|---|---|---|---|---|")
    for path in args.artifacts:
        tuning = json.loads(path.read_text(encoding="utf-8")).get("tuning")
        if not tuning:
            continue
        seeds = [str(seed) for seed in tuning["seeds"]]
        grid = tuning.get("protocol", "grid") == "grid"
        for label, block in tuning["arms"].items():
            cost = arm_cost(block, seeds, args.noise, args.top, args.confirm, grid)
            arms += 1
            rescored += cost["extra_runs"] > 0
            total_extra += cost["extra_runs"]
            total_runs += cost["recorded_runs"]
            gap = "—" if cost["next_gap"] is None else f"{cost['next_gap']:.2f}"
            print(f"| {path.parents[1].name} | {label} | {tuning.get('protocol', 'grid')} | {cost['contenders']} "
                  f"| {cost['extra_runs']} | {cost['recorded_runs']} | {gap} |")
    print(f"\n{arms} arms; re-scored {rescored}; extra runs {total_extra} beside {total_runs} recorded tuning "
          f"runs (+{100 * total_extra / max(total_runs, 1):.1f}%)")


if __name__ == "__main__":
    main()
