"""Length heuristics: chars_div_4 and runes_div_3_5 (reference estimate.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.token_counters.heuristic import CharsDiv4Counter, RunesDiv35Counter


@pytest.mark.parametrize(
    ("text", "expected"), [("", 0), ("abcd", 1), ("abcde", 2), ("a" * 8, 2), ("a" * 9, 3)]
)
def test_chars_div_4_is_the_ceiling_of_a_quarter_of_the_length(text: str, expected: int) -> None:
    assert CharsDiv4Counter().count(text) == expected


@pytest.mark.parametrize(("text", "expected"), [("", 0), ("hello", 2), ("abcdefg", 2), ("abcdefgh", 3)])
def test_runes_div_3_5_is_the_ceiling_of_length_over_three_and_a_half(text: str, expected: int) -> None:
    assert RunesDiv35Counter().count(text) == expected


def test_lengths_are_counted_in_code_points_not_bytes() -> None:
    text = "日本語の文"  # 5 code points, 15 UTF-8 bytes
    assert CharsDiv4Counter().count(text) == 2
    assert RunesDiv35Counter().count(text) == 2
    assert CharsDiv4Counter().count("😀😀😀😀😀") == 2


def test_heuristic_counters_report_their_kind_and_are_not_exact() -> None:
    assert (CharsDiv4Counter().kind, RunesDiv35Counter().kind) == ("chars_div_4", "runes_div_3_5")


@given(st.text(max_size=300))
def test_heuristics_match_their_real_valued_formulas(text: str) -> None:
    assert CharsDiv4Counter().count(text) == math.ceil(len(text) / 4)
    assert RunesDiv35Counter().count(text) == math.ceil(len(text) * 2 / 7)
