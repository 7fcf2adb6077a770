"""The arm cache (``runner.cache``): its key, its files, and a bad entry as a miss."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from tuning_support import scorer

from llmevo.catalog import build_model
from llmevo.experiments.plans import plan_comparison
from llmevo.registry import ComponentChoice
from llmevo.runner import cache as arm_cache
from llmevo.runner import tuning
from llmevo.runner.arm_run import ArmRun
from llmevo.runner.cache import ArmCache, CacheContext, ReportEntries, TuningEntries, run_key
from llmevo.runner.presets import get_preset
from llmevo.train.execution import RunSpec
from llmevo.train.trainer import TrainConfig, TrainResult

CONFIG = TrainConfig(steps=3, batch_size=2, seq_len=8, lr=1e-3)
CONTEXT = CacheContext(
    code_sha256="c" * 64, torch_version="2.13.0", device="cpu", accelerator="CPU",
    cpu='{"model":"AMD EPYC","flags_sha256":"0123"}', cpu_capability="AVX2", machine="x86_64", threads=1, float32_matmul_precision="highest",
    path="parallel", replicas_max=None,
)
ARM = arm_cache.arm_parts(plan_comparison("relu2").baseline)
EVALUATION = arm_cache.evaluation_parts(get_preset("smoke"), "lm_loss", "public_composite")


def _key(context: CacheContext = CONTEXT, arm: dict = ARM, data: str = "d" * 64,
         evaluation: dict = EVALUATION, config: TrainConfig = CONFIG, seed: int = 42,
         trained_with: list[RunSpec] | None = None) -> str:
    return run_key("report", context, arm, data, evaluation, config, seed, trained_with)


def test_changing_any_one_input_changes_the_key():
    method = arm_cache.arm_parts(plan_comparison("relu2").method)
    other_eval = arm_cache.evaluation_parts(get_preset("smoke").override({"eval_batch_size": 32}),
                                            "lm_loss", "public_composite")
    keys = {
        "base": _key(),
        "lr": _key(config=CONFIG.model_copy(update={"lr": 2e-3})),
        "seed": _key(seed=43),
        "steps": _key(config=CONFIG.model_copy(update={"steps": 4})),
        "warmup": _key(config=CONFIG.model_copy(update={"warmup_steps": 1})),
        "optimizer": _key(config=CONFIG.model_copy(update={"optimizer": ComponentChoice(name="lion")})),
        "code": _key(context=dataclasses.replace(CONTEXT, code_sha256="e" * 64)),
        "model": _key(arm=method),
        "data": _key(data="f" * 64),
        "threads": _key(context=dataclasses.replace(CONTEXT, threads=2)),
        # same capability to torch, another CPU: other last bits (docs/LOG.md, 2026-12-05)
        "cpu": _key(context=dataclasses.replace(CONTEXT, cpu='{"model":"Intel Xeon","flags_sha256":"4567"}')),
        "torch": _key(context=dataclasses.replace(CONTEXT, torch_version="2.14.0")),
        "path": _key(context=dataclasses.replace(CONTEXT, path="sequential")),
        "evaluation": _key(evaluation=other_eval),
    }
    assert len(set(keys.values())) == len(keys)
    assert _key() == _key()  # and the same inputs give the same key
    assert run_key("tuning", CONTEXT, ARM, "d" * 64, EVALUATION, CONFIG, 42) != keys["base"]
    assert all(len(key) == 64 and int(key, 16) >= 0 for key in keys.values())


def test_a_component_written_with_its_defaults_is_the_same_arm():
    """nope's baseline writes ``rope`` bare, layernorm's ``rope:theta=10000.0`` (the default):
    one network, one key; a different theta is another arm."""
    bare = plan_comparison("nope").baseline
    explicit = plan_comparison("layernorm").baseline
    assert bare.model.position.config != explicit.model.position.config  # written differently
    assert arm_cache.arm_parts(bare) == arm_cache.arm_parts(explicit)
    assert _key(arm=arm_cache.arm_parts(bare)) == _key(arm=arm_cache.arm_parts(explicit))
    other = dataclasses.replace(explicit, model=explicit.model.model_copy(update={
        "position": ComponentChoice(name="rope", config={"theta": 500000.0})}))
    assert arm_cache.arm_parts(other) != arm_cache.arm_parts(explicit)


def _with_model(arm, **slots):
    return dataclasses.replace(arm, model=arm.model.model_copy(update={
        slot: ComponentChoice(name=name, config=config) for slot, (name, config) in slots.items()}))


def test_one_model_spelled_two_ways_is_one_key_and_trains_once():
    """Issue 34 item 6: an attention comparison's baseline writes ``mha`` bare (kv_heads None),
    llama_modern's genome ``mha:kv_heads=4``; at 4 heads both build the same network, so both
    are one key (the explicit count, which the default genome's entries already had)."""
    bare = plan_comparison("qk_norm").baseline
    default = plan_comparison("muon").baseline
    assert bare.model.attention.config == {} and default.model.attention.config == {"kv_heads": 4}
    assert bare.model.model_dump(exclude={"attention", "position"}) == default.model.model_dump(
        exclude={"attention", "position"})
    assert arm_cache.arm_parts(bare) == arm_cache.arm_parts(default)
    assert arm_cache.arm_parts(default)["model"]["attention"] == {"name": "mha", "config": {"kv_heads": 4}}
    torch.manual_seed(0)
    built_bare = build_model(bare.model).state_dict()
    torch.manual_seed(0)
    built_default = build_model(default.model).state_dict()
    assert built_bare.keys() == built_default.keys()
    assert all(torch.equal(built_bare[name], built_default[name]) for name in built_bare)
    # a real difference stays one: two key/value heads is another network
    grouped = _with_model(default, attention=("mha", {"kv_heads": 2}))
    assert arm_cache.arm_parts(grouped) != arm_cache.arm_parts(default)
    # the other attention components keep their default spelling (None), as their entries have it
    qk = plan_comparison("qk_norm").method
    assert arm_cache.arm_parts(_with_model(qk, attention=("qk_norm", {"kv_heads": 4}))) == arm_cache.arm_parts(qk)
    assert arm_cache.arm_parts(qk)["model"]["attention"]["config"]["kv_heads"] is None
    # RoPE over the whole head (16 of 64 / 4 heads) written out is RoPE's default
    whole = _with_model(default, position=("rope", {"rotary_dim": 16}))
    assert arm_cache.arm_parts(whole) == arm_cache.arm_parts(default)
    assert arm_cache.arm_parts(default)["model"]["position"]["config"]["rotary_dim"] is None
    assert arm_cache.arm_parts(_with_model(default, position=("rope", {"rotary_dim": 8}))) != arm_cache.arm_parts(default)


def test_the_context_names_the_cpu(monkeypatch):
    """Two CPUs that torch calls AVX512 alike (an AMD EPYC and an Intel Xeon) trained one key to
    different numbers: the context, and so every key, names the CPU."""
    from llmevo.train.execution import Execution

    here = CacheContext.capture(torch.device("cpu"), Execution(), code_modules=())
    monkeypatch.setattr(arm_cache, "cpu_identity", lambda: {"model": "another CPU", "flags_sha256": "0"})
    there = CacheContext.capture(torch.device("cpu"), Execution(), code_modules=())
    assert here.cpu != there.cpu and "another CPU" in there.cpu
    assert _key(context=here) != _key(context=there)


def test_call_mates_enter_the_key_only_where_they_can_change_the_numbers():
    alone, together = [RunSpec(42, CONFIG)], [RunSpec(42, CONFIG), RunSpec(43, CONFIG)]
    # parallel at one thread: each run is a fresh single-thread train() call
    assert CONTEXT.independent and _key(trained_with=alone) == _key(trained_with=together)
    for path, threads in (("batched", 1), ("parallel-batched", 1), ("parallel", 2)):
        context = dataclasses.replace(CONTEXT, path=path, threads=threads)
        assert not context.independent
        assert _key(context, trained_with=alone) != _key(context, trained_with=together)
    assert dataclasses.replace(CONTEXT, path="sequential", threads=4).independent


def test_source_digest_follows_every_python_file(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    first = arm_cache.source_sha256(tmp_path)
    (tmp_path / "notes.txt").write_text("not code")
    assert arm_cache.source_sha256(tmp_path) == first
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    changed = arm_cache.source_sha256(tmp_path)
    (tmp_path / "b.py").write_text("")
    assert len({first, changed, arm_cache.source_sha256(tmp_path)}) == 3
    assert arm_cache.source_sha256() == arm_cache.source_sha256()  # the llmevo package itself


def test_source_digest_of_named_modules_ignores_the_rest(tmp_path):
    package = tmp_path / "llmevo"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    (package / "b.py").write_text("y = 1\n")
    first = arm_cache.source_sha256(package, ["llmevo.a"])
    (package / "b.py").write_text("y = 2\n")  # not named: no change
    assert arm_cache.source_sha256(package, ["llmevo.a"]) == first
    (package / "a.py").write_text("x = 2\n")
    assert arm_cache.source_sha256(package, ["llmevo.a"]) != first
    with pytest.raises(ValueError, match="llmevo.missing"):
        arm_cache.source_sha256(package, ["llmevo.missing"])


def test_reproduction_cache_covers_what_its_runs_execute_and_not_reports():
    from llmevo.experiments.reproduction import cache_code_modules

    modules = set(cache_code_modules())
    # every component (the catalog is followed), the trainer, the tuner, evaluation
    assert {"llmevo.components.position.rope", "llmevo.components.optim.muon", "llmevo.model.transformer",
            "llmevo.train.trainer", "llmevo.runner.tuning", "llmevo.eval.lm",
            "llmevo.experiments.reproduction"} <= modules
    # code no run reaches: editing it keeps a background ladder's entries
    assert not {m for m in modules if m.startswith(("llmevo.cli", "llmevo.reports", "llmevo.evolve"))}


def _data(stream: torch.Tensor, narrative: torch.Tensor | None = None) -> SimpleNamespace:
    suite = SimpleNamespace(fingerprint="s" * 64)
    sources = {"lm": stream, "narrative": torch.arange(50) if narrative is None else narrative}
    return SimpleNamespace(kind="bpe", seq_len=8, fingerprint="fp", suite_validation=suite,
                           suite_test=suite, stream=stream, validation=torch.arange(10),
                           test=torch.arange(10), token_bytes=torch.ones(4, dtype=torch.int64),
                           sources=sources)


def test_data_digest_sees_one_changed_token():
    stream = torch.arange(100)
    changed = stream.clone()
    changed[57] = 3
    assert arm_cache.data_sha256(_data(stream)) == arm_cache.data_sha256(_data(stream.clone()))
    assert arm_cache.data_sha256(_data(stream)) != arm_cache.data_sha256(_data(changed))
    # a training source outside the concatenated stream counts too (a data recipe draws from it)
    narrative = torch.arange(50)
    narrative[3] = 0
    assert arm_cache.data_sha256(_data(stream)) != arm_cache.data_sha256(_data(stream, narrative))


def _build() -> nn.Module:
    return nn.Linear(4, 3)


def _run(model: nn.Module) -> ArmRun:
    result = TrainResult(status="complete", losses=[2.5, 2.25, 2.0], initial_loss=2.25,
                         final_loss=2.25, steps_done=3, tokens_seen=48, token_stream_sha256="t" * 64,
                         wall_seconds=0.5, tokens_per_second=96.0)
    return ArmRun(seed=42, validation={"lm_loss": 2.0 / 3.0, "bits_per_byte": None}, test={"lm_loss": 0.7},
                     train=result, parameters=15, architecture_stats={"split": "a"}, model=model,
                     train_config=CONFIG.model_dump(mode="json"), path="parallel")


def _report_entries(root: Path, read: bool = True) -> ReportEntries:
    return ReportEntries(ArmCache(root, CONTEXT, read=read), "report", ARM, "d" * 64, EVALUATION)


def test_a_report_run_round_trips_with_its_model(tmp_path):
    entries = _report_entries(tmp_path)
    spec = RunSpec(42, CONFIG)
    torch.manual_seed(0)
    trained = _build()
    assert entries.load(spec, [spec], _build) is None  # nothing there yet
    entries.store(spec, [spec], _run(trained))
    key = entries.key(spec, [spec])
    assert (tmp_path / key[:2] / f"{key}.json").is_file() and (tmp_path / key[:2] / f"{key}.pt").is_file()
    hit = entries.load(spec, [spec], _build)
    assert hit is not None
    expected = _run(trained)
    for field in ("seed", "validation", "test", "train", "parameters", "architecture_stats",
                  "train_config", "path"):
        assert getattr(hit, field) == getattr(expected, field), field
    for name, tensor in trained.state_dict().items():
        assert torch.equal(hit.model.state_dict()[name], tensor)
    assert entries.load(RunSpec(43, CONFIG), [spec], _build) is None  # another seed is another key
    assert list(tmp_path.rglob("*.tmp")) == []  # no temporary file left behind


def _entry_files(root: Path) -> tuple[Path, Path]:
    (entry,) = root.rglob("*.json")
    return entry, entry.with_suffix(".pt")


@pytest.mark.parametrize("damage", [
    "number", "truncated", "not json", "state altered", "state missing", "entry missing", "wrong key",
])
def test_a_damaged_report_entry_is_a_miss(tmp_path, damage):
    entries = _report_entries(tmp_path)
    spec = RunSpec(42, CONFIG)
    entries.store(spec, [spec], _run(_build()))
    entry, state = _entry_files(tmp_path)
    text = entry.read_text()
    if damage == "number":  # a validation value altered, the JSON still valid
        entry.write_text(text.replace(repr(2.0 / 3.0), "0.5"))
        assert repr(2.0 / 3.0) in text
    elif damage == "truncated":
        entry.write_text(text[: len(text) // 2])
    elif damage == "not json":
        entry.write_bytes(b"\xff\x00garbage")
    elif damage == "state altered":
        raw = bytearray(state.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        state.write_bytes(bytes(raw))
    elif damage == "state missing":
        state.unlink()
    elif damage == "entry missing":
        entry.unlink()
    else:  # an entry that says it belongs to another key
        data = json.loads(text)
        data["key"] = "0" * 64
        entry.write_text(json.dumps(data))
    assert entries.load(spec, [spec], _build) is None
    entries.store(spec, [spec], _run(_build()))  # the recomputed run overwrites it
    assert entries.load(spec, [spec], _build) is not None


def test_an_entry_that_does_not_fit_the_model_is_a_miss(tmp_path):
    entries = _report_entries(tmp_path)
    spec = RunSpec(42, CONFIG)
    entries.store(spec, [spec], _run(_build()))
    assert entries.load(spec, [spec], lambda: nn.Linear(5, 3)) is None


def test_refresh_writes_but_never_reads_and_a_failed_write_is_skipped(tmp_path):
    spec = RunSpec(42, CONFIG)
    _report_entries(tmp_path, read=False).store(spec, [spec], _run(_build()))
    assert _report_entries(tmp_path, read=False).load(spec, [spec], _build) is None
    assert _report_entries(tmp_path).load(spec, [spec], _build) is not None
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    _report_entries(blocked).store(spec, [spec], _run(_build()))  # no error
    assert _report_entries(blocked).load(spec, [spec], _build) is None


def test_a_full_disk_skips_the_entry_and_leaves_no_file(tmp_path, monkeypatch):
    """Stored after its run trained: a failed write (here the disk fills at the entry's JSON)
    is skipped rather than throwing the run away, and leaves no temporary file behind."""
    import errno
    import os

    real_fsync, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) > 1:  # the state file is written, the entry's JSON finds the disk full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    spec = RunSpec(42, CONFIG)
    monkeypatch.setattr(os, "fsync", fsync)
    _report_entries(tmp_path).store(spec, [spec], _run(_build()))  # no error
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert _report_entries(tmp_path).load(spec, [spec], _build) is None
    assert [p.suffix for p in tmp_path.rglob("*") if p.is_file()] == [".pt"]  # no .tmp, no .json


def test_tuning_entries_keep_a_value_or_a_divergence(tmp_path):
    entries = TuningEntries(ArmCache(tmp_path, CONTEXT), "tuning", ARM, "d" * 64, EVALUATION)
    low, high = RunSpec(1000, CONFIG), RunSpec(1000, CONFIG.model_copy(update={"lr": 1.0}))
    entries.store(low, [low, high], 3.25)
    entries.store(high, [low, high], None)
    assert entries.load(low, [low, high]).value == 3.25
    loaded = entries.load(high, [low, high])
    assert loaded is not None and loaded.value is None  # diverged, not missing
    assert entries.load(RunSpec(1001, CONFIG), [low]) is None


def _tune(tmp_path, monkeypatch, context: CacheContext, calls: list) -> tuning.ArmTuning:
    """The arm tuned through ``score_arm`` over a fake trainer (``tuning_support``): a run
    scores (lr - 3e-3)^2 + seed / 1e6; each call records its (lr, seed) pairs."""
    entries = TuningEntries(ArmCache(tmp_path, context), "tuning", ARM, "d" * 64, EVALUATION)
    plan = tuning.grid_tuner([1e-3, 3e-3, 1e-2], [1000, 1001], [42])
    score = scorer(monkeypatch, lambda model: (model.lr - 3e-3) ** 2 + model.seed / 1e6, calls=calls,
                   note=lambda spec: (spec.config.lr, spec.seed), cache=entries)
    return tuning.tune_arm("baseline", CONFIG, plan, score)


def test_tune_arm_trains_only_runs_missing_from_the_cache(tmp_path, monkeypatch):
    first_calls, second_calls, third_calls = [], [], []
    first = _tune(tmp_path, monkeypatch, CONTEXT, first_calls)
    assert first.cached == [] and len(first_calls[0]) == 6
    second = _tune(tmp_path, monkeypatch, CONTEXT, second_calls)
    assert second_calls == [] and len(second.cached) == 6
    assert [(s.lr, s.values) for s in second.settings] == [(s.lr, s.values) for s in first.settings]
    assert second.best().lr == first.best().lr == 3e-3
    # one entry lost: only that run trains (independent context)
    key = TuningEntries(ArmCache(tmp_path, CONTEXT), "tuning", ARM, "d" * 64, EVALUATION).key(
        RunSpec(1001, CONFIG.model_copy(update={"lr": 1e-2})), [])
    (tmp_path / key[:2] / f"{key}.json").unlink()
    third = _tune(tmp_path, monkeypatch, CONTEXT, third_calls)
    assert third_calls == [[(1e-2, 1001)]] and len(third.cached) == 5
    assert [list(s.values) for s in third.settings] == [[1000, 1001]] * 3  # seed order kept
    assert math.isclose(third.settings[2].values[1001], (1e-2 - 3e-3) ** 2 + 1001 / 1e6)


def test_a_partial_hit_trains_the_whole_call_where_call_mates_matter(tmp_path, monkeypatch):
    batched = dataclasses.replace(CONTEXT, path="batched")
    _tune(tmp_path, monkeypatch, batched, [])
    for entry in sorted(tmp_path.rglob("*.json"))[:1]:
        entry.unlink()
    calls = []
    again = _tune(tmp_path, monkeypatch, batched, calls)
    assert [len(call) for call in calls] == [6] and again.cached == []
