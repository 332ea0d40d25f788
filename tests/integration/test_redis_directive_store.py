"""RedisDirectiveStore against a real redis-server: Go envelopes, malformed values, outages, timeouts."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as redis_asyncio

from adapters.redis_directive_store import RedisDirectiveStore, backstop_timeout_s
from domain.model.directive import Directive
from ports.errors import DirectiveStoreError, DirectiveStoreTimeoutError
from tests.support.go_envelope import go_envelope
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis

ORG = "5f0c6b2e-8d4a-4c1e-9b7a-1d2e3f405162"
AGENT = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
KEY = f"{ORG}:directive:{AGENT}"
VERSION = uuid.UUID("0b9e8f7a-6d5c-4b3a-9f8e-7d6c5b4a3f2e")


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisDirectiveStore]:
    store = RedisDirectiveStore.from_url(redis_url, socket_timeout_s=1.0, connect_timeout_s=1.0, max_connections=4)
    yield store
    await store.close()


async def stored_then_read(client: redis_asyncio.Redis, store: RedisDirectiveStore, raw: bytes) -> Directive | None:
    await client.set(KEY, raw)
    return await store.get(ORG, AGENT, timeout_s=1.0)


async def test_go_envelope_with_every_field_is_parsed(redis_client, store) -> None:
    raw = go_envelope("Be precise.", "system_append", VERSION)
    version = str(VERSION).encode()
    assert raw == b'{"v":1,"content":"Be precise.","injection_mode":"system_append","version_id":"%s"}' % version
    directive = await stored_then_read(redis_client, store, raw)
    assert directive == Directive("Be precise.", "system_append", str(VERSION))


async def test_html_escaped_content_round_trips(redis_client, store) -> None:
    content = '<b>&</b> "q" \\ \n\t\b\f \u2028\u2029 \x01\x1f\x7f é'
    raw = go_envelope(content, "user_prepend")
    assert raw == (
        b'{"v":1,"content":"\\u003cb\\u003e\\u0026\\u003c/b\\u003e \\"q\\" \\\\ \\n\\t\\b\\f '
        b'\\u2028\\u2029 \\u0001\\u001f\x7f \xc3\xa9","injection_mode":"user_prepend"}'
    )
    assert await stored_then_read(redis_client, store, raw) == Directive(content, "user_prepend", None)


async def test_non_ascii_content_is_raw_utf8_and_round_trips(redis_client, store) -> None:
    content = "Réponds en français — 日本語で 🙂"
    raw = go_envelope(content, "system_first", VERSION)
    assert content.encode("utf-8") in raw
    assert (await stored_then_read(redis_client, store, raw)).content == content


async def test_omitted_version_id_is_none(redis_client, store) -> None:
    raw = go_envelope("x", "system_first")
    assert b"version_id" not in raw
    assert (await stored_then_read(redis_client, store, raw)).version_id is None


async def test_empty_content_with_empty_mode_is_an_empty_system_first_directive(redis_client, store) -> None:
    directive = await stored_then_read(redis_client, store, go_envelope("", ""))
    assert directive == Directive("", "system_first", None) and directive.is_blank


async def test_miss_is_none(store) -> None:
    assert await store.get(ORG, AGENT, timeout_s=1.0) is None


@pytest.mark.parametrize(
    "raw",
    [
        b'{"v":99,"content":"x"}', b'{"v":true,"content":"x"}', b'{"v":1.0,"content":"x"}',
        b'{"v":"1","content":"x"}', b'{"content":"x"}', b'{"v":1,"version_id":"not-a-uuid"}',
        b'{"v":1,"version_id":123}', b'{"v":1,"content":123}', b'{"v":1,"injection_mode":1}',
        b"\xff\xfe", b"\xff\xfe{}", b"not-json", b'["not","object"]', b'{"v":NaN}', b"",
        b'{"v":1,"version_id":"{0b9e8f7a-6d5c-4b3a-9f8e-7d6c5b4a3f2e}"}',
    ],
)
async def test_malformed_value_is_a_store_error(redis_client, store, raw: bytes) -> None:
    with pytest.raises(DirectiveStoreError, match=KEY) as excinfo:
        await stored_then_read(redis_client, store, raw)
    assert not isinstance(excinfo.value, DirectiveStoreTimeoutError)


@pytest.mark.parametrize(
    ("mode", "expected"), [("nope", "system_first"), (" user_prepend\n", "user_prepend"), ("   ", "system_first")]
)
async def test_injection_mode_is_normalised(redis_client, store, mode: str, expected: str) -> None:
    assert (await stored_then_read(redis_client, store, go_envelope("x", mode))).injection_mode == expected


async def test_null_content_and_mode_are_empty_and_system_first(redis_client, store) -> None:
    raw = b'{"v":1,"content":null,"injection_mode":null,"version_id":null}'
    assert await stored_then_read(redis_client, store, raw) == Directive("", "system_first", None)


async def test_uppercase_version_id_is_normalised(redis_client, store) -> None:
    raw = b'{"v":1,"content":"x","version_id":"' + str(VERSION).upper().encode() + b'"}'
    assert (await stored_then_read(redis_client, store, raw)).version_id == str(VERSION)


async def test_lone_surrogates_are_replaced_and_pairs_kept(redis_client, store) -> None:
    raw = b'{"v":1,"content":"a\\ud800b\\udc00c\\ud83d\\ude00","injection_mode":"system_first"}'
    assert (await stored_then_read(redis_client, store, raw)).content == "a\ufffdb\ufffdc\U0001f600"


async def test_key_uses_canonical_lowercase_ids(redis_client, store) -> None:
    await redis_client.set(KEY, go_envelope("found", "system_first"))
    directive = await store.get(ORG.upper(), AGENT.replace("-", "").upper(), timeout_s=1.0)
    assert directive is not None and directive.content == "found"


@pytest.mark.parametrize(
    ("org", "agent", "named"), [("nope", AGENT, "org_id"), (ORG, f"{{{AGENT}}}", "agent_id"), (ORG, "", "agent_id")]
)
async def test_bad_ids_are_rejected_by_name(store, org: str, agent: str, named: str) -> None:
    with pytest.raises(DirectiveStoreError, match=named):
        await store.get(org, agent, timeout_s=1.0)


async def test_wrong_redis_type_is_a_store_error(redis_client, store) -> None:
    await redis_client.hset(KEY, "content", "x")
    with pytest.raises(DirectiveStoreError, match="failed"):
        await store.get(ORG, AGENT, timeout_s=1.0)
    await redis_client.delete(KEY)
    assert await store.get(ORG, AGENT, timeout_s=1.0) is None  # the connection is still usable


async def test_close_then_get_is_a_store_error(redis_url) -> None:
    store = RedisDirectiveStore.from_url(redis_url, socket_timeout_s=1.0, connect_timeout_s=1.0)
    assert await store.get(ORG, AGENT, timeout_s=1.0) is None
    await store.close()
    await store.close()
    with pytest.raises(DirectiveStoreError, match="closed"):
        await store.get(ORG, AGENT, timeout_s=1.0)


async def test_unreachable_unix_socket_is_a_store_error(tmp_path) -> None:
    store = RedisDirectiveStore.from_url(f"unix://{tmp_path}/absent.sock", socket_timeout_s=0.5, connect_timeout_s=0.5)
    try:
        with pytest.raises(DirectiveStoreError, match="failed"):
            await store.get(ORG, AGENT, timeout_s=0.5)
    finally:
        await store.close()


@pytest.mark.parametrize("timeout_s", [0.0, -1.0])
async def test_no_time_left_is_a_timeout_without_io(store, timeout_s: float) -> None:
    with pytest.raises(DirectiveStoreTimeoutError):
        await store.get(ORG, AGENT, timeout_s=timeout_s)


async def test_nan_timeout_is_rejected(store) -> None:
    with pytest.raises(DirectiveStoreError, match="timeout_s"):
        await store.get(ORG, AGENT, timeout_s=float("nan"))


def test_construction_rejects_bad_settings_by_name() -> None:
    with pytest.raises(ValueError, match="Redis URL"):
        RedisDirectiveStore.from_url("http://example", socket_timeout_s=0.05, connect_timeout_s=0.05)
    with pytest.raises(ValueError, match="socket_timeout_s"):
        RedisDirectiveStore.from_url("redis://127.0.0.1:1", socket_timeout_s=0.0, connect_timeout_s=0.05)
    with pytest.raises(ValueError, match="max_connections"):
        RedisDirectiveStore.from_url(
            "redis://127.0.0.1:1", socket_timeout_s=0.05, connect_timeout_s=0.05, max_connections=0
        )


def test_backstop_is_a_multiple_of_the_branch_budget_with_a_floor() -> None:
    assert backstop_timeout_s(0.005) == 0.05
    assert backstop_timeout_s(0.1) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="branch_timeout_s"):
        backstop_timeout_s(float("inf"))


async def test_stopped_redis_fails_fast_and_recovers_on_restart(private_redis: RedisServer) -> None:
    store = RedisDirectiveStore.for_branch_timeout(private_redis.url, branch_timeout_s=0.005)
    try:
        assert await store.get(ORG, AGENT, timeout_s=1.0) is None
        private_redis.stop()
        for _ in range(3):
            started = time.perf_counter()
            with pytest.raises(DirectiveStoreError):
                await store.get(ORG, AGENT, timeout_s=1.0)
            assert time.perf_counter() - started < 0.25
        private_redis.start()
        await seed(private_redis.url, {KEY: go_envelope("back", "system_first")})
        assert (await store.get(ORG, AGENT, timeout_s=1.0)).content == "back"
    finally:
        await store.close()


async def test_paused_redis_times_out_within_the_budget(private_redis: RedisServer) -> None:
    store = RedisDirectiveStore.from_url(private_redis.url, socket_timeout_s=1.0, connect_timeout_s=1.0)
    admin = redis_asyncio.from_url(private_redis.url)
    try:
        assert await store.get(ORG, AGENT, timeout_s=1.0) is None  # connection warmed before the pause
        await admin.execute_command("CLIENT", "PAUSE", 300, "ALL")
        started = time.perf_counter()
        with pytest.raises(DirectiveStoreTimeoutError, match="timeout"):
            await store.get(ORG, AGENT, timeout_s=0.01)
        assert time.perf_counter() - started < 0.01 + 0.1
    finally:
        await store.close()
        await admin.aclose()


async def seed(url: str, values: dict[str, bytes]) -> None:
    admin = redis_asyncio.from_url(url)
    try:
        await admin.mset(values)
    finally:
        await admin.aclose()


# --- SPEC 2.14: a timeout never crosses tenants ---------------------------------------------------


def tenant(index: int) -> tuple[str, str]:
    return str(uuid.UUID(int=2 * index + 1)), str(uuid.UUID(int=2 * index + 2))


def marker(org: str, agent: str) -> str:
    return f"directive of {org}/{agent}"


async def seed_tenants(url: str, count: int) -> None:
    ids = [tenant(index) for index in range(count)]
    await seed(url, {f"{o}:directive:{a}": go_envelope(marker(o, a), "system_first") for o, a in ids})


async def unsafe_get(pool: redis_asyncio.BlockingConnectionPool, key: str, timeout_s: float) -> bytes | None:
    """Control: a GET that returns an interrupted connection to the pool as it is (the bug class)."""
    conn = await pool.get_connection()
    try:
        async with asyncio.timeout(timeout_s):
            await conn.send_command("GET", key)
            return await conn.read_response(disable_decoding=True, disconnect_on_error=False)
    finally:
        await pool.release(conn)


async def test_interrupted_get_never_hands_its_reply_to_the_next_tenant(private_redis: RedisServer) -> None:
    await seed_tenants(private_redis.url, 2)
    (org_a, agent_a), (org_b, agent_b) = tenant(0), tenant(1)
    admin = redis_asyncio.from_url(private_redis.url)
    control = redis_asyncio.BlockingConnectionPool.from_url(private_redis.url, max_connections=1)
    store = RedisDirectiveStore.from_url(
        private_redis.url, socket_timeout_s=1.0, connect_timeout_s=1.0, max_connections=1
    )
    try:
        # The control proves the scenario is real: without the discard, B reads A's directive.
        await unsafe_get(control, f"{org_b}:directive:{agent_b}", 1.0)
        await admin.execute_command("CLIENT", "PAUSE", 150, "ALL")
        with pytest.raises(TimeoutError):
            await unsafe_get(control, f"{org_a}:directive:{agent_a}", 0.02)
        assert marker(org_a, agent_a).encode() in await unsafe_get(control, f"{org_b}:directive:{agent_b}", 1.0)
        # The store, same scenario: A times out, B gets B's directive.
        assert (await store.get(org_b, agent_b, timeout_s=1.0)).content == marker(org_b, agent_b)
        await admin.execute_command("CLIENT", "PAUSE", 150, "ALL")
        with pytest.raises(DirectiveStoreTimeoutError):
            await store.get(org_a, agent_a, timeout_s=0.02)
        assert (await store.get(org_b, agent_b, timeout_s=1.0)).content == marker(org_b, agent_b)
    finally:
        await store.close()
        await control.disconnect()
        await admin.aclose()


async def connected_clients(admin: redis_asyncio.Redis, exclude_name: str) -> int:
    listing = (await admin.execute_command("CLIENT", "LIST")).decode()
    return sum(1 for line in listing.splitlines() if f" name={exclude_name} " not in line)


async def test_concurrent_gets_with_timeouts_never_cross_tenants(private_redis: RedisServer) -> None:
    tenants, calls, pool_size, rng = 64, 3000, 8, random.Random(2026)
    await seed_tenants(private_redis.url, tenants)
    store = RedisDirectiveStore.from_url(
        private_redis.url, socket_timeout_s=2.0, connect_timeout_s=2.0, max_connections=pool_size
    )
    admin = redis_asyncio.from_url(private_redis.url, client_name="tenancy-admin", single_connection_client=True)
    received_before = (await admin.info("stats"))["total_connections_received"]
    outcomes: list[str] = []
    peak_clients = 0

    async def one_call(index: int) -> None:
        org, agent = tenant(index % tenants)
        timeout_s = rng.uniform(0.0005, 0.015) if rng.random() < 0.3 else 2.0
        try:
            directive = await store.get(org, agent, timeout_s=timeout_s)
        except DirectiveStoreTimeoutError:
            outcomes.append("timeout")
            return
        outcomes.append("own" if directive.content == marker(org, agent) else f"CROSSED: {directive.content}")

    async def disturb(stop: asyncio.Event) -> None:
        # Pause the server ~20 ms (expiry is checked by the cron, hz 100), let it run ~30 ms, repeat:
        # GETs written during a pause are interrupted while their reply is still owed.
        nonlocal peak_clients
        await admin.config_set("hz", 100)
        while not stop.is_set():
            await admin.execute_command("CLIENT", "PAUSE", 10, "ALL")
            peak_clients = max(peak_clients, await connected_clients(admin, "tenancy-admin"))  # after the pause
            await asyncio.sleep(0.03)

    stop = asyncio.Event()
    try:
        async with asyncio.timeout(60):
            disturber = asyncio.create_task(disturb(stop))
            for start in range(0, calls, 24):
                await asyncio.gather(*(one_call(i) for i in range(start, start + 24)))
            stop.set()
            await disturber
        received = (await admin.info("stats"))["total_connections_received"] - received_before
    finally:
        await store.close()
        await admin.aclose()
    timeouts, own = outcomes.count("timeout"), outcomes.count("own")
    print(f"calls={len(outcomes)} own={own} timeouts={timeouts} new_connections={received} peak_clients={peak_clients}")
    assert [o for o in outcomes if o not in ("own", "timeout")] == []
    assert len(outcomes) == calls and own > calls // 2 and timeouts > 100
    assert peak_clients <= pool_size
    # Interrupted exchanges did happen (their connections were replaced), yet churn stays bounded:
    # at most one new connection per interrupted call, beyond the pool's first fill and the admin.
    replaced = received - pool_size - 1
    assert 20 <= replaced <= timeouts
