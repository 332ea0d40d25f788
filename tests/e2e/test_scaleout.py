"""Scale-out proof on loopback: ``bench.scaleout`` run small, its mechanisms asserted.

Three ``serve`` replicas on 127.0.0.2-.4 behind a loopback DNS authority, a client configured as
docs/DEPLOYMENT.md tells the Go proxy (round_robin, health checking, retry on UNAVAILABLE):
SIGTERM one, start a fourth on 127.0.0.5, SIGKILL another: 0 failed calls, every live replica
served, and the fourth found through re-resolution after a connection reached its max age. Timing and spread
figures are the bench's to print (docs/DEPLOYMENT.md), not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FIRST = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
NEW = "127.0.0.5"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("scaleout") / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench.scaleout", "--rate", "80", "--phase-s", "3", "--max-age-s", "2",
         "--drain-s", "1", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text())


def test_no_call_fails_through_sigterm_sigkill_and_scale_up(report: dict) -> None:
    assert report["total_failed"] == 0
    for name, phase in report["phases"].items():
        assert phase["failed"] == {}, name
        assert phase["calls"] >= 0.5 * report["rate"] * report["phase_s"], name  # the load really ran
    assert report["sigterm_exit_code"] == 0


def test_calls_spread_over_every_live_replica(report: dict) -> None:
    phases = report["phases"]
    assert set(phases["three"]["served"]) == set(FIRST)
    assert {"127.0.0.3", "127.0.0.4"} <= set(phases["sigterm"]["served"])
    assert {"127.0.0.4", NEW} <= set(phases["sigkill"]["served"])
    assert set(phases["two"]["served"]) == {"127.0.0.4", NEW}  # the killed .3 is gone


def test_the_new_replica_is_found_by_re_resolution(report: dict) -> None:
    assert report["new_replica_found_after_s"] is not None
    assert report["dns_queries"] > 1  # the client asked again after the first resolution
