"""``llmevo evolve`` is reproducible by default and refuses an option it would ignore (issue 37).

The sampler's seed has a fixed default (0): the same one-worker command, run twice into two
fresh studies, proposes the same genomes and measures the same values; the seed is recorded
in the study. ``--tune-grid`` without the final tuning it shapes is refused with one line.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from cli_runner import assert_refused, run_cli

from llmevo.evolve.study import SAMPLER_SEED_ATTR


def _smoke(database: Path, *extra: str) -> list[str]:
    return ["evolve", "--preset", "smoke", "--workers", "1", "--threads", "1", "--no-report",
            "--trials", "3", "--trial-steps", "6", "--eval-windows", "4", "--device", "cpu",
            "--promotion", "manifest", "--storage", f"sqlite:///{database}", "--study", "x", *extra]


def _trials(database: Path) -> list[tuple[int, dict, float | None, str | None]]:
    study = optuna.load_study(study_name="x", storage=f"sqlite:///{database}")
    return [(t.number, t.params, t.value, t.user_attrs.get("genome_hash"))
            for t in study.get_trials(deepcopy=False)]


@pytest.mark.slow
def test_the_same_command_twice_gives_the_same_trials(workdir):
    first, second = workdir / "a.db", workdir / "b.db"
    assert run_cli(_smoke(first)) == 0
    assert run_cli(_smoke(second)) == 0
    trials = _trials(first)
    assert len(trials) == 3 and all(value is not None for _, _, value, _ in trials)
    assert len({genome for *_, genome in trials}) > 1  # the sampler drew, not only the baseline
    assert _trials(second) == trials
    stored = optuna.load_study(study_name="x", storage=f"sqlite:///{first}").user_attrs
    assert stored[SAMPLER_SEED_ATTR] == 0


@pytest.mark.slow
def test_another_sampler_seed_draws_other_genomes(workdir):
    first, second = workdir / "a.db", workdir / "b.db"
    assert run_cli(_smoke(first)) == 0
    assert run_cli(_smoke(second, "--sampler-seed", "7")) == 0
    assert [t[3] for t in _trials(first)][1:] != [t[3] for t in _trials(second)][1:]
    stored = optuna.load_study(study_name="x", storage=f"sqlite:///{second}").user_attrs
    assert stored[SAMPLER_SEED_ATTR] == 7


def test_tune_grid_without_the_final_tuning_is_refused(capsys, workdir):
    assert_refused(_smoke(workdir / "a.db", "--no-final-tune", "--tune-grid", "0.001,0.002"),
                   "--tune-grid needs the final tuning", capsys, workdir)
