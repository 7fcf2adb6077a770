"""BLT end to end on a slice of WikiText-2: entropy model quality, calibration, leakage.

One tiny entropy model (120 steps, ~6 s on one core) is trained per module and shared.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import llmevo.model.blt.entropy as entropy_module
from llmevo.catalog import build_model
from llmevo.data.bytes import byte_stream
from llmevo.data.pins import read_text
from llmevo.errors import ConfigError
from llmevo.model.blt import blt_model_config, prepare_blt
from llmevo.model.blt.entropy import EntropyModelSettings, train_or_load_entropy_model
from llmevo.model.config import ModelConfig

TINY_ENTROPY = EntropyModelSettings(steps=120, batch_size=16, context=64, learning_rate=1e-2)
BYTES_PER_TOKEN = 3.0


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Two spinning intra-op threads on two shared cores are far slower than one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def corpus(data_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    root = data_dir / "wikitext-2"  # embedded: runs on a fresh clone
    train = byte_stream(read_text(root / "wiki.train.tokens")[:400_000])
    validation = byte_stream(read_text(root / "wiki.valid.tokens")[:60_000])
    return train, validation


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory) -> ModelConfig:
    train, validation = corpus
    config = blt_model_config(BYTES_PER_TOKEN, seq_len_tokens=16, entropy_model=TINY_ENTROPY)
    return prepare_blt(config, train, validation, tmp_path_factory.mktemp("entropy"), seed=0)


def test_entropy_model_beats_unigram_on_validation(prepared: ModelConfig) -> None:
    extra = prepared.extra
    assert extra["entropy_model_validation_bpb"] < extra["unigram_validation_bpb"] - 0.1
    assert 4.0 < extra["unigram_validation_bpb"] < 5.5  # English bytes: ~4.6 bits


def test_validation_mean_patch_size_is_within_15_percent(prepared, corpus) -> None:
    assert prepared.extra["validation_mean_patch_size"] == pytest.approx(BYTES_PER_TOKEN, rel=0.15)
    model = build_model(prepared).eval()
    windows = corpus[1][: 200 * prepared.max_seq_len].view(200, prepared.max_seq_len)
    index = model.patch_index(windows)[:, :-1]
    measured = windows.numel() / (index[:, -1] + 1).sum().item()
    assert measured == pytest.approx(BYTES_PER_TOKEN, rel=0.15)


def test_entropy_model_is_cached_by_settings_and_data(corpus, prepared, monkeypatch) -> None:
    train, validation = corpus
    cache_dir = Path(prepared.extra["entropy_model_path"]).parent

    def no_training(*args, **kwargs):
        raise AssertionError("cache miss: the entropy model was trained again")

    monkeypatch.setattr(entropy_module, "train_entropy_model", no_training)
    record = train_or_load_entropy_model(TINY_ENTROPY, train, validation, cache_dir, seed=0)
    assert str(record.path) == prepared.extra["entropy_model_path"]
    with pytest.raises(AssertionError, match="cache miss"):  # other data -> other key
        train_or_load_entropy_model(TINY_ENTROPY, train[1:], validation, cache_dir, seed=0)


def test_no_logit_sees_its_own_or_a_later_byte(prepared, corpus) -> None:
    """Changing bytes t+1.. never moves logits <= t, although patch boundaries move."""
    model = build_model(prepared).eval()
    length = prepared.max_seq_len
    generator = torch.Generator().manual_seed(0)
    base = corpus[1][1000 : 1000 + 4 * length].view(4, length).clone()
    reference = model(base)
    boundaries_moved = 0
    for t in torch.randint(0, length - 1, (24,), generator=generator).tolist():
        changed = base.clone()
        changed[:, t + 1 :] = torch.randint(0, 256, changed[:, t + 1 :].shape, generator=generator)
        logits = model(changed)
        torch.testing.assert_close(logits[:, : t + 1], reference[:, : t + 1], atol=1e-5, rtol=1e-5)
        boundaries_moved += int(
            not torch.equal(model.patch_index(changed), model.patch_index(base))
        )
        if t + 1 < length - 1:  # the control: later logits do see the change
            assert not torch.allclose(logits[:, t + 1 :], reference[:, t + 1 :])
    assert boundaries_moved > 0  # the test exercised moving patches, not a fixed grid


def test_trainable_parameters_exclude_the_frozen_entropy_model(prepared) -> None:
    model = build_model(prepared)
    stats = model.architecture_stats()
    assert stats["parameters_trainable"] == sum(p.numel() for p in model.parameters())
    assert stats["parameters_trainable"] == (
        stats["parameters_local_encoder"]
        + stats["parameters_latent"]
        + stats["parameters_local_decoder"]
    )
    assert (
        stats["entropy_model_parameters_frozen_not_counted"] == model.entropy_model.num_parameters()
    )
    assert not any(name.startswith("entropy") for name in model.state_dict())
    assert abs(stats["parameters_trainable"] / 139_584 - 1) <= 0.25  # llama_modern +-25%


def test_latent_blocks_come_from_the_config_slots(prepared) -> None:
    swapped = prepared.with_slot("position", "learned")
    model = build_model(swapped)
    names = {getattr(type(module), "component_name", None) for module in model.modules()}
    assert {"learned", "mha", "swiglu", "rmsnorm", "pre_norm"} <= names


def test_training_step_reduces_loss_and_stats_track_patches(prepared, corpus) -> None:
    torch.manual_seed(0)
    model = build_model(prepared)
    length = prepared.max_seq_len
    batch = corpus[0][: 8 * (length + 1)].view(8, length + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5
    patches_per_pass = (model.patch_index(batch[:, :-1])[:, length - 1] + 1).sum().item()
    observed = model.architecture_stats()["observed_mean_patch_size_bytes"]
    assert observed == pytest.approx(8 * length / patches_per_pass)


def test_unprepared_config_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="run prepare_blt first"):
        build_model(blt_model_config(BYTES_PER_TOKEN))
    with pytest.raises(ConfigError, match="unknown patching rule"):
        blt_model_config(BYTES_PER_TOKEN, patch_rule="median")
