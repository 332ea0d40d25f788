"""Answers no API handler gives: 404/405 and a failure outside a handler are the error shape, counted."""

from __future__ import annotations

import uuid

import httpx

from entrypoints.http_api.app import make_app
from entrypoints.observability.metrics import ServiceMetrics


class _BrokenRender(ServiceMetrics):
    def render(self) -> tuple[bytes, str]:
        raise RuntimeError("boom")


def _client(metrics: ServiceMetrics) -> httpx.AsyncClient:
    app = make_app(assemble=object(), search=object(), feedback=object(),  # type: ignore[arg-type]
                   metrics=metrics, readiness=lambda: True)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app, raise_app_exceptions=False), base_url="http://test")


def _count(metrics: ServiceMetrics, method: str, code: str) -> float:
    return metrics.registry.get_sample_value(
        "ibex_context_requests_total", {"surface": "http", "method": method, "code": code}) or 0.0


async def test_a_failure_outside_a_handler_is_a_json_500_with_a_request_id_counted() -> None:
    metrics = _BrokenRender()
    async with _client(metrics) as client:
        response = await client.get("/metrics")
    assert response.status_code == 500 and response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "INTERNAL" and "boom" not in response.text
    assert str(uuid.UUID(error["requestId"])) == error["requestId"] == response.headers["x-request-id"]
    assert _count(metrics, "unhandled", "INTERNAL") == 1


async def test_unrouted_requests_carry_a_request_id_and_are_counted() -> None:
    metrics = ServiceMetrics()
    async with _client(metrics) as client:
        missing = await client.post("/v1/%ff%00", content=b"{}")
        wrong = await client.delete("/v1/context:assemble", headers={"x-request-id": "mine-1"})
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "NOT_FOUND")
    assert missing.json()["error"]["requestId"] == missing.headers["x-request-id"]
    assert (wrong.status_code, wrong.json()["error"]["requestId"], wrong.headers["allow"]) == (405, "mine-1", "POST")
    assert _count(metrics, "unrouted", "NOT_FOUND") == _count(metrics, "unrouted", "METHOD_NOT_ALLOWED") == 1
