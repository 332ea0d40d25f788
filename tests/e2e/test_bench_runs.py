"""The benchmarks stay runnable: each is run end to end, briefly, as a user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def run_bench(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_floors_prints_a_cpu_figure_for_every_piece() -> None:
    out = run_bench("bench.floors", "--rate", "40", "--calls", "20", "--grpc-seconds", "1")
    rows = [line for line in out.splitlines()[1:] if line.strip()]
    assert len(rows) == 11
    for row in rows:
        figure, calls = row.split()[-2:]
        assert float(figure) > 0 and int(calls) in (1, 2), row
    assert any(row.startswith("assembly, I/O in-process (80 candidates)") for row in rows)


def test_load_reports_its_rate_with_no_errors_at_a_light_load() -> None:
    out = run_bench("bench.load", "--workers", "1", "--duration", "2", "--rates", "20", "--no-step")
    fixed = [line.split() for line in out.splitlines() if line.startswith("fixed")]
    assert len(fixed) == 1
    offered, achieved, errors = float(fixed[0][1]), float(fixed[0][2]), int(fixed[0][7])
    assert (offered, errors) == (20.0, 0) and achieved > 0
