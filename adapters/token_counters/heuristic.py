"""Character-length token estimates for families without a public tokenizer."""

from __future__ import annotations

from collections.abc import Sequence

from ports.token_counter import TokenCounter

CHARS_DIV_4 = "chars_div_4"
RUNES_DIV_3_5 = "runes_div_3_5"


class CharsDiv4Counter(TokenCounter):
    """ceil(code points / 4); 0 for ""."""

    @property
    def kind(self) -> str:
        return CHARS_DIV_4

    def count(self, text: str) -> int:
        return (len(text) + 3) // 4

    def count_each(self, texts: Sequence[str]) -> tuple[int, ...]:
        return tuple([(len(text) + 3) // 4 for text in texts])


class RunesDiv35Counter(TokenCounter):
    """ceil(code points / 3.5) in integer form, (n * 2 + 6) // 7; 0 for ""."""

    @property
    def kind(self) -> str:
        return RUNES_DIV_3_5

    def count(self, text: str) -> int:
        return (len(text) * 2 + 6) // 7

    def count_each(self, texts: Sequence[str]) -> tuple[int, ...]:
        return tuple([(len(text) * 2 + 6) // 7 for text in texts])
