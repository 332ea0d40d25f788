"""HttpMemorySource against the real loopback memory service (no HTTP mocks)."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import attrs
import pytest
from aiohttp import web

from adapters.memory_http import HttpMemorySource
from domain.model.feedback import FeedbackItem
from domain.model.memory import CallContext, HotQuery, SearchQuery
from ports.errors import (
    MemoryNotFoundError,
    MemorySourceClosedError,
    MemorySourceDeniedError,
    MemorySourceTimeoutError,
    MemorySourceUnavailableError,
)
from tests.support.memory_server import (
    ANY_ORG,
    BAD_ITEM_KINDS,
    FOREIGN_AGENT_ID,
    FOREIGN_ORG_ID,
    MALFORMED_BODIES,
    MemoryServer,
)

# The field each bad item kind must be blamed on in DroppedItem.detail.
BLAMED_FIELD = {
    "rank_zero": "rank", "rank_bool": "rank", "bad_uuid": "memory.id", "org_not_uuid": "memory.org_id",
    "confidence_high": "memory.confidence", "similarity_nan": "similarity",
    "similarity_inf": "similarity", "similarity_bool": "similarity",
    "content_not_string": "memory.content", "category_not_string": "memory.category",
    "missing_source": "source", "missing_memory": "memory", "memory_not_object": "memory",
    "not_object": "item", "usefulness_high": "memory.usefulness_score",
    "created_at_bad": "memory.created_at", "retrieval_count_negative": "memory.retrieval_count",
    "tags_not_list": "memory.tags",
}


@attrs.frozen
class Tenant:
    org_id: str
    agent_id: str
    token: str


def new_tenant(server: MemoryServer, memories: int = 0) -> Tenant:
    tenant = Tenant(str(uuid.uuid4()), str(uuid.uuid4()), f"token-{uuid.uuid4().hex}")
    server.add_token(tenant.token, tenant.org_id)
    server.add_agent(tenant.org_id, tenant.agent_id)
    for k in range(memories):
        server.add_memory(tenant.org_id, tenant.agent_id, f"marker {tenant.org_id} {tenant.agent_id} {k}",
                          hot_score=1.0 - k / 100, confidence=0.5 + k / 100)
    return tenant


@pytest.fixture(scope="module")
def memory_server() -> Iterator[MemoryServer]:
    with MemoryServer.running() as server:
        yield server


@pytest.fixture
def server(memory_server: MemoryServer) -> MemoryServer:
    memory_server.clear_faults()
    memory_server.clear_log()
    return memory_server


@pytest.fixture
def tenant(server: MemoryServer) -> Tenant:
    return new_tenant(server, memories=3)


@pytest.fixture
async def source(server: MemoryServer, tenant: Tenant) -> AsyncIterator[HttpMemorySource]:
    adapter = HttpMemorySource(server.base_url + "/", tenant.token, pool_size=8)
    yield adapter
    await adapter.close()


def hot(tenant: Tenant, **kwargs: object) -> HotQuery:
    return HotQuery(org_id=tenant.org_id, agent_id=tenant.agent_id, **kwargs)  # type: ignore[arg-type]


def search(tenant: Tenant, query: str = "marker", **kwargs: object) -> SearchQuery:
    return SearchQuery(org_id=tenant.org_id, agent_id=tenant.agent_id, query=query, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ happy paths
async def test_hot_sends_query_parameters_bearer_token_and_correlation_ids(server, tenant, source):
    await source.hot(hot(tenant, limit=7, min_confidence=0.25, call=CallContext("req-1", "trace-1")), timeout_s=2)
    [logged] = server.requests("hot")
    assert (logged.method, logged.path) == ("GET", "/v1/memories/hot")
    assert logged.query == {"agent_id": tenant.agent_id, "limit": "7", "min_confidence": "0.25"}
    assert logged.headers["authorization"] == f"Bearer {tenant.token}"
    assert logged.headers["accept"] == "application/json"
    assert (logged.headers["x-request-id"], logged.headers["x-trace-id"]) == ("req-1", "trace-1")


async def test_correlation_ids_are_omitted_when_blank_or_not_header_safe(server, tenant, source):
    await source.hot(hot(tenant, call=CallContext("", "bad\r\nX-Evil: 1")), timeout_s=2)
    [logged] = server.requests("hot")
    assert "x-request-id" not in logged.headers and "x-trace-id" not in logged.headers
    assert "x-evil" not in logged.headers


async def test_hot_returns_hits_in_service_order_with_ranks_source_and_optional_fields(tenant, source):
    batch = await source.hot(hot(tenant), timeout_s=2)
    assert [hit.rank for hit in batch.hits] == [1, 2, 3]
    assert [hit.content.split()[-1] for hit in batch.hits] == ["0", "1", "2"]  # hot score descending
    assert [hit.similarity for hit in batch.hits] == [1.0, 0.99, 0.98]
    first = batch.hits[0]
    assert (first.org_id, first.agent_id, first.source) == (tenant.org_id, tenant.agent_id, "hot_cache")
    assert (first.confidence, first.usefulness, first.retrieval_count) == (0.5, 0.5, 0)
    assert first.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert batch.dropped == ()


async def test_ids_are_normalised_and_null_optional_fields_are_absent(server, tenant, source):
    memory_id = str(uuid.uuid4())
    server.add_memory(tenant.org_id, tenant.agent_id, "upper", id=memory_id.upper(), hot_score=2.0,
                      usefulness=None)
    first = (await source.hot(hot(tenant), timeout_s=2)).hits[0]
    assert first.memory_id == memory_id
    assert (first.usefulness, first.tags, first.retrieval_count) == (None, (), 0)


async def test_hot_honours_limit_and_min_confidence(tenant, source):
    batch = await source.hot(hot(tenant, limit=5, min_confidence=0.51), timeout_s=2)
    assert [hit.confidence for hit in batch.hits] == [0.51, 0.52]


async def test_search_posts_the_query_and_optional_filters_only_when_set(server, tenant, source):
    await source.search(search(tenant, "theme", limit=4), timeout_s=2)
    await source.search(search(tenant, "theme", min_similarity=0.2, categories=("factual",), tags=("ui",)),
                        timeout_s=2)
    plain, filtered = (r.json() for r in server.requests("search"))
    assert plain == {"agent_id": tenant.agent_id, "query": "theme", "limit": 4, "min_confidence": 0.0}
    assert filtered == {"agent_id": tenant.agent_id, "query": "theme", "limit": 10, "min_confidence": 0.0,
                        "min_similarity": 0.2, "categories": ["factual"], "tags": ["ui"]}
    assert server.requests("search")[0].headers["content-type"] == "application/json"


async def test_search_returns_hits_ranked_by_similarity_with_vector_source(server, tenant, source):
    best = server.add_memory(tenant.org_id, tenant.agent_id, "dark mode theme", category="preference",
                             tags=("ui",), retrieval_count=4)
    batch = await source.search(search(tenant, "dark mode theme marker"), timeout_s=2)
    assert batch.hits[0].memory_id == best and batch.hits[0].similarity == 0.75
    assert batch.hits[0].tags == ("ui",) and batch.hits[0].retrieval_count == 4
    assert [hit.rank for hit in batch.hits] == [1, 2, 3, 4]
    assert {hit.source for hit in batch.hits} == {"vector"}


# ------------------------------------------------------------------ malformed answers
@pytest.mark.parametrize("kind", sorted(MALFORMED_BODIES))
@pytest.mark.parametrize("endpoint", ["hot", "search"])
async def test_a_malformed_body_fails_the_whole_call(server, tenant, source, endpoint, kind):
    server.malform_body(endpoint, kind)
    call = source.hot(hot(tenant), timeout_s=2) if endpoint == "hot" else source.search(search(tenant), timeout_s=2)
    with pytest.raises(MemorySourceUnavailableError, match="malformed body"):
        await call


@pytest.mark.parametrize("kind", BAD_ITEM_KINDS)
async def test_a_malformed_item_is_dropped_with_the_field_named_and_the_rest_kept(server, tenant, source, kind):
    server.inject_bad_items("hot", kind)
    batch = await source.hot(hot(tenant), timeout_s=2)
    assert [hit.content.split()[-1] for hit in batch.hits] == ["0", "1", "2"]
    assert [hit.rank for hit in batch.hits] == [2, 3, 4]
    [dropped] = batch.dropped
    assert dropped.reason == "malformed"
    assert dropped.detail.startswith(f"results[0].{BLAMED_FIELD[kind]}: ")
    expects_id = kind not in ("bad_uuid", "missing_memory", "memory_not_object", "not_object")
    assert (dropped.memory_id != "") is expects_id


async def test_many_malformed_items_are_each_reported(server, tenant, source):
    server.inject_bad_items("search", *BAD_ITEM_KINDS)
    batch = await source.search(search(tenant, limit=50), timeout_s=2)
    assert len(batch.hits) == 3 and len(batch.dropped) == len(BAD_ITEM_KINDS)
    assert [d.detail.split(".")[0] for d in batch.dropped] == [f"results[{i}]" for i in range(len(BAD_ITEM_KINDS))]


async def test_results_past_the_limit_asked_for_are_not_read(server, tenant, source):
    """A service that answers more than asked costs the item checks of the limit, no more."""
    server.inject_bad_items("search", *BAD_ITEM_KINDS)  # put before the service's own results
    batch = await source.search(search(tenant, limit=2), timeout_s=2)
    assert batch.hits == ()
    assert [d.detail for d in batch.dropped][2:] == [
        f"results[2:]: past the limit of 2 asked for, not read ({len(BAD_ITEM_KINDS)} more)"]
    assert [d.detail.split(".")[0] for d in batch.dropped[:2]] == ["results[0]", "results[1]"]


@pytest.mark.parametrize("kind", ["surrogate", "utf8"])
async def test_invalid_unicode_in_content_is_replaced_not_fatal(server, tenant, source, kind):
    server.inject_invalid_text("hot", kind)
    batch = await source.hot(hot(tenant), timeout_s=2)
    assert len(batch.hits) == 3 and batch.dropped == ()
    assert batch.hits[0].content.startswith("broken \ufffd")
    assert all(hit.content.encode("utf-8") for hit in batch.hits)  # every string is encodable


async def test_other_tenants_items_are_fenced_out_and_reported_as_dropped(server, tenant, source):
    server.inject_foreign_items("search", 2)
    batch = await source.search(search(tenant), timeout_s=2)
    assert all((hit.org_id, hit.agent_id) == (tenant.org_id, tenant.agent_id) for hit in batch.hits)
    assert not any(hit.content.startswith("foreign") for hit in batch.hits)
    fenced = [item for item in batch.dropped if item.reason == "tenant_mismatch"]
    assert len(fenced) == 2
    assert FOREIGN_ORG_ID in fenced[0].detail and FOREIGN_AGENT_ID in fenced[1].detail


# ------------------------------------------------------------------ statuses and transport
@pytest.mark.parametrize("status", [401, 403])
async def test_refused_credentials_are_denied_with_the_status(server, tenant, source, status):
    server.force_status("search", status)
    with pytest.raises(MemorySourceDeniedError) as caught:
        await source.search(search(tenant), timeout_s=2)
    assert caught.value.status_code == status


async def test_an_unknown_token_and_a_foreign_agent_are_denied_with_the_service_code(server, tenant):
    other = new_tenant(server)
    stranger = HttpMemorySource(server.base_url, "no-such-token")
    with pytest.raises(MemorySourceDeniedError, match=r"HTTP 401 \(INVALID_TOKEN\)"):
        await stranger.hot(hot(tenant), timeout_s=2)
    await stranger.close()
    source = HttpMemorySource(server.base_url, tenant.token)
    with pytest.raises(MemorySourceDeniedError, match=r"HTTP 403 \(AGENT_NOT_AUTHORIZED\)"):
        await source.hot(hot(other), timeout_s=2)
    await source.close()


@pytest.mark.parametrize("status", [404, 422, 500, 503])
async def test_other_error_statuses_are_unavailable_with_the_status(server, tenant, source, status):
    server.force_status("hot", status)
    with pytest.raises(MemorySourceUnavailableError) as caught:
        await source.hot(hot(tenant), timeout_s=2)
    assert caught.value.status_code == status


async def test_an_answer_slower_than_the_timeout_times_out_within_budget(server, tenant, source):
    # The service holds the request (no answer until released), so the call cannot be answered
    # in time whatever the scheduling; the message names the caller's 50 ms budget, not the
    # exchange's hard cap (timeout + drain grace: 1050 ms), so the caller was let go at its budget.
    server.hold("search")
    try:
        with pytest.raises(MemorySourceTimeoutError, match=r"timeout after 50 ms"):
            await source.search(search(tenant), timeout_s=0.05)
    finally:
        server.release("search")


async def test_no_time_budget_is_a_timeout_without_a_request(server, tenant, source):
    with pytest.raises(MemorySourceTimeoutError, match="no time budget"):
        await source.hot(hot(tenant), timeout_s=0.0)
    assert server.requests() == ()


@pytest.mark.parametrize("endpoint", ["hot", "search"])
async def test_a_reset_connection_is_unavailable(server, tenant, source, endpoint):
    server.reset_connections(endpoint)
    call = source.hot(hot(tenant), timeout_s=2) if endpoint == "hot" else source.search(search(tenant), timeout_s=2)
    with pytest.raises(MemorySourceUnavailableError, match="transport error"):
        await call


async def test_an_unreachable_service_is_unavailable(tenant):
    source = HttpMemorySource("http://127.0.0.1:9", tenant.token)
    with pytest.raises(MemorySourceUnavailableError, match="transport error"):
        await source.hot(hot(tenant), timeout_s=2)
    await source.close()


async def test_an_answer_over_the_size_cap_is_unavailable(server, tenant):
    source = HttpMemorySource(server.base_url, tenant.token, max_body_bytes=200)
    with pytest.raises(MemorySourceUnavailableError, match="too large"):
        await source.hot(hot(tenant), timeout_s=2)
    await source.close()


async def test_a_chunked_answer_over_the_cap_is_refused_and_keeps_nothing_it_read(server, tenant):
    """No Content-Length: the body is read up to the cap, then refused; the error's traceback (kept
    in a reference cycle until a full collection) must not keep what was read."""
    server.huge_body("hot", 4 * 1024 * 1024, declared=False)
    source = HttpMemorySource(server.base_url, tenant.token, max_body_bytes=256 * 1024)
    with pytest.raises(MemorySourceUnavailableError, match="too large: over 262144 bytes") as refused:
        await source.hot(hot(tenant), timeout_s=5)
    await source.close()
    held = []
    tb = refused.value.__traceback__
    while tb is not None:
        held += [len(v) for v in tb.tb_frame.f_locals.values() if isinstance(v, list) and v and isinstance(v[0], bytes)]
        tb = tb.tb_next
    assert held == []


async def test_a_cookie_set_by_the_upstream_is_never_sent_back(tenant):
    """One session serves every tenant: a cookie set on one answer must not ride on the next call."""
    seen: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        response = web.json_response({"data": {"results": []}})
        response.set_cookie("upstream_session", f"for-{len(seen)}")
        return response

    app = web.Application()
    app.router.add_get("/v1/memories/hot", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    source = HttpMemorySource(f"http://localhost:{port}", tenant.token)  # a host name: jars keep its cookies
    try:
        for _ in range(3):
            assert (await source.hot(hot(tenant), timeout_s=2)).hits == ()
    finally:
        await source.close()
        await runner.cleanup()
    assert seen == [None, None, None]


# ------------------------------------------------------------------ feedback
def feedback(tenant: Tenant, memory_id: str, key: str = "key-1", value: str = "positive") -> FeedbackItem:
    return FeedbackItem(org_id=tenant.org_id, memory_id=memory_id, feedback=value, idempotency_key=key,
                        trace_id=str(uuid.uuid4()), notes="helpful")


async def test_feedback_is_posted_with_idempotency_key_and_returns_new_figures(server, tenant, source):
    memory_id = server.add_memory(tenant.org_id, tenant.agent_id, "x")
    item = feedback(tenant, memory_id)
    result = await source.record(item, timeout_s=2)
    assert (result.memory_id, result.feedback, result.new_usefulness_score) == (memory_id, "positive", 0.666667)
    assert (result.total_positive_feedback, result.total_negative_feedback) == (1, 0)
    [logged] = server.requests("feedback")
    assert logged.path == f"/v1/memories/{memory_id}/feedback"
    assert logged.headers["idempotency-key"] == "key-1" and logged.headers["x-trace-id"] == item.trace_id
    assert logged.json() == {"feedback": "positive", "session_id": None, "trace_id": item.trace_id,
                             "notes": "helpful"}


async def test_a_repeated_idempotency_key_counts_once(server, tenant, source):
    memory_id = server.add_memory(tenant.org_id, tenant.agent_id, "x")
    first = await source.record(feedback(tenant, memory_id, "same"), timeout_s=2)
    again = await source.record(feedback(tenant, memory_id, "same"), timeout_s=2)
    await source.record(feedback(tenant, memory_id, "other", "negative"), timeout_s=2)
    assert first == again and server.feedback_totals(memory_id) == (1, 1)


async def test_a_retry_after_a_lost_answer_counts_once(server, tenant, source):
    memory_id = server.add_memory(tenant.org_id, tenant.agent_id, "x")
    server.reset_connections("feedback", times=1, after_apply=True)
    with pytest.raises(MemorySourceUnavailableError):
        await source.record(feedback(tenant, memory_id), timeout_s=2)
    result = await source.record(feedback(tenant, memory_id), timeout_s=2)
    assert result.total_positive_feedback == 1 and server.feedback_totals(memory_id) == (1, 0)


async def test_feedback_on_an_unknown_memory_is_not_found(tenant, source):
    with pytest.raises(MemoryNotFoundError) as caught:
        await source.record(feedback(tenant, str(uuid.uuid4())), timeout_s=2)
    assert caught.value.status_code == 404


async def test_feedback_on_a_non_uuid_id_is_not_found_without_a_request(server, tenant, source):
    with pytest.raises(MemoryNotFoundError, match="not a UUID"):
        await source.record(feedback(tenant, "../../admin"), timeout_s=2)
    assert server.requests() == ()


@pytest.mark.parametrize(("fault", "error"), [
    (401, MemorySourceDeniedError), (403, MemorySourceDeniedError), (503, MemorySourceUnavailableError),
    ("no_data", MemorySourceUnavailableError), ("not_json", MemorySourceUnavailableError),
])
async def test_feedback_failures_map_to_port_errors(server, tenant, source, fault, error):
    memory_id = server.add_memory(tenant.org_id, tenant.agent_id, "x")
    if isinstance(fault, int):
        server.force_status("feedback", fault)
    else:
        server.malform_body("feedback", fault)
    with pytest.raises(error):
        await source.record(feedback(tenant, memory_id), timeout_s=2)


# ------------------------------------------------------------------ lifecycle and configuration
async def test_calls_after_close_raise_closed(tenant, source):
    await source.close()
    with pytest.raises(MemorySourceClosedError):
        await source.hot(hot(tenant), timeout_s=2)


async def test_close_during_a_call_ends_it_with_closed(server, tenant, source):
    server.hold("hot")  # the call stays in flight until closed
    call = asyncio.ensure_future(source.hot(hot(tenant), timeout_s=30))
    await asyncio.to_thread(server.wait_held, "hot")  # the request is at the service
    await source.close()
    with pytest.raises(MemorySourceClosedError):
        await call
    server.release("hot")


async def test_close_ends_calls_waiting_for_a_connection_with_closed(server, tenant):
    server.hold("hot")
    source = HttpMemorySource(server.base_url, tenant.token, pool_size=1)
    calls = [asyncio.ensure_future(source.hot(hot(tenant), timeout_s=30)) for _ in range(2)]
    await asyncio.to_thread(server.wait_held, "hot")  # the first is at the service, the second waits for its slot
    await source.close()
    results = await asyncio.gather(*calls, return_exceptions=True)
    server.release("hot")
    assert [type(r) for r in results] == [MemorySourceClosedError] * 2
    assert len(server.requests("hot")) == 1


@pytest.mark.parametrize(("url", "token", "message"), [
    ("", "t", "memory_base_url is required"), ("  ", "t", "memory_base_url is required"),
    ("ftp://x", "t", "http"), ("http://", "t", "http"), ("http://x", " ", "memory_api_token is required"),
    ("http://x", "a b", "visible ASCII"),
])
def test_bad_configuration_is_a_value_error_naming_the_setting(url, token, message):
    with pytest.raises(ValueError, match=message):
        HttpMemorySource(url, token)


async def test_waiting_for_a_pooled_connection_counts_against_the_timeout(server, tenant):
    server.hold("hot")  # the one connection stays busy until released
    source = HttpMemorySource(server.base_url, tenant.token, pool_size=1)
    busy = asyncio.ensure_future(source.hot(hot(tenant), timeout_s=30))
    await asyncio.to_thread(server.wait_held, "hot")
    with pytest.raises(MemorySourceTimeoutError, match="no free connection"):
        await source.hot(hot(tenant), timeout_s=0.05)
    server.release("hot")
    await busy
    assert len(server.requests("hot")) == 1  # the call that gave up never reached the service
    await source.close()


# ------------------------------------------------------------------ SPEC 2.14: timeouts never cross tenants
# Calls are abandoned on purpose, on a known set of calls: their requests are held at the service
# (no answer until released), so each one times out (or is cancelled from outside) mid-flight,
# whatever the machine's scheduling. Every count below is known in advance.
POOL = 8


def one_call(source: HttpMemorySource, tenant: Tenant, index: int, timeout_s: float) -> asyncio.Task:
    """Odd indexes ask for the hot list, even ones search."""
    call = (source.hot(hot(tenant), timeout_s=timeout_s) if index % 2 else
            source.search(search(tenant, f"marker {tenant.agent_id}"), timeout_s=timeout_s))
    return asyncio.ensure_future(call)


def check_own(batch, tenant: Tenant) -> None:  # type: ignore[no-untyped-def]
    assert len(batch.hits) == 5, batch
    for hit in batch.hits:  # only this tenant's markers, ever
        assert (hit.org_id, hit.agent_id) == (tenant.org_id, tenant.agent_id)
        assert hit.content.startswith(f"marker {tenant.org_id} {tenant.agent_id} ")


async def outcome_of(task: asyncio.Task) -> str:
    try:
        await task
    except MemorySourceTimeoutError as e:
        return "starved" if "no free connection" in str(e) else "timeout"
    except asyncio.CancelledError:
        return "cancelled"
    return "ok"


async def settle(source: HttpMemorySource) -> None:
    """Wait (polling; 30 s is a hang guard only) until no exchange runs any more."""
    async with asyncio.timeout(30):
        while source.in_flight:
            await asyncio.sleep(0.005)


def hold_both(server: MemoryServer) -> None:
    server.hold("hot")
    server.hold("search")


def release_both(server: MemoryServer) -> None:
    server.release("hot")
    server.release("search")


@pytest.fixture
def shared_pool_tenants(server: MemoryServer) -> list[Tenant]:
    server.add_token("service-token", ANY_ORG)
    return [new_tenant(server, memories=5) for _ in range(16)]


async def test_abandoned_calls_never_leak_answers_and_never_churn_connections(server, shared_pool_tenants):
    """Late answers are drained before a connection is reused, so the pool is never poisoned and
    never churned: connections opened <= pool size however many calls give up mid-flight.

    Each round: one call per slot, its request held at the service; half of them time out, the
    other half are cancelled from outside once their request is at the service. Then calls that
    find every slot taken give up waiting for one (no request sent). Then ordinary calls queue for
    the slots, and the held requests are released: their late answers are drained and the ordinary
    calls run on those very connections. The drain grace (60 s) never runs out here: every
    abandoned exchange ends by draining its answer, none by the cap.
    """
    rounds, starved_per_round, ordinary_per_round, rng = 6, 4, 24, random.Random(1)
    source = HttpMemorySource(server.base_url, "service-token", pool_size=POOL, drain_grace_s=60.0)
    before = server.connections_accepted
    outcomes: list[str] = []
    try:
        for _ in range(rounds):
            hold_both(server)
            abandoned = [one_call(source, rng.choice(shared_pool_tenants), i, 0.05 if i < POOL // 2 else 30.0)
                         for i in range(POOL)]
            await asyncio.to_thread(server.wait_held, "hot", POOL // 2)
            await asyncio.to_thread(server.wait_held, "search", POOL // 2)
            for task in abandoned[POOL // 2:]:
                task.cancel()  # cancelled from outside with its request at the service
            outcomes += [await outcome_of(task) for task in abandoned]
            starved = [one_call(source, rng.choice(shared_pool_tenants), i, 0.05) for i in range(starved_per_round)]
            outcomes += [await outcome_of(task) for task in starved]
            tenants = [rng.choice(shared_pool_tenants) for _ in range(ordinary_per_round)]
            ordinary = [one_call(source, t, i, 30.0) for i, t in enumerate(tenants)]
            release_both(server)  # the late answers are drained; the ordinary calls reuse those connections
            for task, tenant in zip(ordinary, tenants):
                check_own(await task, tenant)
                outcomes.append("ok")
        await settle(source)
    finally:
        release_both(server)
        await source.close()
    counts = {kind: outcomes.count(kind) for kind in ("ok", "timeout", "cancelled", "starved")}
    assert counts == {"ok": rounds * ordinary_per_round, "timeout": rounds * POOL // 2,
                      "cancelled": rounds * POOL // 2, "starved": rounds * starved_per_round}, counts
    abandoned_on_the_wire = len(server.requests()) - counts["ok"]
    assert abandoned_on_the_wire == rounds * POOL  # the answers that arrived after their caller had gone
    assert server.connections_accepted - before <= POOL


async def test_answers_past_the_drain_cap_close_their_connection_and_nothing_else(server, shared_pool_tenants):
    """A connection is closed only when its exchange hits timeout + drain_grace; each costs one reconnect.

    Each round: a few searches whose requests are held at the service until after their exchange
    hit its cap (timeout 250 ms + drain grace 250 ms), while ordinary hot calls run on the other
    connections; the next round reuses what is left and reconnects what was closed. (The pool is
    warm first, so each held request goes out at once on an idle connection, well within its cap.)
    """
    rounds, slow_per_round, ordinary_per_round, rng = 6, 3, 20, random.Random(2)
    source = HttpMemorySource(server.base_url, "service-token", pool_size=POOL, drain_grace_s=0.25)
    before = server.connections_accepted
    outcomes: list[str] = []
    try:
        warm = [rng.choice(shared_pool_tenants) for _ in range(POOL)]
        for task, tenant in zip([one_call(source, t, 1, 30.0) for t in warm], warm):
            check_own(await task, tenant)
        for _ in range(rounds):
            server.hold("search")
            slow = [one_call(source, rng.choice(shared_pool_tenants), 2 * i, 0.25) for i in range(slow_per_round)]
            tenants = [rng.choice(shared_pool_tenants) for _ in range(ordinary_per_round)]
            ordinary = [one_call(source, t, 2 * i + 1, 30.0) for i, t in enumerate(tenants)]
            for task, tenant in zip(ordinary, tenants):
                check_own(await task, tenant)
                outcomes.append("ok")
            outcomes += [await outcome_of(task) for task in slow]
            await asyncio.to_thread(server.wait_held, "search", slow_per_round)
            await settle(source)  # every held exchange has hit its cap: its connection is closed
            server.release("search")  # their answers now go to closed connections
        slow_total = rounds * slow_per_round
        assert outcomes.count("timeout") == slow_total and outcomes.count("ok") == rounds * ordinary_per_round
        assert len(server.requests("search")) == slow_total
        assert server.connections_accepted - before <= POOL + slow_total
        batch = await source.hot(hot(shared_pool_tenants[0]), timeout_s=30)  # the pool still answers correctly
        assert {hit.agent_id for hit in batch.hits} == {shared_pool_tenants[0].agent_id}
    finally:
        release_both(server)
        await source.close()
