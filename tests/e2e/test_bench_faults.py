"""bench.faults stays runnable: a few short rows end to end, as a user would run them.

A smoke test of the output's shape and of what the faults must visibly do (a flapping memory
service degrades answers, a killed Redis costs answers their directive and it comes back), never
of the targets: a 6 s row on a shared machine says nothing about p99 (6 s, so that the sampled
client sees a few calls inside each fault window even on a slow machine).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

REPO = Path(__file__).resolve().parents[2]


def test_fault_rows_run_and_account_for_every_call(tmp_path: Path) -> None:
    out = tmp_path / "faults.json"
    table = tmp_path / "faults.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.faults", "--only", "baseline,memory_flapping,redis_kill", "--duration", "6",
         "--warmup", "0.5", "--json", str(out), "--markdown", str(table)],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["row"]: row for row in json.loads(out.read_text())["rows"]}
    assert list(rows) == ["baseline", "memory_flapping", "redis_kill"]
    for row in rows.values():
        assert row["verdict"] in ("PASS", "FAIL")
        assert row["answered"] > 0 and row["ok"] + sum(row["non_ok"].values()) == row["answered"]
        assert sum(row["levels"].values()) > 0
        assert row["sampled"]["calls"] > 0 and row["h2load"]["answered"] > 0
        for value in (row["ok_pct"], row["rss_before_mib"], row["rss_after_mib"], row["h2load"]["p99_ms"]):
            assert math.isfinite(value) and value >= 0
    flapping = rows["memory_flapping"]
    assert flapping["branches"].get("hot:error", 0) > 0 and flapping["levels"]["L0"] < flapping["answered"]
    kill = rows["redis_kill"]
    assert kill["branches"].get("directive:error", 0) > 0
    assert kill["sampled"]["without_directive"] > 0 and "directive_back_s" in kill
    markdown = table.read_text()
    assert markdown in done.stdout
    assert all(f"| {name} |" in markdown for name in rows)


def test_the_overload_row_runs_and_drives_the_canned_floor_the_same_way(tmp_path: Path) -> None:
    # A low capacity (20 -> 80 req/s) and a short surge: the shape of the row, not its targets.
    out = tmp_path / "overload.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.faults", "--only", "overload", "--capacity", "40", "--duration", "3",
         "--warmup", "0.5", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["row"] == "overload" and row["verdict"] in ("PASS", "FAIL")
    assert sum(row["codes_during"].values()) > 0 and math.isfinite(row["ok_per_s"])
    floor = row["floor"]
    assert floor["sampled_codes"].get("OK", 0) > 0  # the canned server answers the sampled client
    for value in (floor["ok_p50_ms"], floor["ok_p99_ms"], floor["h2load_surge_p99_ms"]):
        assert math.isfinite(value) and value >= 0
    line = next(text for text in done.stdout.splitlines() if text.startswith("| 40 | 80 |"))
    assert line.count("|") == 13  # 12 cells, the floor's among them
