"""CachedDirectiveStore with a fake inner store, a fake clock and the feed's hooks called directly.

The inner store here answers when the test lets it (``GatedStore``), so a read can be held in
flight while the test invalidates, drops or re-subscribes: every race is created, not hoped for.
"""

from __future__ import annotations

import asyncio
import uuid

import attrs
import pytest

from adapters.directive_cache import CachedDirectiveStore, CacheResult
from adapters.redis_directive_store import org_and_key
from adapters.redis_directive_store.invalidations import org_of_channel
from domain.model.directive import Directive
from ports.directive_store import DirectiveStore
from ports.errors import DirectiveStoreError, DirectiveStoreTimeoutError
from tests.fakes.clock import FixedClock

TTL_S = 1.0
ORG_A, ORG_B = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))
AGENT_1, AGENT_2 = str(uuid.UUID(int=11)), str(uuid.UUID(int=12))


def directive(text: str) -> Directive:
    return Directive(text, "system_first", None)


@attrs.define
class Held:
    """One read in flight: the answer it will give (read when it started) and its gate."""

    org_id: str
    agent_id: str
    answer: Directive | None
    gate: asyncio.Event = attrs.Factory(asyncio.Event)


class GatedStore(DirectiveStore):
    """Answers from ``values``, read when a call starts; ``hold = True`` keeps calls in flight
    until ``release()``; ``fail_with`` raises instead. ``reads`` counts the calls that reached it."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], Directive | None] = {}
        self.hold = False
        self.held: list[Held] = []
        self.fail_with: DirectiveStoreError | None = None
        self.reads = 0
        self.closed = False
        self.changed = asyncio.Event()  # set whenever a read is held

    async def get(self, org_id: str, agent_id: str, *, timeout_s: float) -> Directive | None:
        if self.closed:
            raise DirectiveStoreError("closed")
        self.reads += 1
        if self.fail_with is not None:
            raise self.fail_with
        answer = self.values.get((org_id.lower(), agent_id.lower()))
        if self.hold:
            held = Held(org_id, agent_id, answer)
            self.held.append(held)
            self.changed.set()
            await held.gate.wait()
        return answer

    def release(self) -> None:
        for held in self.held:
            held.gate.set()
        self.held.clear()

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def inner() -> GatedStore:
    store = GatedStore()
    store.values = {(ORG_A, AGENT_1): directive("A1 v1"), (ORG_A, AGENT_2): directive("A2 v1"),
                    (ORG_B, AGENT_1): directive("B1 v1")}
    return store


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def lookups() -> list[CacheResult]:
    return []


@pytest.fixture
def cache(inner: GatedStore, clock: FixedClock, lookups: list[CacheResult]) -> CachedDirectiveStore:
    cached = CachedDirectiveStore(inner, clock, key_of=org_and_key, ttl_s=TTL_S, max_entries=100,
                                  on_lookup=lookups.append)
    cached.subscription_changed(True)
    return cached


async def get(cache: CachedDirectiveStore, org: str, agent: str) -> Directive | None:
    return await cache.get(org, agent, timeout_s=1.0)


async def in_flight(inner: GatedStore, count: int) -> None:
    """Until ``count`` reads are held at the store (the cap is a hang guard only)."""
    async with asyncio.timeout(30):
        while len(inner.held) < count:
            inner.changed.clear()
            await inner.changed.wait()


# ------------------------------------------------------------------ hits, misses, the TTL, the bound
async def test_a_second_call_is_answered_from_the_cache(cache, inner, lookups) -> None:
    first = await get(cache, ORG_A, AGENT_1)
    inner.values[(ORG_A, AGENT_1)] = directive("A1 v2")  # changed without an invalidation
    assert await get(cache, ORG_A, AGENT_1) is first
    assert inner.reads == 1 and lookups == [CacheResult.MISS, CacheResult.HIT]


async def test_no_directive_is_cached_too(cache, inner) -> None:
    assert await get(cache, ORG_B, AGENT_2) is None
    inner.values[(ORG_B, AGENT_2)] = directive("B2 v1")
    assert await get(cache, ORG_B, AGENT_2) is None
    assert inner.reads == 1


async def test_an_entry_lives_less_than_the_ttl(cache, inner, clock, lookups) -> None:
    await get(cache, ORG_A, AGENT_1)
    inner.values[(ORG_A, AGENT_1)] = directive("A1 v2")
    clock.advance(TTL_S * 0.999)
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v1"
    clock.advance(TTL_S * 0.001)
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v2"
    assert lookups == [CacheResult.MISS, CacheResult.HIT, CacheResult.MISS]
    assert cache.entries == 1  # the expired entry was replaced, not added to


async def test_the_ttl_counts_from_when_the_read_was_sent(cache, inner, clock) -> None:
    inner.hold = True
    reading = asyncio.ensure_future(get(cache, ORG_A, AGENT_1))
    await in_flight(inner, 1)
    clock.advance(TTL_S)  # the read took the whole TTL: its answer is as old as that
    inner.release()
    assert (await reading).content == "A1 v1"
    inner.hold = False
    inner.values[(ORG_A, AGENT_1)] = directive("A1 v2")
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v2"


async def test_the_least_recently_used_entry_goes_first(inner, clock) -> None:
    cache = CachedDirectiveStore(inner, clock, key_of=org_and_key, ttl_s=TTL_S, max_entries=2)
    cache.subscription_changed(True)
    await get(cache, ORG_A, AGENT_1)
    await get(cache, ORG_A, AGENT_2)
    await get(cache, ORG_A, AGENT_1)  # A1 used again: A2 is now the least recently used
    await get(cache, ORG_B, AGENT_1)  # a third entry evicts A2
    assert cache.entries == 2 and inner.reads == 3
    await get(cache, ORG_A, AGENT_1)
    await get(cache, ORG_B, AGENT_1)
    assert inner.reads == 3
    await get(cache, ORG_A, AGENT_2)
    assert inner.reads == 4


# ------------------------------------------------------------------ errors are never kept
@pytest.mark.parametrize("error", [DirectiveStoreError("unreachable"), DirectiveStoreTimeoutError("5 ms")])
async def test_an_error_is_never_cached(cache, inner, error: DirectiveStoreError) -> None:
    inner.fail_with = error
    with pytest.raises(type(error)):
        await get(cache, ORG_A, AGENT_1)
    inner.fail_with = None
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v1"
    assert inner.reads == 2 and cache.entries == 1


async def test_a_cancelled_read_is_not_kept(cache, inner) -> None:
    inner.hold = True
    reading = asyncio.ensure_future(get(cache, ORG_A, AGENT_1))
    await in_flight(inner, 1)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert cache.entries == 0


async def test_bad_ids_are_the_stores_error_and_reach_nothing(cache, inner) -> None:
    with pytest.raises(DirectiveStoreError, match="org_id"):
        await get(cache, "not-a-uuid", AGENT_1)
    with pytest.raises(DirectiveStoreError, match="agent_id"):
        await get(cache, ORG_A, "")
    assert inner.reads == 0


# ------------------------------------------------------------------ tenants
async def test_an_entry_answers_only_its_own_org_and_agent(cache, inner) -> None:
    answers = {(org, agent): await get(cache, org, agent)
               for org in (ORG_A, ORG_B) for agent in (AGENT_1, AGENT_2)}
    assert {key: None if d is None else d.content for key, d in answers.items()} == {
        (ORG_A, AGENT_1): "A1 v1", (ORG_A, AGENT_2): "A2 v1", (ORG_B, AGENT_1): "B1 v1", (ORG_B, AGENT_2): None}
    assert inner.reads == 4 and cache.entries == 4


async def test_ids_in_any_accepted_spelling_share_the_canonical_entry(cache, inner) -> None:
    await get(cache, ORG_A, AGENT_1)
    assert (await get(cache, ORG_A.upper(), AGENT_1.replace("-", ""))).content == "A1 v1"
    assert inner.reads == 1
    cache.invalidate(ORG_A)  # the feed's canonical id drops the entry whatever spelling filled it
    assert cache.entries == 0


# ------------------------------------------------------------------ invalidation
async def test_an_invalidation_drops_every_entry_of_its_org_and_only_those(cache, inner) -> None:
    for org, agent in ((ORG_A, AGENT_1), (ORG_A, AGENT_2), (ORG_B, AGENT_1)):
        await get(cache, org, agent)
    inner.values = {key: directive(f"{value.content} v2") for key, value in inner.values.items() if value}
    cache.invalidate(ORG_A)
    assert cache.entries == 1
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v1 v2"
    assert (await get(cache, ORG_A, AGENT_2)).content == "A2 v1 v2"
    assert (await get(cache, ORG_B, AGENT_1)).content == "B1 v1"  # still the cached one


async def test_an_invalidation_naming_no_org_drops_everything(cache, inner) -> None:
    await get(cache, ORG_A, AGENT_1)
    await get(cache, ORG_B, AGENT_1)
    cache.invalidate(None)
    assert cache.entries == 0


async def test_an_invalidation_of_an_org_with_nothing_cached_is_harmless(cache) -> None:
    cache.invalidate(str(uuid.UUID(int=99)))
    assert cache.entries == 0


# ------------------------------------------------------------------ no stale fill
async def test_a_read_in_flight_when_its_org_is_invalidated_is_not_kept(cache, inner) -> None:
    inner.hold = True
    reading = asyncio.ensure_future(get(cache, ORG_A, AGENT_1))
    await in_flight(inner, 1)  # its answer (v1) was read before the change below
    inner.values[(ORG_A, AGENT_1)] = directive("A1 v2")
    cache.invalidate(ORG_A)
    inner.release()
    assert (await reading).content == "A1 v1"  # its caller gets it: it asked before the change
    assert cache.entries == 0  # but nobody after
    inner.hold = False
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v2"


async def test_a_read_in_flight_when_another_org_is_invalidated_is_kept(cache, inner) -> None:
    inner.hold = True
    reading = asyncio.ensure_future(get(cache, ORG_A, AGENT_1))
    await in_flight(inner, 1)
    cache.invalidate(ORG_B)
    inner.release()
    await reading
    assert cache.entries == 1


async def test_concurrent_reads_of_one_org_are_all_refused_after_its_invalidation(cache, inner) -> None:
    inner.hold = True
    readings = [asyncio.ensure_future(get(cache, ORG_A, agent)) for agent in (AGENT_1, AGENT_2, AGENT_1)]
    await in_flight(inner, 3)  # no coalescing: each miss went to the store
    cache.invalidate(ORG_A)
    inner.release()
    await asyncio.gather(*readings)
    assert cache.entries == 0


async def test_a_read_started_after_the_invalidation_is_kept(cache, inner) -> None:
    inner.hold = True
    early = asyncio.ensure_future(get(cache, ORG_A, AGENT_1))
    await in_flight(inner, 1)
    cache.invalidate(ORG_A)
    late = asyncio.ensure_future(get(cache, ORG_A, AGENT_2))
    await in_flight(inner, 2)
    inner.release()
    await asyncio.gather(early, late)
    assert cache.entries == 1
    inner.hold = False
    await get(cache, ORG_A, AGENT_2)
    assert inner.reads == 2  # A2 was kept


@pytest.mark.parametrize("event", ["drop_all", "down", "down_and_up", "up_again"])
async def test_a_read_in_flight_across_a_whole_cache_event_is_not_kept(cache, inner, event: str) -> None:
    inner.hold = True
    reading = asyncio.ensure_future(get(cache, ORG_A, AGENT_1))
    await in_flight(inner, 1)
    if event == "drop_all":
        cache.invalidate(None)
    if event in ("down", "down_and_up"):
        cache.subscription_changed(False)
    if event in ("down_and_up", "up_again"):
        cache.subscription_changed(True)
    inner.release()
    await reading
    assert cache.entries == 0


async def test_an_earlier_read_never_replaces_a_later_one(cache, inner, clock) -> None:
    inner.hold = True
    early = asyncio.ensure_future(get(cache, ORG_A, AGENT_1))  # reads v1
    await in_flight(inner, 1)
    clock.advance(0.1)
    inner.values[(ORG_A, AGENT_1)] = directive("A1 v2")  # written without a publish
    late = asyncio.ensure_future(get(cache, ORG_A, AGENT_1))  # reads v2
    await in_flight(inner, 2)
    later_gate, earlier_gate = inner.held[1].gate, inner.held[0].gate
    inner.held.clear()
    later_gate.set()
    assert (await late).content == "A1 v2"
    earlier_gate.set()
    assert (await early).content == "A1 v1"
    inner.hold = False
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v2"


# ------------------------------------------------------------------ the subscription
async def test_a_new_cache_is_bypassed_until_its_subscription_is_confirmed(inner, clock) -> None:
    results: list[CacheResult] = []
    cache = CachedDirectiveStore(inner, clock, key_of=org_and_key, ttl_s=TTL_S, on_lookup=results.append)
    assert not cache.live
    await get(cache, ORG_A, AGENT_1)
    await get(cache, ORG_A, AGENT_1)
    assert inner.reads == 2 and cache.entries == 0 and results == [CacheResult.BYPASS] * 2
    cache.subscription_changed(True)
    await get(cache, ORG_A, AGENT_1)
    await get(cache, ORG_A, AGENT_1)
    assert inner.reads == 3 and results[2:] == [CacheResult.MISS, CacheResult.HIT]


async def test_while_the_subscription_is_down_every_call_goes_to_the_store(cache, inner, lookups) -> None:
    await get(cache, ORG_A, AGENT_1)
    cache.subscription_changed(False)
    assert cache.entries == 0 and not cache.live
    inner.values[(ORG_A, AGENT_1)] = directive("A1 v2")  # a change whose message may be lost
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v2"
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v2"
    assert inner.reads == 3 and cache.entries == 0
    assert lookups[-2:] == [CacheResult.BYPASS, CacheResult.BYPASS]


async def test_a_resubscription_empties_the_cache_before_it_is_used_again(cache, inner) -> None:
    await get(cache, ORG_A, AGENT_1)
    inner.values[(ORG_A, AGENT_1)] = directive("A1 v2")
    cache.subscription_changed(True)  # confirmed anew: messages may have been missed meanwhile
    assert cache.entries == 0
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v2"
    assert (await get(cache, ORG_A, AGENT_1)).content == "A1 v2"
    assert inner.reads == 2


async def test_until_live_tells_whether_the_cache_came_into_use(inner, clock) -> None:
    cache = CachedDirectiveStore(inner, clock, key_of=org_and_key, ttl_s=TTL_S)
    assert not await cache.until_live(timeout_s=0.01)  # nothing will confirm a subscription
    cache.subscription_changed(True)
    assert await cache.until_live(timeout_s=30.0)
    cache.subscription_changed(False)
    assert not await cache.until_live(timeout_s=0.01)


# ------------------------------------------------------------------ closing, construction
async def test_close_empties_closes_the_inner_store_and_refuses_later_calls(cache, inner) -> None:
    await get(cache, ORG_A, AGENT_1)
    await cache.close()
    assert inner.closed and cache.entries == 0
    with pytest.raises(DirectiveStoreError, match="closed"):
        await get(cache, ORG_A, AGENT_1)
    cache.subscription_changed(True)  # a feed closing after the cache cannot turn it back on
    assert not cache.live


@pytest.mark.parametrize(("ttl_s", "max_entries", "named"), [
    (0.0, 10, "ttl_s"), (-1.0, 10, "ttl_s"), (float("inf"), 10, "ttl_s"), (float("nan"), 10, "ttl_s"),
    (True, 10, "ttl_s"), (1.0, 0, "max_entries"), (1.0, 2.5, "max_entries"),
])
def test_construction_checks_its_bounds(inner, clock, ttl_s, max_entries, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        CachedDirectiveStore(inner, clock, key_of=org_and_key, ttl_s=ttl_s, max_entries=max_entries)


# ------------------------------------------------------------------ channels (the feed's parsing)
@pytest.mark.parametrize(("channel", "org"), [
    (f"directive_updates:{ORG_A}".encode(), ORG_A),
    (f"directive_updates:{ORG_A.upper()}".encode(), ORG_A),
    (f"directive_updates:{ORG_A.replace('-', '')}".encode(), ORG_A),
    (b"directive_updates:not-a-uuid", None),
    (b"directive_updates:", None),
    (f"directive_updates:{{{ORG_A}}}".encode(), None),
    (f"directive_updates:{ORG_A}:extra".encode(), None),
    ("directive_updates:\u0661".encode(), None),
    (b"directive_updates:\xff", None),
    (f"other:{ORG_A}".encode(), None),
])
def test_a_channel_names_its_org_canonically_or_none(channel: bytes, org: str | None) -> None:
    assert org_of_channel(channel) == org


# ------------------------------------------------------------------ refresh ahead
@pytest.fixture
def refreshing(inner: GatedStore, clock: FixedClock, lookups: list[CacheResult]) -> CachedDirectiveStore:
    cached = CachedDirectiveStore(inner, clock, key_of=org_and_key, ttl_s=TTL_S, max_entries=100,
                                  refresh_timeout_s=0.05, on_lookup=lookups.append)
    cached.subscription_changed(True)
    return cached


async def settled(cache: CachedDirectiveStore) -> None:
    """Until no background refresh is in flight (the cap is a hang guard only)."""
    async with asyncio.timeout(30):
        while cache._refreshes:  # noqa: SLF001 - the test waits for the task it started
            await asyncio.gather(*cache._refreshes.values(), return_exceptions=True)  # noqa: SLF001


async def test_a_hit_past_half_the_ttl_is_served_and_refreshed_in_the_background(refreshing, inner, clock, lookups) -> None:
    await get(refreshing, ORG_A, AGENT_1)
    inner.values[(ORG_A, AGENT_1)] = directive("A1 v2")
    clock.advance(TTL_S * 0.4)
    assert (await get(refreshing, ORG_A, AGENT_1)).content == "A1 v1"  # young: a plain hit
    clock.advance(TTL_S * 0.2)
    assert (await get(refreshing, ORG_A, AGENT_1)).content == "A1 v1"  # served at once, refresh started
    await settled(refreshing)
    assert lookups == [CacheResult.MISS, CacheResult.HIT, CacheResult.REFRESH] and inner.reads == 2
    clock.advance(TTL_S * 0.9)  # 1.5 TTL after the first read, 0.9 after the refresh was sent
    assert (await get(refreshing, ORG_A, AGENT_1)).content == "A1 v2"
    assert inner.reads == 2  # a hit on the refreshed entry: the caller never waited for the store


async def test_one_refresh_per_key_at_a_time(refreshing, inner, clock, lookups) -> None:
    await get(refreshing, ORG_A, AGENT_1)
    clock.advance(TTL_S * 0.6)
    inner.hold = True
    for _ in range(3):
        assert (await get(refreshing, ORG_A, AGENT_1)).content == "A1 v1"
    await in_flight(inner, 1)
    assert lookups == [CacheResult.MISS, CacheResult.REFRESH, CacheResult.HIT, CacheResult.HIT]
    inner.release()
    await settled(refreshing)
    assert inner.reads == 2


async def test_a_failed_refresh_leaves_the_entry_to_expire(refreshing, inner, clock) -> None:
    await get(refreshing, ORG_A, AGENT_1)
    clock.advance(TTL_S * 0.6)
    inner.fail_with = DirectiveStoreTimeoutError("no answer")
    assert (await get(refreshing, ORG_A, AGENT_1)).content == "A1 v1"
    await settled(refreshing)
    assert (await get(refreshing, ORG_A, AGENT_1)).content == "A1 v1"  # still within its TTL: kept
    clock.advance(TTL_S * 0.4)  # a whole TTL since the read that filled it
    with pytest.raises(DirectiveStoreTimeoutError):
        await get(refreshing, ORG_A, AGENT_1)  # expired: the caller asks the store, which fails


async def test_a_refresh_in_flight_when_its_org_is_invalidated_is_not_kept(refreshing, inner, clock) -> None:
    await get(refreshing, ORG_A, AGENT_1)
    clock.advance(TTL_S * 0.6)
    inner.hold = True
    await get(refreshing, ORG_A, AGENT_1)
    await in_flight(inner, 1)  # the refresh read "A1 v1" before the change below
    inner.values[(ORG_A, AGENT_1)] = directive("A1 v2")
    refreshing.invalidate(ORG_A)
    inner.release()
    await settled(refreshing)
    inner.hold = False
    assert (await get(refreshing, ORG_A, AGENT_1)).content == "A1 v2"
    assert inner.reads == 3


async def test_close_cancels_a_refresh_in_flight(refreshing, inner, clock) -> None:
    await get(refreshing, ORG_A, AGENT_1)
    clock.advance(TTL_S * 0.6)
    inner.hold = True
    await get(refreshing, ORG_A, AGENT_1)
    await in_flight(inner, 1)
    await refreshing.close()
    assert not refreshing._refreshes and inner.closed  # noqa: SLF001


@pytest.mark.parametrize("refresh_timeout_s", [0.0, -0.05, float("inf"), float("nan")])
def test_the_refresh_timeout_is_checked(inner, clock, refresh_timeout_s: float) -> None:
    with pytest.raises(ValueError, match="refresh_timeout_s"):
        CachedDirectiveStore(inner, clock, key_of=org_and_key, ttl_s=TTL_S, refresh_timeout_s=refresh_timeout_s)
