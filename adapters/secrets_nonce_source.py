"""Nonces from the operating system's CSPRNG, in base62 (letters and digits only).

A nonce for ``n`` bytes has ``(4n + 2) // 3`` characters — the length of
``secrets.token_urlsafe(n)``, so budgets match the reference — drawn uniformly from 62 symbols
(5.95 bits each: 131 bits for the default 16 bytes). Letters and digits never merge with the
quotes around them when tokenized, and never need escaping.
"""

from __future__ import annotations

import secrets
import string

from ports.nonce_source import NonceSource

ALPHABET = string.ascii_letters + string.digits
_BASE = len(ALPHABET)
MIN_NONCE_BYTES = 1
MAX_NONCE_BYTES = 64


def nonce_length(n_bytes: int) -> int:
    clamped = min(MAX_NONCE_BYTES, max(MIN_NONCE_BYTES, n_bytes))
    return (4 * clamped + 2) // 3


class SecretsNonceSource(NonceSource):
    def new_nonce(self, n_bytes: int) -> str:
        if not MIN_NONCE_BYTES <= n_bytes <= MAX_NONCE_BYTES:
            raise ValueError(f"nonce bytes must be in {MIN_NONCE_BYTES}..{MAX_NONCE_BYTES}, got {n_bytes}")
        length = nonce_length(n_bytes)
        # a uniform integer below 62**length, written in base 62 with exactly ``length`` digits
        value = secrets.randbelow(_BASE**length)
        digits = []
        for _ in range(length):
            value, digit = divmod(value, _BASE)
            digits.append(ALPHABET[digit])
        return "".join(digits)
