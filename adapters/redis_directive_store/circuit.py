"""The directive store's circuit breaker: fail fast while Redis is known to be failing.

Without it a hung Redis (SIGSTOPped, or a TCP path that swallows packets: the kernel still
accepts connections into the backlog, nothing answers) costs every uncached directive read its
whole branch budget and a connection: the GET (or the connect handshake) waits, the budget ends,
the interrupted connection is closed (cancellation safety, ``store``) and the next call opens a
new one. That churn (a socket, a handshake, an exception and a close per call) is CPU the other
calls' deadlines need. The rules (``Circuit``, one per store, one event loop, no lock):

* **closed** (the start): every call goes to Redis. A call that ends without Redis answering
  (``settle(ticket, failure)`` with a description) makes Redis **suspect**; a second such call
  **opens** the circuit if it was admitted after the first one failed (``failures_to_open``, 2 by
  default; 1 opens on the first). Calls in flight together when Redis went quiet, or when the
  event loop stalled past their budgets (one busy stretch of the loop times out every GET waiting
  in it, though Redis answered each in time), are one look at Redis, not several: only a call sent
  after the first failure tells something new. Any answer clears the suspicion. What counts: a
  timeout (the call's own ``timeout_s`` or the socket backstop), a connection or transport error
  (refused, reset, TLS, authentication, ``LOADING``, a garbled reply), an unexpected exception,
  and a cancellation while the call was waiting for Redis. The last one matters most: the
  retrieval branch bounds the call by the same budget as the store, and its bound is set first,
  so it expires first and the store sees the caller's cancellation, not its own timeout. What
  does not count: a miss, a malformed value, an error reply read in full (``WRONGTYPE``): Redis
  answered; nor anything refused before Redis is asked (bad ids, no time left, closed store).
* **open**: for the cool-down (``cooldown_s``) every call is refused at once
  (``DirectiveStoreError``, not the timeout subclass: nothing waited; its message names the state,
  the time left and the last failure), without touching the pool or the network.
* **half_open**: the first call after the cool-down is let through as the one probe; calls while
  it is in flight are refused like calls in the open state. The probe's answer closes the
  circuit; its failure opens it again with the cool-down doubled, up to ``max_cooldown_s``; the
  cool-down is back to ``cooldown_s`` once the circuit closes. The probe's slot is freed whatever
  ends it: the store settles every admitted call in a ``finally``, and a cancelled probe is a
  failed one (it was waiting for Redis), so the circuit is open again, never stuck half-open.
* **Why not open on the first failure**: on a busy process one stall of the event loop longer
  than the 5 ms directive budget failed a GET that Redis had answered, opened the circuit, and
  cost every uncached agent its directive for the cool-down (12 answers without their directive
  in a 10 s fault-table row at 50 req/s, with Redis healthy). A hung Redis costs the confirmation
  one more call's budget and connection.
* **Stragglers**: a call admitted before the circuit opened may end after. Its failure only
  updates the last failure (the cool-down already runs, and only a probe doubles it); its answer
  closes the circuit (Redis answers after all: a busy event loop, not Redis, cost the failure).
* **Messages are tenant-free**: the failure descriptions the circuit keeps and shows to later
  callers (the directive branch's detail, returned in the response) never contain a key, so no
  caller sees another tenant's ids.

``on_change(state)`` is told each transition (``closed``, ``open``, ``half_open``), once; it must
not raise (if it does, the exception is ignored: a broken hook must not leave a probe's slot
taken). Time comes from ``monotonic`` (``time.monotonic`` by default; tests pass a fake clock's).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from ports.errors import DirectiveStoreError

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
# Why 250 ms: long against what it saves (at 50 uncached reads/s a hung Redis sees one probe
# instead of ~12 calls per cool-down; at 700 req/s, one instead of ~175), short against what it
# costs: while open, an uncached agent gets no directive, and a Redis that answers again is read
# again within one cool-down, well inside the directive cache's TTL (1 s) and the fault table's
# "directive back within 1 s of a restart".
DEFAULT_COOLDOWN_S = 0.25
# Why double only to 500 ms (not seconds): a failed probe is cheap (one call's 5 ms budget, which
# it would have lost anyway, and one connection), so a long outage at 2 probes/s costs nothing
# worth saving, while every step up delays the first read after Redis is back by as much: 500 ms
# keeps that within the 1 s target with room for the next call to arrive. The doubling still
# halves the probes of a long outage, and of many processes reconnecting to a recovering Redis.
DEFAULT_MAX_COOLDOWN_S = 0.5
# Why 2: see "Why not open on the first failure" above; a third would only add a hung Redis's cost.
DEFAULT_FAILURES_TO_OPEN = 2
INTERRUPTED = "interrupted while waiting for Redis (the caller's deadline or cancellation)"

Ticket = object  # what ``admit`` returns and ``settle`` takes back: the probe's own, or a call's number


def _ignore(_state: str) -> None:
    return None


class Circuit:
    """See the module docstring: ``admit()`` before asking Redis, ``settle()`` after, always."""

    def __init__(
        self,
        *,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        max_cooldown_s: float = DEFAULT_MAX_COOLDOWN_S,
        failures_to_open: int = DEFAULT_FAILURES_TO_OPEN,
        monotonic: Callable[[], float] = time.monotonic,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        for name, value in (("cooldown_s", cooldown_s), ("max_cooldown_s", max_cooldown_s)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
        if max_cooldown_s < cooldown_s:
            raise ValueError(f"max_cooldown_s ({max_cooldown_s!r}) must be >= cooldown_s ({cooldown_s!r})")
        if isinstance(failures_to_open, bool) or not isinstance(failures_to_open, int) or failures_to_open < 1:
            raise ValueError(f"failures_to_open must be a whole number >= 1, got {failures_to_open!r}")
        self._failures_to_open = failures_to_open
        self._admitted = 0  # calls admitted so far: a regular call's ticket is its number
        self._first_suspect = 0  # while suspect: the number of the first call admitted after the last failure
        self._failures = 0  # independent failures since the last answer (closed only)
        self._base_s = float(cooldown_s)
        self._max_s = float(max_cooldown_s)
        self._monotonic = monotonic
        self._on_change = on_change or _ignore
        self._state = CLOSED
        self._cooldown_s = self._base_s  # of the current (or next) open period
        self._open_until = -math.inf
        self._probe: Ticket | None = None  # the probe in flight (half-open only)
        self._last_failure = ""

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half_open`` (open past its cool-down until a call probes)."""
        return self._state

    @property
    def last_failure(self) -> str:
        """The last failure's description (tenant-free); empty before the first."""
        return self._last_failure

    @property
    def cooldown_s(self) -> float:
        """The cool-down of the current open period (of the next one while closed)."""
        return self._cooldown_s

    def admit(self) -> Ticket:
        """Let a call ask Redis (its ticket, for ``settle``), or refuse it at once.

        Raises:
            DirectiveStoreError: open and cooling down, or half-open with the probe in flight.
        """
        if self._state == CLOSED:
            self._admitted += 1
            return self._admitted
        if self._state == OPEN:
            left_s = self._open_until - self._monotonic()
            if left_s > 0:
                raise DirectiveStoreError(
                    f"directive store circuit open: Redis not asked for {left_s * 1000:.0f} ms more "
                    f"(cool-down {self._cooldown_s * 1000:.0f} ms) after: {self._last_failure}")
            self._probe = probe = object()
            self._enter(HALF_OPEN)
            return probe
        raise DirectiveStoreError(
            f"directive store circuit half-open: one probe is asking Redis; last failure: {self._last_failure}")

    def settle(self, ticket: Ticket, failure: str | None) -> None:
        """How an admitted call ended: ``None`` when Redis answered, else what failed (no key in it)."""
        probe = self._probe is not None and ticket is self._probe
        if probe:
            self._probe = None
        if failure is None:
            self._cooldown_s = self._base_s
            self._failures = 0
            if self._state != CLOSED:
                self._probe = None  # a straggler's answer: the probe in flight, if any, is a regular call now
                self._enter(CLOSED)
            return
        self._last_failure = failure
        if probe:
            self._open(min(self._max_s, 2.0 * self._cooldown_s))
        elif self._state == CLOSED and self._independent(ticket):
            self._failures += 1
            self._first_suspect = self._admitted + 1
            if self._failures >= self._failures_to_open:
                self._open(self._base_s)
        # else: in flight with a failure already counted, or admitted before the circuit opened
        # (the cool-down already runs, and only a probe extends it)

    def _independent(self, ticket: Ticket) -> bool:
        """A closed call's failure is news unless the call was in flight when the last one failed."""
        return self._failures == 0 or (isinstance(ticket, int) and ticket >= self._first_suspect)

    def _open(self, cooldown_s: float) -> None:
        self._failures = 0
        self._cooldown_s = cooldown_s
        self._open_until = self._monotonic() + cooldown_s
        self._enter(OPEN)

    def _enter(self, state: str) -> None:
        self._state = state
        try:
            self._on_change(state)
        except Exception:  # the hook's failure must not change the circuit's
            pass
