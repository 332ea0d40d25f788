"""RedisDirectiveStore's circuit breaker against a real redis-server, on a fake clock.

Redis is made to fail on purpose: the proxy holds GETs (a reply owed for as long as the test
wants, so any budget runs out) or the test's own redis-server is SIGSTOPped (hung: the kernel
still accepts connections, nothing answers). "Without a network round trip" is shown by the
proxy's counts (connections accepted, commands received) or by Redis' own, never by a timing.
The cool-down passes only when the test advances the clock.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator

import attrs
import pytest
import redis.asyncio as redis_asyncio

from adapters.redis_directive_store import (
    CLOSED, DEFAULT_COOLDOWN_S, DEFAULT_MAX_COOLDOWN_S, HALF_OPEN, OPEN, RedisDirectiveStore,
)
from ports.errors import DirectiveStoreError, DirectiveStoreTimeoutError
from tests.fakes.clock import FixedClock
from tests.support.go_envelope import go_envelope
from tests.support.redis_proxy import HoldingRedisProxy
from tests.support.redis_server import RedisServer, seed

pytestmark = pytest.mark.redis

ORG = "5f0c6b2e-8d4a-4c1e-9b7a-1d2e3f405162"
AGENT = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
OTHER_AGENT = "0e1f2a3b-4c5d-4a7b-8c9d-a1b2c3d4e5f6"
KEY = f"{ORG}:directive:{AGENT}"
OTHER_KEY = f"{ORG}:directive:{OTHER_AGENT}"
LONG_S = 30.0  # a budget no held call can meet and no answered call can miss
SHORT_S = 0.02  # a held call's budget: it cannot be answered in time, however slow the machine


@attrs.define(eq=False)
class Harness:
    store: RedisDirectiveStore
    proxy: HoldingRedisProxy
    clock: FixedClock
    states: list[str]

    async def get(self, timeout_s: float = LONG_S, agent: str = AGENT) -> str | None:
        directive = await self.store.get(ORG, agent, timeout_s=timeout_s)
        return None if directive is None else directive.content

    def network(self) -> tuple[int, int]:
        """(connections accepted, commands received) at the proxy."""
        return self.proxy.accepted, self.proxy.commands

    async def open_by_a_held_get(self) -> None:
        """Hold KEY's GETs and let two time out, one after the other: the circuit opens."""
        self.proxy.hold_gets(KEY)
        for state in (CLOSED, OPEN):  # the first makes Redis suspect, the second (sent after it) confirms
            with pytest.raises(DirectiveStoreTimeoutError):
                await self.get(SHORT_S)
            assert self.store.circuit.state == state

    async def refused_fast(self, agent: str = AGENT) -> DirectiveStoreError:
        """A call refused by the circuit, asserted not to have reached the proxy."""
        before = self.network()
        with pytest.raises(DirectiveStoreError) as excinfo:
            await self.get(LONG_S, agent)
        assert not isinstance(excinfo.value, DirectiveStoreTimeoutError), excinfo.value  # nothing waited
        assert self.network() == before  # no connection opened, no command sent
        return excinfo.value


@pytest.fixture
async def harness(private_redis: RedisServer) -> AsyncIterator[Harness]:
    await seed(private_redis.url, {KEY: go_envelope("mine", "system_first"),
                                   OTHER_KEY: go_envelope("other", "system_first")})
    proxy = await HoldingRedisProxy.start(private_redis.port)
    clock, states = FixedClock(), []
    store = RedisDirectiveStore.from_url(proxy.url, socket_timeout_s=LONG_S, connect_timeout_s=LONG_S,
                                         monotonic=clock.monotonic, on_circuit=states.append)
    try:
        yield Harness(store, proxy, clock, states)
    finally:
        proxy.release()
        await store.close()
        await proxy.close()


async def test_a_timeout_opens_the_circuit_and_calls_during_the_cool_down_never_reach_redis(harness: Harness) -> None:
    assert await harness.get() == "mine"  # a pooled connection, answered: closed
    assert harness.states == []
    await harness.open_by_a_held_get()
    assert harness.states == [OPEN]
    assert harness.store.circuit.last_failure == "no answer within 20 ms"
    for agent in (AGENT, OTHER_AGENT, AGENT):  # every key: the circuit is about Redis, not one key
        error = await harness.refused_fast(agent)
        assert str(error).startswith("directive store circuit open: Redis not asked for 250 ms more")
        assert str(error).endswith("after: no answer within 20 ms")
        assert ORG not in str(error) and AGENT not in str(error)  # no tenant's ids in what others see
    harness.clock.advance(DEFAULT_COOLDOWN_S / 2)
    await harness.refused_fast()
    with pytest.raises(DirectiveStoreError, match="circuit open"):
        await harness.store.ping(timeout_s=LONG_S)  # the warm-up's PING too
    assert harness.states == [OPEN]


async def test_after_the_cool_down_one_probe_closes_the_circuit_and_the_directive_is_served_again(
    harness: Harness
) -> None:
    await harness.open_by_a_held_get()
    harness.proxy.release()
    harness.clock.advance(DEFAULT_COOLDOWN_S)
    accepted, commands = harness.network()
    assert await harness.get() == "mine"  # the probe, on a new connection (the held one was dropped)
    assert harness.proxy.accepted == accepted + 1 and harness.proxy.commands > commands
    assert harness.store.circuit.state == CLOSED and harness.states == [OPEN, HALF_OPEN, CLOSED]
    assert await harness.get(agent=OTHER_AGENT) == "other"
    assert harness.states == [OPEN, HALF_OPEN, CLOSED]


async def test_a_failed_probe_reopens_the_circuit_with_a_doubled_cool_down(harness: Harness) -> None:
    await harness.open_by_a_held_get()
    harness.clock.advance(DEFAULT_COOLDOWN_S)
    held = harness.proxy.held_gets
    with pytest.raises(DirectiveStoreTimeoutError):  # the probe: its GET is held too
        await harness.get(SHORT_S)
    assert harness.proxy.held_gets == held + 1  # it did ask Redis
    assert harness.states == [OPEN, HALF_OPEN, OPEN] and harness.store.circuit.cooldown_s == DEFAULT_MAX_COOLDOWN_S
    harness.clock.advance(DEFAULT_COOLDOWN_S)
    await harness.refused_fast()  # a first cool-down is not enough any more
    harness.proxy.release()
    harness.clock.advance(DEFAULT_MAX_COOLDOWN_S - DEFAULT_COOLDOWN_S)
    assert await harness.get() == "mine"
    assert harness.states == [OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]
    assert harness.store.circuit.cooldown_s == DEFAULT_COOLDOWN_S  # reset by the answer


async def test_calls_during_a_probe_fail_fast(harness: Harness) -> None:
    await harness.open_by_a_held_get()
    harness.clock.advance(DEFAULT_COOLDOWN_S)
    held = harness.proxy.held_gets
    probe = asyncio.ensure_future(harness.get(LONG_S))
    await harness.proxy.wait_for(lambda: harness.proxy.held_gets == held + 1, "the probe's GET at the proxy")
    assert harness.store.circuit.state == HALF_OPEN
    for agent in (AGENT, OTHER_AGENT):
        error = await harness.refused_fast(agent)
        assert str(error) == ("directive store circuit half-open: one probe is asking Redis; "
                              "last failure: no answer within 20 ms")
    harness.proxy.release()
    assert await probe == "mine"
    assert harness.states == [OPEN, HALF_OPEN, CLOSED]


async def test_a_cancelled_probe_frees_the_half_open_slot(harness: Harness) -> None:
    await harness.open_by_a_held_get()
    harness.clock.advance(DEFAULT_COOLDOWN_S)
    held = harness.proxy.held_gets
    probe = asyncio.ensure_future(harness.get(LONG_S))
    await harness.proxy.wait_for(lambda: harness.proxy.held_gets == held + 1, "the probe's GET at the proxy")
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    # Cancelled while waiting for Redis: a failed probe, so open again (never stuck half-open)...
    assert harness.store.circuit.state == OPEN and harness.states == [OPEN, HALF_OPEN, OPEN]
    assert "interrupted while waiting for Redis" in harness.store.circuit.last_failure
    interrupted = harness.proxy.links_holding()[-1]  # the probe's (the first held GET's link is older)
    await harness.proxy.wait_for(lambda: interrupted.client_closed, "the cancelled probe's connection closed")
    # ...and after its cool-down the next call is the probe.
    harness.proxy.release()
    harness.clock.advance(harness.store.circuit.cooldown_s)
    assert await harness.get() == "mine"
    assert harness.states == [OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]


async def test_a_call_cancelled_by_its_callers_bound_opens_the_circuit(harness: Harness) -> None:
    """The production path: the retrieval branch bounds the call by the directive budget itself,
    set before the store's, so the store sees a cancellation, not its own timeout."""
    assert await harness.get() == "mine"
    harness.proxy.hold_gets(KEY)
    for state in (CLOSED, OPEN):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(SHORT_S):
                await harness.get(LONG_S)
        assert harness.store.circuit.state == state
    assert harness.states == [OPEN]
    assert "interrupted while waiting for Redis" in harness.store.circuit.last_failure
    await harness.refused_fast()


async def test_gets_in_flight_together_when_redis_goes_quiet_count_once_and_an_answer_clears_them(
    harness: Harness
) -> None:
    """What a stall of the event loop looks like to the circuit: every GET waiting at that moment
    fails at once. They are one look at Redis; an answer after them closes the question."""
    assert await harness.get() == "mine"
    harness.proxy.hold_gets(KEY)
    held = harness.proxy.held_gets
    together = [asyncio.ensure_future(harness.get(LONG_S)) for _ in range(3)]
    await harness.proxy.wait_for(lambda: harness.proxy.held_gets == held + 3, "three GETs held at the proxy")
    for call in together:
        call.cancel()
    results = await asyncio.gather(*together, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results), results
    assert harness.store.circuit.state == CLOSED and harness.states == []
    assert await harness.get(agent=OTHER_AGENT) == "other"  # Redis answers: not suspect any more
    with pytest.raises(DirectiveStoreTimeoutError):
        await harness.get(SHORT_S)
    assert harness.store.circuit.state == CLOSED and harness.states == []


async def test_a_miss_a_malformed_value_an_error_reply_or_bad_ids_never_open_the_circuit(
    harness: Harness, private_redis: RedisServer
) -> None:
    admin = redis_asyncio.from_url(private_redis.url)
    try:
        await admin.delete(OTHER_KEY)
        assert await harness.get(agent=OTHER_AGENT) is None  # a miss
        await admin.set(OTHER_KEY, b"not-json")
        with pytest.raises(DirectiveStoreError, match="not JSON"):
            await harness.get(agent=OTHER_AGENT)
        await admin.delete(OTHER_KEY)
        await admin.hset(OTHER_KEY, "content", "x")
        with pytest.raises(DirectiveStoreError, match="WRONGTYPE"):  # an error reply, read in full
            await harness.get(agent=OTHER_AGENT)
        with pytest.raises(DirectiveStoreError, match="agent_id"):
            await harness.store.get(ORG, "not-a-uuid", timeout_s=LONG_S)
        with pytest.raises(DirectiveStoreTimeoutError, match="not attempted"):
            await harness.get(0.0)
        assert harness.store.circuit.state == CLOSED and harness.states == []
        # An answer of any of these kinds is Redis answering: as a probe, it closes the circuit.
        await harness.open_by_a_held_get()
        harness.clock.advance(DEFAULT_COOLDOWN_S)
        with pytest.raises(DirectiveStoreError, match="WRONGTYPE"):
            await harness.get(agent=OTHER_AGENT)
        assert harness.states == [OPEN, HALF_OPEN, CLOSED]
    finally:
        await admin.aclose()


async def test_a_lost_connection_and_refused_reconnects_open_the_circuit_as_an_error(
    harness: Harness, private_redis: RedisServer
) -> None:
    assert await harness.get() == "mine"
    harness.proxy.refuse_connections(True)
    admin = redis_asyncio.from_url(private_redis.url)
    try:
        assert await admin.execute_command("CLIENT", "KILL", "TYPE", "normal") == 1  # the store's (via the proxy)
    finally:
        await admin.aclose()
    await harness.proxy.wait_for(lambda: harness.proxy.open_links == 0, "the pooled connection closed")
    for state in (CLOSED, OPEN):  # the lost connection, then a reconnect refused
        with pytest.raises(DirectiveStoreError) as excinfo:
            await harness.get()
        assert not isinstance(excinfo.value, DirectiveStoreTimeoutError), excinfo.value
        assert harness.store.circuit.state == state
        assert harness.store.circuit.last_failure.startswith("ConnectionError")
    refused = harness.proxy.refused
    await harness.refused_fast()
    assert harness.proxy.refused == refused  # not even a refused connection attempt
    harness.clock.advance(DEFAULT_COOLDOWN_S)
    with pytest.raises(DirectiveStoreError, match="failed"):  # the probe's reconnect, refused
        await harness.get()
    assert harness.proxy.refused == refused + 1 and harness.store.circuit.state == OPEN
    harness.proxy.refuse_connections(False)
    harness.clock.advance(DEFAULT_MAX_COOLDOWN_S)
    assert await harness.get() == "mine"
    assert harness.states == [OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]


# ------------------------------------------------------------------ a hung redis-server (SIGSTOP)
@pytest.fixture
def stopped(private_redis: RedisServer) -> Iterator[list[bool]]:
    """``stopped[0] = True`` after the test SIGSTOPs the server: it is continued whatever happens."""
    flag = [False]
    yield flag
    if flag[0] and private_redis.process is not None:
        private_redis.process.send_signal(signal.SIGCONT)


async def test_a_hung_redis_server_opens_the_circuit_and_no_call_opens_a_connection_during_the_cool_down(
    private_redis: RedisServer, stopped: list[bool]
) -> None:
    await seed(private_redis.url, {KEY: go_envelope("mine", "system_first")})
    clock, states = FixedClock(), []
    store = RedisDirectiveStore.from_url(private_redis.url, socket_timeout_s=LONG_S, connect_timeout_s=LONG_S,
                                         monotonic=clock.monotonic, on_circuit=states.append)
    admin = redis_asyncio.from_url(private_redis.url, single_connection_client=True)
    try:
        assert (await store.get(ORG, AGENT, timeout_s=LONG_S)).content == "mine"
        received = (await admin.info("stats"))["total_connections_received"]
        assert private_redis.process is not None
        private_redis.process.send_signal(signal.SIGSTOP)
        stopped[0] = True
        for state in (CLOSED, OPEN):
            # The GET is written, nothing answers; the second on a new connection (the kernel
            # accepts it into the backlog), which confirms the first.
            with pytest.raises(DirectiveStoreTimeoutError):
                await store.get(ORG, AGENT, timeout_s=SHORT_S)
            assert store.circuit.state == state
        assert states == [OPEN]
        for _ in range(5):
            with pytest.raises(DirectiveStoreError, match="circuit open") as excinfo:
                await store.get(ORG, AGENT, timeout_s=SHORT_S)
            assert not isinstance(excinfo.value, DirectiveStoreTimeoutError)
        private_redis.process.send_signal(signal.SIGCONT)
        stopped[0] = False
        # Connections the store had opened while Redis was stopped waited in the backlog and are
        # counted now: only the confirming GET's (the first GET's connection predates the stop),
        # none during the cool-down.
        assert (await admin.info("stats"))["total_connections_received"] == received + 1
        clock.advance(DEFAULT_COOLDOWN_S)
        assert (await store.get(ORG, AGENT, timeout_s=LONG_S)).content == "mine"
        assert states == [OPEN, HALF_OPEN, CLOSED]
        assert (await admin.info("stats"))["total_connections_received"] == received + 2  # the probe's
    finally:
        await store.close()
        await admin.aclose()
