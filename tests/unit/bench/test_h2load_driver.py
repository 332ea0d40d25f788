"""bench.h2load_driver: the command lines of a run, staggered (one process per connection) or aligned."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.h2load_driver import METHOD_PATH, Request, Target, commands, parse_log

TARGET = Target("h2load", "127.0.0.1:9", Path("/tmp/body.bin"), deadline_ms=45.0)


def _option(line: list[str], name: str) -> str:
    return line[line.index(name) + 1]


def test_staggered_runs_one_single_connection_process_per_connection_sharing_the_rate() -> None:
    logs = [Path(f"/tmp/run-{i}.log") for i in range(4)]
    lines = commands(TARGET, 60.0, 20.0, 4, "staggered", logs)
    assert len(lines) == 4
    for line, log in zip(lines, logs, strict=True):
        assert line[:2] == ["h2load", f"http://127.0.0.1:9{METHOD_PATH}"]
        assert _option(line, "-c") == "1"
        assert "--rps=15" in line  # 60 req/s over 4 connections
        assert f"--log-file={log}" in line
        assert _option(line, "-D") == "20"
        assert "grpc-timeout: 45m" in line


def test_aligned_runs_one_process_with_every_connection() -> None:
    lines = commands(TARGET, 60.0, 20.0, 4, "aligned", [Path("/tmp/run-0.log")])
    assert len(lines) == 1
    assert _option(lines[0], "-c") == "4"
    assert "--rps=15" in lines[0]


def test_no_deadline_sends_no_grpc_timeout() -> None:
    line = commands(Target("h2load", "a:1", Path("b")), 10.0, 1.0, 1, "staggered", [Path("l")])[0]
    assert not any(part.startswith("grpc-timeout") for part in line)


@pytest.mark.parametrize(("arrivals", "connections", "rate", "logs", "message"), [
    ("poisson", 4, 60.0, 4, "arrivals must be one of staggered, aligned"),
    ("staggered", 0, 60.0, 0, "at least one connection"),
    ("staggered", 2, 0.0, 2, "positive rate"),
    ("staggered", 4, 60.0, 1, "4 log paths needed, got 1"),
])
def test_a_bad_run_is_refused_with_what_is_wrong(arrivals: str, connections: int, rate: float, logs: int,
                                                 message: str) -> None:
    with pytest.raises(ValueError, match=message):
        commands(TARGET, rate, 1.0, connections, arrivals, [Path(f"l{i}") for i in range(logs)])


def test_a_log_line_is_start_status_latency_and_other_lines_are_skipped() -> None:
    text = "1764626400000000\t200\t1500\n\n1764626400250000\t503\t20000\nprogress: 10% done\n"
    assert parse_log(text) == [Request(1764626400.0, 200, 1.5), Request(1764626400.25, 503, 20.0)]
