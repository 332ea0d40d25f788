"""RedisDirectiveStore against a real redis-server: Go envelopes, malformed values, outages, timeouts."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as redis_asyncio

from adapters.redis_directive_store import DEFAULT_COOLDOWN_S, DEFAULT_MAX_COOLDOWN_S, RedisDirectiveStore, backstop_timeout_s
from domain.model.directive import Directive
from ports.errors import DirectiveStoreError, DirectiveStoreTimeoutError
from tests.fakes.clock import FixedClock
from tests.support.go_envelope import go_envelope
from tests.support.redis_proxy import HoldingRedisProxy
from tests.support.redis_server import RedisServer, seed

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
    # Budgets and backstops far longer than any refusal takes: a failure that is not a timeout came
    # from the refused connection itself, not from waiting a budget out ("fast", whatever the load).
    # The circuit's cool-downs pass when the clock is advanced: each advance lets one call through.
    clock = FixedClock()
    store = RedisDirectiveStore.for_branch_timeout(private_redis.url, branch_timeout_s=5.0, monotonic=clock.monotonic)
    try:
        assert await store.get(ORG, AGENT, timeout_s=30.0) is None
        private_redis.stop()
        # The pooled connection first (closed by the server), then a refused reconnect (the probe
        # after the cool-down), and calls refused by the open circuit in between: errors, never timeouts.
        for advance_s in (0.0, 0.0, DEFAULT_COOLDOWN_S, 0.0):
            clock.advance(advance_s)
            with pytest.raises(DirectiveStoreError) as excinfo:
                await store.get(ORG, AGENT, timeout_s=30.0)
            assert not isinstance(excinfo.value, DirectiveStoreTimeoutError), excinfo.value
        assert "circuit open" in str(excinfo.value) and "Error 111 connecting" in str(excinfo.value)  # ECONNREFUSED
        private_redis.start()
        await seed(private_redis.url, {KEY: go_envelope("back", "system_first")})
        clock.advance(DEFAULT_MAX_COOLDOWN_S)  # the failed probe doubled the cool-down
        assert (await store.get(ORG, AGENT, timeout_s=30.0)).content == "back"
        assert store.circuit.state == "closed"
    finally:
        await store.close()


@pytest.fixture
async def proxy(private_redis: RedisServer) -> AsyncIterator[HoldingRedisProxy]:
    """A proxy in front of the test's own redis-server, holding the GETs the test chooses."""
    holding = await HoldingRedisProxy.start(private_redis.port)
    yield holding
    await holding.close()


async def test_unanswered_get_times_out_at_the_call_budget_not_the_socket_backstop(
    private_redis: RedisServer, proxy: HoldingRedisProxy
) -> None:
    # The reply is held until released, so the call cannot be answered in time however slow the
    # machine; the message names the per-call bound (the backstop's says "hit the socket timeout").
    store = RedisDirectiveStore.from_url(proxy.url, socket_timeout_s=30.0, connect_timeout_s=30.0)
    try:
        assert await store.get(ORG, AGENT, timeout_s=30.0) is None  # connection warmed before the hold
        proxy.hold_gets(KEY)
        with pytest.raises(DirectiveStoreTimeoutError, match=r"timeout after 10 ms"):
            await store.get(ORG, AGENT, timeout_s=0.01)
        assert proxy.held_gets == 1  # it was interrupted with its GET written and its reply owed
    finally:
        proxy.release()
        await store.close()


# --- SPEC 2.14: a timeout never crosses tenants ---------------------------------------------------


def tenant(index: int) -> tuple[str, str]:
    return str(uuid.UUID(int=2 * index + 1)), str(uuid.UUID(int=2 * index + 2))


def tenant_key(index: int) -> str:
    org, agent = tenant(index)
    return f"{org}:directive:{agent}"


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


async def test_interrupted_get_never_hands_its_reply_to_the_next_tenant(
    private_redis: RedisServer, proxy: HoldingRedisProxy
) -> None:
    await seed_tenants(private_redis.url, 2)
    (org_a, agent_a), (org_b, agent_b) = tenant(0), tenant(1)
    key_a, key_b = tenant_key(0), tenant_key(1)
    control = redis_asyncio.BlockingConnectionPool.from_url(proxy.url, max_connections=1)
    clock = FixedClock()  # A's timeout opens the store's circuit: B's read, a cool-down later, is its probe
    store = RedisDirectiveStore.from_url(proxy.url, socket_timeout_s=30.0, connect_timeout_s=30.0, max_connections=1,
                                         monotonic=clock.monotonic)
    try:
        # The control proves the scenario is real: without the discard, B reads A's directive.
        # A's GET is held, so A times out with its reply owed; B's GET goes out on the same
        # connection (held behind A's); once released, Redis answers A, then B, and B reads A's.
        await unsafe_get(control, key_b, 30.0)  # connection warmed before the hold
        proxy.hold_gets(key_a)
        with pytest.raises(TimeoutError):
            await unsafe_get(control, key_a, 0.02)
        late = asyncio.ensure_future(unsafe_get(control, key_b, 30.0))
        await proxy.wait_for(lambda: proxy.kept_back_commands() == 2, "B's GET kept back behind A's")
        proxy.release()
        assert marker(org_a, agent_a).encode() in await late
        # The store, same scenario: A times out, and its connection is closed, never reused...
        assert (await store.get(org_b, agent_b, timeout_s=30.0)).content == marker(org_b, agent_b)
        proxy.hold_gets(key_a)
        with pytest.raises(DirectiveStoreTimeoutError):
            await store.get(org_a, agent_a, timeout_s=0.02)
        [interrupted] = proxy.links_holding()
        await proxy.wait_for(lambda: interrupted.client_closed, "the interrupted connection closed by the store")
        # ...so B, on a new connection, gets B's directive, even with A's reply released meanwhile.
        clock.advance(DEFAULT_COOLDOWN_S)
        later = asyncio.ensure_future(store.get(org_b, agent_b, timeout_s=30.0))
        proxy.release()
        assert (await later).content == marker(org_b, agent_b)
    finally:
        proxy.release()
        await store.close()
        await control.disconnect()


async def store_clients(admin: redis_asyncio.Redis, admin_name: str) -> int:
    """Clients Redis has open, other than the admin (and any it is about to close: flag A)."""
    listing = (await admin.execute_command("CLIENT", "LIST")).decode()
    return sum(1 for line in listing.split("\n") if line.strip()
               and f" name={admin_name} " not in line and "A" not in line.split(" flags=")[1].split(" ")[0])


async def test_concurrent_gets_with_timeouts_never_cross_tenants(
    private_redis: RedisServer, proxy: HoldingRedisProxy
) -> None:
    """Rounds of concurrent GETs over one shared pool, in each of which a known set of calls is interrupted.

    Each round: a warm phase (as many calls as the pool has connections, all answered); then one
    designated call per connection, for tenants whose GETs the proxy holds, so each of them times
    out with its GET written and its reply owed, started together with ordinary calls for other
    tenants, which queue for a connection and so run on the ones the interrupted calls leave.
    Once every designated call has timed out, the held GETs are released: a connection the store
    had kept would now hand a stale reply to the ordinary call using it. Nothing here depends on
    how fast the machine is: the designated calls cannot be answered, the others have 30 s.
    """
    tenants, pool_size, rounds, ordinary_per_round = 64, 8, 10, 24
    await seed_tenants(private_redis.url, tenants)
    store = RedisDirectiveStore.from_url(
        proxy.url, socket_timeout_s=30.0, connect_timeout_s=30.0, max_connections=pool_size
    )
    admin = redis_asyncio.from_url(private_redis.url, client_name="tenancy-admin", single_connection_client=True)
    received_before = (await admin.info("stats"))["total_connections_received"]
    outcomes: dict[tuple[int, int], str] = {}  # (round, call) -> "own" | "timeout" | what else happened
    designated: set[tuple[int, int]] = set()
    client_samples: list[int] = []

    async def one_call(round_no: int, call: int, tenant_index: int, timeout_s: float) -> None:
        org, agent = tenant(tenant_index)
        try:
            directive = await store.get(org, agent, timeout_s=timeout_s)
        except DirectiveStoreTimeoutError:
            outcomes[round_no, call] = "timeout"
            return
        except DirectiveStoreError as e:
            outcomes[round_no, call] = f"ERROR: {e}"
            return
        content = None if directive is None else directive.content
        outcomes[round_no, call] = "own" if content == marker(org, agent) else f"CROSSED: {content}"

    async def warm_phase(round_no: int, tenant_indexes: list[int]) -> None:
        """Every connection of the pool in use at once, all answered; then count Redis' clients."""
        await asyncio.gather(*(one_call(round_no, -1 - k, t, 30.0) for k, t in enumerate(tenant_indexes[:pool_size])))
        client_samples.append(await store_clients(admin, "tenancy-admin"))  # settled: nothing is closing

    try:
        async with asyncio.timeout(120):  # a hang guard only
            for round_no in range(rounds):
                held = [(round_no * pool_size + k) % tenants for k in range(pool_size)]
                others = [t for t in range(tenants) if t not in held]
                await warm_phase(round_no, others[round_no:])
                proxy.hold_gets(*(tenant_key(t) for t in held))
                # Started first, the designated calls take every connection; the ordinary ones wait.
                interrupted = [asyncio.ensure_future(one_call(round_no, k, t, 0.25)) for k, t in enumerate(held)]
                designated.update((round_no, k) for k in range(pool_size))
                ordinary = [asyncio.ensure_future(one_call(round_no, pool_size + k, others[(round_no * 7 + k) % len(others)], 30.0))
                            for k in range(ordinary_per_round)]
                await asyncio.gather(*interrupted)
                links = proxy.links_holding()
                assert sorted(key for link in links for key in link.held_keys) == sorted(tenant_key(t) for t in held)
                assert all(len(link.held_keys) == 1 for link in links)  # one interrupted GET per connection
                # Every interrupted exchange's connection is closed by the store, never reused...
                await proxy.wait_for(lambda links=links: all(link.client_closed for link in links),
                                     "interrupted connections closed by the store")
                proxy.release()  # ...so the replies released now reach nobody
                await asyncio.gather(*ordinary)
            await warm_phase(rounds, list(range(tenants)))  # on the connections the last round left
        received = (await admin.info("stats"))["total_connections_received"] - received_before
    finally:
        proxy.release()
        await store.close()
        await admin.aclose()
    timeouts = {call for call, outcome in outcomes.items() if outcome == "timeout"}
    own = sum(1 for outcome in outcomes.values() if outcome == "own")
    print(f"calls={len(outcomes)} own={own} timeouts={len(timeouts)} new_connections={received} "
          f"store_clients={client_samples}")
    # (a) Every answer is the caller's own tenant's; the interrupted calls are exactly the designated ones.
    assert {call: o for call, o in outcomes.items() if o not in ("own", "timeout")} == {}
    assert len(outcomes) == (rounds + 1) * pool_size + rounds * (pool_size + ordinary_per_round)
    assert timeouts == designated and len(timeouts) == rounds * pool_size
    # (b) Churn stays bounded: never more clients than the pool, and at most one new connection per
    # interrupted call beyond the pool's first fill (the admin connected before the count started).
    assert max(client_samples) <= pool_size
    assert received == proxy.accepted  # every new connection is one of the store's (one upstream each)
    assert received <= len(timeouts) + pool_size
