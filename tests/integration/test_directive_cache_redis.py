"""The directive cache against a real redis-server: the store, the cache and the invalidation feed
wired as the composition root wires them, with a fake clock for the TTL.

Nothing here waits a fixed time or asserts one: each test creates the condition it asserts on
(a publish and the feed reporting it, a killed subscription and the feed reporting it, refused
reconnects counted at a proxy) and waits for that state with a generous cap (a hang guard only).
Time in the cache only moves when a test advances the clock, so no entry expires by itself.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import attrs
import pytest
import redis.asyncio as redis_asyncio

from adapters.directive_cache import CachedDirectiveStore, CacheResult
from adapters.redis_directive_store import DEFAULT_COOLDOWN_S, RedisDirectiveStore, RedisInvalidations, org_and_key
from ports.errors import DirectiveStoreError
from tests.fakes.clock import FixedClock
from tests.support.go_envelope import go_envelope
from tests.support.polling import until
from tests.support.redis_proxy import HoldingRedisProxy
from tests.support.redis_sentinel import SentinelCluster
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis

TTL_S = 1.0
CAP_S = 30.0  # a hang guard, never a timing figure
CALL_TIMEOUT_S = 30.0
QUIET_PING_S = 3600.0  # the feed's PING only where a test is about it: no liveness check interferes
ORG, AGENT = "5f0c6b2e-8d4a-4c1e-9b7a-1d2e3f405162", "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"


def key(org: str, agent: str) -> str:
    return f"{org}:directive:{agent}"


def envelope(text: str) -> bytes:
    return go_envelope(text, "system_first")


def channel(org: str) -> str:
    return f"directive_updates:{org}"


@attrs.define(eq=False)
class Cached:
    """A store, its cache and its feed; records what the feed reported and what each lookup was."""

    store: RedisDirectiveStore
    cache: CachedDirectiveStore
    feed: RedisInvalidations
    clock: FixedClock
    invalidations: list[str | None] = attrs.Factory(list)
    states: list[tuple[bool, str]] = attrs.Factory(list)
    lookups: list[CacheResult] = attrs.Factory(list)
    changed: asyncio.Event = attrs.Factory(asyncio.Event)

    async def get(self, org: str = ORG, agent: str = AGENT) -> str | None:
        directive = await self.cache.get(org, agent, timeout_s=CALL_TIMEOUT_S)
        return None if directive is None else directive.content

    async def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        """Until ``condition()`` holds; checked whenever the feed reports something."""
        try:
            async with asyncio.timeout(CAP_S):
                while not condition():
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            raise AssertionError(f"{what}: not reached within {CAP_S} s (states {self.states})") from None

    async def live(self, subscriptions: int = 1) -> None:
        await self.wait_for(lambda: self.cache.live and self.feed.subscriptions >= subscriptions,
                            f"subscription #{subscriptions} confirmed")

    async def down(self) -> None:
        await self.wait_for(lambda: not self.cache.live and not self.feed.live, "subscription lost")

    async def invalidated(self, count: int) -> None:
        await self.wait_for(lambda: len(self.invalidations) >= count, f"{count} invalidations received")

    async def close(self) -> None:
        await self.feed.close()
        await self.cache.close()


def open_cached(store_url: str, feed_url: str | None = None, *, ping_interval_s: float = QUIET_PING_S,
                max_entries: int = 10_000, refresh_timeout_s: float | None = None) -> Cached:
    """The composition root's wiring (``open_directive_cache``), with a fake clock and records
    (refresh ahead off unless ``refresh_timeout_s`` is given, so that reads happen when a test says)."""
    clock = FixedClock()  # the cache's TTL and the store's circuit cool-down
    store = RedisDirectiveStore.from_url(store_url, socket_timeout_s=CALL_TIMEOUT_S, connect_timeout_s=CALL_TIMEOUT_S,
                                         monotonic=clock.monotonic)
    holder: list[Cached] = []

    def on_invalidate(org_id: str | None) -> None:
        harness = holder[0]
        harness.cache.invalidate(org_id)
        harness.invalidations.append(org_id)
        harness.changed.set()

    def on_state(live: bool, detail: str) -> None:
        harness = holder[0]
        harness.cache.subscription_changed(live)
        harness.states.append((live, detail))
        harness.changed.set()

    lookups: list[CacheResult] = []
    cache = CachedDirectiveStore(store, clock, key_of=org_and_key, ttl_s=TTL_S, max_entries=max_entries,
                                 refresh_timeout_s=refresh_timeout_s, on_lookup=lookups.append)
    feed = RedisInvalidations.from_url(feed_url or store_url, on_invalidate=on_invalidate, on_state=on_state,
                                       ping_interval_s=ping_interval_s)
    holder.append(Cached(store, cache, feed, clock, lookups=lookups))
    feed.start()
    return holder[0]


@pytest.fixture
async def cached(redis_url: str, redis_client: redis_asyncio.Redis) -> AsyncIterator[Cached]:
    harness = open_cached(redis_url)
    await harness.live()
    yield harness
    await harness.close()


# ------------------------------------------------------------------ updates, deletes, fills
async def test_an_update_published_by_the_proxy_is_seen_at_the_next_call(cached: Cached, redis_client) -> None:
    await redis_client.set(key(ORG, AGENT), envelope("v1"))
    assert await cached.get() == "v1"
    assert await cached.get() == "v1"
    assert cached.lookups == [CacheResult.MISS, CacheResult.HIT]
    await redis_client.set(key(ORG, AGENT), envelope("v2"))
    assert await cached.get() == "v1"  # no publish yet: the cached answer
    assert await redis_client.publish(channel(ORG), "") == 1
    await cached.invalidated(1)
    assert cached.invalidations == [ORG]
    assert await cached.get() == "v2"


async def test_a_delete_and_publish_gives_no_directive(cached: Cached, redis_client) -> None:
    await redis_client.set(key(ORG, AGENT), envelope("v1"))
    assert await cached.get() == "v1"
    await redis_client.delete(key(ORG, AGENT))
    await redis_client.publish(channel(ORG), "deleted")
    await cached.invalidated(1)
    assert await cached.get() is None
    assert await cached.get() is None
    assert cached.lookups[-2:] == [CacheResult.MISS, CacheResult.HIT]  # the miss is cached too


async def test_a_fill_without_a_publish_is_seen_once_the_ttl_has_passed(cached: Cached, redis_client) -> None:
    assert await cached.get() is None  # a miss, cached
    await redis_client.set(key(ORG, AGENT), envelope("filled"))  # the proxy's write-behind fill: no publish
    assert await cached.get() is None
    cached.clock.advance(TTL_S * 0.999)
    assert await cached.get() is None
    cached.clock.advance(TTL_S * 0.001)
    assert await cached.get() == "filled"


async def test_a_refresh_ahead_reads_redis_in_the_background_and_the_caller_never_waits(redis_url, redis_client) -> None:
    harness = open_cached(redis_url, refresh_timeout_s=CALL_TIMEOUT_S)
    try:
        await harness.live()
        await redis_client.set(key(ORG, AGENT), envelope("v1"))
        assert await harness.get() == "v1"
        await redis_client.set(key(ORG, AGENT), envelope("v2"))  # no publish
        harness.clock.advance(TTL_S * 0.6)
        assert await harness.get() == "v1"  # served from the entry; its refresh reads Redis
        async with asyncio.timeout(CAP_S):
            while harness.cache._refreshes:  # noqa: SLF001 - wait for the background read it started
                await asyncio.gather(*harness.cache._refreshes.values())  # noqa: SLF001
        harness.clock.advance(TTL_S * 0.45)  # past the first read's TTL; the refreshed entry is still young
        assert await harness.get() == "v2"
        assert harness.lookups == [CacheResult.MISS, CacheResult.REFRESH, CacheResult.HIT]
    finally:
        await harness.close()


async def test_a_channel_that_names_no_org_drops_the_whole_cache(cached: Cached, redis_client) -> None:
    other = str(uuid.uuid4())
    await redis_client.mset({key(ORG, AGENT): envelope("mine v1"), key(other, AGENT): envelope("other v1")})
    assert (await cached.get(), await cached.get(other)) == ("mine v1", "other v1")
    await redis_client.mset({key(ORG, AGENT): envelope("mine v2"), key(other, AGENT): envelope("other v2")})
    await redis_client.publish("directive_updates:not-a-uuid", "")
    await cached.invalidated(1)
    assert cached.invalidations == [None] and cached.cache.entries == 0
    assert (await cached.get(), await cached.get(other)) == ("mine v2", "other v2")


async def test_an_org_id_in_any_accepted_spelling_invalidates_its_canonical_entries(cached: Cached, redis_client) -> None:
    await redis_client.set(key(ORG, AGENT), envelope("v1"))
    assert await cached.get() == "v1"
    await redis_client.set(key(ORG, AGENT), envelope("v2"))
    await redis_client.publish(channel(ORG.upper()), "")
    await redis_client.publish(channel(ORG.replace("-", "")), "")
    await cached.invalidated(2)
    assert cached.invalidations == [ORG, ORG]
    assert await cached.get() == "v2"


# ------------------------------------------------------------------ a lost subscription
@pytest.fixture
async def feed_proxy(private_redis: RedisServer) -> AsyncIterator[HoldingRedisProxy]:
    """A proxy in front of the test's own redis-server, for the feed's connection only."""
    proxy = await HoldingRedisProxy.start(private_redis.port)
    yield proxy
    await proxy.close()


@pytest.fixture
async def admin(private_redis: RedisServer) -> AsyncIterator[redis_asyncio.Redis]:
    client = redis_asyncio.from_url(private_redis.url)
    yield client
    await client.aclose()


async def test_a_killed_subscription_bypasses_the_cache_until_it_is_confirmed_again(
    private_redis: RedisServer, feed_proxy: HoldingRedisProxy, admin: redis_asyncio.Redis
) -> None:
    cached = open_cached(private_redis.url, feed_proxy.url)
    try:
        await cached.live()
        await admin.set(key(ORG, AGENT), envelope("v1"))
        assert await cached.get() == "v1"
        # The feed cannot reconnect (the proxy refuses it) once Redis drops its subscription.
        feed_proxy.refuse_connections(True)
        assert await admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub") == 1
        await cached.down()
        assert cached.cache.entries == 0
        # Down: every call goes to Redis, so a change nobody published is seen at once.
        await admin.set(key(ORG, AGENT), envelope("v2"))
        assert await cached.get() == "v2"
        await admin.set(key(ORG, AGENT), envelope("v3"))
        assert await cached.get() == "v3"
        assert cached.lookups[-2:] == [CacheResult.BYPASS, CacheResult.BYPASS] and cached.cache.entries == 0
        await feed_proxy.wait_for(lambda: feed_proxy.refused >= 3, "three refused reconnects")
        assert [live for live, _ in cached.states] == [True, False]  # one transition, however many retries
        # Reconnects allowed again: a new PSUBSCRIBE is confirmed and the cache is used again.
        feed_proxy.refuse_connections(False)
        await cached.live(subscriptions=2)
        assert [live for live, _ in cached.states] == [True, False, True]
        assert await cached.get() == "v3"
        await admin.set(key(ORG, AGENT), envelope("v4"))
        assert await cached.get() == "v3"
        assert cached.lookups[-2:] == [CacheResult.MISS, CacheResult.HIT]
        await admin.publish(channel(ORG), "")
        await cached.invalidated(1)
        assert await cached.get() == "v4"
    finally:
        await cached.close()


async def test_a_resubscription_empties_what_was_cached_before_the_loss(
    private_redis: RedisServer, admin: redis_asyncio.Redis
) -> None:
    cached = open_cached(private_redis.url)
    try:
        await cached.live()
        await admin.set(key(ORG, AGENT), envelope("v1"))
        assert await cached.get() == "v1"
        await admin.set(key(ORG, AGENT), envelope("v2"))  # its message, had there been one, is lost below
        assert await admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub") == 1
        await cached.live(subscriptions=2)
        assert await cached.get() == "v2"
    finally:
        await cached.close()


async def test_a_restarted_redis_is_resubscribed_and_its_directives_read_anew(
    private_redis: RedisServer, admin: redis_asyncio.Redis
) -> None:
    cached = open_cached(private_redis.url)
    try:
        await cached.live()
        await admin.set(key(ORG, AGENT), envelope("before"))
        assert await cached.get() == "before"
        private_redis.stop()
        await cached.down()
        with pytest.raises(DirectiveStoreError):  # Redis is gone: the error, never a cached answer
            await cached.get()
        assert cached.lookups[-1] == CacheResult.BYPASS
        private_redis.start()
        await admin.connection_pool.disconnect()  # the test's own client: its connection died with Redis
        await cached.live(subscriptions=2)
        await admin.set(key(ORG, AGENT), envelope("after"))
        # One failed read leaves the store's circuit closed (suspect); had a second opened it, the
        # cool-down is past and this read probes: either way it asks Redis.
        cached.clock.advance(DEFAULT_COOLDOWN_S)
        assert await cached.get() == "after"
        await admin.set(key(ORG, AGENT), envelope("after v2"))
        assert await cached.get() == "after"  # cached again
        await admin.publish(channel(ORG), "")
        await cached.invalidated(1)
        assert await cached.get() == "after v2"
    finally:
        await cached.close()


async def test_an_unanswered_ping_ends_the_subscription(
    private_redis: RedisServer, feed_proxy: HoldingRedisProxy
) -> None:
    # The proxy holds every PING: the connection stays open but can no longer be shown alive.
    cached = open_cached(private_redis.url, feed_proxy.url, ping_interval_s=0.05)
    try:
        await cached.live()
        feed_proxy.hold_commands("PING")
        await cached.down()
        assert "no reply to PING" in cached.states[-1][1]
        feed_proxy.release()
        await cached.live(subscriptions=2)
    finally:
        feed_proxy.release()
        await cached.close()


async def test_an_unreachable_redis_leaves_the_cache_bypassed(tmp_path) -> None:
    cached = open_cached(f"unix://{tmp_path}/absent.sock")
    try:
        await until(lambda: cached.feed.attempts >= 3, "three attempts to subscribe")
        assert cached.states == [] and not cached.cache.live  # never live: no transition to report
        with pytest.raises(DirectiveStoreError):
            await cached.get()
        assert cached.lookups == [CacheResult.BYPASS]
    finally:
        await cached.close()


# ------------------------------------------------------------------ many tenants
def tenants(orgs: int, agents: int) -> list[tuple[str, str]]:
    return [(str(uuid.UUID(int=1000 + o)), str(uuid.UUID(int=5000 + a))) for o in range(orgs) for a in range(agents)]


def marker(org: str, agent: str, version: int) -> str:
    return f"directive of {org}/{agent} v{version}"


async def test_each_orgs_invalidation_drops_only_its_own_entries(cached: Cached, redis_client) -> None:
    ids = tenants(200, 2)
    await redis_client.mset({key(o, a): envelope(marker(o, a, 1)) for o, a in ids})
    assert [await cached.get(o, a) for o, a in ids] == [marker(o, a, 1) for o, a in ids]
    assert cached.cache.entries == 400
    await redis_client.mset({key(o, a): envelope(marker(o, a, 2)) for o, a in ids})  # no publish yet
    orgs = sorted({o for o, _ in ids})
    published = set(orgs[::2])
    for org in sorted(published):
        await redis_client.publish(channel(org), "")
    await cached.invalidated(len(published))
    assert sorted(cached.invalidations) == sorted(published)
    assert cached.cache.entries == 200
    for org, agent in ids:
        assert await cached.get(org, agent) == marker(org, agent, 2 if org in published else 1)


async def test_concurrent_calls_across_orgs_with_publishes_never_cross_tenants(cached: Cached, redis_client) -> None:
    """Rounds of concurrent calls for 50 orgs x 2 agents over one pool, each round interleaved with
    updates (SET of a new version + PUBLISH) of a few orgs. Every answer must carry its own org's
    and agent's marker; once every message is received and no call is in flight, every answer is
    the latest version (no read begun before an update was kept after it)."""
    ids = tenants(50, 2)
    versions = dict.fromkeys(ids, 1)
    await redis_client.mset({key(o, a): envelope(marker(o, a, 1)) for o, a in ids})
    orgs = sorted({o for o, _ in ids})
    chosen = random.Random(16)
    answers: list[tuple[tuple[str, str], str | None]] = []
    published = 0

    async def call(org: str, agent: str) -> None:
        answers.append(((org, agent), await cached.get(org, agent)))

    async def update(org: str) -> None:
        nonlocal published
        for agent in {a for o, a in ids if o == org}:
            versions[org, agent] += 1
            await redis_client.set(key(org, agent), envelope(marker(org, agent, versions[org, agent])))
        await redis_client.publish(channel(org), "")
        published += 1

    async with asyncio.timeout(120):  # a hang guard only
        for _ in range(20):
            calls = [call(*chosen.choice(ids)) for _ in range(200)]
            updates = [update(chosen.choice(orgs)) for _ in range(5)]
            work = calls + updates
            chosen.shuffle(work)
            await asyncio.gather(*work)
        await cached.invalidated(published)
    crossed = [(tenant, content) for tenant, content in answers
               if content is None or not content.startswith(f"directive of {tenant[0]}/{tenant[1]} v")]
    assert crossed == []
    assert len(answers) == 20 * 200
    assert cached.lookups.count(CacheResult.HIT) > 0  # the cache was in use throughout
    latest = {(o, a): await cached.get(o, a) for o, a in ids}
    assert latest == {(o, a): marker(o, a, versions[o, a]) for o, a in ids}


# ------------------------------------------------------------------ Sentinel failover
@pytest.fixture
def cluster() -> Iterator[SentinelCluster]:
    cluster = SentinelCluster.launch()
    yield cluster
    cluster.close()


async def test_after_a_sentinel_failover_the_feed_subscribes_on_the_new_master(cluster: SentinelCluster) -> None:
    """Sentinel demotes the old master without killing its pub/sub clients: the feed must notice
    (it asks the sentinels every ping interval) and move to the new master by itself, while the
    old one is still up; then only the new master carries messages."""
    cached = open_cached(cluster.url, ping_interval_s=0.1)
    new_master = cluster.replica.client()
    try:
        await cached.live()
        old_master = cluster.master_port()
        await asyncio.to_thread(cluster.failover)
        assert cluster.master_port() == cluster.replica.port != old_master
        await until(lambda: cached.cache.live and new_master.pubsub_numpat() == 1,
                    "the feed subscribed on the new master")
        assert cached.feed.subscriptions >= 2
        cluster.master.stop()  # from here only the new master can carry a message
        new_master.set(key(ORG, AGENT), envelope("v1"))
        assert await cached.get() == "v1"
        new_master.set(key(ORG, AGENT), envelope("v2"))
        assert new_master.publish(channel(ORG), "") == 1
        await cached.invalidated(1)
        assert await cached.get() == "v2"
        print(f"feed transitions across the failover: {cached.states}")
    finally:
        new_master.close()
        await cached.close()
