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


# ------------------------------------------------------------------ every string and repeated field is bounded
@pytest.mark.parametrize(("changes", "field"), [
    ({"org_id": " " * 300 + ORG}, "org_id"),
    ({"agent_id": AGENT + " " * 300}, "agent_id"),
    ({"model": " " * 300 + "gpt-4o"}, "model"),
    ({"tool_schemas": ("x" * 65_537,)}, "tool_schemas[0]"),
    ({"tool_schemas": ("x" * 60_000,) * 9}, "tool_schemas"),
    ({"session_id": "s" * 257}, "session_id"),
    ({"directive_version_id": "d" * 257}, "directive_version_id"),
    ({"span_id": "s" * 257}, "span_id"),
])
def test_assembly_strings_are_bounded_before_trimming(changes: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_assemble(request(**changes))
    assert excinfo.value.field == field and field.split("[")[0] in str(excinfo.value)


def test_tool_schemas_at_their_bounds_are_accepted() -> None:
    validate_assemble(request(tool_schemas=("x" * 8192,) * 64))
    validate_assemble(request(tool_schemas=("x" * 65_536,) * 8))


@pytest.mark.parametrize(("changes", "field"), [
    ({"tags": ("t",) * 65}, "tags"),
    ({"tags": ("t" * 129,)}, "tags[0]"),
    ({"tags": ("ok", "  ")}, "tags[1]"),
    ({"categories": ("factual",) * 17}, "categories"),
    ({"categories": ("c" * 65,)}, "categories[0]"),
    ({"org_id": ORG + " " * 300}, "org_id"),
    ({"query": "q" * 8193}, "query"),
    ({"session_id": "s" * 257}, "session_id"),
    ({"request_id": "r" * 257}, "request_id"),
    ({"trace_id": "t" * 257}, "trace_id"),
])
def test_search_filters_and_ids_are_bounded(changes: dict[str, object], field: str) -> None:
    fields: dict[str, object] = {"org_id": ORG, "agent_id": AGENT, "query": "q", **changes}
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_search(SearchRequest(**fields))  # type: ignore[arg-type]
    assert excinfo.value.field == field


def test_search_filters_at_their_bounds_are_accepted() -> None:
    validate_search(SearchRequest(ORG, AGENT, "q", tags=("t" * 128,) * 64, categories=("c" * 64,) * 16))


def test_feedback_ids_and_word_are_bounded_and_never_echoed_whole() -> None:
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_feedback(FeedbackRequest(ORG, (AGENT + " " * 300,), "positive"))
    assert excinfo.value.field == "memory_ids[0]"
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_feedback(FeedbackRequest(ORG, (AGENT,), "x" * 1_000_000))
    assert excinfo.value.field == "feedback" and len(str(excinfo.value)) < 100
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_feedback(FeedbackRequest(ORG, (AGENT,), "y" * 32))
    assert len(str(excinfo.value)) < 200
