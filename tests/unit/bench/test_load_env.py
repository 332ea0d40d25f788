"""bench.load's arguments: --env (extra environment for the serve process), the step searches' bounds."""

from __future__ import annotations

import pytest

from bench.load import extra_env, main


def test_env_pairs_become_a_dict_and_later_ones_win() -> None:
    assert extra_env(["OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "A=1=2", "A=3", "EMPTY="]) == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "A": "3", "EMPTY": ""}


@pytest.mark.parametrize("bad", ["NOVALUE", "=x"])
def test_a_pair_without_a_key_or_equals_sign_is_refused(bad: str) -> None:
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        extra_env([bad])


@pytest.mark.parametrize(("argv", "named"), [
    (["--step-floors", "--no-step"], "--step-floors needs"),
    (["--step-floors", "--no-floors"], "--step-floors needs"),
    (["--floor-step", "0"], "--floor-step must be > 0"),
    (["--step", "-10"], "--floor-step must be > 0, got 300, -10, 100"),
    (["--step-from", "60", "--step-to", "40"], "--step-to must be at least --step-from, got 40 < 60"),
])
def test_a_step_search_that_cannot_run_is_refused_before_anything_starts(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
