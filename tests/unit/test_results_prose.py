"""The hand-written prose of the results pages holds each figure it quotes against the
artifact that figure comes from (issue 48, item 6).

``test_doc_citations.py`` asks whether *some* published JSON holds a figure, which let a page
name the genome's trial lr where the champion trained at another one (both numbers exist
somewhere). Here each quoted phrase is rebuilt from its own artifact field and must appear in
the page (whitespace folded), and every figure the prose cites (``reports.citations``) must lie
inside one of those phrases, so a new figure fails until it is tied to its source. The
qualitative claims beside them (a class, a fragile seed count, which rungs a rule chose) are
checked against the same artifacts. Generated regions are not prose and are not read here.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from llmevo.artifacts.ladder import load_ladder
from llmevo.artifacts.schema import load_artifact
from llmevo.promotion import verdict_class
from llmevo.reports.citations import cited_figures

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
REPRO = "reproductions/{}/metrics/{}.json"
GROWN = DOCS / "evolution" / "evolve-quick-grown"


@cache
def artifact(folder: str, name: str = "public-quick-tuned-seeds42-46"):
    return load_artifact(DOCS / REPRO.format(folder, name))


@cache
def evolution(study: str, name: str) -> dict:
    return json.loads((DOCS / "evolution" / study / f"{name}.json").read_text(encoding="utf-8"))


def signed(value: float, digits: int = 2) -> str:
    """``−12.06`` / ``+0.44``: a signed figure with the pages' minus sign."""
    return f"{value:+.{digits}f}".replace("-", "−")


def interval(low: float, high: float) -> str:
    return f"[{signed(low)}, {signed(high)}]"


def change(found) -> str:
    """``−10.48% [−11.92, −9.04]``: a headline change as the prose prints it."""
    return f"{signed(found.percent)}% {interval(found.ci_low, found.ci_high)}"


def lr(value: float) -> str:
    """``1.56e-2``: a learning rate to 3 significant digits in the pages' notation."""
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def knockout(name: str) -> dict:
    return next(v for v in evolution("evolve-quick-grown", "knockouts")["variants"] if v["variant"] == name)


def knock_cell(name: str, against: str = "vs_champion_percent", percent: bool = False) -> str:
    found = knockout(name)["fitness"]["test"][against]
    return f"{signed(found['mean'])}{'%' if percent else ''} {interval(found['ci_low'], found['ci_high'])}"


def index_claims() -> list[str]:
    untuned = artifact("2502.16982-muon", "public-quick-seeds42-44")
    space = artifact("2502.16982-muon", "public-quick-tuned-space-seeds42-46")
    grid = artifact("2502.16982-muon")
    normuon = artifact("2510.05491-normuon", "public-quick-tuned-space-seeds42-46")
    muon_lr = space.tuning.arms["method"].space["lr"]
    trials = [s for s in space.tuning.arms["method"].settings if s.phase != "grid"]
    post_norm = artifact("1706.03762-post_norm").tuning.arms["method"]
    mixture = artifact("2504.11393-mixture").dataset.data_recipes["method"]["config"]
    curriculum = artifact("2108.06084-curriculum").dataset.data_recipes["method"]["config"]
    sft, dpo = artifact("2203.02155-sft", "public-quick-seeds42-44"), artifact("2305.18290-dpo", "public-quick-seeds42-44")
    neftune = artifact("2310.05914-neftune", "public-quick-seeds42-44")
    grpo = artifact("2402.03300-grpo", "public-quick-seeds42-44")
    post = sft.setup.post_training
    return [
        f"read {signed(untuned.headline_change.percent, 1)}% *worse* untuned ({len(untuned.per_seed)} seeds",
        f"{change(space.headline_change)}, {verdict_class(space)}, with Muon at lr {lr(space.tuning.arms['method'].chosen['lr'])}",
        f"its lr grid had found ({lr(grid.tuning.arms['method'].chosen['lr'])})",
        f"({lr(muon_lr.declared_low)} … {lr(muon_lr.declared_high)})",
        f"tuning seed ({min(s.validation['1000'] for s in trials):.4f})",
        f"number for number ({space.baseline.lm_loss:.3f})",
        f"baseline (lr {lr(normuon.tuning.arms['baseline'].chosen['lr'])};",
        f"reads {change(normuon.headline_change)}, {verdict_class(normuon)}",
        f"one tuning seed chose {lr(post_norm.rescoring.settings[0].lr)}",
        f"it chose {lr(post_norm.chosen['lr'])}",
        f"(lm {mixture['lm']}, narrative {mixture['narrative']}, instruction {mixture['instruction']} per window)",
        f"(Tiny Shakespeare {curriculum['start_narrative']} → {curriculum['end_narrative']:g} over training)",
        f"it is worse: {change(artifact('2408.00118-softcap').headline_change)}, also after Holm",
        f"At `quick` ({len(sft.per_seed)} seeds",
        f"{post['steps']} steps of {post['batch_size']} examples",
        f"instruction loss by {abs(sft.headline_change.percent):.2f}% "
        f"{interval(sft.headline_change.ci_low, sft.headline_change.ci_high)} against no post-training",
        f"preference accuracy by {dpo.headline_change.percent:.2f}% "
        f"{interval(dpo.headline_change.ci_low, dpo.headline_change.ci_high)} against SFT",
        f"NEFTune ({change(neftune.headline_change)})",
        f"error rate {change(grpo.headline_change)})",
    ]


def evolution_claims() -> list[str]:
    summary = evolution("evolve-quick-grown", "summary")
    test = summary["final_evaluation"]["splits"]["test"]
    fitness, loss = (test[key]["paired_relative_change_percent"] for key in ("fitness", "lm_loss"))
    arms = summary["final_tuning"]["arms"]
    knock_lr = knockout("champion")["genome"]["train"]["lr"]
    factors = summary["settings"]["trial_lr_factors"]
    reverted_lr = knockout("revert train.lr")["genome"]["train"]["lr"]
    return [
        f"{signed(fitness['mean'])}% fitness {interval(fitness['ci_low'], fitness['ci_high'])}",
        f"(lm_loss {signed(loss['mean'])}% {interval(loss['ci_low'], loss['ci_high'])})",
        f"the champion trained at {lr(arms['champion']['chosen']['lr'])}, on the grid's edge after an extension, "
        f"the baseline at {lr(arms['baseline']['chosen']['lr'])}",
        f"lr gene is {lr(summary['champion']['genome']['train']['lr'])}",
        f"best of {factors[0]}, {factors[1]:g} and {factors[2]:g} times its gene",
        f"the knockouts below ran at {lr(knock_lr)}, twice the gene",
        f"the knockouts' lr of {lr(knock_lr)}",
        f"beats the baseline by {knock_cell('champion', 'vs_baseline_percent', percent=True)}",
        f"| lr {lr(knock_lr)} → {lr(reverted_lr)} | {knock_cell('revert train.lr')} |",
        f"| optimizer NorMuon → AdamW | {knock_cell('revert optimizer')} |",
        f"| block Peri-LN → pre-norm | {knock_cell('revert block')} |",
        f"| feed-forward hidden 256 → 192 | {knock_cell('revert feedforward.swiglu.hidden')} |",
        f"| RoPE θ 1e3 → 1e4 | {knock_cell('revert position.rope.theta')} |",
        f"| warmup 15 → 30 | {knock_cell('revert train.warmup_steps')} |",
        f"| attention value residual → MHA | {knock_cell('revert attention')} |",
        f"| RoPE rotary dims 8 → all | {knock_cell('revert position.rope.rotary_dim')} |",
        f"| champion architecture, llama_modern's training | {knock_cell('champion architecture, baseline training')} |",
        f"| llama_modern's architecture, champion's training | {knock_cell('baseline architecture, champion training')} |",
        f"still gains {knock_cell('champion architecture, baseline training', 'vs_baseline_percent', percent=True)}",
        f"reaches {knock_cell('baseline architecture, champion training', 'vs_baseline_percent', percent=True)}",
    ]


def ladders_claims() -> list[str]:
    muon = load_ladder(DOCS / "ladders" / "2502.16982-muon" / "ladder.json")
    rung0 = next(r for r in muon.rungs if r.rung == 0)
    return [f"({lr(rung0.chosen_lr['method'])} at rung 0)"]


CLAIMS = {"index.md": index_claims, "evolution.md": evolution_claims, "ladders.md": ladders_claims}


def _folded(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("page", sorted(CLAIMS))
def test_each_quoted_figure_is_its_artifacts(page):
    text = _folded((RESULTS / page).read_text(encoding="utf-8"))
    missing = [claim for claim in CLAIMS[page]() if _folded(claim) not in text]
    assert not missing, f"{page} no longer says what its artifacts hold; expected:\n" + "\n".join(missing)


@pytest.mark.parametrize("page", sorted(CLAIMS))
def test_every_figure_the_prose_cites_is_tied_to_its_source(page):
    claims = [_folded(claim) for claim in CLAIMS[page]()]
    loose = [f"line {c.line}: {c.text}" for c in cited_figures(RESULTS / page)
             if not any(c.text in claim for claim in claims)]
    assert not loose, (f"{page} cites figures no claim here ties to an artifact (add them to "
                       "this test with their source):\n" + "\n".join(loose))


def test_the_index_pages_qualitative_claims():
    untuned = artifact("2502.16982-muon", "public-quick-seeds42-44")
    assert untuned.tuning is None and untuned.provenance.code_dirty  # "untuned", "uncommitted changes"
    rows = {(row["name"], row.get("against")): row
            for row in json.loads((DOCS / "LEADERBOARD.json").read_text(encoding="utf-8"))["rows"]
            if row["kind"] == "reproduction" and row.get("holm")}
    swiglu, gelu = rows[("relu2", "swiglu")], rows[("relu2", None)]
    assert swiglu["classification"] == swiglu["holm"]["classification"] == "better"
    # "better before Holm only ... fragile (any one of four of the five report seeds) ... stalled at 44"
    assert gelu["classification"] == "better" and gelu["holm"]["classification"] == "inconclusive"
    assert len(gelu["fragile_seeds"]) == 4 and gelu["seeds"] == 5
    assert gelu["stalled_seeds"]["baseline"] == [44]
    # post-norm at 9e-3: 4 of 5 report seeds beat tuned pre-norm and one stalled
    post_norm = artifact("1706.03762-post_norm")
    beat = [row.seed for row in post_norm.per_seed if row.method["lm_loss"] < row.baseline["lm_loss"]]
    assert len(beat) == 4 and rows[("post_norm", None)]["stalled_seeds"]["method"] == [44]
    assert rows[("deepnorm", None)]["classification"] == rows[("post_norm", None)]["classification"] == "inconclusive"
    # every other optimizer row shares the space-tuned AdamW arm (the same runs)
    adamw = artifact("2502.16982-muon", "public-quick-tuned-space-seeds42-46")
    for folder in ("2302.06675-lion", "2405.15682-schedule_free_adamw", "2406.16793-adam_mini",
                   "2409.03137-ademamix", "2409.11321-soap", "2411.16085-cautious_adamw"):
        other = artifact(folder, "public-quick-tuned-space-seeds42-46")
        assert [row.baseline["lm_loss"] for row in other.per_seed] == [row.baseline["lm_loss"] for row in adamw.per_seed]


def test_the_ladders_pages_qualitative_claims():
    from llmevo.reports.ladder import fitted_rungs, scan_ladders

    ladders = dict((path.parent.name, ladder) for path, ladder in scan_ladders([DOCS]))
    for ladder in ladders.values():  # "none reads growing or shrinking"; df = fitted rungs less two
        assert ladder.trend in ("stable", "unstable")
        assert ladder.trend_fit.df == len(fitted_rungs(ladder)) - 2
    assert sorted({len(fitted_rungs(ladder)) for ladder in ladders.values()}) == [3, 4, 5]
    # nothing above rung 1
    assert max(ladder.rungs[-1].rung for ladder in ladders.values()) == 1
    # Muon's rungs -1 and 0 took the ladder's lr rule
    muon = ladders["2502.16982-muon"]
    assert [r.rung for r in muon.rungs if r.grid_rule["rule"] == "learning-rate rule"] == [-1, 0]
    # the champions gain most at rung -2 and a little less at each rung above it
    for name in ("evolve-quick-grown-champion", "evolve-quick-fair-champion"):
        fitted = [r.delta_percent for r in ladders[name].rungs if r.rung >= -2]
        assert fitted == sorted(fitted) and fitted[0] == min(r.delta_percent for r in ladders[name].rungs)


def test_the_evolution_pages_qualitative_claims():
    summary = evolution("evolve-quick-grown", "summary")
    gene = summary["champion"]["genome"]["train"]["lr"]
    assert knockout("champion")["genome"]["train"]["lr"] == pytest.approx(2 * gene)  # "twice the gene"
    champion = summary["final_tuning"]["arms"]["champion"]
    assert champion["chosen_on_edge"] and champion["extended"] == "up"  # "on the grid's edge after an extension"
    assert summary["champion"]["trial"] == 3 and summary["champion"]["lineage"] == [3]  # from the random population
    assert summary["champion"]["parameters"] == 164480
    # "Both studies' tuned llama_modern arms give the same numbers, run for run"
    fair = evolution("evolve-quick-fair", "summary")["final_evaluation"]["per_seed"]
    grown = summary["final_evaluation"]["per_seed"]
    assert [row["baseline"] for row in fair] == [row["baseline"] for row in grown]
