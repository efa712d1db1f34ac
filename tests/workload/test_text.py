from __future__ import annotations

import pytest

from orchestrator.workload.text import WORD_POOL, TextSizer, words_for


def test_word_stream_is_reproducible_and_key_dependent():
    stream_a, stream_b = words_for("s1-j1:3"), words_for("s1-j1:3")
    a = [next(stream_a) for _ in range(50)]
    assert a == [next(stream_b) for _ in range(50)]
    other = words_for("s1-j1:4")
    assert a != [next(other) for _ in range(50)]
    assert set(a) <= set(WORD_POOL)


def _subword_measure(text: str) -> int:
    """A tokenizer stand-in whose cost is not one token per word: long words split in two, ':' is its own."""
    return sum(2 if len(word) > 6 else 1 for word in text.split()) + text.count(":")


@pytest.mark.parametrize("target", [15, 100, 1333, 2730])
def test_sizer_hits_targets_under_a_non_word_level_measure(target):
    text = TextSizer(_subword_measure).text("[job:turn1:abcdef12]", f"k{target}", target)
    assert abs(_subword_measure(text) - target) <= 1


def test_sizer_never_drops_the_header_even_when_the_target_is_smaller():
    text = TextSizer(_subword_measure).text("[job-1:turn1:abcdef12]", "k", 1)
    assert text.startswith("[job-1:turn1:abcdef12]")
