"""bench.grpc_accept refuses a burst it cannot send, by name, before it starts a server."""

from __future__ import annotations

import pytest

from bench.grpc_accept import main


@pytest.mark.parametrize(("argv", "named"), [
    (["--calls", "0"], "--calls must be 1-1000"),
    (["--calls", "1001"], "--calls must be 1-1000"),
    (["--block-ms", "0", "-1"], "--block-ms must be 0-100 ms, got [0.0, -1.0]"),
    (["--block-ms", "250"], "--block-ms must be 0-100 ms"),
])
def test_a_burst_out_of_bounds_is_refused(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
