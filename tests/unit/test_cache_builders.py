"""Cache entries built once when several processes start cold together (the jobs of a launched
table): the second builder waits on the first's lock and reads what it wrote. Threads stand in
for processes: ``flock`` locks each opening of the lock file, so threads contend as processes do."""

from __future__ import annotations

import threading
import time

import pytest

from llmevo.artifacts.io import one_builder
from llmevo.data import lm, tokenizer

TEXTS = ["the quick brown fox jumps over the lazy dog " * 40, "a stitch in time saves nine " * 40]


def _race(work, n=2):
    """Run ``work`` in ``n`` threads started together; their results, in order."""
    results: list = [None] * n
    start = threading.Barrier(n)

    def run(i):
        start.wait()
        results[i] = work()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_a_second_builder_enters_only_after_the_first_leaves(tmp_path):
    inside, events = threading.Event(), []

    def first():
        with one_builder(tmp_path / "entry.npz"):
            inside.set()
            time.sleep(0.2)
            events.append("first out")

    def second():
        inside.wait()
        with one_builder(tmp_path / "entry.npz"):
            events.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert events == ["first out", "second in"]
    assert not list(tmp_path.iterdir())  # no lock file is left behind


def test_a_failed_build_leaves_no_lock_file(tmp_path):
    with pytest.raises(RuntimeError), one_builder(tmp_path / "entry.npz"):
        raise RuntimeError("the build failed")
    assert not list(tmp_path.iterdir())


def test_a_folder_that_cannot_hold_the_lock_runs_the_block_unlocked(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    ran = []
    with one_builder(blocker / "entry.npz"):  # its parent is a file: no lock can be made there
        ran.append(True)
    assert ran == [True]


def test_a_tokenizer_two_processes_need_at_once_is_trained_once(tmp_path, monkeypatch):
    calls = []
    train = tokenizer.train_bpe

    def slow_train(*args, **kwargs):
        calls.append(1)
        time.sleep(0.3)  # long enough that an unlocked second caller also misses the cache
        return train(*args, **kwargs)

    monkeypatch.setattr(tokenizer, "train_bpe", slow_train)
    infos = _race(lambda: tokenizer.load_or_train_bpe({"t": "0" * 64}, TEXTS, tmp_path, vocab_size=300))
    assert len(calls) == 1
    assert infos[0].sha256 == infos[1].sha256 and infos[0].path == infos[1].path


def test_a_token_array_two_processes_need_at_once_is_encoded_once(tmp_path, monkeypatch):
    info = tokenizer.load_or_train_bpe({"t": "0" * 64}, TEXTS, tmp_path, vocab_size=300)
    calls = []
    encode = lm.encode_prefix

    def slow_encode(*args, **kwargs):
        calls.append(1)
        time.sleep(0.3)
        return encode(*args, **kwargs)

    monkeypatch.setattr(lm, "encode_prefix", slow_encode)
    results = _race(lambda: lm._cached_encode(info, TEXTS[0], "1" * 64, 100, tmp_path))
    assert len(calls) == 1
    (first, first_end), (second, second_end) = results
    assert first.tolist() == second.tolist() and first_end == second_end
    assert len(first) == 100


@pytest.mark.parametrize("budget", [None, 50])
def test_a_locked_build_gives_what_an_unlocked_encode_gives(tmp_path, budget):
    info = tokenizer.load_or_train_bpe({"t": "0" * 64}, TEXTS, tmp_path, vocab_size=300)
    ids, end = lm._cached_encode(info, TEXTS[1], "2" * 64, budget, tmp_path)
    expected, expected_end = lm.encode_prefix(info, TEXTS[1], budget)
    assert ids.tolist() == list(expected) and end == expected_end
