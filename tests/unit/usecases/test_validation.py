from __future__ import annotations

import pytest

from domain.model.assembly import AssembleRequest, AssemblyOptions
from domain.model.errors import InvalidRequestError
from domain.model.messages import Message
from domain.model.operations import FeedbackRequest, SearchRequest
from domain.usecases.validation import validate_assemble, validate_feedback, validate_search

ORG = "7f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
AGENT = "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d"


def request(**changes: object) -> AssembleRequest:
    fields: dict[str, object] = dict(org_id=ORG, agent_id=AGENT, model="gpt-4o-mini", query="theme")
    fields.update(changes)
    return AssembleRequest(**fields)  # type: ignore[arg-type]


def test_valid_request_is_canonicalised() -> None:
    checked = validate_assemble(request(org_id=ORG.upper(), model="  gpt-4o  "))
    assert checked.org_id == ORG and checked.model == "gpt-4o"


@pytest.mark.parametrize(("changes", "field"), [
    ({"org_id": "not-a-uuid"}, "org_id"),
    ({"org_id": ""}, "org_id"),
    ({"agent_id": "x"}, "agent_id"),
    ({"model": ""}, "model"),
    ({"model": "m" * 300}, "model"),
    ({"query": "q" * 9000}, "query"),
    ({"options": AssemblyOptions(max_memories=-1)}, "options.max_memories"),
    ({"options": AssemblyOptions(max_memories=101)}, "options.max_memories"),
    ({"options": AssemblyOptions(recency_weight=float("nan"))}, "options.recency_weight"),
    ({"options": AssemblyOptions(relevance_weight=-1.0)}, "options.relevance_weight"),
    ({"recent_messages": tuple(Message("user", "x") for _ in range(101))}, "recent_messages"),
    ({"recent_messages": (Message("user", "x" * 40000),)}, "recent_messages[0].content"),
    ({"recent_messages": (Message("r" * 80, "x"),)}, "recent_messages[0].role"),
    ({"available_tokens": -5}, "available_tokens"),
    ({"tool_schemas": ("x",) * 65}, "tool_schemas"),
])
def test_each_bound_names_its_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_assemble(request(**changes))
    assert excinfo.value.field == field
    assert field.split(".")[-1].split("[")[0] in str(excinfo.value)


def test_boundaries_are_inclusive() -> None:
    validate_assemble(request(model="m" * 256, query="q" * 8192, options=AssemblyOptions(max_memories=100),
                              recent_messages=tuple(Message("r" * 64, "c" * 32768) for _ in range(100))))


def test_search_requires_a_query_and_bounds_the_limit() -> None:
    with pytest.raises(InvalidRequestError, match="query"):
        validate_search(SearchRequest(ORG, AGENT, "   "))
    with pytest.raises(InvalidRequestError, match="limit"):
        validate_search(SearchRequest(ORG, AGENT, "q", limit=101))
    with pytest.raises(InvalidRequestError, match="min_similarity"):
        validate_search(SearchRequest(ORG, AGENT, "q", min_similarity=1.5))


def test_feedback_validation() -> None:
    ok = validate_feedback(FeedbackRequest(ORG, (AGENT.upper(), AGENT), "Positive"))
    assert ok.memory_ids == (AGENT,) and ok.feedback == "positive"
    with pytest.raises(InvalidRequestError, match="feedback"):
        validate_feedback(FeedbackRequest(ORG, (AGENT,), "great"))
    with pytest.raises(InvalidRequestError, match="memory_ids"):
        validate_feedback(FeedbackRequest(ORG, (), "positive"))
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_feedback(FeedbackRequest(ORG, (AGENT, "bad"), "neutral"))
    assert excinfo.value.field == "memory_ids[1]"
