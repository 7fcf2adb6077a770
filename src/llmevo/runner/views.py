"""Per-tokenization arm data: what an arm is trained and evaluated on (BPE tokens or bytes).

``bpe`` is the BPE-512 token view (or a checkpoint's own BPE tokenizer: ``load_views``); ``bytes`` is the UTF-8 byte view of exactly the same
text spans (for byte-level models such as BLT), with windows of the same text length.

Each view holds every training source (``sources``: ``lm``, ``narrative``, ``instruction``;
the train split only, never validation or test) and ``stream``, the preset's ``train_on``
sources concatenated (the ``concat`` recipe). ``arm_stream`` binds an arm's data recipe to
them: what the trainer draws windows from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from llmevo.components.data.base import DataRecipe, TrainSources, TrainStream
from llmevo.data.bytes import byte_stream
from llmevo.data.codec import BPECodec, ByteCodec, TextCodec
from llmevo.data.lm import LMCorpus, load_lm_corpus
from llmevo.data.suites import SuiteData, instruction_train_stream, load_suite
from llmevo.data.tokenizer import TokenizerInfo
from llmevo.runner.presets import Preset


@dataclass
class DataView:
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
    sources: dict[str, Tensor] = field(default_factory=dict)  # every training source (SOURCES), train split only
    train_on: tuple[str, ...] = ("lm",)  # the preset's sources, in the order ``stream`` concatenates them

    def train_sources(self) -> TrainSources:
        """The training sources as data recipes see them (the same tensors, held once)."""
        if self._sources is None:
            parts = self.sources or {part: self.stream for part in self.train_on[:1]}
            self._sources = TrainSources(parts=parts, default=self.train_on, stream=self.stream)
        return self._sources

    def largest_token(self) -> int:
        """The largest token id the view holds (training stream and sources, validation, test;
        -1 when all are empty), found once per view: every arm's vocabulary is checked against
        it (``runner.run.check_fits_data``), and a full scan of the tensors per arm was a
        measurable part of a warm smoke run's fixed cost under load."""
        if self._largest is None:
            tensors = (self.stream, *self.sources.values(), self.validation, self.test)
            self._largest = max((int(t.max()) for t in tensors if t.numel()), default=-1)
        return self._largest

    _sources: TrainSources | None = field(default=None, init=False, repr=False, compare=False)
    _largest: int | None = field(default=None, init=False, repr=False, compare=False)


def recipe_fingerprint(data: DataView, recipe: DataRecipe) -> str:
    """The data fingerprint of an arm: the view's, followed for a recipe other than
    ``concat`` by 16 hex digits of the sha256 of the recipe's identity (name and full config)."""
    identity = TrainStream(data.train_sources(), recipe).identity()
    if not identity:
        return data.fingerprint
    return f"{data.fingerprint}+{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def arm_stream(recipe: DataRecipe, data: DataView) -> TrainStream:
    """What an arm trains on: ``recipe`` (``catalog.build_recipe``) over ``data``'s sources."""
    return TrainStream(data.train_sources(), recipe)


def prepare_bpe_data(
    corpus: LMCorpus, preset: Preset, data_dir: Path, seq_len: int, cache_dir: Path | None = None,
) -> DataView:
    """BPE tokens: the preset's training parts, validation/test splits and suites (the
    instruction part's ids kept in ``cache_dir`` when given)."""
    codec = BPECodec(corpus.tokenizer.tokenizer, corpus.tokenizer.special)
    sources = {
        "lm": corpus.tokens["train"],
        "narrative": corpus.tokens["narrative"],
        "instruction": instruction_train_stream(data_dir, codec, cache_dir=cache_dir),
    }
    stream = torch.cat([sources[part] for part in preset.train_on])
    suite_validation = load_suite(preset.suite, data_dir, codec, seq_len, "validation")
    suite_test = load_suite(preset.suite, data_dir, codec, seq_len, "test")
    return DataView(
        codec=codec,
        stream=stream,
        validation=corpus.tokens["validation"],
        test=corpus.tokens["test"],
        token_bytes=corpus.token_bytes,
        suite_validation=suite_validation,
        suite_test=suite_test,
        fingerprint=f"{corpus.fingerprint[:32]}+{suite_validation.fingerprint[:16]}",
        seq_len=seq_len,
        sources=sources,
        train_on=tuple(preset.train_on),
    )


def prepare_byte_data(
    corpus: LMCorpus, preset: Preset, data_dir: Path, seq_len: int, cache_dir: Path | None = None,
) -> DataView:
    """UTF-8 bytes of exactly the text the BPE view covers; windows of the same text length.

    A byte window is ``round(seq_len * bytes_per_token)`` bytes, so one byte window covers
    as much text as one token window and equal steps x batch give equal training bytes.
    """
    codec = ByteCodec()
    byte_len = max(1, round(seq_len * corpus.bytes_per_token("train")))
    sources = {
        "lm": byte_stream(corpus.texts["train"]),
        "narrative": byte_stream(corpus.texts["narrative"]),
        "instruction": instruction_train_stream(data_dir, codec, cache_dir=cache_dir),
    }
    stream = torch.cat([sources[part] for part in preset.train_on])
    token_bytes = torch.zeros(codec.vocab_size, dtype=torch.int64)
    token_bytes[: ByteCodec.BYTE_COUNT] = 1
    suite_validation = load_suite(preset.suite, data_dir, codec, byte_len, "validation")
    suite_test = load_suite(preset.suite, data_dir, codec, byte_len, "test")
    return DataView(
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
        sources=sources,
        train_on=tuple(preset.train_on),
    )


DATA_VIEWS: dict[str, Callable[[LMCorpus, Preset, Path, int, Path | None], DataView]] = {
    "bpe": prepare_bpe_data,
    "bytes": prepare_byte_data,
}


def load_views(
    preset: Preset, kinds: Iterable[str], data_dir: Path, cache_dir: Path,
    tokenizer: TokenizerInfo | None = None,
) -> tuple[LMCorpus, Preset, dict[str, DataView]]:
    """The corpus ``preset`` names, the preset resolved on it (a one-epoch preset gets its
    step count), and one data view per kind in ``kinds`` (``DATA_VIEWS``), each prepared once.
    ``tokenizer``: the BPE view's tokenizer (a checkpoint's own, ``--init-from``) instead of
    llmevo's BPE-512."""
    corpus = load_lm_corpus(data_dir, preset.variant, preset.budgets, cache_dir, tokenizer)
    resolved = preset.resolved(int(corpus.tokens["train"].numel()))
    views = {kind: DATA_VIEWS[kind](corpus, resolved, data_dir, resolved.train.seq_len, cache_dir)
             for kind in dict.fromkeys(kinds)}
    return corpus, resolved, views
