"""A hill-climbing proposer for ``llmevo evolve --proposer`` (it does not import llmevo).

    llmevo evolve --preset smoke --trials 8 --proposer '{python} examples/proposer/hill_climb.py'

Each call reads the study's request (schema ``llmevo.proposer/1``) on stdin and answers one
line of JSON: the best complete trial's genes with one gene changed (a slot's component,
whose genes then start at their first value, or one gene's value), a genome no trial of
the study has had; ``{"stop": true}`` once none is left. Its choices are seeded by the
number of trials, so the same study gets the same answers. The contract is in
docs/guide/evolve.md; anything this script prints before its last line is ignored.
"""

from __future__ import annotations

import json
import math
import random
import sys


def values_of(distribution: dict) -> list:
    """A few values of one gene's distribution (Optuna's JSON of it)."""
    attributes = distribution["attributes"]
    if distribution["name"] == "CategoricalDistribution":
        return list(attributes["choices"])
    low, high = attributes["low"], attributes["high"]
    if attributes.get("log"):
        points = [math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / 4) for i in range(5)]
    else:
        points = [low + (high - low) * i / 4 for i in range(5)]
    if distribution["name"] == "IntDistribution":
        return sorted({int(round(point)) for point in points})
    return [float(f"{point:.3g}") for point in points if low <= float(f"{point:.3g}") <= high]


def neighbours(params: dict, space: dict) -> list[dict]:
    """Every genome one gene away from ``params``."""
    found = []
    component_genes = space["component_genes"]
    for slot, components in space["slots"].items():
        for component in components:
            if component == params[slot]:
                continue
            child = {key: value for key, value in params.items()
                     if key not in component_genes.get(slot, {}).get(params[slot], [])}
            child[slot] = component
            for gene in component_genes.get(slot, {}).get(component, []):
                child[gene] = values_of(space["genes"][gene])[0]
            found.append(child)
    for gene, value in params.items():
        if gene in space["slots"]:
            continue
        found += [{**params, gene: other} for other in values_of(space["genes"][gene]) if other != value]
    return found


def propose(request: dict) -> dict:
    trials = request["trials"]
    complete = [trial for trial in trials if trial["state"] == "complete" and trial["params"]]
    if not complete:
        return {"params": request["baseline"]["params"], "note": "no complete trial yet"}
    best = max(complete, key=lambda trial: trial["fitness"])
    seen = [trial["params"] for trial in trials if trial["params"]]
    fresh = [child for child in neighbours(best["params"], request["space"]) if child not in seen]
    if not fresh:
        return {"stop": True, "reason": f"every neighbour of trial {best['number']} was tried"}
    child = random.Random(len(trials)).choice(fresh)
    changed = sorted(key for key in child if child.get(key) != best["params"].get(key))
    return {"params": child, "parent": best["number"], "note": f"changed {', '.join(changed)}"}


if __name__ == "__main__":
    print(json.dumps(propose(json.load(sys.stdin))))
