"""bench.tracing_cost stays runnable: one short run, every row there with finite figures."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_tracing_cost_prints_off_and_both_samplings() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.tracing_cost", "--calls", "20", "--rounds", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(
        r"^(off|on, 100%|on, 1%)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$", done.stdout, re.M)}
    assert set(rows) == {"off", "on, 100%", "on, 1%"}, done.stdout
    assert all(math.isfinite(float(value)) for row in rows.values() for value in row)
