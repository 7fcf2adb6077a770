"""Perplexity-based quality filtering: keep the training chunks a small reference language
model finds most like its held-out reference text.

CCNet (Wenzek et al., "CCNet: Extracting High Quality Monolingual Datasets from Web Crawl
Data", arXiv 1911.00359, section 3.3) trains a 5-gram Kneser-Ney model (KenLM) on Wikipedia
and ranks every web paragraph by its perplexity under it, keeping the low-perplexity
("head") part. Here the reference model is an add-k smoothed token *bigram* model trained
on a held-out slice of the TRAIN split — the last ``reference_share`` of the WikiText-2
training source ``lm`` — which is then left out of the pool, so no chunk is scored by a
model that saw it. Validation and test are never read.

The pool is the preset's training sources (``train_on``; ``lm`` without its reference
slice), each cut into chunks of ``chunk`` tokens (a trailing partial chunk is dropped). A
chunk's score is its mean negative log-likelihood per transition under the bigram,
``-mean log p(x[i+1] | x[i])`` over its ``chunk - 1`` inner transitions, with
``p(b | a) = (C[a, b] + k) / (C[a] + k V)`` (``k`` = ``smoothing``, ``V`` the largest token
id in the sources + 1, ``C`` the reference slice's counts). The ``keep`` fraction of
chunks with the lowest scores (ties: the earlier chunk) is kept in its original order and
concatenated; windows are uniform over that (``WindowSampler``), so the budget stays equal
tokens (steps x batch x seq_len) and windows may cross from one kept chunk into the next,
as they cross sources in ``concat``.

Why a bigram and not a small transformer: it is what CCNet's model class (a count-based
n-gram) reduces to at this vocabulary (512 BPE tokens) and corpus size (~2M tokens), it is
exact and deterministic (no training run, no seed), takes well under a second, and an
independent implementation in plain Python checks it token by token.

Reference test (tests/reference/test_data_recipes_reference.py): the scores and the kept
stream against a plain-Python implementation (dictionary counts, ``math.log``) on a small
corpus; the reference slice never reaches the kept stream.

Deviations: a bigram instead of a 5-gram Kneser-Ney; fixed-length chunks instead of
paragraphs; one reference slice of the training split instead of Wikipedia; a kept
fraction instead of CCNet's head/middle/tail terciles.
"""

from __future__ import annotations

import torch
from pydantic import Field, PositiveFloat, PositiveInt
from torch import Tensor

from llmevo.components.data.base import DataRecipe, TrainSources, Windows, WindowSampler
from llmevo.errors import ConfigError
from llmevo.registry import Paper, SearchDimension, StrictModel, register


class PerplexityFilterConfig(StrictModel):
    keep: float = Field(default=0.5, gt=0.0, le=1.0, description="Fraction of chunks kept.")
    chunk: PositiveInt = Field(default=128, ge=2, description="Tokens per scored chunk.")
    reference_share: float = Field(default=0.1, gt=0.0, lt=1.0,
                                   description="The last share of the lm source that trains the reference model.")
    smoothing: PositiveFloat = 0.1  # add-k


class Bigram:
    """An add-k bigram model counted on ``reference``: log p(b | a) = log((n(a, b) + k) /
    (n(a) + k·V)). The pair counts are kept sparse (the distinct pairs, sorted), not as a V x V
    table: at a 30k-id vocabulary the dense table is 7 GB of float64."""

    def __init__(self, reference: Tensor, vocab: int, smoothing: float):
        self.vocab, self.smoothing = vocab, smoothing
        self.pairs, counts = torch.unique(reference[:-1] * vocab + reference[1:], return_counts=True)
        self.pair_counts = counts.double()  # (P,) for the sorted distinct pair codes
        self.totals = torch.bincount(reference[:-1], minlength=vocab).double()  # (V,) n(a)

    def log_probs(self, first: Tensor, second: Tensor) -> Tensor:
        """log p(second | first), elementwise over two equal-shape id tensors."""
        query = first * self.vocab + second  # the reference holds >= 2 tokens: pairs never empty
        where = torch.searchsorted(self.pairs, query).clamp(max=self.pairs.numel() - 1)
        counts = torch.where(self.pairs[where] == query, self.pair_counts[where], 0.0)
        return torch.log((counts + self.smoothing) / (self.totals[first] + self.smoothing * self.vocab))


def chunk_scores(chunks: Tensor, model: Bigram) -> Tensor:
    """(n,) mean negative log-likelihood per inner transition of each (n, c) chunk."""
    transitions = model.log_probs(chunks[:, :-1], chunks[:, 1:])  # (n, c - 1)
    return -transitions.mean(dim=1)


def split_reference(sources: TrainSources, share: float) -> tuple[Tensor, Tensor]:
    """(lm without its reference slice, the reference slice: the last ``share`` of lm)."""
    lm = sources.get("lm")
    cut = lm.numel() - max(2, int(round(lm.numel() * share)))
    if cut < 2:
        raise ConfigError(f"the lm source has {lm.numel()} tokens; too few to hold out a reference slice")
    return lm[:cut], lm[cut:]


def filtered_pool(sources: TrainSources, config: PerplexityFilterConfig) -> tuple[Tensor, Tensor]:
    """(the kept chunks concatenated in order, the per-chunk scores of the whole pool)."""
    pool_lm, reference = split_reference(sources, config.reference_share)
    parts = [pool_lm if name == "lm" else sources.get(name) for name in sources.default]
    vocab = int(max(int(part.max()) for part in sources.parts.values() if part.numel())) + 1
    model = Bigram(reference, vocab, config.smoothing)
    chunks = torch.cat([part[: part.numel() // config.chunk * config.chunk].view(-1, config.chunk)
                        for part in parts])  # (n, c)
    if chunks.shape[0] == 0:
        raise ConfigError(f"the training sources hold no chunk of {config.chunk} tokens")
    scores = chunk_scores(chunks, model)
    kept_count = max(1, int(round(chunks.shape[0] * config.keep)))
    order = torch.argsort(scores, stable=True)[:kept_count]  # lowest first; ties: earlier chunk
    kept = chunks[torch.sort(order).values].reshape(-1)
    return kept, scores


@register(
    slot="data",
    name="ppl_filter",
    config=PerplexityFilterConfig,
    paper=Paper(
        arxiv_id="1911.00359",
        title="CCNet: Extracting High Quality Monolingual Datasets from Web Crawl Data",
        url="https://arxiv.org/abs/1911.00359",
        organization="Facebook AI",
    ),
    ablation="concat",
    implementation_status="integrated",
    evolve_integrated=True,
    scope=("Chunks of the training sources ranked by perplexity under an add-k bigram trained "
           "on a held-out tenth of the WikiText-2 train split; the lowest-perplexity half kept, "
           "at equal tokens. CCNet's 5-gram KenLM, paragraphs and web data are not used."),
    search_space={"keep": SearchDimension(choices=(0.33, 0.5, 0.75))},
)
class PerplexityFilter(DataRecipe):
    config: PerplexityFilterConfig

    def __init__(self, config: PerplexityFilterConfig):
        super().__init__(config)
        self._kept: tuple[TrainSources, Tensor] | None = None  # the last sources, their kept stream

    def kept(self, sources: TrainSources) -> Tensor:
        if self._kept is None or self._kept[0] is not sources:
            self._kept = (sources, filtered_pool(sources, self.config)[0])
        return self._kept[1]

    def pool_tokens(self, sources: TrainSources) -> int:
        return int(self.kept(sources).numel())

    def windows(self, sources: TrainSources, batch_size: int, seq_len: int, seed: int,
                steps: int) -> Windows:
        return WindowSampler(self.kept(sources), batch_size, seq_len, seed)
