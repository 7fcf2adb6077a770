"""Plans compose plans: a ladder plans its comparison once and each rung once, ``--all``
each comparison once, counted through planning and into the first run (issue 33, item 2);
the sections are declared once and a field a pipeline does not read is refused."""

from __future__ import annotations

from collections import Counter

import pytest

from llmevo.errors import ConfigError
from llmevo.experiments import EvidenceRequest, LadderRequest, ReproductionRequest
from llmevo.experiments import evidence as evidence_module
from llmevo.experiments import ladder as ladder_module
from llmevo.experiments import pipeline as pipeline_module
from llmevo.experiments import sections as sections_module
from llmevo.experiments.plans import ReproductionPlan
from llmevo.experiments.sections import RunSection, SizeSection, TuningSection
from llmevo.registry import SectionedRequest
from llmevo.runner import size as size_module


class Stop(Exception):
    """Raised by the stand-in for the first training call: counting ends there."""


@pytest.fixture
def counts(monkeypatch):
    """Calls of the comparison planner, the size dial and ``ReproductionRequest.plan``."""
    counted: Counter[str] = Counter()

    def counting(module, name, key):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            counted[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting(pipeline_module, "plan_comparison", "comparison")
    counting(size_module, "size_dial", "size")  # imported by SizeSection.resolve when it runs
    counting(ReproductionRequest, "plan", "plan")
    return counted


def _first_run_stops(monkeypatch, module, received: list):
    def reproduce(plan, *args, **kwargs):
        received.append(plan)
        raise Stop

    monkeypatch.setattr(module, "reproduce", reproduce)


def test_a_ladder_plans_its_comparison_once_and_each_rung_once(tmp_path, counts, monkeypatch):
    received: list = []
    _first_run_stops(monkeypatch, ladder_module, received)
    request = LadderRequest(name="rope", rungs=[-2, -1, 0], data_dir=tmp_path, out=tmp_path / "ladder")
    with pytest.raises(Stop):
        ladder_module.run_ladder(request)
    assert counts == {"comparison": 1, "size": 3, "plan": 3}
    # the rung runs the plan made when the ladder was planned, its grid bound late
    (plan,) = received
    assert isinstance(plan, ReproductionPlan) and plan.size is not None and plan.tuning is not None
    assert plan.tuning.grid == tuple(sorted(plan.tuning.grid)) and len(plan.tuning.grid) == 5


def test_reproduce_all_plans_each_comparison_once(tmp_path, counts, monkeypatch):
    received: list = []
    _first_run_stops(monkeypatch, evidence_module, received)
    request = EvidenceRequest(preset="smoke", only=["rope", "qk_norm", "muon"], data_dir=tmp_path,
                              out=tmp_path / "table", tune_grid=[1e-3, 3e-3])
    with pytest.raises(Stop):
        evidence_module.run_evidence(request)
    assert counts == {"comparison": 3, "size": 3, "plan": 3}  # the dial read once each (no size: None)
    assert isinstance(received[0], ReproductionPlan) and received[0].name == "rope"


def test_one_reproduction_plans_once_and_resolves_its_size_once(tmp_path, counts):
    request = ReproductionRequest(name="rope", preset="quick", rung=-1, data_dir=tmp_path)
    request.plan()
    assert counts == {"comparison": 1, "size": 1, "plan": 1}


def test_a_ladder_hands_its_run_section_to_every_rung(tmp_path):
    run = RunSection(data_dir=tmp_path, device="cpu", threads=1, path="sequential", arm_cache=False,
                     command="llmevo ladder rope")
    plan = LadderRequest(name="rope", rungs=[-2, -1], run=run, out=tmp_path / "ladder").plan()
    for rung in plan.rungs:
        assert rung.plan.arm_cache == "refresh" and rung.plan.execution.path == "sequential"
        assert rung.plan.command == f"llmevo ladder rope (rung {rung.rung})"


def test_sections_are_declared_once_with_unique_field_names():
    fields = Counter(name for section in (RunSection, TuningSection, SizeSection,
                                          sections_module.TrainingSection,
                                          sections_module.PostTrainingSection)
                     for name in section.model_fields)
    assert [name for name, count in fields.items() if count > 1] == []
    for request in (ReproductionRequest, LadderRequest, EvidenceRequest):
        assert issubclass(request, SectionedRequest)
        own = set(request.model_fields) - set(request.sections())
        assert not own & set(fields), f"{request.__name__} declares a section's field again"
    from llmevo.evolve import EvolutionSettings

    assert not (set(EvolutionSettings.model_fields) - set(EvolutionSettings.sections())) & set(fields)


@pytest.mark.parametrize(("request_type", "field", "value", "message"), [
    (LadderRequest, "tune_grid", [1e-3, 3e-3], "--tune-grid does not apply here: each rung's grid"),
    (LadderRequest, "rung", 0, "--rung does not apply here: --rungs chooses"),
    (EvidenceRequest, "tune_space", "full", "--tune-space does not apply here"),
])
def test_a_section_field_a_pipeline_does_not_read_is_refused(tmp_path, request_type, field, value, message):
    values = {"data_dir": tmp_path, field: value, **({"name": "rope"} if request_type is LadderRequest else {})}
    with pytest.raises(ConfigError, match=message):
        request_type(**values)
    request_type(**{**values, field: None} if field != "rung" else {**values, "rung": None})  # a default is no choice


def test_flat_keywords_and_sections_build_the_same_request(tmp_path):
    flat = ReproductionRequest(name="rope", data_dir=tmp_path, threads=2, tune_grid=[1e-3, 3e-3], steps=4)
    sectioned = ReproductionRequest(name="rope", run=RunSection(data_dir=tmp_path, threads=2),
                                    tuning=TuningSection(tune_grid=[1e-3, 3e-3]), train={"steps": 4})
    assert flat == sectioned
    assert flat.updated(threads=1).run.threads == 1 and flat.updated(threads=1).tuning == flat.tuning
    with pytest.raises(ConfigError, match="--threads 0"):
        flat.updated(threads=0)


def test_an_evolution_plan_resolves_its_size_once_and_carries_it(tmp_path, data_dir, counts):
    from llmevo.evolve import EvolutionSettings

    plan = EvolutionSettings(study="sized", storage=f"sqlite:///{tmp_path}/s.db", preset="quick", rung=-2,
                             data_dir=data_dir, cache_dir=tmp_path, device="cpu", workers=1,
                             out=tmp_path / "report").plan()
    assert counts["size"] == 1
    # the final comparison's artifact records the dial's rung, parameters and tokens from here
    assert plan.size is not None and plan.size.rung == -2 and plan.rung == -2
    assert plan.base_model == plan.size.model and plan.final_preset.train.steps == plan.size.preset.train.steps


def test_the_table_takes_a_size_and_hands_it_to_every_comparison(tmp_path):
    """``reproduce --all --rung -3 --heads 2 --tokens-per-parameter 60``: each row planned at
    that size (rung -3's batch, two heads, 60 tokens per parameter: 875 steps of 16 x 64 tokens
    for 14,928 parameters, computed here from the rung table's figures)."""
    request = EvidenceRequest(preset="quick", only=["rope", "muon", "geglu"], rung=-3, heads=2,
                              tokens_per_parameter=60, data_dir=tmp_path, out=tmp_path / "table")
    plans = [plan for _, plan in request.plan().entries]
    assert [plan.name for plan in plans] == ["rope", "geglu", "muon", "geglu"]  # geglu --against swiglu last
    for plan in plans:
        assert plan.size is not None and plan.size.parameters == 14_928
        assert plan.preset.train.batch_size == 16 and plan.preset.train.steps == round(60 * 14_928 / (16 * 64))
        assert all(arm.model.n_heads == 2 for arm in plan.comparison.arms)
    with pytest.raises(ConfigError, match="--param"):
        EvidenceRequest(preset="quick", only=["rope"], param="mup", data_dir=tmp_path)


def test_a_run_at_other_tokens_per_parameter_or_window_has_a_file_of_its_own(tmp_path):
    """The size's label alone (``rung-3``) named a 60-tokens-per-parameter run as the default's,
    so one replaced the other; the given ratio and window now join the name."""
    def artifact(**size):
        return ReproductionRequest(name="rope", preset="quick", data_dir=tmp_path, **size).plan().outputs.artifact.name

    names = {artifact(rung=-3), artifact(rung=-3, tokens_per_parameter=60),
             artifact(rung=-3, tokens_per_parameter=60, seq_len=128)}
    assert names == {"public-quick-rung-3-tuned-seeds42-46.json", "public-quick-rung-3-tpp60-tuned-seeds42-46.json",
                     "public-quick-rung-3-tpp60-ctx128-tuned-seeds42-46.json"}
