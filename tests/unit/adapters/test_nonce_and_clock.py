from __future__ import annotations

import secrets
import string
from datetime import UTC, datetime

import pytest

from adapters.secrets_nonce_source import SecretsNonceSource, nonce_length
from adapters.system_clock import SystemClock


@pytest.mark.parametrize("n_bytes", [1, 2, 3, 16, 32, 64])
def test_nonces_are_base62_with_the_reference_length(n_bytes: int) -> None:
    nonce = SecretsNonceSource().new_nonce(n_bytes)
    assert len(nonce) == nonce_length(n_bytes) == len(secrets.token_urlsafe(n_bytes))
    assert set(nonce) <= set(string.ascii_letters + string.digits)


def test_nonces_do_not_repeat_and_use_the_whole_alphabet() -> None:
    source = SecretsNonceSource()
    nonces = {source.new_nonce(16) for _ in range(2000)}
    assert len(nonces) == 2000
    assert set("".join(nonces)) == set(string.ascii_letters + string.digits)


@pytest.mark.parametrize("n_bytes", [0, 65, -1])
def test_out_of_range_nonce_sizes_are_rejected(n_bytes: int) -> None:
    with pytest.raises(ValueError, match="nonce bytes"):
        SecretsNonceSource().new_nonce(n_bytes)


def test_system_clock_is_aware_utc_and_monotonic() -> None:
    clock = SystemClock()
    now = clock.now()
    assert now.tzinfo is UTC and abs((datetime.now(UTC) - now).total_seconds()) < 5
    first, second = clock.monotonic(), clock.monotonic()
    assert second >= first
