"""The directive store's circuit breaker as a state machine, on a fake clock, and how the store
classifies failures for it (no Redis: the store against a real redis-server is
tests/integration/test_redis_directive_circuit.py)."""

from __future__ import annotations

import pytest
from redis import exceptions as redis_exceptions

from adapters.redis_directive_store import RedisDirectiveStore
from adapters.redis_directive_store.circuit import (
    CLOSED, DEFAULT_COOLDOWN_S, DEFAULT_FAILURES_TO_OPEN, DEFAULT_MAX_COOLDOWN_S, HALF_OPEN, INTERRUPTED, OPEN, Circuit,
)
from ports.errors import DirectiveStoreError, DirectiveStoreTimeoutError
from tests.fakes.clock import FixedClock


def circuit(clock: FixedClock, states: list[str], **options: float) -> Circuit:
    return Circuit(monotonic=clock.monotonic, on_change=states.append, **options)


def fail_twice(breaker: Circuit, failure: str) -> None:
    """Two failed calls, the second sent after the first failed: what opens a closed circuit."""
    breaker.settle(breaker.admit(), failure)
    assert breaker.state == CLOSED  # one look at Redis: suspect, not open
    breaker.settle(breaker.admit(), failure)


def refused(breaker: Circuit) -> DirectiveStoreError:
    with pytest.raises(DirectiveStoreError) as excinfo:
        breaker.admit()
    assert not isinstance(excinfo.value, DirectiveStoreTimeoutError)  # nothing waited
    return excinfo.value


def test_the_defaults_are_a_quarter_second_doubled_once_after_two_failures() -> None:
    assert (DEFAULT_COOLDOWN_S, DEFAULT_MAX_COOLDOWN_S, DEFAULT_FAILURES_TO_OPEN) == (0.25, 0.5, 2)
    breaker = Circuit()
    assert (breaker.state, breaker.cooldown_s, breaker.last_failure) == (CLOSED, 0.25, "")


def test_answers_keep_it_closed_and_two_failures_in_a_row_open_it_for_the_cool_down() -> None:
    clock, states = FixedClock(), []
    breaker = circuit(clock, states)
    for _ in range(3):
        breaker.settle(breaker.admit(), None)
    assert breaker.state == CLOSED and states == []
    fail_twice(breaker, "no answer within 5 ms")
    assert breaker.state == OPEN and states == [OPEN]
    clock.advance(0.1)
    error = refused(breaker)
    assert str(error) == ("directive store circuit open: Redis not asked for 150 ms more (cool-down 250 ms) "
                          "after: no answer within 5 ms")
    clock.advance(0.149)
    refused(breaker)
    assert states == [OPEN]


def test_failures_of_calls_in_flight_together_are_one_look_at_redis() -> None:
    # One stall of the event loop times out every GET waiting in it, though Redis answered each:
    # only a call sent after the first failure can confirm that Redis itself is failing.
    clock, states = FixedClock(), []
    breaker = circuit(clock, states)
    together = [breaker.admit() for _ in range(5)]
    for ticket in together:
        breaker.settle(ticket, "no answer within 5 ms")
    assert breaker.state == CLOSED and states == []
    assert breaker.last_failure == "no answer within 5 ms"
    breaker.settle(breaker.admit(), "no answer within 5 ms")  # sent after them, failed too
    assert breaker.state == OPEN and states == [OPEN]


def test_an_answer_clears_the_suspicion() -> None:
    clock, states = FixedClock(), []
    breaker = circuit(clock, states)
    breaker.settle(breaker.admit(), "timeout")
    breaker.settle(breaker.admit(), None)  # Redis answers: the failure was not Redis
    breaker.settle(breaker.admit(), "timeout")  # a first failure again
    assert breaker.state == CLOSED
    in_flight = breaker.admit()
    breaker.settle(in_flight, None)
    breaker.settle(breaker.admit(), "timeout")
    assert breaker.state == CLOSED and states == []
    breaker.settle(breaker.admit(), "timeout")
    assert breaker.state == OPEN and states == [OPEN]


def test_one_failure_to_open_opens_on_the_first() -> None:
    clock, states = FixedClock(), []
    breaker = circuit(clock, states, failures_to_open=1)
    breaker.settle(breaker.admit(), "timeout")
    assert breaker.state == OPEN and states == [OPEN]


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2"])
def test_a_bad_failure_count_is_refused_by_name(value: object) -> None:
    with pytest.raises(ValueError, match="failures_to_open must be a whole number >= 1"):
        Circuit(failures_to_open=value)  # type: ignore[arg-type]


def test_one_probe_after_the_cool_down_and_its_answer_closes_the_circuit() -> None:
    clock, states = FixedClock(), []
    breaker = circuit(clock, states)
    fail_twice(breaker, "ConnectionError: refused")
    clock.advance(0.25)
    probe = breaker.admit()
    assert breaker.state == HALF_OPEN
    for _ in range(3):  # concurrent calls while the probe is in flight
        assert str(refused(breaker)) == ("directive store circuit half-open: one probe is asking Redis; "
                                         "last failure: ConnectionError: refused")
    breaker.settle(probe, None)
    assert breaker.state == CLOSED and states == [OPEN, HALF_OPEN, CLOSED]
    breaker.settle(breaker.admit(), None)
    assert states == [OPEN, HALF_OPEN, CLOSED]  # transitions only


def test_each_failed_probe_doubles_the_cool_down_up_to_the_cap_and_an_answer_resets_it() -> None:
    clock, states = FixedClock(), []
    breaker = circuit(clock, states, cooldown_s=0.125, max_cooldown_s=0.5)  # binary fractions: exact sums
    fail_twice(breaker, "first")
    seen = [breaker.cooldown_s]
    for _ in range(4):
        clock.advance(breaker.cooldown_s / 2)
        refused(breaker)  # not yet
        clock.advance(breaker.cooldown_s / 2)
        breaker.settle(breaker.admit(), INTERRUPTED)
        seen.append(breaker.cooldown_s)
    assert seen == [0.125, 0.25, 0.5, 0.5, 0.5]
    assert breaker.last_failure == INTERRUPTED
    clock.advance(0.5)
    breaker.settle(breaker.admit(), None)
    assert breaker.state == CLOSED and breaker.cooldown_s == 0.125
    fail_twice(breaker, "again")
    assert breaker.cooldown_s == 0.125  # a new episode starts from the first cool-down
    assert states == [OPEN] + [HALF_OPEN, OPEN] * 4 + [HALF_OPEN, CLOSED, OPEN]


def test_a_call_admitted_before_the_circuit_opened_does_not_extend_the_cool_down() -> None:
    clock, states = FixedClock(), []
    breaker = circuit(clock, states)
    breaker.settle(breaker.admit(), "first failure")
    second, third = breaker.admit(), breaker.admit()
    breaker.settle(second, "second failure")  # opens
    clock.advance(0.2)
    breaker.settle(third, "third failure")
    assert breaker.last_failure == "third failure" and breaker.cooldown_s == 0.25
    clock.advance(0.05)
    breaker.admit()  # the cool-down counted from the second failure: probing now
    assert states == [OPEN, HALF_OPEN]


def test_a_straggler_answer_closes_the_circuit_and_the_probe_then_counts_as_a_regular_call() -> None:
    clock, states = FixedClock(), []
    breaker = circuit(clock, states)
    straggler = breaker.admit()
    fail_twice(breaker, "timeout")
    clock.advance(0.25)
    probe = breaker.admit()
    breaker.settle(straggler, None)  # Redis answered a call sent before the circuit opened
    assert breaker.state == CLOSED
    breaker.settle(probe, "timeout")  # no longer the probe: a first failure of a closed circuit
    assert breaker.state == CLOSED
    breaker.settle(breaker.admit(), "timeout")  # the second, sent after it: the first cool-down
    assert breaker.state == OPEN and breaker.cooldown_s == 0.25
    assert states == [OPEN, HALF_OPEN, CLOSED, OPEN]


def test_an_old_probe_ending_during_a_later_probe_leaves_the_later_one_in_charge() -> None:
    clock, states = FixedClock(), []
    breaker = circuit(clock, states)
    fail_twice(breaker, "timeout")
    clock.advance(0.25)
    old_probe = breaker.admit()
    breaker.settle(old_probe, "timeout")  # re-opened, 500 ms
    clock.advance(0.5)
    new_probe = breaker.admit()
    breaker.settle(old_probe, "timeout")  # a second settle of a stale ticket: not the probe any more
    assert breaker.state == HALF_OPEN
    refused(breaker)
    breaker.settle(new_probe, None)
    assert breaker.state == CLOSED


def test_a_raising_hook_never_leaves_the_probe_slot_taken() -> None:
    clock = FixedClock()

    def hook(_state: str) -> None:
        raise RuntimeError("metrics broke")

    breaker = Circuit(monotonic=clock.monotonic, on_change=hook)
    fail_twice(breaker, "timeout")
    clock.advance(0.25)
    probe = breaker.admit()
    assert breaker.state == HALF_OPEN
    breaker.settle(probe, None)
    assert breaker.state == CLOSED


@pytest.mark.parametrize(("options", "named"), [
    ({"cooldown_s": 0}, "cooldown_s"), ({"cooldown_s": float("inf")}, "cooldown_s"),
    ({"cooldown_s": True}, "cooldown_s"), ({"max_cooldown_s": -1.0}, "max_cooldown_s"),
    ({"cooldown_s": 1.0, "max_cooldown_s": 0.5}, "max_cooldown_s"),
])
def test_bad_cool_downs_are_refused_by_name(options: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        Circuit(**options)


# ------------------------------------------------------------------ the store's classification (no Redis)
class _FailingClient:
    """Stands in for the redis client: every PING raises ``error``; closing is a no-op."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.pings = 0

    async def ping(self) -> None:
        self.pings += 1
        raise self.error

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(("error", "kept", "opens"), [
    (redis_exceptions.InvalidResponse("Protocol Error: b'{\"content\":\"another tenant'"), "InvalidResponse", True),
    (redis_exceptions.ConnectionError("Error 111 connecting to 10.0.0.7:6379."),
     "ConnectionError: Error 111 connecting to 10.0.0.7:6379.", True),
    (redis_exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
     "BusyLoadingError: Redis is loading the dataset in memory", True),
    (RuntimeError("library bug quoting b'secret'"), "unexpected RuntimeError", True),
    (redis_exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), "", False),
])
async def test_the_store_keeps_only_tenant_free_failure_texts_and_an_error_reply_is_an_answer(
    error: BaseException, kept: str, opens: bool
) -> None:
    client = _FailingClient(error)
    store = RedisDirectiveStore(client, monotonic=FixedClock().monotonic)  # type: ignore[arg-type]
    for _ in range(2):  # the second failure, sent after the first, opens the circuit
        with pytest.raises(DirectiveStoreError):
            await store.ping(timeout_s=1.0)
        assert store.circuit.last_failure == kept
    assert store.circuit.state == (OPEN if opens else CLOSED)
    if opens:
        with pytest.raises(DirectiveStoreError, match="circuit open"):
            await store.ping(timeout_s=1.0)
        assert client.pings == 2  # refused without asking the client
    await store.close()
