"""Suite scores against independent references on the real (pinned) data.

References: the uniform distribution (loss = ln V exactly), a closed form for a model
that favours one token, a plain per-token Python loop with float64 log-sum-exp, and the
record counts and known answers of the released files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from llmevo.data.codec import BPECodec, ByteCodec
from llmevo.data.suites import SuiteData, instruction_train_stream, load_suite
from llmevo.eval.suites import evaluate_suite


@pytest.fixture(scope="module")
def bpe(data_dir: Path) -> BPECodec:
    text = (data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:100_000]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        min_frequency=2,
        special_tokens=["<pad>", "<unk>", "<bos>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(text.splitlines(), trainer=trainer)
    return BPECodec(tokenizer)


@pytest.fixture(scope="module")
def public_bpe(data_dir: Path, bpe: BPECodec) -> SuiteData:
    return load_suite("public", data_dir, bpe, 64, "validation")


def uniform(vocab: int):
    return lambda tokens: torch.zeros(*tokens.shape, vocab)


def test_counts_on_the_released_files(data_dir: Path, bpe: BPECodec, public_bpe: SuiteData) -> None:
    assert public_bpe.counts == {
        "instruction_train": 320,
        "instruction_validation": 64,
        "preference_validation": 64,
        "reasoning_validation": 64,
        "hh_rlhf_validation": 64,
    }
    assert set(public_bpe.skipped.values()) == {0}
    core = load_suite("core", data_dir, bpe, 64, "test")
    assert core.counts == {
        "instruction_train": 320,
        "instruction_test": 64,
        "preference_test": 0,
        "reasoning_test": 0,
        "hh_rlhf_test": 0,
    }
    assert core.preference == core.reasoning == core.hh_rlhf == ()


def test_known_records(data_dir: Path, public_bpe: SuiteData, bpe: BPECodec) -> None:
    # GSM8K line 0 (Janet's ducks) has the answer 18
    first = public_bpe.reasoning[0]
    gold = first.candidates[first.gold]
    assert gold.tokens[gold.response_start :] == (*bpe.encode(" 18"), bpe.eos_id)
    golds = [example.gold for example in public_bpe.reasoning]
    assert len(set(golds)) == 8
    # the first validation instruction is Alpaca record 320, in file order
    records = json.loads((data_dir / "alpaca" / "alpaca_5000.json").read_text())
    sequence = public_bpe.instruction[0]
    expected = (*bpe.encode(" " + records[320]["output"]), bpe.eos_id)
    kept = sequence.tokens[sequence.response_start :]
    assert kept == expected[: len(kept)]


def test_uniform_model_scores_ln_v_and_chance(public_bpe: SuiteData, bpe: BPECodec) -> None:
    metrics = evaluate_suite(uniform(bpe.vocab_size), public_bpe)
    log_v = math.log(bpe.vocab_size)
    assert metrics["instruction_loss"] == pytest.approx(log_v, abs=1e-6)
    tokens = sum(len(s.tokens) - s.response_start for s in public_bpe.instruction)
    response_bytes = sum(s.response_bytes for s in public_bpe.instruction)
    assert metrics["instruction_bpb"] == pytest.approx(
        log_v * tokens / (math.log(2) * response_bytes), rel=1e-6
    )
    assert metrics["reasoning_nll"] == pytest.approx(math.log(8), abs=1e-6)
    assert metrics["reasoning_accuracy"] == pytest.approx(1 / 8)
    assert metrics["hh_preference_loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert metrics["hh_preference_accuracy"] == pytest.approx(1 / 2)
    sizes = [len(example.candidates) for example in public_bpe.preference]
    assert metrics["preference_loss"] == pytest.approx(np.mean(np.log(sizes)), abs=1e-6)


def test_uniform_byte_model(data_dir: Path) -> None:
    codec = ByteCodec()
    suite = load_suite("core", data_dir, codec, 256, "validation")
    metrics = evaluate_suite(uniform(codec.vocab_size), suite)
    assert metrics["instruction_loss"] == pytest.approx(math.log(259), abs=1e-6)


def test_eos_favouring_model_matches_closed_form(public_bpe: SuiteData, bpe: BPECodec) -> None:
    """Logit L on <eos>, 0 elsewhere: log p(eos) = L - z, log p(other) = -z, z = ln(e^L + V - 1)."""
    boost, vocab = 3.0, bpe.vocab_size

    def logits_fn(tokens: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*tokens.shape, vocab)
        logits[..., bpe.eos_id] = boost
        return logits

    z = math.log(math.exp(boost) + vocab - 1)

    def mean_log_likelihood(sequence) -> tuple[float, int]:
        response = sequence.tokens[sequence.response_start :]
        eos = sum(token == bpe.eos_id for token in response)
        return (eos * boost - len(response) * z), len(response)

    metrics = evaluate_suite(logits_fn, public_bpe, batch_size=16)
    totals = [mean_log_likelihood(s) for s in public_bpe.instruction]
    expected_loss = -sum(t for t, _ in totals) / sum(n for _, n in totals)
    assert metrics["instruction_loss"] == pytest.approx(expected_loss, abs=1e-5)

    losses, hits = [], []
    for example in public_bpe.preference:
        scores = [t / n for t, n in map(mean_log_likelihood, example.candidates)]
        norm = sum(math.exp(score) for score in scores)
        losses.append(-math.log(math.exp(scores[example.gold]) / norm))
        best = [i for i, score in enumerate(scores) if score == max(scores)]
        hits.append(1 / len(best) if example.gold in best else 0.0)  # ties share credit
    assert metrics["preference_loss"] == pytest.approx(float(np.mean(losses)), abs=1e-5)
    assert metrics["preference_accuracy"] == pytest.approx(float(np.mean(hits)))


def test_bigram_model_matches_a_plain_loop(public_bpe: SuiteData, bpe: BPECodec) -> None:
    """A random bigram model, scored batched vs a per-token float64 numpy loop."""
    table = np.random.default_rng(0).normal(size=(bpe.vocab_size, bpe.vocab_size))
    table_t = torch.tensor(table, dtype=torch.float32)
    metrics = evaluate_suite(lambda tokens: table_t[tokens], public_bpe, batch_size=7)

    rows = table_t.double().numpy()
    log_norm = np.log(np.exp(rows).sum(axis=1))

    def log_likelihood(sequence) -> tuple[float, int]:
        total = 0.0
        for t in range(sequence.response_start, len(sequence.tokens)):
            previous, token = sequence.tokens[t - 1], sequence.tokens[t]
            total += rows[previous, token] - log_norm[previous]
        return total, len(sequence.tokens) - sequence.response_start

    scored = [log_likelihood(s) for s in public_bpe.instruction]
    nll = -sum(t for t, _ in scored)
    assert metrics["instruction_loss"] == pytest.approx(nll / sum(n for _, n in scored), rel=1e-6)
    response_bytes = sum(s.response_bytes for s in public_bpe.instruction)
    assert metrics["instruction_bpb"] == pytest.approx(nll / math.log(2) / response_bytes, rel=1e-6)
    for part, loss_name in (("reasoning", "reasoning_nll"), ("hh_rlhf", "hh_preference_loss")):
        losses = []
        for example in getattr(public_bpe, part):
            scores = np.array([t / n for t, n in map(log_likelihood, example.candidates)])
            losses.append(np.log(np.exp(scores).sum()) - scores[example.gold])
        assert metrics[loss_name] == pytest.approx(float(np.mean(losses)), rel=1e-6)


def test_fingerprint_tracks_data_codec_and_length(
    data_dir: Path, bpe: BPECodec, public_bpe: SuiteData
) -> None:
    again = load_suite("public", data_dir, bpe, 64, "validation")
    assert again.fingerprint == public_bpe.fingerprint
    others = {
        load_suite("public", data_dir, bpe, 32, "validation").fingerprint,
        load_suite("public", data_dir, ByteCodec(), 64, "validation").fingerprint,
        load_suite("public", data_dir, bpe, 64, "test").fingerprint,
        load_suite("core", data_dir, bpe, 64, "validation").fingerprint,
    }
    assert public_bpe.fingerprint not in others and len(others) == 4


def test_truncation_is_counted_and_bounded(public_bpe: SuiteData) -> None:
    sequences = list(public_bpe.instruction) + [
        c
        for part in ("preference", "hh_rlhf", "reasoning")
        for e in getattr(public_bpe, part)
        for c in e.candidates
    ]
    assert all(len(s.tokens) <= 65 and s.response_start < len(s.tokens) for s in sequences)
    assert public_bpe.truncated["instruction"] == sum(s.truncated for s in public_bpe.instruction)
    assert public_bpe.truncated["hh_rlhf"] > 0  # HH dialogues are long


def test_instruction_train_stream(data_dir: Path, bpe: BPECodec) -> None:
    stream = instruction_train_stream(data_dir, bpe)
    assert stream.dtype == torch.long
    assert int((stream == bpe.bos_id).sum()) == 320
    assert int((stream == bpe.eos_id).sum()) == 320
    assert int(stream[0]) == bpe.bos_id and int(stream[-1]) == bpe.eos_id


def test_the_instruction_stream_cache_gives_the_encoded_ids(data_dir: Path, bpe: BPECodec, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``cache_dir``: the first call encodes and stores, a second encodes nothing and gives the
    same ids (equal to the uncached stream); an altered, foreign or unreadable entry is
    rebuilt; each codec has its own entry."""
    import hashlib

    import numpy as np

    reference = instruction_train_stream(data_dir, bpe)
    first = instruction_train_stream(data_dir, bpe, cache_dir=tmp_path)
    (entry,) = (tmp_path / "tokens").glob("instruction-*.npz")
    assert torch.equal(first, reference)
    encode = bpe.encode
    monkeypatch.setattr(bpe, "encode", lambda text: pytest.fail("encoded on a cache hit"))
    assert torch.equal(instruction_train_stream(data_dir, bpe, cache_dir=tmp_path), reference)
    monkeypatch.setattr(bpe, "encode", encode)
    with np.load(entry) as stored:
        fields = {key: stored[key] for key in stored.files}
    def entry_of(ids: np.ndarray, claim: str) -> dict:
        return {"ids": ids, "claim": np.str_(claim), "ids_sha256": np.str_(hashlib.sha256(ids.tobytes()).hexdigest())}

    other = fields["ids"][::-1].copy()  # other ids, each a valid one
    claim = str(fields["claim"])
    for altered in ({**entry_of(other, claim), "ids_sha256": fields["ids_sha256"]},  # digest no longer matches
                    entry_of(other, "instruction-train-v1:another-codec"),  # another entry's claim
                    entry_of(np.full_like(other, 600), claim)):  # outside the vocabulary
        np.savez(entry, **altered)
        assert torch.equal(instruction_train_stream(data_dir, bpe, cache_dir=tmp_path), reference)
    entry.write_bytes(b"not an npz")
    assert torch.equal(instruction_train_stream(data_dir, bpe, cache_dir=tmp_path), reference)
    in_bytes = instruction_train_stream(data_dir, ByteCodec(), cache_dir=tmp_path)
    assert torch.equal(in_bytes, instruction_train_stream(data_dir, ByteCodec()))
    assert len(list((tmp_path / "tokens").glob("instruction-*.npz"))) == 2
