"""What the loopback memory service stores and logs, and the JSON answers it builds."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
from aiohttp import web

if TYPE_CHECKING:
    from yarl import URL  # aiohttp's URL type (request.rel_url)

ANY_ORG = "*"  # a token mapped to ANY_ORG is a service token: any registered agent, its owner's org
NAMESPACE = uuid.UUID("6f1d3a52-9c1e-4b7a-8a53-2f4d0c7e9b10")
TIMESTAMP = "2026-01-01T00:00:00Z"
_WORDS = re.compile(r"\w+")


@attrs.frozen
class LoggedRequest:
    """One request as the server received it (header names lower-cased)."""

    endpoint: str
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    latency_ms: float

    def json(self) -> object:
        return json.loads(self.body)

    @property
    def traceparent(self) -> str:
        """The W3C ``traceparent`` header the request carried ("" without one)."""
        return self.headers.get("traceparent", "")

    @classmethod
    def of(cls, raw: RawRequest) -> LoggedRequest:
        return cls(endpoint=raw.endpoint, method=raw.method, path=raw.url.path, query=dict(raw.url.query),
                   headers={k.lower(): v for k, v in raw.headers.items()}, body=raw.body,
                   latency_ms=raw.latency_ms)


@attrs.frozen
class RawRequest:
    """What the server keeps of a request while answering (cheap); ``LoggedRequest.of`` reads it."""

    endpoint: str
    method: str
    url: URL  # the request's relative URL (path and query), immutable
    headers: Mapping[str, str]  # the request's (immutable) header proxy
    body: bytes
    latency_ms: float


@attrs.define
class StoredMemory:
    id: str
    org_id: str
    agent_id: str
    content: str
    category: str = "factual"
    confidence: float = 0.9
    hot_score: float = 0.5
    usefulness: float | None = 0.5
    retrieval_count: int = 0
    tags: tuple[str, ...] = ()
    positive: int = 0
    negative: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id, "org_id": self.org_id, "agent_id": self.agent_id, "content": self.content,
            "category": self.category, "confidence": self.confidence, "status": "active",
            "created_at": TIMESTAMP, "updated_at": TIMESTAMP, "usefulness_score": self.usefulness,
            "retrieval_count": self.retrieval_count, "tags": list(self.tags),
        }


def similarity(query: str, content: str) -> float:
    """Jaccard overlap of the lower-cased words of both texts, in [0, 1]."""
    q, c = set(_WORDS.findall(query.lower())), set(_WORDS.findall(content.lower()))
    return len(q & c) / len(q | c) if q and c else 0.0


def apply_feedback(memory: StoredMemory, value: str) -> dict[str, object]:
    """Count the feedback; usefulness becomes (positive + 1) / (positive + negative + 2)."""
    memory.positive += value == "positive"
    memory.negative += value == "negative"
    memory.usefulness = round((memory.positive + 1) / (memory.positive + memory.negative + 2), 6)
    return {
        "memory_id": memory.id, "feedback": value, "new_usefulness_score": memory.usefulness,
        "total_positive_feedback": memory.positive, "total_negative_feedback": memory.negative,
    }


def error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"detail": {"code": code, "message": message}}, status=status)


def unprocessable(message: str) -> web.Response:
    """FastAPI's 422 shape (a list of problems)."""
    return web.json_response({"detail": [{"loc": ["body"], "msg": message, "type": "value_error"}]}, status=422)


def results_body(rows: list[tuple[StoredMemory, float]], source: str) -> bytes:
    """The JSON body of a hot/search answer (as ``web.json_response`` would render it)."""
    items = [{"memory": m.to_json(), "similarity": s, "rank": i, "source": source}
             for i, (m, s) in enumerate(rows, start=1)]
    return json.dumps({"data": {"results": items}}).encode("utf-8")


def json_answer(body: bytes) -> web.Response:
    """A 200 answer with an already rendered JSON body (same headers as ``web.json_response``)."""
    return web.Response(body=body, content_type="application/json", charset="utf-8")
