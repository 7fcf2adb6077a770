"""``DataView.largest_token``: the largest token id over every tensor a view holds, found once
(the vocabulary check before training reads it for every arm)."""

from __future__ import annotations

import dataclasses

import torch

from llmevo.runner.views import DataView


def view(**tensors: torch.Tensor) -> DataView:
    empty = torch.zeros(0, dtype=torch.long)
    parts = {"stream": empty, "validation": empty, "test": empty} | tensors
    sources = {name[len("source_"):]: t for name, t in tensors.items() if name.startswith("source_")}
    return DataView(codec=None, stream=parts["stream"], validation=parts["validation"],  # type: ignore[arg-type]
                    test=parts["test"], token_bytes=empty, suite_validation=None,  # type: ignore[arg-type]
                    suite_test=None, fingerprint="f", sources=sources)  # type: ignore[arg-type]


def test_the_largest_id_over_stream_sources_validation_and_test():
    assert view(stream=torch.tensor([3, 9, 4]), validation=torch.tensor([2])).largest_token() == 9
    assert view(stream=torch.tensor([3]), test=torch.tensor([11])).largest_token() == 11
    assert view(stream=torch.tensor([3]), source_sft=torch.tensor([40, 1])).largest_token() == 40
    assert view().largest_token() == -1  # nothing to check against


def test_it_is_found_once_per_view_and_a_replaced_view_finds_its_own():
    first = view(stream=torch.tensor([3, 9]))
    assert first.largest_token() == 9
    first.stream[1] = 100  # not rescanned: the view's tensors are not meant to change in place
    assert first.largest_token() == 9
    assert dataclasses.replace(first, validation=torch.tensor([50])).largest_token() == 100
