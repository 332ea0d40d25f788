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

    @abstractmethod
    def count(self, text: str) -> int:
        """Number of tokens of ``text`` (0 for ""). Pure and deterministic; never raises."""

    @abstractmethod
    def count_each(self, texts: Sequence[str]) -> tuple[int, ...]:
        """``tuple(count(t) for t in texts)``: one call to price many texts (the candidates'
        memory elements); an implementation may share work between them."""


class TokenCounters(Protocol):
    @abstractmethod
    def for_kind(self, estimate_kind: str) -> TokenCounter:
        """Return the counter for an estimate kind (loaded once per process).

        Raises:
            UnsupportedEstimateKindError: no counter for that kind.
        """
