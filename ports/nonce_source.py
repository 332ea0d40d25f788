"""Port: unpredictable per-assembly nonces for the memory tags."""

from __future__ import annotations

from abc import abstractmethod
from typing import Protocol


class NonceSource(Protocol):
    @abstractmethod
    def new_nonce(self, n_bytes: int) -> str:
        """A fresh nonce carrying ``n_bytes`` bytes of entropy, made of ASCII letters and digits
        only, ``(4 * n_bytes + 2) // 3`` characters long (the length of ``secrets.token_urlsafe(n_bytes)``)."""
