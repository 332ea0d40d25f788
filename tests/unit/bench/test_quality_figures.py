"""bench.quality's figures of one block, on a hand-made data set."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench import quality
from bench.quality import Tally, Truth
from bench.quality_data import Dataset, Memory, Question

AGENT = "agent"


def memory(memory_id: str, content: str) -> Memory:
    return Memory(memory_id, AGENT, content, "episodic", 1.0, 0.5, 1.0, "answer")


DATASET = Dataset(
    seed=0, org_id="org", agents=(),
    memories=(memory("e1", "Maya: the flight is on 3 May."), memory("e1-copy", "maya: the flight is on 3 May"),
              memory("e2", "Maya: the hotel is Casa Verde."), memory("e2-para", "Maya: so, the hotel is Casa Verde indeed."),
              memory("n1", "Jon: haha."), memory("n2", "Jon: good morning.")),
    questions=(Question("q", AGENT, "When is the flight and which hotel?", ("e1", "e2"), "lexical", "travel"),),
    verbatim_pairs=(("e1", "e1-copy"),), paraphrase_pairs=(("e2", "e2-para"),),
)


def block(included: list[str], others: list[tuple[str, str]], tokens: int = 100) -> SimpleNamespace:
    records = [SimpleNamespace(memory_id=m, exclusion="included", detail="") for m in included]
    records += [SimpleNamespace(memory_id=m, exclusion="filter", detail=detail) for m, detail in others]
    return SimpleNamespace(memories_used=tuple(records), tokens_used=tokens, degradation_level="L0")


def test_a_copy_of_evidence_answers_like_the_evidence_and_paraphrase_pairs_count_once() -> None:
    tally = Tally()
    Truth(DATASET).add(tally, DATASET.questions[0], block(["e1-copy", "e2", "e2-para", "n1"], [("n2", "budget")]))
    row = tally.row("p", 500)
    assert (row["evidence_in_block"], row["evidence_among_candidates"], row["kept_of_found"]) == (1.0, 1.0, 1.0)
    assert row["noise_share"] == 0.25
    assert (row["duplicates_packed"], row["near_duplicates_packed"]) == (0, 1)
    assert row["included_per_block"] == 4 and row["tokens_used"] == 100


def test_both_verbatim_copies_packed_count_as_two_duplicates_and_tenant_mismatch_is_no_candidate() -> None:
    tally = Tally()
    truth = Truth(DATASET)
    question = DATASET.questions[0]
    truth.add(tally, question, block(["e1", "e1-copy", "n1"], [("e2", "tenant_mismatch"), ("e2-para", "tenant_mismatch")]))
    truth.add(tally, question, block(["n1"], [("e1", "budget"), ("e2", "budget")]))
    row = tally.row("p", 500)
    assert row["evidence_in_block"] == (0.5 + 0.0) / 2
    assert row["evidence_among_candidates"] == (0.5 + 1.0) / 2
    assert row["kept_of_found"] == 1 / 3
    assert row["duplicates_packed"] == 2 and row["near_duplicates_packed"] == 0
    assert row["noise_share"] == 2 / 4


def test_an_unknown_policy_stops_with_a_clear_message() -> None:
    with pytest.raises(SystemExit, match="unknown score policy"):
        quality.config_for("no_such_policy", None, None)
    assert quality.config_for("interim_v1", None, 30).cold_limit == 30
