"""The e2e tenant: ids, seeded memories and directive, and a valid request builder."""

from __future__ import annotations

import uuid

from contracts.ibex.context.v1 import context_pb2 as pb

NAMESPACE = uuid.UUID("1f6c2f0e-8f43-4f64-9a51-3e2b7c9d0a11")
ORG_ID = str(uuid.uuid5(NAMESPACE, "e2e-org"))
AGENT_ID = str(uuid.uuid5(NAMESPACE, "e2e-agent"))
TOKEN = "e2e-token"
DIRECTIVE = "Answer in two sentences at most."
MEMORIES = (
    ("The user prefers the dark theme in every editor", "preference"),
    ("Deploys happen on Friday afternoons after review", "procedural"),
    ("The team budget report is due every month", "factual"),
    ("The user drinks coffee before the weekly meeting", "behavioral"),
    ("A theme switch broke the build last spring", "episodic"),
)
MODEL = "gpt-4o"


def assemble_request(**changes: object) -> pb.AssembleContextRequest:
    """A valid request for the seeded tenant; ``changes`` replace top-level fields."""
    fields: dict[str, object] = {
        "org_id": ORG_ID,
        "agent_id": AGENT_ID,
        "model": MODEL,
        "query": "dark theme",
        "recent_messages": [pb.Message(role="user", content="Which theme do I like?")],
        "request_id": "req-e2e-1",
        "trace_id": "trace-e2e-1",
        "span_id": "span-e2e-1",
        "session_id": str(uuid.uuid5(NAMESPACE, "session")),
    }
    fields.update(changes)
    return pb.AssembleContextRequest(**fields)  # type: ignore[arg-type]
