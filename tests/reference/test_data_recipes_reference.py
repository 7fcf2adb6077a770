"""Data recipes (the ``data`` slot) against independent references: the window draws of
``concat``, ``mixture`` and ``curriculum`` against what their formulas say, the perplexity
filter against a plain-Python bigram model, and the trainer's hash against one recomputed
by hand."""

from __future__ import annotations

import hashlib
import math
from collections import Counter

import pytest
import torch
from torch import nn

from llmevo.catalog import build_optimizer, build_recipe
from llmevo.components.data.base import SOURCES, TrainSources, TrainStream, WindowSampler
from llmevo.components.data.curriculum import CurriculumConfig, weights_at
from llmevo.components.data.quality import PerplexityFilterConfig, filtered_pool
from llmevo.registry import ComponentChoice
from llmevo.train.trainer import TrainConfig, train

SEQ = 8
# each source's ids tell which source and which offset a token is: source s, offset i -> s * 10_000 + i
LENGTHS = {"lm": 5_000, "narrative": 3_000, "instruction": 400}


def tagged_sources(default: tuple[str, ...] = ("lm", "narrative", "instruction")) -> TrainSources:
    parts = {name: torch.arange(LENGTHS[name]) + 10_000 * index for index, name in enumerate(SOURCES)}
    return TrainSources(parts=parts, default=default, stream=torch.cat([parts[n] for n in default]))


def source_of(window: torch.Tensor) -> str:
    """The one source a window lies in, asserting it is one contiguous slice of it."""
    index = int(window[0]) // 10_000
    assert torch.equal(window, torch.arange(int(window[0]), int(window[0]) + window.numel())), \
        "a window must be one contiguous slice of one source"
    assert int(window[-1]) - 10_000 * index < LENGTHS[SOURCES[index]]
    return SOURCES[index]


def draw(recipe: str, steps: int, batch: int = 16, seed: int = 7, sources: TrainSources | None = None):
    component = build_recipe(ComponentChoice.parse(recipe))
    windows = component.windows(sources or tagged_sources(), batch, SEQ, seed, steps)
    return [windows.next() for _ in range(steps)]  # each (B, T + 1)


def test_concat_is_the_bare_stream_sampler():
    sources = tagged_sources()
    ours = draw("concat", 5, sources=sources)
    reference = WindowSampler(torch.cat([sources.parts[n] for n in sources.default]), 16, SEQ, 7)
    for batch in ours:
        assert torch.equal(batch, reference.next())


def _binomial_bound(n: int, p: float) -> float:
    return 5.0 * math.sqrt(n * p * (1 - p)) + 1  # 5 sigma: fails by chance < 1e-6


def test_mixture_draws_whole_windows_from_sources_in_proportion_to_the_weights():
    batches = draw("mixture:lm=0.5,narrative=0.3,instruction=0.2", steps=200)
    counts = Counter(source_of(window) for batch in batches for window in batch)
    n = sum(counts.values())
    for name, weight in zip(SOURCES, (0.5, 0.3, 0.2), strict=True):
        assert abs(counts[name] - n * weight) < _binomial_bound(n, weight), (name, counts)


def test_mixture_weights_are_normalised_and_a_zero_weight_is_never_drawn():
    batches = draw("mixture:lm=3,narrative=1,instruction=0", steps=200)
    counts = Counter(source_of(window) for batch in batches for window in batch)
    n = sum(counts.values())
    assert counts["instruction"] == 0
    assert abs(counts["lm"] - 0.75 * n) < _binomial_bound(n, 0.75)


def test_mixture_draws_are_a_function_of_the_seed_alone():
    a = draw("mixture", steps=10, seed=3)
    b = draw("mixture", steps=10, seed=3)
    c = draw("mixture", steps=10, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))
    assert all(batch.shape == (16, SEQ + 1) for batch in a)  # equal tokens whatever the recipe


def test_curriculum_weights_follow_the_linear_formula():
    config = CurriculumConfig(start_lm=1, start_narrative=0, start_instruction=0,
                              end_lm=0.2, end_narrative=0.5, end_instruction=0.3)
    steps = 11
    for step in range(steps):
        t = step / 10
        expected = [(1 - t) * 1 + t * 0.2, t * 0.5, t * 0.3]
        assert weights_at(config, step, steps).tolist() == pytest.approx(expected, abs=1e-12)
    assert weights_at(config, 0, 1).tolist() == [1.0, 0.0, 0.0]  # a one-step run stays at start


def test_curriculum_moves_the_share_from_start_to_end():
    recipe = ("curriculum:start_lm=1,start_narrative=0,start_instruction=0,"
              "end_lm=0,end_narrative=1,end_instruction=0")
    steps = 400
    batches = draw(recipe, steps=steps, batch=8)
    assert {source_of(w) for w in batches[0]} == {"lm"}
    assert {source_of(w) for w in batches[-1]} == {"narrative"}
    for quarter in range(4):  # narrative share over each quarter = mean of t over its steps
        chosen = range(quarter * 100, (quarter + 1) * 100)
        expected = sum(s / (steps - 1) for s in chosen) / 100
        n = 100 * 8
        got = sum(source_of(w) == "narrative" for s in chosen for w in batches[s])
        assert abs(got - n * expected) < _binomial_bound(n, expected), (quarter, got, n * expected)


# --- the perplexity filter against a plain-Python bigram model ------------------------------


def reference_filter(parts: dict[str, list[int]], default: tuple[str, ...], keep: float,
                     chunk: int, share: float, k: float) -> tuple[list[int], list[float]]:
    lm = parts["lm"]
    held = max(2, int(round(len(lm) * share)))
    pool_lm, reference = lm[: len(lm) - held], lm[len(lm) - held:]
    vocab = max(max(p) for p in parts.values() if p) + 1
    pairs = Counter(zip(reference[:-1], reference[1:], strict=True))
    firsts = Counter(reference[:-1])
    chunks = []
    for name in default:
        tokens = pool_lm if name == "lm" else parts[name]
        chunks += [tokens[i:i + chunk] for i in range(0, len(tokens) - chunk + 1, chunk)]
    scores = []
    for piece in chunks:
        nll = [-math.log((pairs[(a, b)] + k) / (firsts[a] + k * vocab))
               for a, b in zip(piece[:-1], piece[1:], strict=True)]
        scores.append(sum(nll) / len(nll))
    count = max(1, int(round(len(chunks) * keep)))
    ranked = sorted(range(len(chunks)), key=lambda i: (scores[i], i))[:count]
    kept = [token for i in sorted(ranked) for token in chunks[i]]
    return kept, scores


def test_perplexity_filter_matches_a_plain_python_bigram_model():
    generator = torch.Generator().manual_seed(0)
    # lm: a repetitive "clean" text (its reference slice too); narrative: uniform noise
    pattern = torch.tensor([1, 2, 3, 4, 5, 2, 3, 1])
    lm = torch.cat([pattern.repeat(60), torch.randint(0, 12, (100,), generator=generator),
                    pattern.repeat(30)])
    narrative = torch.randint(0, 12, (400,), generator=generator)
    instruction = torch.cat([pattern.repeat(10), torch.randint(0, 12, (40,), generator=generator)])
    parts = {"lm": lm, "narrative": narrative, "instruction": instruction}
    sources = TrainSources(parts=parts, default=("lm", "narrative", "instruction"),
                           stream=torch.cat(list(parts.values())))
    config = PerplexityFilterConfig(keep=0.4, chunk=16, reference_share=0.3, smoothing=0.5)
    kept, scores = filtered_pool(sources, config)
    ref_kept, ref_scores = reference_filter({n: p.tolist() for n, p in parts.items()}, sources.default,
                                            0.4, 16, 0.3, 0.5)
    assert scores.tolist() == pytest.approx(ref_scores, rel=1e-12)
    assert kept.tolist() == ref_kept
    assert len(ref_kept) // 16 == round(len(scores) * 0.4)
    # the noise scores worse than the pattern its reference slice holds: no noise chunk is kept
    noise_chunks = {tuple(narrative[i:i + 16].tolist()) for i in range(0, 400, 16)}
    kept_chunks = {tuple(kept[i:i + 16].tolist()) for i in range(0, kept.numel(), 16)}
    assert not noise_chunks & kept_chunks


def test_perplexity_filter_never_keeps_its_reference_slice():
    sources = tagged_sources(default=("lm",))  # every token id unique: membership is exact
    config = PerplexityFilterConfig(keep=1.0, chunk=10, reference_share=0.2)
    kept, _ = filtered_pool(sources, config)
    lm = sources.parts["lm"]
    reference = set(lm[len(lm) - round(len(lm) * 0.2):].tolist())
    assert not reference & set(kept.tolist())
    assert kept.tolist() == lm[: len(lm) - len(reference)].tolist()  # keep=1: the rest, in order


# --- the trainer's token-stream hash covers the recipe --------------------------------------


class _Tiny(nn.Module):
    def __init__(self, vocab: int = 30_000, width: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))  # (B, T, V)


def _train(stream, seed: int = 5):
    config = TrainConfig(steps=3, batch_size=4, seq_len=SEQ, lr=1e-2)
    torch.manual_seed(0)
    return train(_Tiny(), stream, config, seed, torch.device("cpu"),
                 build_optimizer(ComponentChoice(name="adamw")))


def test_the_hash_of_concat_is_the_bare_streams_and_a_recipe_prefixes_its_identity():
    sources = tagged_sources()
    bare = _train(sources.stream)
    concat = _train(TrainStream(sources, build_recipe(ComponentChoice(name="concat"))))
    assert concat.token_stream_sha256 == bare.token_stream_sha256
    recipe = build_recipe(ComponentChoice.parse("mixture:lm=0.5,narrative=0.5,instruction=0"))
    mixed = _train(TrainStream(sources, recipe))
    windows = recipe.windows(sources, 4, SEQ, 5, 3)
    digest = hashlib.sha256(f"recipe:{recipe.identity()}\n".encode())
    for _ in range(3):
        digest.update(windows.next().numpy().tobytes())
    assert mixed.token_stream_sha256 == digest.hexdigest()
    assert mixed.tokens_seen == bare.tokens_seen == 3 * 4 * SEQ  # equal tokens
    # the same windows under another config of the recipe hash differently
    assert recipe.identity() != build_recipe(ComponentChoice.parse("mixture:lm=1")).identity()
