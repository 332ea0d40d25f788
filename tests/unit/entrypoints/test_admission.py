"""Admission control: the conditions are made by the test (held slots, deadlines), never timed."""

from __future__ import annotations

import asyncio

import pytest

from entrypoints.admission import Admission, Shed, ShedReason

LONG_S = 30.0  # a wait that must never run out in these tests


class Recorder:
    def __init__(self) -> None:
        self.shed: list[tuple[str, ShedReason]] = []

    def __call__(self, surface: str, reason: ShedReason) -> None:
        self.shed.append((surface, reason))


async def hold(admission: Admission, entered: asyncio.Event, release: asyncio.Event) -> None:
    async with admission.slot("grpc", None):
        entered.set()
        await release.wait()


async def test_a_call_with_too_little_deadline_left_never_starts() -> None:
    recorder = Recorder()
    admission = Admission(max_in_flight=4, max_wait_s=0.0, min_deadline_s=0.010, busy_deadline_s=0.030, on_shed=recorder)
    started = False
    with pytest.raises(Shed) as refused:
        async with admission.slot("grpc", 0.004):
            started = True
    assert not started and refused.value.reason == ShedReason.DEADLINE
    assert str(refused.value) == "4.0 ms of the deadline left; an assembly is not started with less than 10 ms"
    assert recorder.shed == [("grpc", ShedReason.DEADLINE)]


async def test_past_the_in_flight_bound_a_call_is_refused_at_once_without_a_wait() -> None:
    recorder = Recorder()
    admission = Admission(max_in_flight=1, max_wait_s=0.0, min_deadline_s=0.0, busy_deadline_s=0.0, on_shed=recorder)
    entered, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold(admission, entered, release))
    await entered.wait()
    with pytest.raises(Shed) as refused:
        async with admission.slot("http", None):
            raise AssertionError("must not start")
    assert refused.value.reason == ShedReason.IN_FLIGHT
    assert str(refused.value) == "all 1 assembly slots are taken and none freed within 0 ms; retry shortly"
    release.set()
    await holder
    async with admission.slot("http", None):  # the slot is free again
        pass
    assert recorder.shed == [("http", ShedReason.IN_FLIGHT)]


async def test_a_waiting_call_starts_when_a_slot_frees() -> None:
    admission = Admission(max_in_flight=1, max_wait_s=LONG_S, min_deadline_s=0.0, busy_deadline_s=0.0)
    entered, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold(admission, entered, release))
    await entered.wait()
    ran = asyncio.Event()

    async def waiter() -> None:
        async with admission.slot("grpc", LONG_S * 2):
            ran.set()

    waiting = asyncio.create_task(waiter())
    await asyncio.sleep(0)  # let it find the slot taken and start waiting
    assert not ran.is_set()
    release.set()
    await asyncio.wait_for(waiting, LONG_S)
    assert ran.is_set()
    await holder


async def test_the_wait_never_eats_into_the_time_an_assembly_needs() -> None:
    """Deadline 10 ms, busy minimum 10 ms: no time to wait at all, whatever the configured wait."""
    admission = Admission(max_in_flight=1, max_wait_s=LONG_S, min_deadline_s=0.005, busy_deadline_s=0.010)
    entered, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold(admission, entered, release))
    await entered.wait()
    with pytest.raises(Shed) as refused:
        async with admission.slot("grpc", 0.010):
            raise AssertionError("must not start")
    assert refused.value.reason == ShedReason.IN_FLIGHT
    release.set()
    await holder


async def test_a_busy_process_refuses_at_once_a_call_with_less_than_the_busy_deadline_left() -> None:
    recorder = Recorder()
    admission = Admission(max_in_flight=1, max_wait_s=LONG_S, min_deadline_s=0.010, busy_deadline_s=0.030,
                          on_shed=recorder)
    entered, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold(admission, entered, release))
    await entered.wait()
    with pytest.raises(Shed) as refused:  # refused without waiting: the configured wait is 30 s
        async with admission.slot("grpc", 0.025):
            raise AssertionError("must not start")
    assert refused.value.reason == ShedReason.DEADLINE
    assert str(refused.value) == ("all 1 assembly slots are taken and 25.0 ms of the deadline is left; "
                                  "a busy process needs 30 ms to start one")
    assert recorder.shed == [("grpc", ShedReason.DEADLINE)]
    release.set()
    await holder


async def test_an_idle_process_starts_a_call_with_a_short_deadline() -> None:
    """Between the two minimums a call starts when a slot is free: only waiting needs the busy one."""
    admission = Admission(max_in_flight=1, max_wait_s=0.0, min_deadline_s=0.010, busy_deadline_s=0.030)
    started = False
    async with admission.slot("grpc", 0.025):
        started = True
    assert started


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="max_in_flight must be >= 1"):
        Admission(max_in_flight=0, max_wait_s=0.0, min_deadline_s=0.0, busy_deadline_s=0.0)
    with pytest.raises(ValueError, match="busy_deadline_s >= min_deadline_s"):
        Admission(max_in_flight=1, max_wait_s=0.0, min_deadline_s=0.020, busy_deadline_s=0.010)


async def test_check_start_applies_the_deadline_rules_at_once_and_never_takes_a_slot() -> None:
    recorder = Recorder()
    admission = Admission(max_in_flight=1, max_wait_s=LONG_S, min_deadline_s=0.010, busy_deadline_s=0.030,
                          on_shed=recorder)
    admission.check_start("grpc", None)  # no deadline: nothing to check
    admission.check_start("grpc", 0.020)  # idle: 10 ms is enough
    with pytest.raises(Shed, match="4.0 ms of the deadline left"):
        admission.check_start("grpc", 0.004)
    entered, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold(admission, entered, release))  # check_start took no slot: this one starts
    await entered.wait()
    with pytest.raises(Shed, match="a busy process needs 30 ms to start one"):
        admission.check_start("grpc", 0.020)  # every slot taken: 30 ms needed, and nothing waited
    admission.check_start("grpc", 0.040)
    release.set()
    await holder
    assert recorder.shed == [("grpc", ShedReason.DEADLINE), ("grpc", ShedReason.DEADLINE)]
