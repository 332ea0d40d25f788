"""The HTTP JSON API through real uvicorn servers on 127.0.0.1, over the real use cases.

Backends: the embedded SQLite file (seeded through its write API), and the loopback memory
service for source failures. One application is opened per backend; it is served twice (without
and with signed-principal authentication) from one event loop in a thread of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import attrs
import httpx
import pytest
import uvicorn

from adapters.embedded import EmbeddedDirectiveStore, EmbeddedMemoryStore
from adapters.system_clock import SystemClock
from contracts.ibex.context.v1 import context_pb2 as pb
from entrypoints.auth.http_auth import PROOF_HEADER, HttpAuthenticator
from entrypoints.auth.keys import KeyRing
from entrypoints.containers import Application, open_application
from entrypoints.http_api.app import make_app
from entrypoints.settings import Settings
from tests.support.background_loop import BackgroundLoop
from tests.support.memory_server import MemoryServer
from tests.support.principal_proofs import AGENT, ORG, OTHER_ORG, context, ed_entry, ed_proof, write_key_file

pytestmark = pytest.mark.e2e

DIRECTIVE = "You are the tea assistant. Be brief."
TEA_FACTS = ("The user drinks green tea every morning", "The user dislikes sugar in tea", "The user keeps oolong tea at work")
ODD_MODEL = "odd-model"  # its family names an estimate kind no counter supports: an unexpected failure
MAX_BODY = 256 * 1024
GENEROUS = {"timeout_ms": 3000.0, "deadline_ms": 3000.0, "directive_timeout_ms": 2000.0,
            "hot_timeout_ms": 2000.0, "cold_timeout_ms": 2000.0}
JSON_NAMES = {f.json_name for f in pb.AssembleContextResponse.DESCRIPTOR.fields}


class ServedApi(BackgroundLoop):
    """One opened application behind two uvicorn servers (``open``: no auth; ``authed``: proofs)."""

    what = "the HTTP API"

    def __init__(self, settings: Settings, keyring: KeyRing) -> None:
        super().__init__()
        self.settings = settings
        self.keyring = keyring
        self.ready = True
        self.urls: dict[str, str] = {}
        self._app: Application | None = None
        self._servers: list[uvicorn.Server] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        app = self._app = await open_application(self.settings)
        authenticator = HttpAuthenticator(self.keyring, on_failure=app.metrics.auth_failure)
        apps = {name: make_app(assemble=app.assemble, search=app.search, feedback=app.feedback, metrics=app.metrics,
                               readiness=lambda: self.ready, authenticator=auth, max_body_bytes=MAX_BODY)
                for name, auth in (("open", None), ("authed", authenticator))}
        servers = {name: uvicorn.Server(uvicorn.Config(asgi, host="127.0.0.1", port=0, lifespan="off",
                                                       log_config=None, access_log=False))
                   for name, asgi in apps.items()}
        self._servers = list(servers.values())
        self._tasks = [asyncio.create_task(server.serve()) for server in self._servers]
        while not all(s.started for s in self._servers) and not any(t.done() for t in self._tasks):
            await asyncio.sleep(0.01)
        if not all(s.started for s in self._servers):
            raise RuntimeError("a uvicorn server stopped during start-up")
        for name, server in servers.items():
            self.urls[name] = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        for server in self._servers:
            server.should_exit = True
        await asyncio.gather(*self._tasks, return_exceptions=True)
        assert self._app is not None
        await self._app.close()


@attrs.frozen
class Seeded:
    memory_ids: tuple[str, ...]


def _seed(path: Path) -> Seeded:
    async def write() -> Seeded:
        clock = SystemClock()
        store = EmbeddedMemoryStore.open(path, clock=clock)
        ids = [await store.add(org_id=ORG, agent_id=AGENT, content=text, category="preference", confidence=0.9)
               for text in TEA_FACTS]
        await store.close()
        directives = EmbeddedDirectiveStore.open(path, clock=clock)
        await directives.set_directive(ORG, AGENT, DIRECTIVE)
        await directives.close()
        return Seeded(tuple(ids))
    return asyncio.run(write())


def _catalog_with_odd_model(path: Path) -> Path:
    document = json.loads(resources.files("adapters").joinpath("data/model_capabilities.v1.json").read_bytes())
    document["models"].append({"model_id": ODD_MODEL, "provider": "test", "context_window": 8000,
                               "max_output_tokens": 1000, "supports_tools": True, "supports_vision": False,
                               "supports_streaming": True, "tokenizer_family": "odd"})
    document["tokenizer_families"]["odd"] = {"estimate_kind": "no_such_kind", "safety_buffer_fraction": 0.1}
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def keyring(tmp_path_factory: pytest.TempPathFactory) -> KeyRing:
    return KeyRing.from_path(write_key_file(tmp_path_factory.mktemp("keys") / "keys.json", ed_entry("ed-1")))


@pytest.fixture(scope="module")
def seeded_api(tmp_path_factory: pytest.TempPathFactory, keyring: KeyRing) -> Iterator[tuple[ServedApi, Seeded]]:
    root = tmp_path_factory.mktemp("embedded")
    seeded = _seed(root / "ibex.db")
    settings = Settings(data_path=str(root / "ibex.db"), catalog_path=str(_catalog_with_odd_model(root / "catalog.json")),
                        **GENEROUS)
    with ServedApi(settings, keyring) as api:
        yield api, seeded


@pytest.fixture
def api(seeded_api: tuple[ServedApi, Seeded]) -> Iterator[httpx.Client]:
    served = seeded_api[0]
    served.ready = True
    with httpx.Client(base_url=served.urls["open"], timeout=30) as client:
        yield client


@pytest.fixture
def memory_ids(seeded_api: tuple[ServedApi, Seeded]) -> tuple[str, ...]:
    return seeded_api[1].memory_ids


def _assemble(**extra: object) -> dict[str, object]:
    return {"orgId": ORG, "agentId": AGENT, "model": "gpt-4o", "query": "tea", **extra}


def _error(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    return error


# ---------------------------------------------------------------- health, readiness, metrics


def test_healthz_answers_ok(api: httpx.Client) -> None:
    response = api.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_follows_the_readiness_callable(api: httpx.Client, seeded_api: tuple[ServedApi, Seeded]) -> None:
    assert api.get("/readyz").status_code == 200
    seeded_api[0].ready = False
    assert (api.get("/readyz").status_code, api.get("/readyz").json()) == (503, {"status": "not_ready"})
    seeded_api[0].ready = True
    assert api.get("/readyz").json() == {"status": "ready"}


def test_metrics_count_requests_assemblies_and_branches(api: httpx.Client) -> None:
    assert api.post("/v1/context:assemble", json=_assemble()).status_code == 200
    assert api.post("/v1/context:assemble", json=_assemble(model="nope")).status_code == 400
    response = api.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    for expected in (
        'ibex_context_requests_total{code="OK",method="AssembleContext",surface="http"}',
        'ibex_context_requests_total{code="INVALID_ARGUMENT",method="AssembleContext",surface="http"}',
        'ibex_context_request_latency_seconds_bucket{le="0.05",method="AssembleContext",surface="http"}',
        'ibex_context_in_flight_requests{surface="http"} 0.0',
        'ibex_context_assemblies_total{level="L0"}',
        'ibex_context_branch_outcomes_total{branch="cold",outcome="success"}',
        "ibex_context_packing_path_total",
        'ibex_context_candidates_total{disposition="included"}',
        "ibex_context_tokens_used_bucket",
    ):
        assert expected in text, expected


# ---------------------------------------------------------------- AssembleContext


def test_assemble_answers_every_field_of_the_response(api: httpx.Client) -> None:
    response = api.post("/v1/context:assemble", json=_assemble(recentMessages=[{"role": "user", "content": "tea?"}]))
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == JSON_NAMES
    assert DIRECTIVE in body["assembledContext"] and TEA_FACTS[0] in body["assembledContext"]
    assert body["degradationLevel"] == "L0" and body["estimateKind"] == "exact_o200k_base"
    assert [b["name"] for b in body["branches"]] == ["directive", "hot", "cold"]
    assert all(b["outcome"] == "success" for b in body["branches"])
    included = [m for m in body["memoriesUsed"] if m["exclusion"] == "included"]
    assert len(included) == body["memoriesIncluded"] == 3
    assert 0 < sum(m["tokenEstimate"] for m in included) == body["memoryTokens"] <= body["usableBudget"]


def test_snake_case_requests_are_answered_like_camel_case_ones(api: httpx.Client) -> None:
    snake = {"org_id": ORG, "agent_id": AGENT, "model": "gpt-4o", "query": "tea", "options": {"max_memories": 1}}
    camel = {"orgId": ORG, "agentId": AGENT, "model": "gpt-4o", "query": "tea", "options": {"maxMemories": 1}}
    first, second = (api.post("/v1/context:assemble", json=body).json() for body in (snake, camel))
    assert first["memoriesIncluded"] == second["memoriesIncluded"] == 1
    outcome = [[(m["memoryId"], m["exclusion"], m["detail"]) for m in body["memoriesUsed"]] for body in (first, second)]
    assert outcome[0] == outcome[1]  # the nonce differs per call, so token counts may too


def test_correlation_ids_are_echoed(api: httpx.Client) -> None:
    from_body = api.post("/v1/context:assemble", json=_assemble(requestId="req-body", traceId="trace-1"))
    assert (from_body.json()["requestId"], from_body.json()["traceId"]) == ("req-body", "trace-1")
    assert from_body.headers["x-request-id"] == "req-body"
    from_header = api.post("/v1/context:assemble", json=_assemble(), headers={"X-Request-ID": "req-header"})
    assert from_header.json()["requestId"] == from_header.headers["x-request-id"] == "req-header"
    both = api.post("/v1/context:assemble", json=_assemble(requestId="req-body"),
                    headers={"X-Request-ID": "req-header"})
    assert both.json()["requestId"] == both.headers["x-request-id"] == "req-body"  # the body's id is the request's


def _is_uuid4(text: str) -> bool:
    return str(uuid.UUID(text)) == text and uuid.UUID(text).version == 4


def _request_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "http_request"]


def test_without_a_request_id_one_is_generated_answered_and_logged(
    api: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="ibex_context.http"):
        first, second = (api.post("/v1/context:assemble", json=_assemble()) for _ in range(2))
    ids = [response.json()["requestId"] for response in (first, second)]
    assert all(_is_uuid4(i) for i in ids) and ids[0] != ids[1]
    assert [first.headers["x-request-id"], second.headers["x-request-id"]] == ids
    assert [r.request_id for r in _request_logs(caplog)] == ids  # type: ignore[attr-defined]


def test_a_caller_request_id_is_echoed_unchanged_and_logged(
    api: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="ibex_context.http"):
        response = api.post("/v1/context:assemble", json=_assemble(requestId="Caller 7 / ü"))
    assert response.json()["requestId"] == "Caller 7 / ü"
    assert "x-request-id" not in response.headers  # it cannot travel in a header; no other id is invented
    assert [r.request_id for r in _request_logs(caplog)] == ["Caller 7 / ü"]  # type: ignore[attr-defined]


def test_errors_carry_the_calls_request_id(api: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="ibex_context.http"):
        bad = api.post("/v1/context:assemble", json=_assemble(model="gpt-17"))
        search = api.post("/v1/memories:search", json={"orgId": ORG, "agentId": AGENT, "query": " "})
    ids = [_error(response, 400, "INVALID_ARGUMENT")["requestId"] for response in (bad, search)]
    assert all(_is_uuid4(i) for i in ids)
    assert [bad.headers["x-request-id"], search.headers["x-request-id"]] == ids
    assert [r.request_id for r in _request_logs(caplog)] == ids  # type: ignore[attr-defined]


# ---------------------------------------------------------------- SearchMemories and RecordMemoryFeedback


def test_search_returns_the_tenants_matching_memories(api: httpx.Client, memory_ids: tuple[str, ...]) -> None:
    response = api.post("/v1/memories:search", json={"orgId": ORG, "agentId": AGENT, "query": "oolong tea", "limit": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"memories", "totalCandidates", "searchTimeMs"}
    assert body["memories"][0]["id"] == memory_ids[2] and body["memories"][0]["content"] == TEA_FACTS[2]
    assert len(body["memories"]) <= 2 and body["memories"][0]["createdAt"].endswith("Z")


def test_feedback_reports_every_id(api: httpx.Client, memory_ids: tuple[str, ...]) -> None:
    unknown = str(uuid.uuid4())
    response = api.post("/v1/memories:feedback", json={"orgId": ORG, "memoryIds": [memory_ids[0], unknown],
                                                       "feedback": "positive", "traceId": str(uuid.uuid4())})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is False
    by_id = {u["memoryId"]: u for u in body["updates"]}
    assert by_id[memory_ids[0]]["error"] == "" and by_id[memory_ids[0]]["newScore"] > by_id[memory_ids[0]]["previousScore"]
    assert by_id[unknown]["error"] == "not_found"


# ---------------------------------------------------------------- error shapes


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/context:assemble", _assemble(surprise=1), "surprise"),
        ("/v1/context:assemble", _assemble(model=7), "model"),
        ("/v1/context:assemble", _assemble(options={"maxMemories": "many"}), "options.max_memories"),
        ("/v1/context:assemble", _assemble(options={"maxMemories": 101}), "options.max_memories"),
        ("/v1/context:assemble", _assemble(orgId="not-a-uuid"), "org_id"),
        ("/v1/context:assemble", _assemble(recentMessages=[{"role": "u", "content": "x"}] * 101), "recent_messages"),
        ("/v1/context:assemble", _assemble(query="q" * 8193), "query"),
        ("/v1/memories:search", {"orgId": ORG, "agentId": AGENT, "query": "  "}, "query"),
        ("/v1/memories:search", {"orgId": ORG, "agentId": AGENT, "query": "tea", "limit": 1000}, "limit"),
        ("/v1/memories:feedback", {"orgId": ORG, "memoryIds": [str(uuid.uuid4())], "feedback": "meh"}, "feedback"),
    ],
)
def test_bad_fields_are_400_naming_the_field(api: httpx.Client, path: str, body: dict, field: str) -> None:
    error = _error(api.post(path, json=body), 400, "INVALID_ARGUMENT")
    assert error["field"] == field and error["message"]


def test_bad_json_is_400(api: httpx.Client) -> None:
    response = api.post("/v1/context:assemble", content=b'{"orgId": ', headers={"content-type": "application/json"})
    assert "not valid JSON" in _error(response, 400, "INVALID_ARGUMENT")["message"]


def test_unknown_model_is_400_naming_the_model_and_the_known_ones(api: httpx.Client) -> None:
    error = _error(api.post("/v1/context:assemble", json=_assemble(model="gpt-17")), 400, "INVALID_ARGUMENT")
    known = sorted([m["model_id"] for m in json.loads(resources.files("adapters").joinpath(
        "data/model_capabilities.v1.json").read_bytes())["models"]] + [ODD_MODEL])
    assert error["field"] == "model"
    assert error["message"] == f"unknown model 'gpt-17': not in the model catalog (known: {', '.join(known)})"


def test_unknown_path_is_404_in_the_error_shape(api: httpx.Client) -> None:
    assert "/v1/nothing" in _error(api.post("/v1/nothing", json={}), 404, "NOT_FOUND")["message"]


def test_wrong_method_is_405_with_allow(api: httpx.Client) -> None:
    response = api.get("/v1/context:assemble")
    _error(response, 405, "METHOD_NOT_ALLOWED")
    assert response.headers["allow"] == "POST"


def test_other_media_types_are_415(api: httpx.Client) -> None:
    response = api.post("/v1/memories:search", content=b"query=tea", headers={"content-type": "text/plain"})
    assert "application/json" in _error(response, 415, "UNSUPPORTED_MEDIA_TYPE")["message"]


def test_oversized_bodies_are_413(api: httpx.Client) -> None:
    response = api.post("/v1/context:assemble", json=_assemble(query="q" * (MAX_BODY + 1)))
    _error(response, 413, "PAYLOAD_TOO_LARGE")


def test_a_bad_request_id_header_is_400(api: httpx.Client) -> None:
    error = _error(api.post("/v1/context:assemble", json=_assemble(), headers={"X-Request-ID": "x" * 200}),
                   400, "INVALID_ARGUMENT")
    assert error["field"] == "X-Request-ID"


def test_unexpected_failures_are_500_with_a_request_id_and_no_trace(api: httpx.Client) -> None:
    response = api.post("/v1/context:assemble", json=_assemble(model=ODD_MODEL), headers={"X-Request-ID": "boom-1"})
    error = _error(response, 500, "INTERNAL")
    assert error["requestId"] == "boom-1"
    assert "Traceback" not in response.text and "no_such_kind" not in response.text


# ---------------------------------------------------------------- caller authentication seam


def _proof(org_id: str = ORG) -> dict[str, str]:
    fresh = context(org_id=org_id, issued_at=datetime.now(UTC) - timedelta(seconds=1))
    return {PROOF_HEADER: base64.b64encode(ed_proof(fresh)).decode("ascii")}


def test_authenticated_app_requires_a_matching_proof(seeded_api: tuple[ServedApi, Seeded]) -> None:
    with httpx.Client(base_url=seeded_api[0].urls["authed"], timeout=30) as client:
        _error(client.post("/v1/context:assemble", json=_assemble()), 401, "UNAUTHENTICATED")
        _error(client.post("/v1/context:assemble", json=_assemble(orgId=OTHER_ORG), headers=_proof()),
               403, "PERMISSION_DENIED")
        _error(client.post("/v1/memories:feedback", headers=_proof(OTHER_ORG),
                           json={"orgId": ORG, "memoryIds": [str(uuid.uuid4())], "feedback": "neutral"}),
               403, "PERMISSION_DENIED")
        ok = client.post("/v1/context:assemble", json=_assemble(orgId=ORG.upper()), headers=_proof())
        assert ok.status_code == 200 and ok.json()["memoriesIncluded"] == 3


# ---------------------------------------------------------------- source failures (loopback memory service)


@pytest.fixture(scope="module")
def memory_service() -> Iterator[MemoryServer]:
    with MemoryServer.running() as server:
        server.add_token("svc-token", ORG)
        server.add_memory(ORG, AGENT, "The user drinks green tea")
        yield server


@pytest.fixture(scope="module")
def remote_api(memory_service: MemoryServer, tmp_path_factory: pytest.TempPathFactory,
               keyring: KeyRing) -> Iterator[httpx.Client]:
    settings = Settings(memory_base_url=memory_service.base_url, memory_api_token="svc-token",
                        data_path=str(tmp_path_factory.mktemp("remote") / "ibex.db"), **GENEROUS)
    with ServedApi(settings, keyring) as served, httpx.Client(base_url=served.urls["open"], timeout=30) as client:
        yield client


@pytest.fixture
def faults(memory_service: MemoryServer) -> Iterator[MemoryServer]:
    memory_service.clear_faults()
    yield memory_service
    memory_service.clear_faults()


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [("status_503", 503, "UNAVAILABLE"), ("status_500", 503, "UNAVAILABLE"), ("status_403", 502, "FAILED_PRECONDITION"),
     ("slow", 504, "DEADLINE_EXCEEDED")],
)
def test_search_maps_source_failures(remote_api: httpx.Client, faults: MemoryServer, fault: str, status: int,
                                     code: str) -> None:
    if fault == "slow":
        faults.hold("search")  # never answers: the search's budget runs out, however busy the machine
    else:
        faults.force_status("search", int(fault.split("_")[1]))
    _error(remote_api.post("/v1/memories:search", json={"orgId": ORG, "agentId": AGENT, "query": "tea"}), status, code)


def test_search_through_the_memory_service(remote_api: httpx.Client, faults: MemoryServer) -> None:
    response = remote_api.post("/v1/memories:search", json={"orgId": ORG, "agentId": AGENT, "query": "green tea"})
    assert response.status_code == 200 and response.json()["memories"][0]["content"] == "The user drinks green tea"


def test_assemble_degrades_instead_of_failing(remote_api: httpx.Client, faults: MemoryServer) -> None:
    faults.force_status("hot", 500)
    response = remote_api.post("/v1/context:assemble", json=_assemble(query="green tea"))
    assert response.status_code == 200, response.text
    body = response.json()
    outcomes = {b["name"]: b["outcome"] for b in body["branches"]}
    assert body["degradationLevel"] == "L1" and outcomes["hot"] == "error" and outcomes["cold"] == "success"
    assert "The user drinks green tea" in body["assembledContext"]


def test_a_tenant_mismatch_is_counted_as_an_auth_failure(seeded_api: tuple[ServedApi, Seeded]) -> None:
    with httpx.Client(base_url=seeded_api[0].urls["authed"], timeout=30) as client:
        _error(client.post("/v1/context:assemble", json=_assemble(orgId=OTHER_ORG), headers=_proof()), 403, "PERMISSION_DENIED")
        metrics = client.get("/metrics").text
    assert 'ibex_context_auth_failures_total{reason="org_mismatch"}' in metrics
