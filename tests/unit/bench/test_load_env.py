"""bench.load --env: extra environment for the serve process."""

from __future__ import annotations

import pytest

from bench.load import extra_env


def test_env_pairs_become_a_dict_and_later_ones_win() -> None:
    assert extra_env(["OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "A=1=2", "A=3", "EMPTY="]) == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "A": "3", "EMPTY": ""}


@pytest.mark.parametrize("bad", ["NOVALUE", "=x"])
def test_a_pair_without_a_key_or_equals_sign_is_refused(bad: str) -> None:
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        extra_env([bad])
