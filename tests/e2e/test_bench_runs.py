"""The benchmarks stay runnable: each is run end to end, briefly, as a user would run it.

These are smoke tests of the output's shape and sanity (every row there, every figure a finite,
non-negative number, every request accounted for), never of what a short run on a shared machine
measured: 20 calls can take 0.000 ms of CPU at the clock's resolution, and a busy machine can make
a call miss the load driver's deadline.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
# Each piece bench.floors measures, and how many times an assembly makes that call.
FLOOR_PIECES = {
    "gRPC server, canned response prebuilt": 1,
    "gRPC load driver (client), response prebuilt": 1,
    "gRPC server, canned response built per call": 1,
    "gRPC load driver (client), response built per call": 1,
    "raw aiohttp GET hot": 2,
    "memory service per call": 2,
    "adapter hot()": 1,
    "adapter search()": 1,
    "raw redis-py GET": 1,
    "adapter get()": 1,
    "assembly, I/O in-process (80 candidates)": 1,
}
LOAD_COLUMNS = ("phase", "offered", "achieved", "p50 ms", "p95 ms", "p99 ms", "max ms", "errors", "degraded",
                "cands", "svc cpu ms/req", "mem cpu ms/req", "drv cpu ms/req")


def run_bench(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def figure(text: str) -> float:
    """A measured figure: it parses, and is finite and non-negative (zero is a valid measurement)."""
    value = float(text)
    assert math.isfinite(value) and value >= 0, text
    return value


def test_floors_prints_a_cpu_figure_for_every_piece() -> None:
    out = run_bench("bench.floors", "--rate", "40", "--calls", "20", "--grpc-seconds", "1")
    header, *rest = out.splitlines()
    assert header.split() == ["piece", "CPU", "ms/call", "calls/assembly"]
    rows = [re.fullmatch(r"(.+?)\s+(\S+)\s+(\S+)", line.strip()) for line in rest if line.strip()]
    assert all(rows), out
    printed = {row.group(1): (row.group(2), row.group(3)) for row in rows if row}
    assert len(printed) == len(rows) == len(FLOOR_PIECES), out
    assert {name: int(calls) for name, (_, calls) in printed.items()} == FLOOR_PIECES
    for cpu_ms, _ in printed.values():
        figure(cpu_ms)


def test_load_reports_its_rate_with_no_errors_at_a_light_load() -> None:
    out = run_bench("bench.load", "--workers", "1", "--duration", "2", "--rates", "20", "--no-step")
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("phase"))
    assert all(column in header for column in LOAD_COLUMNS), header
    fixed = [line.split() for line in lines if line.startswith("fixed")]
    assert len(fixed) == 1 and len(fixed[0]) == len(LOAD_COLUMNS), out
    offered, achieved = figure(fixed[0][1]), figure(fixed[0][2])
    errors, degraded = int(fixed[0][7]), int(fixed[0][8])
    answered = round(achieved * 2)  # achieved = answered calls / the 2 s phase
    assert offered == 20.0 and answered == achieved * 2
    # Every one of the 40 requests is accounted for: answered, or failed with a code named below.
    assert answered + errors == 40 and 0 <= degraded <= answered, out
    if answered:
        for cell in fixed[0][3:7] + fixed[0][9:]:
            figure(cell)
    # The only failure a light load may show is a call that missed the driver's deadline on a
    # busy machine; any other error code (UNAVAILABLE, INTERNAL...) is a bug.
    [note] = [line for line in lines if line.startswith("20 req/s:")]
    codes = re.search(r"errors (\{.*?\}|-);", note)
    assert codes is not None, note
    assert set(re.findall(r"'([A-Z_]+)'", codes.group(1))) <= {"DEADLINE_EXCEEDED"}, note
    assert (codes.group(1) == "-") == (errors == 0), note
