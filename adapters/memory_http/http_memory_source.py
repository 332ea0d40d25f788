"""HttpMemorySource: the memory service over HTTP (hot list, search, feedback).

Requests: ``GET /v1/memories/hot`` (agent_id, limit, min_confidence), ``POST /v1/memories/search``
(agent_id, query, limit, min_confidence; min_similarity when set; categories/tags when non-empty),
``POST /v1/memories/{memory_id}/feedback`` (feedback, session_id, trace_id, notes; null when absent)
with ``Idempotency-Key``. Headers: ``Authorization: Bearer <token>``, ``Accept: application/json``,
and the correlation ids ``X-Request-ID`` / ``X-Trace-ID`` when set (only visible ASCII, at most 128
characters; other values are not sent rather than failing the call). The org comes from the token.
Trace context: when a span is current (the branch's stage span, or the caller's context that the
edge attached), every request carries it in the fields of the configured propagators (W3C
``traceparent``/``tracestate`` by default, through ``opentelemetry.propagate``: the API only, no
SDK), so the memory service's spans join the caller's trace.

Status mapping: 2xx -> decoded; 401/403 -> MemorySourceDeniedError; 404 on feedback ->
MemoryNotFoundError; any other status >= 300 -> MemorySourceUnavailableError. All carry
``status_code``. No retries here: the feedback use case retries with the same idempotency key.
Tenant fence: items whose org/agent differ from the query are not returned as hits; they are
reported in ``MemoryBatch.dropped`` with reason ``tenant_mismatch`` (the use case fences again).
Pooling, timeouts and cancellation safety: see ``exchange.py``.
"""

from __future__ import annotations

import json
import re
import uuid
from urllib.parse import urlsplit

from opentelemetry import propagate, trace

from adapters.memory_http.answer_memo import AnswerMemo
from adapters.memory_http.decode import decode_feedback, error_code
from adapters.memory_http.exchange import PooledExchange, Reply, Request
from domain.model.feedback import FeedbackItem, FeedbackResult
from domain.model.memory import CallContext, DroppedItem, HotQuery, MemoryBatch, SearchQuery
from ports.errors import (
    MemoryNotFoundError,
    MemorySourceDeniedError,
    MemorySourceError,
    MemorySourceUnavailableError,
)
from ports.feedback_sink import FeedbackSink
from ports.memory_source import MemorySource

_HEADER_VALUE = re.compile(r"[\x21-\x7e]{1,128}")
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")
_TOKEN = re.compile(r"[\x21-\x7e]+")


class HttpMemorySource(MemorySource, FeedbackSink):
    """Reads memories from, and writes feedback to, the memory service.

    Args:
        base_url: ``http(s)://host[:port][/prefix]`` of the memory service.
        api_token: the Bearer token (the service derives the org from it).
        pool_size: keep-alive connections (and requests in flight) to the service.
        drain_grace_s: how long past its timeout an abandoned request may still drain its answer
            so that its connection can be reused; past that the connection is closed.
        max_body_bytes: larger answers fail the call (Unavailable).
        keepalive_s: idle time after which a pooled connection is closed.

    Raises:
        ValueError: at construction, for configuration errors (blank or non-HTTP URL, blank token,
            non-positive sizes). Calls raise only ports.errors exceptions.
    """

    def __init__(self, base_url: str, api_token: str, *, pool_size: int = 64,
                 drain_grace_s: float = 1.0, max_body_bytes: int = 1024 * 1024,
                 keepalive_s: float = 30.0) -> None:
        self._base = _checked_base_url(base_url)
        token = (api_token or "").strip()
        if not token:
            raise ValueError("memory_api_token is required for the HTTP memory source")
        if not _TOKEN.fullmatch(token):
            raise ValueError("memory_api_token must be visible ASCII without spaces")
        if pool_size < 1 or max_body_bytes < 1 or not drain_grace_s > 0 or not keepalive_s > 0:
            raise ValueError(
                "pool_size, max_body_bytes, drain_grace_s and keepalive_s must be positive, got "
                f"{pool_size}, {max_body_bytes}, {drain_grace_s}, {keepalive_s}")
        self._plain_headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._json_headers = {**self._plain_headers, "Content-Type": "application/json"}
        self._hot_url = f"{self._base}/v1/memories/hot"
        self._search_url = f"{self._base}/v1/memories/search"
        self._exchange = PooledExchange(pool_size=pool_size, drain_grace_s=drain_grace_s,
                                        max_body_bytes=max_body_bytes, keepalive_s=keepalive_s)
        self._answers = AnswerMemo()

    async def hot(self, query: HotQuery, *, timeout_s: float) -> MemoryBatch:
        params = {"agent_id": query.agent_id, "limit": str(query.limit),
                  "min_confidence": str(float(query.min_confidence))}
        request = Request("GET", self._hot_url, self._headers(query.call), params=params)
        answer = _checked(await self._exchange.send(request, timeout_s=timeout_s))
        return _fenced(self._answers.batch(answer.body, query.limit), query.org_id, query.agent_id)

    async def search(self, query: SearchQuery, *, timeout_s: float) -> MemoryBatch:
        payload: dict[str, object] = {"agent_id": query.agent_id, "query": query.query,
                                      "limit": query.limit, "min_confidence": query.min_confidence}
        if query.min_similarity is not None:
            payload["min_similarity"] = query.min_similarity
        if query.categories:
            payload["categories"] = list(query.categories)
        if query.tags:
            payload["tags"] = list(query.tags)
        request = Request("POST", self._search_url, self._headers(query.call, json_body=True), body=_json(payload))
        answer = _checked(await self._exchange.send(request, timeout_s=timeout_s))
        return _fenced(self._answers.batch(answer.body, query.limit), query.org_id, query.agent_id)

    async def record(self, item: FeedbackItem, *, timeout_s: float) -> FeedbackResult:
        memory_id = _memory_id(item.memory_id)
        headers = dict(self._headers(CallContext(trace_id=item.trace_id or ""), json_body=True))
        if item.idempotency_key:
            headers["Idempotency-Key"] = _idempotency_key(item.idempotency_key)
        payload = {"feedback": item.feedback, "session_id": item.session_id,
                   "trace_id": item.trace_id, "notes": item.notes}
        request = Request("POST", f"{self._base}/v1/memories/{memory_id}/feedback", headers,
                          body=_json(payload))
        reply = await self._exchange.send(request, timeout_s=timeout_s)
        if reply.status == 404:
            raise MemoryNotFoundError(f"memory {memory_id} not found", status_code=404)
        return decode_feedback(_checked(reply).body, memory_id)

    async def close(self) -> None:
        await self._exchange.close()

    @property
    def in_flight(self) -> int:
        """Exchanges still running, including abandoned ones draining a late answer."""
        return self._exchange.in_flight

    def _headers(self, call: CallContext, *, json_body: bool = False) -> dict[str, str]:
        """The request headers; the shared prepared dict when there are no correlation ids and no
        current trace context (read-only)."""
        prepared = self._json_headers if json_body else self._plain_headers
        traced = trace.get_current_span().get_span_context().is_valid
        if not (call.request_id or call.trace_id or traced):
            return prepared
        headers = dict(prepared)
        if _HEADER_VALUE.fullmatch(call.request_id):
            headers["X-Request-ID"] = call.request_id
        if _HEADER_VALUE.fullmatch(call.trace_id):
            headers["X-Trace-ID"] = call.trace_id
        if traced:
            propagate.inject(headers)
        return headers


def _fenced(batch: MemoryBatch, org_id: str, agent_id: str) -> MemoryBatch:
    """Keep only the query's tenant; report the others as dropped ``tenant_mismatch`` items."""
    own = tuple(hit for hit in batch.hits if hit.org_id == org_id and hit.agent_id == agent_id)
    if len(own) == len(batch.hits):
        return batch
    foreign = tuple(
        DroppedItem("tenant_mismatch", f"memory of org {hit.org_id} agent {hit.agent_id}", hit.memory_id)
        for hit in batch.hits if not (hit.org_id == org_id and hit.agent_id == agent_id)
    )
    return MemoryBatch(own, batch.dropped + foreign)


def _checked(reply: Reply) -> Reply:
    if 200 <= reply.status < 300:
        return reply
    code = error_code(reply.body)
    message = f"memory service HTTP {reply.status}" + (f" ({code})" if code else "")
    error: type[MemorySourceError] = (
        MemorySourceDeniedError if reply.status in (401, 403) else MemorySourceUnavailableError)
    raise error(message, status_code=reply.status)


def _checked_base_url(base_url: str) -> str:
    base = (base_url or "").strip().rstrip("/")
    if not base:
        raise ValueError("memory_base_url is required for the HTTP memory source")
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"memory_base_url must be an http(s)://host[:port][/path] URL, got {base!r}")
    return base


def _memory_id(value: str) -> str:
    """The memory id as a canonical UUID (it becomes part of the URL path)."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        raise MemoryNotFoundError(f"memory_id is not a UUID: {str(value)[:64]!r}") from None


def _idempotency_key(value: str) -> str:
    if not _IDEMPOTENCY_KEY.fullmatch(value):
        raise MemorySourceUnavailableError("idempotency_key must be 1..255 visible ASCII characters")
    return value


def _json(payload: dict[str, object]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode("ascii")
