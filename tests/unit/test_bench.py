"""``llmevo bench``: the replica table's shape and arithmetic, the step profile, and the
one warning the replica trainer silences. No timing is asserted: throughput depends on
the machine; what is checked is which rows exist and that every figure is the stated
function of the measured wall times."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from llmevo import bench
from llmevo.bench import _plan_paths, benchmark_replicas, profile_step
from llmevo.catalog import build_model, build_optimizer
from llmevo.model.config import ModelConfig
from llmevo.train.execution import default_path
from llmevo.train.replicas import FLASH_LOOP_WARNING, train_replicas
from llmevo.train.trainer import TrainConfig

CPU = torch.device("cpu")
TINY = ModelConfig(d_model=32, n_layers=1)
FIELDS = {"replicas", "path", "requested_path", "batch_size", "seq_len", "steps",
          "train_tokens_per_second", "steady_tokens_per_second", "setup_seconds", "wall_seconds",
          "peak_memory_mib", "speedup", "vs_sequential", "steady_vs_sequential"}


def test_paths_planned_per_replica_count() -> None:
    # one run is a plain train() call on every path: measured once, labelled with all requests
    assert _plan_paths(1, ["auto", "batched"], CPU) == [("sequential", "auto,batched")]
    # R > 1: sequential first (the ratio's denominator), added when not requested
    assert _plan_paths(4, ["auto"], CPU) == [("sequential", ""), (default_path(CPU), "auto")]
    assert _plan_paths(4, ["batched", "sequential"], CPU) == [
        ("sequential", "sequential"), ("batched", "batched")]
    # auto and its concrete name merge into one measurement
    default = default_path(CPU)
    assert _plan_paths(2, ["auto", default], CPU) == [("sequential", ""), (default, f"auto,{default}")]


def test_replica_rows_shape_and_arithmetic() -> None:
    steps, batch, length = 3, 2, 8
    rows = benchmark_replicas(TINY, CPU, [1, 2], batch, length, steps, ["auto", "batched"],
                              single_model_tokens_per_second=1000.0, isolate=False)
    assert [(r.replicas, r.requested_path) for r in rows] == [
        (1, "auto,batched"), (2, ""), (2, "auto"), (2, "batched")]
    assert [r.path for r in rows][:2] == ["sequential", "sequential"]
    assert rows[3].path == "batched"
    for row in rows:
        data = row.as_dict()
        assert set(data) == FIELDS
        tokens = row.replicas * batch * length
        assert row.train_tokens_per_second * row.wall_seconds == pytest.approx(tokens * steps)
        assert row.speedup == pytest.approx(row.train_tokens_per_second / 1000.0)
        if math.isfinite(row.steady_tokens_per_second):  # wall = set-up + steps x step time
            assert row.setup_seconds + steps * tokens / row.steady_tokens_per_second == pytest.approx(
                row.wall_seconds)
        sequential = next(r for r in rows if r.replicas == row.replicas and r.requested_path in ("", "auto,batched"))
        assert row.vs_sequential == pytest.approx(
            row.train_tokens_per_second / sequential.train_tokens_per_second)
    assert rows[0].vs_sequential == 1.0 and rows[1].vs_sequential == 1.0


def test_replica_benchmark_refuses_bad_input_before_training() -> None:
    from llmevo.errors import ConfigError

    with pytest.raises(ConfigError, match="at least 2 steps"):
        benchmark_replicas(TINY, CPU, [1], steps=1, isolate=False)
    with pytest.raises(ConfigError, match="must not repeat"):
        benchmark_replicas(TINY, CPU, [2, 2], isolate=False)
    with pytest.raises(ConfigError, match="unknown training path"):
        benchmark_replicas(TINY, CPU, [2], path=["warp"], isolate=False)


def test_cli_replica_json(monkeypatch, capsys) -> None:
    from llmevo.cli import main

    monkeypatch.setattr(bench, "_measure_in_child", bench._measure_runs)  # in-process: fast
    main(["bench", "--threads", "1", "--replicas", "1,2", "--path", "sequential", "--batch-size", "2",
          "--seq-len", "8", "--steps", "2", "--warmup", "0", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert [(r["replicas"], r["path"]) for r in rows] == [(1, "sequential"), (2, "sequential")]
    for row in rows:
        assert FIELDS | {"single_model_tokens_per_second", "single_model_peak_memory_mib", "threads"} == set(row)
        assert row["threads"] == 1 and row["steps"] == 2 and row["single_model_tokens_per_second"] > 0
        assert row["vs_sequential"] == 1.0


@pytest.mark.parametrize(("args", "message"), [
    (["--replicas", "2", "--steps", "1"], "--steps"),
    (["--replicas", "2,2"], "must not repeat"),
    (["--replicas", "2", "--profile"], "does not combine with --replicas"),
    (["--profile", "--profile-top", "0"], "--profile-top"),
])
def test_cli_bad_bench_input_is_one_line_exit_2(args, message, capsys) -> None:
    from llmevo.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--threads", "1", *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_profile_rows_cover_the_step() -> None:
    profile = profile_step(TINY, CPU, batch_size=2, seq_len=8, steps=2, warmup=1, top=4)
    names = [op.op for op in profile.ops]
    assert len(names) == 5 and names[-1] == "(other ops)"
    assert sum(op.share_of_step for op in profile.ops) == pytest.approx(1.0)
    assert sum(op.self_ms_per_step for op in profile.ops) == pytest.approx(profile.profiled_step_ms)
    shares = [op.share_of_step for op in profile.ops[:-1]]
    assert shares == sorted(shares, reverse=True) and profile.step_ms > 0
    full = profile_step(TINY, CPU, batch_size=2, seq_len=8, steps=2, warmup=1, top=500)
    matmuls = [op for op in full.ops if op.op == "aten::mm"]
    # a 1-layer model: 8 projections (q, k, v, out, gate, up, down, head), each one matmul
    # forward and two backward (input and weight gradients)
    assert matmuls and matmuls[0].calls_per_step == 8 * 3


def test_cli_profile_json(capsys) -> None:
    from llmevo.cli import main

    main(["bench", "--threads", "1", "--profile", "--batch-size", "2", "--seq-len", "8", "--steps", "2",
          "--warmup", "0", "--profile-top", "3", "--json"])
    profile = json.loads(capsys.readouterr().out)
    assert set(profile) == {"step_ms", "profiled_step_ms", "threads", "ops"}
    assert [set(op) for op in profile["ops"]] == [
        {"op", "self_ms_per_step", "share_of_step", "calls_per_step"}] * 4


def _flash_under_vmap() -> None:
    q = torch.randn(2, 1, 2, 4, 8)  # (R, B, H, T, Dh)
    torch.vmap(lambda x: F.scaled_dot_product_attention(x, x, x, is_causal=True))(q)


def test_train_replicas_silences_only_the_flash_attention_loop_warning() -> None:
    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        _flash_under_vmap()
    if not any("batching rule for aten::_scaled_dot_product_flash_attention_for_cpu" in str(w.message)
               for w in outside):
        pytest.skip("this torch no longer warns about flash attention under vmap")
    config = TrainConfig(steps=2, batch_size=2, seq_len=8, lr=1e-3)
    stream = torch.randint(0, 512, (500,), generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as inside:
        warnings.simplefilter("always")
        train_replicas(lambda: build_model(TINY), stream, [1, 2],
                       [config, config], CPU, build_optimizer=build_optimizer)
        warnings.warn("a different warning still shows", UserWarning, stacklevel=1)
    messages = [str(w.message) for w in inside]
    assert not any("batching rule for aten::_scaled_dot_product_flash" in m for m in messages)
    assert "a different warning still shows" in messages
    with warnings.catch_warnings(record=True) as after:  # the filter does not leak out
        warnings.simplefilter("always")
        _flash_under_vmap()
    assert any(FLASH_LOOP_WARNING.split(" because")[0] in str(w.message) for w in after)


def test_fixed_costs_are_medians_of_alternating_fresh_processes_and_their_ratio(tmp_path) -> None:
    import sys

    from llmevo.bench import benchmark_fixed_costs
    from llmevo.errors import ConfigError

    log = tmp_path / "order"
    quick = [sys.executable, "-c", f"open({str(log)!r}, 'a').write('c')"]
    baseline = [sys.executable, "-c", f"open({str(log)!r}, 'a').write('b')"]
    result = benchmark_fixed_costs(quick, repetitions=3, baseline=baseline)
    assert log.read_text() == "cb" + "bc" * 3  # one untimed run of each, then alternating
    assert len(result.import_torch_seconds) == len(result.command_seconds) == 3
    data = result.as_dict()
    assert data["command_median"] == sorted(result.command_seconds)[1]
    assert data["ratio"] == pytest.approx(data["command_median"] / data["import_torch_median"])
    with pytest.raises(ConfigError, match="exited with 3: gone"):
        benchmark_fixed_costs([sys.executable, "-c", "import sys; print('gone', file=sys.stderr); sys.exit(3)"],
                              repetitions=1, baseline=baseline)


def test_fixed_costs_run_both_commands_in_the_environment_given(tmp_path) -> None:
    """``env`` reaches the timed processes (the CLI drops PYTHONDONTWRITEBYTECODE from it so
    that llmevo's modules are read from their bytecode cache, as torch's are)."""
    import os
    import sys

    from llmevo.bench import benchmark_fixed_costs

    log = tmp_path / "seen"
    probe = f"import os; open({str(log)!r}, 'a').write(os.environ.get('LLMEVO_BENCH_PROBE', '-'))"
    env = {**os.environ, "LLMEVO_BENCH_PROBE": "x"}
    benchmark_fixed_costs([sys.executable, "-c", probe], repetitions=1,
                          baseline=[sys.executable, "-c", probe], env=env)
    assert log.read_text() == "xxxx"
