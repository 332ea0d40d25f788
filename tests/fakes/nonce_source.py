"""A nonce source that returns a fixed nonce (golden-output tests)."""

from __future__ import annotations

from ports.nonce_source import NonceSource


class FixedNonceSource(NonceSource):
    def __init__(self, nonce: str = "test-nonce-0001") -> None:
        self.nonce = nonce
        self.calls = 0

    def new_nonce(self, n_bytes: int) -> str:
        self.calls += 1
        return self.nonce
