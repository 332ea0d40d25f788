"""Port: the text profile of a memory's content (its words and terms, ``domain.relevance``)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Protocol

from domain.relevance import TextProfile


class TextProfiles(Protocol):
    @abstractmethod
    def profile(self, text: str) -> TextProfile:
        """Exactly ``domain.relevance.profile(text)``; an implementation may cache it."""
