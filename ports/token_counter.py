"""Port: token counting under one estimate kind, and the registry that hands counters out."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Protocol


class TokenCounter(Protocol):
    @property
    @abstractmethod
    def kind(self) -> str:
        """The estimate kind, e.g. "exact_o200k_base" or "chars_div_4"."""

    @property
    @abstractmethod
    def is_exact(self) -> bool:
        """True when counts are the tokenizer's own, not an estimate."""

    @abstractmethod
    def count(self, text: str) -> int:
        """Number of tokens of ``text`` (0 for ""). Pure and deterministic; never raises."""

    @abstractmethod
    def count_joined(self, parts: Sequence[str]) -> int:
        """Exactly ``count("".join(parts))``. Implementations may add up per-part counts only
        where that is provably equal (e.g. at boundaries their tokenizer never crosses)."""


class TokenCounters(Protocol):
    @abstractmethod
    def for_kind(self, estimate_kind: str) -> TokenCounter:
        """Return the counter for an estimate kind (loaded once per process).

        Raises:
            UnsupportedEstimateKindError: no counter for that kind.
        """
