"""`llmevo reproduce ... --init-from DIR`: both arms start from a transformers Llama checkpoint.

The checkpoint is a random ``LlamaForCausalLM`` that ``transformers`` creates here, with a
SmolLM2-like tokenizer (``<|endoftext|>`` = 0 as BOS, EOS and padding), so the data must be
tokenized with it, not with llmevo's BPE-512.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_runner import files_under, run_cli
from hf_llama import make_hf_llama, smol_like_tokenizer

from llmevo.artifacts import load_artifact
from llmevo.digests import sha256_file

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory, data_dir) -> Path:
    return make_hf_llama(tmp_path_factory.mktemp("smol") / "tiny-llama", smol_like_tokenizer(data_dir))


def _common(data_dir: Path, out: Path) -> list[str]:
    return ["--preset", "smoke", "--seed", "42", "--device", "cpu", "--threads", "1",
            "--data-dir", str(data_dir), "--out", str(out), "--no-report"]


def test_sft_from_a_transformers_llama(tmp_path, data_dir, hf_dir, workdir) -> None:
    out = tmp_path / "sft.json"
    code = run_cli(["reproduce", "sft", "--init-from", str(hf_dir), "--post-steps", "3",
                    "--post-batch-size", "2", *_common(data_dir, out)])
    assert code == 0
    artifact = load_artifact(out)  # valid against the schema
    raw = json.loads(out.read_text())
    init = raw["setup"]["init_from"]
    assert init["directory"] == str(hf_dir)
    assert init["weights_sha256"] == sha256_file(hf_dir / "model.safetensors")
    assert init["tokenizer_sha256"] == sha256_file(hf_dir / "tokenizer.json")
    # the data was tokenized with the checkpoint's tokenizer, the arms are its genome
    assert raw["dataset"]["tokenizer_sha256"] == init["tokenizer_sha256"]
    for label in ("baseline", "method"):
        model = raw[label]["genome"]["model"]
        assert (model["d_model"], model["n_layers"], model["vocab_size"]) == (32, 2, 384)
    assert raw["setup"]["tokens_per_arm"] == 0  # nothing was pretrained
    assert "pretraining_curve" not in raw
    starting = init["starting_validation"]["lm_loss"]
    # the ablation ('none') post-trains nothing: it is the checkpoint, evaluated again
    assert artifact.baseline.lm_loss == pytest.approx(starting, rel=1e-9)
    assert artifact.baseline.initial_loss == artifact.baseline.final_loss == pytest.approx(starting)
    # SFT changed the model: three steps of 2 examples moved its validation loss
    assert artifact.method.post_training_examples == 6
    assert math.isfinite(artifact.method.lm_loss) and artifact.method.lm_loss != artifact.baseline.lm_loss


def test_continued_pretraining_starts_from_the_weights(tmp_path, data_dir, hf_dir, workdir) -> None:
    out = tmp_path / "muon.json"
    code = run_cli(["reproduce", "muon", "--init-from", str(hf_dir), "--steps", "2",
                    "--batch-size", "2", "--no-arm-cache", *_common(data_dir, out)])
    assert code == 0
    raw = json.loads(out.read_text())
    assert raw["setup"]["init_from"]["continued_pretraining"] is True
    first = {label: raw["training_curves"][label]["per_seed"]["42"][0] for label in ("baseline", "method")}
    # the first step's loss is the checkpoint's on the first batch: equal for both arms, and
    # far above the ln(V) ~ 5.95 of a freshly initialised model (its weights are large)
    assert first["baseline"] == pytest.approx(first["method"], rel=1e-6)
    assert first["baseline"] > math.log(384) + 0.3


def test_default_artifact_name_says_which_checkpoint(tmp_path, data_dir, hf_dir) -> None:
    from llmevo.experiments import ReproductionRequest

    plan = ReproductionRequest(name="dpo", init_from=hf_dir, data_dir=data_dir).plan()
    digest = sha256_file(hf_dir / "model.safetensors")[:8]
    assert plan.outputs.artifact.name == f"public-init-tiny-llama-{digest}-seed42.json"
    assert plan.comparison.baseline.init is plan.comparison.method.init is plan.init_from


def _refused(args: list[str], capsys, work: Path, message: str) -> None:
    before = files_under(work)
    assert run_cli(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert files_under(work) == before


def _copy(source: Path, target: Path) -> Path:
    target.mkdir()
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def test_bad_checkpoints_are_one_line_and_write_nothing(tmp_path, data_dir, hf_dir, capsys, workdir) -> None:
    out = workdir / "runs" / "a.json"
    args = ["reproduce", "sft", *_common(data_dir, out)]
    not_llama = tmp_path / "not-llama"
    not_llama.mkdir()
    (not_llama / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32}))
    _refused([*args, "--init-from", str(not_llama)], capsys, workdir, "not a Llama checkpoint")
    biased = _copy(hf_dir, tmp_path / "biased")
    config = json.loads((biased / "config.json").read_text())
    (biased / "config.json").write_text(json.dumps({**config, "attention_bias": True}))
    _refused([*args, "--init-from", str(biased)], capsys, workdir, "attention_bias true")
    no_weights = _copy(hf_dir, tmp_path / "no-weights")
    (no_weights / "model.safetensors").unlink()
    _refused([*args, "--init-from", str(no_weights)], capsys, workdir, "model.safetensors is missing")
    _refused([*args, "--init-from", str(tmp_path / "absent")], capsys, workdir, "is not a directory")
    _refused(["reproduce", "rope", "--init-from", str(hf_dir), *_common(data_dir, out)], capsys,
             workdir, "'rope' fills the position slot")
    _refused(["reproduce", "muon", "--preset", "quick", "--rung", "1", "--init-from", str(hf_dir),
              "--data-dir", str(data_dir), "--out", str(out)], capsys, workdir,
             "the model's size is the checkpoint's")


def test_the_arm_cache_keys_on_the_starting_weights(data_dir, hf_dir) -> None:
    from llmevo.experiments import ReproductionRequest
    from llmevo.runner.cache import arm_parts

    started = ReproductionRequest(name="muon", init_from=hf_dir, data_dir=data_dir).plan()
    plain = ReproductionRequest(name="muon", data_dir=data_dir).plan()
    for label in ("baseline", "method"):
        arm = getattr(started.comparison, label)
        assert arm_parts(arm)["init_weights_sha256"] == sha256_file(hf_dir / "model.safetensors")
        assert "init_weights_sha256" not in arm_parts(getattr(plain.comparison, label))
