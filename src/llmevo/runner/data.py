"""Per-tokenization arm data: what an arm is trained and evaluated on (BPE tokens or bytes).

``bpe`` is the BPE-512 token view (or a checkpoint's own BPE tokenizer: ``load_views``); ``bytes`` is the UTF-8 byte view of exactly the same
text spans (for byte-level models such as BLT), with windows of the same text length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from llmevo.data.bytes import byte_stream
from llmevo.data.codec import BPECodec, ByteCodec, TextCodec
from llmevo.data.lm import LMCorpus, load_lm_corpus
from llmevo.data.suites import SuiteData, instruction_train_stream, load_suite
from llmevo.data.tokenizer import TokenizerInfo
from llmevo.runner.presets import Preset


@dataclass
class ArmData:
    """Everything an arm is trained and evaluated on, for one tokenization."""

    codec: TextCodec
    stream: Tensor  # (N,) training token pool
    validation: Tensor
    test: Tensor
    token_bytes: Tensor
    suite_validation: SuiteData
    suite_test: SuiteData
    fingerprint: str
    seq_len: int = 0  # window length in this view's units; 0 means the preset's
    kind: str = "bpe"


def prepare_bpe_data(
    corpus: LMCorpus, preset: Preset, data_dir: Path, seq_len: int
) -> ArmData:
    """BPE tokens: the preset's training parts, validation/test splits and suites."""
    codec = BPECodec(corpus.tokenizer.tokenizer, corpus.tokenizer.special)
    parts: dict[str, Callable[[], Tensor]] = {
        "lm": lambda: corpus.tokens["train"],
        "narrative": lambda: corpus.tokens["narrative"],
        "instruction": lambda: instruction_train_stream(data_dir, codec),
    }
    stream = torch.cat([parts[part]() for part in preset.train_on])
    suite_validation = load_suite(preset.suite, data_dir, codec, seq_len, "validation")
    suite_test = load_suite(preset.suite, data_dir, codec, seq_len, "test")
    return ArmData(
        codec=codec,
        stream=stream,
        validation=corpus.tokens["validation"],
        test=corpus.tokens["test"],
        token_bytes=corpus.token_bytes,
        suite_validation=suite_validation,
        suite_test=suite_test,
        fingerprint=f"{corpus.fingerprint[:32]}+{suite_validation.fingerprint[:16]}",
        seq_len=seq_len,
    )


def prepare_byte_data(
    corpus: LMCorpus, preset: Preset, data_dir: Path, seq_len: int
) -> ArmData:
    """UTF-8 bytes of exactly the text the BPE view covers; windows of the same text length.

    A byte window is ``round(seq_len * bytes_per_token)`` bytes, so one byte window covers
    as much text as one token window and equal steps x batch give equal training bytes.
    """
    codec = ByteCodec()
    byte_len = max(1, round(seq_len * corpus.bytes_per_token("train")))
    parts: dict[str, Callable[[], Tensor]] = {
        "lm": lambda: byte_stream(corpus.texts["train"]),
        "narrative": lambda: byte_stream(corpus.texts["narrative"]),
        "instruction": lambda: instruction_train_stream(data_dir, codec),
    }
    stream = torch.cat([parts[part]() for part in preset.train_on])
    token_bytes = torch.zeros(codec.vocab_size, dtype=torch.int64)
    token_bytes[: ByteCodec.BYTE_COUNT] = 1
    suite_validation = load_suite(preset.suite, data_dir, codec, byte_len, "validation")
    suite_test = load_suite(preset.suite, data_dir, codec, byte_len, "test")
    return ArmData(
        codec=codec,
        stream=stream,
        validation=byte_stream(corpus.texts["validation"]),
        test=byte_stream(corpus.texts["test"]),
        token_bytes=token_bytes,
        suite_validation=suite_validation,
        suite_test=suite_test,
        fingerprint=f"{corpus.fingerprint[:32]}+bytes+{suite_validation.fingerprint[:16]}",
        seq_len=byte_len,
        kind="bytes",
    )


DATA_VIEWS: dict[str, Callable[[LMCorpus, Preset, Path, int], ArmData]] = {
    "bpe": prepare_bpe_data,
    "bytes": prepare_byte_data,
}


def load_views(
    preset: Preset, kinds: Iterable[str], data_dir: Path, cache_dir: Path,
    tokenizer: TokenizerInfo | None = None,
) -> tuple[LMCorpus, Preset, dict[str, ArmData]]:
    """The corpus ``preset`` names, the preset resolved on it (a one-epoch preset gets its
    step count), and one data view per kind in ``kinds`` (``DATA_VIEWS``), each prepared once.
    ``tokenizer``: the BPE view's tokenizer (a checkpoint's own, ``--init-from``) instead of
    llmevo's BPE-512."""
    corpus = load_lm_corpus(data_dir, preset.variant, preset.budgets, cache_dir, tokenizer)
    resolved = preset.resolved(int(corpus.tokens["train"].numel()))
    views = {kind: DATA_VIEWS[kind](corpus, resolved, data_dir, resolved.train.seq_len)
             for kind in dict.fromkeys(kinds)}
    return corpus, resolved, views
