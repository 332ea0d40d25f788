"""Token counters for domain unit tests (the real ones live in adapters/token_counters)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from domain.model.errors import UnsupportedEstimateKindError
from ports.token_counter import TokenCounter, TokenCounters


class CharsDiv4Counter(TokenCounter):
    """ceil(len / 4): the reference estimate, handy for hand-computed expectations."""

    def __init__(self, kind: str = "chars_div_4") -> None:
        self._kind = kind

    @property
    def kind(self) -> str:
        return self._kind

    def count(self, text: str) -> int:
        return math.ceil(len(text) / 4) if text else 0

    def count_each(self, texts: Sequence[str]) -> tuple[int, ...]:
        return tuple(self.count(text) for text in texts)


class StaticCounters(TokenCounters):
    def __init__(self, *counters: TokenCounter) -> None:
        self._by_kind = {c.kind: c for c in counters}

    def for_kind(self, estimate_kind: str) -> TokenCounter:
        try:
            return self._by_kind[estimate_kind]
        except KeyError:
            raise UnsupportedEstimateKindError(f"no token counter for {estimate_kind!r}") from None
