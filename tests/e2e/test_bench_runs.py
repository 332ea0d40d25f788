"""The benchmarks stay runnable: each is run end to end, briefly, as a user would run it.

These are smoke tests of the output's shape and sanity (every row there, every figure a finite,
non-negative number, every request accounted for), never of what a short run on a shared machine
measured: 20 calls can take 0.000 ms of CPU at the clock's resolution, and a busy machine can make
a call miss the load driver's deadline.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
# Each piece bench.floors measures besides the assemblies, and how many times an assembly makes that call.
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
}
# The use case alone, one row per score policy and memory budget, each once per assembly.
ASSEMBLY_ROW = re.compile(r"assembly(?: with [a-z0-9_]+)?(?:, [0-9,]+ tokens)?, I/O in-process \((\d+) candidates\)")
LOAD_COLUMNS = ("what", "offered", "achieved", "p50", "p95", "p99", "max", "svc")


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
    assert len(printed) == len(rows), out  # no piece printed twice
    assemblies = {name for name in printed if ASSEMBLY_ROW.fullmatch(name)}
    assert {name: int(calls) for name, (_, calls) in printed.items() if name not in assemblies} == FLOOR_PIECES
    assert "assembly, I/O in-process (80 candidates)" in assemblies, out
    assert all(int(printed[name][1]) == 1 for name in assemblies)
    for cpu_ms, _ in printed.values():
        figure(cpu_ms)


def test_load_drives_the_service_and_both_floors_with_h2load() -> None:
    out = run_bench("bench.load", "--rates", "40", "--duration", "2", "--no-step", "--connections", "2", "--rounds", "2")
    lines = out.splitlines()
    median = [line for line in lines if line.startswith("40 req/s, median of 2 rounds: ")]
    assert len(median) == 1, out
    for part in median[0].split(": ", 1)[1].split("; "):
        name, figures = part.split(" = ")
        assert name in ("service / canned", "service / I/O only"), part
        figure(figures.split()[0])
    lines = [line for line in lines if line not in median]
    assert sum(1 for line in lines if line.startswith("service ")) == 2  # one service step a round
    assert re.match(r"one serve process, (\d+) candidates \((\d+) reached the packer, (\d+) packed\)", lines[0]), out
    header = next(line for line in lines if line.startswith("what"))
    assert header.split()[:8] == list(LOAD_COLUMNS), header
    rows = {line[:22].strip(): line[22:] for line in lines[lines.index(header) + 1:] if line.strip()}
    assert set(rows) == {"service", "floor: canned", "floor: I/O only"}, out
    for name, rest in rows.items():
        cells = rest.split()
        for cell in cells[:10]:  # offered .. redis cpu, then the share of the machine stolen
            figure(cell)
        assert figure(cells[0]) == 40.0
        assert 0.0 <= figure(cells[9]) <= 100.0
        non_ok = " ".join(cells[10:]).split(" service / floor = ")
        if name != "service":
            figure(non_ok[1])
        # A busy machine may make a call miss the 45 ms deadline, and h2load cancels what is in
        # flight when it stops; any other code (UNAVAILABLE, INTERNAL...) is a bug.
        codes = {part.rsplit(" ", 1)[0] for part in non_ok[0].split(", ") if part != "-"}
        assert codes <= {"DEADLINE_EXCEEDED", "CANCELLED"}, out


async def test_instructions_workers_assemble_the_load_workload_with_every_candidate() -> None:
    # The part of bench.instructions that runs under valgrind: the stand-in's answers, then the
    # use case and its proto answer on them (valgrind itself is the user's to install).
    from bench.instructions import fetch, work

    for corpus in ("varied", "narrow"):
        workload = await fetch(corpus)
        assert await work(workload, 3) == 70, corpus  # every candidate accounted for in the answer


def test_instructions_without_valgrind_says_so_and_exits_2(tmp_path: Path) -> None:
    no_valgrind = {**os.environ, "PATH": str(tmp_path)}  # an empty folder: no valgrind on the PATH
    done = subprocess.run([sys.executable, "-m", "bench.instructions", "--corpus", "varied"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=no_valgrind)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "valgrind is not installed" in done.stderr


def test_load_runs_the_step_search_against_the_service_and_then_each_floor() -> None:
    out = run_bench("bench.load", "--rates", "--step-from", "20", "--step", "20", "--step-to", "20", "--step-floors",
                    "--floor-step", "20", "--duration", "1", "--connections", "2")
    lines = out.splitlines()
    steps = [line[:22].strip() for line in lines if line.startswith("step")]
    # One step each at most (the search stops at --step-to 20), the service's first.
    assert steps[0] == "step" and sorted(steps[1:]) == ["step: floor: I/O only", "step: floor: canned"], out
    service = re.search(r"^highest rate with p99 < 40 ms and no errors: (>= )?(\d+) req/s$", out, re.M)
    floors = re.search(r"^the same search \(from 20 req/s by 20\) against each floor: "
                       r"canned (>= )?(\d+) req/s; I/O only (>= )?(\d+) req/s$", out, re.M)
    assert service and floors, out
    # Each search reached 20 req/s (">= 20": it passed the one step) or nothing ("0"), never another rate.
    for prefix, rate in (service.groups(), floors.groups()[:2], floors.groups()[2:]):
        assert (prefix, rate) in ((">= ", "20"), (None, "0")), out


def test_grpc_accept_prints_a_row_for_every_load_of_the_loop() -> None:
    out = run_bench("bench.grpc_accept", "--calls", "10", "--block-ms", "0", "2")
    lines = out.splitlines()
    assert lines[0] == "10 calls at once on one connection to a grpc.aio server (uvloop) that answers at once", out
    assert lines[1].split() == ["loop", "held", "per", "turn", "ms", "all", "answered", "ms", "ms", "per", "call",
                                "p50", "ms", "p99", "ms", "max", "ms"], out
    rows = [[figure(cell) for cell in line.split()] for line in lines[2:]]
    assert [row[0] for row in rows] == [0.0, 2.0], out
    for _, wall_ms, per_call_ms, p50, p99, longest in rows:
        assert per_call_ms == pytest.approx(wall_ms / 10, abs=0.01)
        assert p50 <= p99 <= longest <= wall_ms + 0.1
