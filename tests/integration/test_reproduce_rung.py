"""`llmevo reproduce --rung` / `evolve --rung`: bad sizes refused (one line, exit 2, nothing
written); a tiny sized reproduction records its rung, parameters, tokens, epochs and 6 N D."""

from __future__ import annotations

import json

import pytest
from cli_runner import assert_refused, run_cli

from llmevo.artifacts import load_artifact

BAD = [
    (["reproduce", "rope", "--preset", "quick", "--rung", "99"], "--rung 99: unknown rung"),
    (["reproduce", "rope", "--preset", "quick", "--rung", "-9"], "--rung -9: unknown rung"),
    (["reproduce", "rope", "--preset", "quick", "--heads", "5"], "--heads 5 does not divide --d-model 64"),
    (["reproduce", "rope", "--preset", "quick", "--rung", "-2", "--batch-size", "100000"],
     "less than one step of batch 100000"),
    (["reproduce", "rope", "--rung", "1"], "scale the quick preset"),
    (["reproduce", "blt", "--preset", "quick", "--rung", "1"], "sizes of its own"),
    (["reproduce", "rope", "--preset", "quick", "--layers", "0"], "--layers 0"),
    (["reproduce", "rope", "--preset", "quick", "--rung", "0", "--seq-len", "5000"], "--seq-len 5000: need"),
    (["reproduce", "rope", "--preset", "quick", "--seq-len", "96"], "--seq-len is a setting of the size dial"),
    (["reproduce", "rope", "--preset", "quick", "--tokens-per-parameter", "3"], "--tokens-per-parameter is a setting"),
    (["evolve", "--rung", "12"], "--rung 12: unknown rung"),
    (["evolve", "--d-model", "96", "--heads", "5"], "--heads 5 does not divide --d-model 96"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_sizes_are_one_line_exit_2_nothing_written(args, message, capsys, workdir):
    assert_refused(args, message, capsys, workdir)


def test_a_sized_reproduction_records_its_scale(tmp_path, data_dir):
    out = tmp_path / "rung.json"
    code = run_cli(["reproduce", "rope", "--preset", "quick", "--rung", "-2", "--steps", "2",
                    "--no-tune", "--seed", "42", "--suite", "core", "--device", "cpu",
                    "--data-dir", str(data_dir), "--out", str(out), "--no-report"])
    assert code == 0
    setup = json.loads(out.read_text())["setup"]
    tokens = 2 * 24 * 64  # two steps of rung -2's batch
    assert (setup["rung"], setup["parameters"], setup["training_tokens"]) == (-2, 43_168, tokens)
    assert (setup["dimensions"], setup["layers"], setup["batch_size"]) == (32, 2, 24)
    stream = json.loads(out.read_text())["dataset"]["train_stream_tokens"]
    assert setup["epochs"] == tokens / stream
    assert setup["compute_6nd"] == 6 * 43_168 * tokens
    assert load_artifact(out).setup.rung == -2
    # the cost of the verdict: CPU seconds of the process and its workers, and wall time
    assert setup["cpu_seconds"] > 0 and setup["reproduction_wall_seconds"] > 0


def test_a_sized_reproduction_at_a_longer_window(tmp_path, data_dir):
    out = tmp_path / "rung.json"
    code = run_cli(["reproduce", "alibi", "--preset", "quick", "--rung", "-2", "--seq-len", "96", "--steps", "2",
                    "--no-tune", "--seed", "42", "--suite", "core", "--device", "cpu",
                    "--data-dir", str(data_dir), "--out", str(out), "--no-report"])
    assert code == 0
    setup = json.loads(out.read_text())["setup"]
    assert (setup["sequence_length"], setup["training_tokens"]) == (96, 2 * 24 * 96)
