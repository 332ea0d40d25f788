"""bench.quality runs end to end, as a user would run it, and reports well-formed figures.

Which policy does better is a benchmark result, not a test: nothing here compares policies, and
nothing depends on timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import quality, quality_data

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FRACTIONS = ("evidence_in_block", "evidence_among_candidates", "kept_of_found", "noise_share")
COUNTS = ("questions", "duplicates_packed", "near_duplicates_packed", "evidence_included", "evidence_found", "degraded")


@pytest.fixture(scope="module")
def report() -> dict:  # type: ignore[type-arg]
    done = subprocess.run([sys.executable, "-m", "bench.quality", "--quick", "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_every_policy_and_budget_has_one_row(report: dict) -> None:  # type: ignore[type-arg]
    cells = [(row["policy"], row["budget"]) for row in report["rows"]]
    rows = (*quality.POLICIES, quality.TOP_K)  # the top-k baseline comes with interim_v1
    assert sorted(cells) == sorted((p, b) for p in rows for b in quality.BUDGETS)
    assert set(report["exclusions"]) == set(quality.POLICIES)
    assert {p: s for p, s in report["score_schemas"].items()} == {p: [p] for p in quality.POLICIES}


def test_figures_are_sane(report: dict) -> None:  # type: ignore[type-arg]
    questions = report["dataset"]["questions"]
    assert questions > 0 and report["dataset"]["memories"] > 0
    for row in report["rows"]:
        for name in FRACTIONS:
            assert 0.0 <= row[name] <= 1.0, (name, row)
        for name in COUNTS:
            assert isinstance(row[name], int) and row[name] >= 0, (name, row)
        assert row["questions"] == questions
        assert row["evidence_among_candidates"] >= row["evidence_in_block"], row
        assert row["evidence_found"] >= row["evidence_included"], row
        assert row["included_per_block"] >= 0 and row["cpu_ms"] >= 0
        assert row["tokens_used"] > 0, row
    for counts in report["exclusions"].values():
        assert all(isinstance(n, int) and n >= 0 for n in counts.values())
        assert "included" not in counts


def test_the_same_seed_gives_the_same_data_set(report: dict) -> None:  # type: ignore[type-arg]
    here = quality_data.generate(report["dataset"]["seed"], quality.QUICK_AGENTS, quality.QUICK_QUESTIONS)
    assert report["dataset"]["fingerprint"] == here.fingerprint()
    assert report["dataset"]["memories"] == len(here.memories)
    assert quality_data.generate(report["dataset"]["seed"] + 1, quality.QUICK_AGENTS,
                                 quality.QUICK_QUESTIONS).fingerprint() != here.fingerprint()
