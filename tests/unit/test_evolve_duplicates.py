"""Evolution's duplicate-genome check under two workers (the race behind a CI flake).

Two workers that drew the same genome must not both train it: each records its genome
hash, waits until every running lower-numbered trial has recorded its own (the bakery
algorithm's "choosing" wait, the trial number as the ticket), then checks; the
higher-numbered one yields. The interleaving that broke the old check (the higher trial
checks before the lower one has recorded the genome, and the lower one never yields to a
higher number) is forced here without threads: the wait's sleep records the lower trial's
hash, as its worker would while this one waits.
"""

from __future__ import annotations

import optuna

from llmevo.evolve import objective

GENOME = "0123456789abcdef"


def _study(tmp_path) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(study_name="race", storage=f"sqlite:///{tmp_path}/race.db",
                               direction="maximize")


def test_the_higher_trial_waits_for_a_lower_claim_and_yields(tmp_path):
    study = _study(tmp_path)
    lower, higher = study.ask(), study.ask()  # both RUNNING; the lower still drawing its genes
    higher.set_user_attr("genome_hash", GENOME)
    higher.set_user_attr("state", "running")
    sleeps = []

    def lower_claims_late(seconds: float) -> None:  # the lower trial's worker, meanwhile
        sleeps.append(seconds)
        lower.set_user_attr("genome_hash", GENOME)
        lower.set_user_attr("state", "running")

    duplicate = objective._finished_duplicate(study, higher, GENOME, timeout=60,
                                              sleep=lower_claims_late)
    assert duplicate is not None and duplicate.number == lower.number
    assert len(sleeps) == 1  # it waited exactly until the claim was in
    # the lower trial does not wait for a higher number, and trains its genome
    assert objective._finished_duplicate(study, lower, GENOME, timeout=60,
                                         sleep=lambda _s: None) is None


def test_a_lower_trial_that_never_claims_is_waited_on_only_until_the_timeout(tmp_path):
    study = _study(tmp_path)
    dead, alive = study.ask(), study.ask()  # the first one's worker died while choosing
    alive.set_user_attr("genome_hash", GENOME)
    waited = []
    assert objective.wait_for_lower_claims(study, alive.number, timeout=0.0,
                                           sleep=waited.append) == [dead.number]
    assert waited == []  # no time left: it reports the trial still choosing and goes on
    assert objective._finished_duplicate(study, alive, GENOME, timeout=0.0) is None


def test_finished_or_other_genomes_do_not_hold_the_wait(tmp_path):
    study = _study(tmp_path)
    finished, other, trial = study.ask(), study.ask(), study.ask()
    study.tell(finished, 1.0)  # no hash, but not running: nothing to wait for
    other.set_user_attr("genome_hash", "another genome")
    trial.set_user_attr("genome_hash", GENOME)

    def fail(_seconds: float) -> None:
        raise AssertionError("waited with no lower trial choosing")

    assert objective.wait_for_lower_claims(study, trial.number, timeout=60, sleep=fail) == []
    assert objective._finished_duplicate(study, trial, GENOME, timeout=60, sleep=fail) is None
