"""A bounded in-process cache of directive answers, dropped by org on invalidation.

``CachedDirectiveStore`` decorates a ``DirectiveStore`` (in production the Redis one, whose GET
has a 5 ms branch budget that a busy event loop sometimes misses), so that most assemblies read
their directive without a round trip. The domain does not know: the decorator is the port. Rules:

* **What is kept**: the inner store's answer, a ``Directive`` or ``None`` (no directive is an
  answer too). An error or a timeout is never kept: the next call asks the store again.
* **The key** is the whole store key: ``key_of(org_id, agent_id) -> (org, key)``, given by the
  composition root (the Redis adapter's ``org_and_key``: ``{org}:directive:{agent}`` with both
  ids canonical). An entry is found by its whole key only, so it answers only the org and agent
  it was read for; ids that are not UUIDs raise ``DirectiveStoreError`` from ``key_of``, as the
  store would.
* **How long**: an entry is used for at most ``ttl_s`` (``Clock.monotonic``), counted from the
  moment its read was sent, so an answer is never older than that. This is the staleness of a
  change that reaches Redis without a publish (the proxy's write-behind fill after a miss).
* **How many**: at most ``max_entries``; the least recently used goes first.
* **Invalidation** (``invalidate``): any message for an org drops all of that org's entries at
  once; ``invalidate(None)`` (a channel naming no org) drops everything. Org ids come from the
  feed canonical, as ``key_of`` makes them.
* **The subscription** (``subscription_changed``): the cache is used only while the feed's
  subscription is live. Down: every call goes to the store (counted ``bypass``) and the cache
  is emptied; up again (a subscription confirmed): emptied first, since messages may have been
  missed in between, then used. A new cache is down until told otherwise.
* **No stale fill**: a read's answer is kept only if nothing that could have made it stale
  happened while it was in flight: no invalidation of its org (the org's generation, tracked
  while the org has reads in flight), no whole-cache drop, subscription loss or
  re-subscription (the epoch). Both are captured before the read and checked before the insert.
* **Refresh ahead** (``refresh_timeout_s`` given): a hit on an entry older than half the TTL
  starts one read of that key in the background (at most one per key at a time), bounded by
  ``refresh_timeout_s`` rather than by the caller's budget, which has already been served. Its
  answer replaces the entry under the same rules as any read (counted from when it was sent, not
  kept across an invalidation of its org or a whole-cache event); a failed refresh leaves the
  entry to expire. So an agent called at least twice a TTL never waits for Redis after its first
  call, and a busy event loop cannot cost it its directive (a 5 ms GET that a loop blocked by
  other assemblies misses). Nothing is served past its TTL.
* **No coalescing**: concurrent misses for one key each go to the store. Sharing one read would
  tie callers' deadlines and cancellations together (a caller whose 5 ms ran out would fail the
  others, or their reads would outlive it) for little gain: a key misses once per TTL, and only
  the calls that arrive during that one round trip (well under a millisecond) duplicate it.

Everything runs on one event loop: the hooks are synchronous and the bookkeeping between two
awaits cannot interleave, so it needs no lock. ``on_lookup`` is told each call's ``CacheResult``.
"""

from __future__ import annotations

import asyncio
import enum
import math
from collections import OrderedDict
from collections.abc import Callable

import attrs

from domain.model.directive import Directive
from ports.clock import Clock
from ports.directive_store import DirectiveStore
from ports.errors import DirectiveStoreError

# Why 10,000: an entry is used for a TTL (1 s by default), and a process assembles well under
# 1,000 calls a second (730 req/s measured, docs/PERFORMANCE.md), so the live set is at most
# about that many agents; ten times that bounds the memory (entries, expired ones included, are
# a key and a directive each: a few MB for typical directives) while never evicting a live one.
DEFAULT_MAX_ENTRIES = 10_000
KeyOf = Callable[[str, str], tuple[str, str]]  # (org_id, agent_id) -> (canonical org id, whole key)


class CacheResult(enum.StrEnum):
    HIT = "hit"  # a kept answer, younger than the TTL
    REFRESH = "refresh"  # a hit that also started a background read of its key (refresh ahead)
    MISS = "miss"  # asked the store (the answer may be kept)
    BYPASS = "bypass"  # the subscription is down: asked the store, nothing kept


@attrs.frozen
class _Entry:
    org: str
    directive: Directive | None
    read_at: float  # monotonic seconds when its read was sent


@attrs.define
class _Reads:
    """An org's reads in flight, and its generation: bumped by each invalidation of the org."""

    in_flight: int = 0
    generation: int = 0


def _ignore(_result: CacheResult) -> None:
    return None


class CachedDirectiveStore(DirectiveStore):
    """See the module docstring. ``invalidate`` and ``subscription_changed`` are the feed's hooks."""

    def __init__(
        self,
        inner: DirectiveStore,
        clock: Clock,
        *,
        key_of: KeyOf,
        ttl_s: float,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        refresh_timeout_s: float | None = None,
        on_lookup: Callable[[CacheResult], None] = _ignore,
    ) -> None:
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not math.isfinite(ttl_s) or ttl_s <= 0:
            raise ValueError(f"ttl_s must be a positive finite number of seconds, got {ttl_s!r}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an integer >= 1, got {max_entries!r}")
        if refresh_timeout_s is not None and not (math.isfinite(refresh_timeout_s) and refresh_timeout_s > 0):
            raise ValueError(f"refresh_timeout_s must be a positive finite number of seconds, got {refresh_timeout_s!r}")
        self._inner = inner
        self._clock = clock
        self._key_of = key_of
        self._ttl_s = float(ttl_s)
        self._max_entries = max_entries
        self._on_lookup = on_lookup
        self._refresh_timeout_s = refresh_timeout_s
        self._refreshes: dict[str, asyncio.Task[None]] = {}  # key -> its background read in flight
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._keys_by_org: dict[str, set[str]] = {}
        self._reads: dict[str, _Reads] = {}  # only orgs with reads in flight
        self._epoch = 0
        self._live = False
        self._live_event = asyncio.Event()
        self._closed = False

    @property
    def live(self) -> bool:
        """True while the cache is used (the feed's subscription is confirmed)."""
        return self._live

    @property
    def entries(self) -> int:
        return len(self._entries)

    async def until_live(self, *, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for the cache to be in use; True if it is (start-up warm-up)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._live_event.wait()
        except TimeoutError:
            return False
        return True

    async def get(self, org_id: str, agent_id: str, *, timeout_s: float) -> Directive | None:
        """The kept answer for this org and agent when it is younger than the TTL, else the store's.

        Raises:
            DirectiveStoreTimeoutError: the store did not answer within ``timeout_s`` (never kept).
            DirectiveStoreError: closed, bad ids, or the store failed (never kept).
        """
        if self._closed:
            raise DirectiveStoreError("directive store is closed")
        if not self._live:
            self._on_lookup(CacheResult.BYPASS)
            return await self._inner.get(org_id, agent_id, timeout_s=timeout_s)
        org, key = self._key_of(org_id, agent_id)
        now = self._clock.monotonic()
        entry = self._entries.get(key)
        if entry is not None:
            age = now - entry.read_at
            if age < self._ttl_s:
                self._entries.move_to_end(key)
                refresh_timeout_s = self._refresh_timeout_s
                if refresh_timeout_s is not None and age >= self._ttl_s / 2 and key not in self._refreshes:
                    self._refresh(org, key, org_id, agent_id, now, refresh_timeout_s)
                    self._on_lookup(CacheResult.REFRESH)
                else:
                    self._on_lookup(CacheResult.HIT)
                return entry.directive
            self._forget(key, entry)
        self._on_lookup(CacheResult.MISS)
        return await self._read(org, key, org_id, agent_id, timeout_s, now)

    def invalidate(self, org_id: str | None) -> None:
        """Drop every entry of ``org_id`` (canonical), and keep none of its reads in flight; None: everything."""
        if org_id is None:
            self._drop_all()
            return
        for key in self._keys_by_org.pop(org_id, ()):
            del self._entries[key]
        reads = self._reads.get(org_id)
        if reads is not None:
            reads.generation += 1

    def subscription_changed(self, live: bool) -> None:
        """The feed's subscription was confirmed (True) or lost (False): empty the cache either way."""
        self._drop_all()
        self._set_live(live and not self._closed)

    async def close(self) -> None:
        """Empty the cache and close the inner store; later calls raise DirectiveStoreError."""
        self._closed = True
        self._set_live(False)
        self._drop_all()
        refreshes = list(self._refreshes.values())
        for task in refreshes:
            task.cancel()
        await asyncio.gather(*refreshes, return_exceptions=True)
        await self._inner.close()

    # ------------------------------------------------------------------ internals
    async def _read(self, org: str, key: str, org_id: str, agent_id: str, timeout_s: float,
                    read_at: float) -> Directive | None:
        reads = self._reads.get(org)
        if reads is None:
            reads = self._reads[org] = _Reads()
        reads.in_flight += 1
        generation, epoch = reads.generation, self._epoch
        try:
            directive = await self._inner.get(org_id, agent_id, timeout_s=timeout_s)
        finally:
            reads.in_flight -= 1
            if reads.in_flight == 0 and self._reads.get(org) is reads:
                del self._reads[org]
        if self._live and self._epoch == epoch and reads.generation == generation:
            self._keep(key, _Entry(org, directive, read_at))
        return directive

    def _refresh(self, org: str, key: str, org_id: str, agent_id: str, read_at: float, timeout_s: float) -> None:
        async def refresh() -> None:
            try:
                await self._read(org, key, org_id, agent_id, timeout_s, read_at)
            except DirectiveStoreError:
                pass  # the entry stays until its TTL; the next hit past half of it tries again

        task = asyncio.get_running_loop().create_task(refresh(), name="directive-refresh")
        self._refreshes[key] = task
        task.add_done_callback(lambda _: self._refreshes.pop(key, None))

    def _keep(self, key: str, entry: _Entry) -> None:
        current = self._entries.get(key)
        if current is not None and current.read_at > entry.read_at:
            return  # a read sent later is already kept
        self._entries[key] = entry
        self._entries.move_to_end(key)
        self._keys_by_org.setdefault(entry.org, set()).add(key)
        while len(self._entries) > self._max_entries:
            oldest_key, oldest = self._entries.popitem(last=False)
            self._unindex(oldest_key, oldest)

    def _forget(self, key: str, entry: _Entry) -> None:
        del self._entries[key]
        self._unindex(key, entry)

    def _unindex(self, key: str, entry: _Entry) -> None:
        keys = self._keys_by_org.get(entry.org)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._keys_by_org[entry.org]

    def _set_live(self, live: bool) -> None:
        self._live = live
        if live:
            self._live_event.set()
        else:
            self._live_event.clear()

    def _drop_all(self) -> None:
        self._entries.clear()
        self._keys_by_org.clear()
        self._epoch += 1  # no read in flight may be kept
