"""Selection noise (issue 22, item 2): does a tuned arm's chosen lr change with another tuning seed?

For each grid-tuned artifact given, every arm's grid is trained again under each --seeds seed
(new tuning seeds; the arm cache loads what was trained before) at the artifact's settings,
and the choice under each new seed is compared with the artifact's (its first tuning seed).
Prints one line per arm and the overall change rate; --json writes everything. Long: a quick
artifact's grid costs about one tuned reproduction's tuning per seed. The logic is
``llmevo.experiments.selection_noise``.

    .venv/bin/python scripts/selection_noise.py docs/reproductions/*/metrics/public-quick-tuned-*.json \
        --seeds 2000 [--json noise.json] [--device cpu] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="+", type=Path, help="grid-tuned reproduction artifacts")
    parser.add_argument("--seeds", default="2000", help="new tuning seeds, e.g. 2000,2001")
    parser.add_argument("--json", type=Path, default=None, help="write every arm's values here")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    import torch

    from llmevo.artifacts import load_artifact
    from llmevo.errors import LlmevoError
    from llmevo.experiments.selection_noise import retrain_grid, selection_changes

    if args.threads:
        torch.set_num_threads(args.threads)
    data_dir = Path(os.environ.get("LLMEVO_DATA", ROOT.parent / "shared" / "data"))
    cache_dir = Path(os.environ.get("LLMEVO_CACHE", ".cache/llmevo"))
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
        report, pairs, changes = {}, 0, 0
        for path in args.artifacts:
            artifact = load_artifact(path)
            values = retrain_grid(artifact, seeds, data_dir, cache_dir, args.device)
            reference = artifact.tuning.seeds[0]
            for arm, grid in values.items():
                noise = selection_changes(arm, grid, reference)
                pairs, changes = pairs + len(noise.chosen), changes + len(noise.changed)
                regrets = [r for r in noise.regret_percent.values() if r is not None]
                worst = f"{max(regrets):.2f}%" if regrets else "n/a"
                print(f"{path} {arm}: lr {noise.reference:.3g} on seed {reference}; "
                      + ", ".join(f"{lr:.3g} on {seed}" for seed, lr in noise.chosen.items())
                      + f" ({len(noise.changed)} of {len(noise.chosen)} changed; regret {worst})")
                report[f"{path}:{arm}"] = {"values": {str(lr): v for lr, v in grid.items()},
                                           "reference": noise.reference,
                                           "chosen": noise.chosen, "changed": list(noise.changed),
                                           "regret_percent": noise.regret_percent}
    except (LlmevoError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"choice changed in {changes} of {pairs} (arm, seed) pairs"
          + (f" ({100 * changes / pairs:.0f}%)" if pairs else ""))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
