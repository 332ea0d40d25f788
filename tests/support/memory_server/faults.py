"""Fault switches of the loopback memory service, per endpoint ("hot", "search", "feedback").

Thread-safe: tests flip them from the test's thread while the server answers in its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import struct
import threading
import uuid
from collections.abc import Callable

import attrs
from aiohttp import web

from tests.support.memory_server.records import NAMESPACE, StoredMemory

ENDPOINTS = ("hot", "search", "feedback")
FOREIGN_ORG_ID = str(uuid.uuid5(NAMESPACE, "foreign-org"))
FOREIGN_AGENT_ID = str(uuid.uuid5(NAMESPACE, "foreign-agent"))
BAD_ITEM_KINDS = (
    "rank_zero", "rank_bool", "bad_uuid", "org_not_uuid", "confidence_high", "similarity_nan",
    "similarity_inf", "similarity_bool", "content_not_string", "category_not_string",
    "missing_source", "missing_memory", "memory_not_object", "not_object", "usefulness_high",
    "created_at_bad", "retrieval_count_negative", "tags_not_list",
)
MALFORMED_BODIES = {
    "not_json": b"<html>upstream error</html>",
    "empty": b"",
    "truncated": b'{"data": {"results": [{"memory": ',
    "array": b"[]",
    "no_data": b"{}",
    "data_not_object": b'{"data": []}',
    "no_results": b'{"data": {}}',
    "results_not_list": b'{"data": {"results": {}}}',
}
_INVALID_UTF8_MARK = "@@invalid-utf8@@"


class Gate:
    """Requests wait here, in the server's loop, until the test opens the gate from its own thread.

    A held request has reached the service (it is logged) and gets no answer at all until
    ``open()``: a stand-in for an upstream that does not answer, with no timing involved.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._opened = False
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.arrived = 0

    @property
    def waiting(self) -> int:
        with self._condition:
            return sum(1 for _, future in self._waiting if not future.done())

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._condition:
            self.arrived += 1
            self._condition.notify_all()
            if self._opened:
                return
            self._waiting.append((loop, future))
        await future

    def wait_arrived(self, count: int, timeout_s: float) -> bool:
        """Block the calling thread until ``count`` requests have reached the gate (False: timed out)."""
        with self._condition:
            return self._condition.wait_for(lambda: self.arrived >= count, timeout_s)

    def open(self) -> None:
        with self._condition:
            self._opened = True
            waiting, self._waiting = self._waiting, []
        for loop, future in waiting:
            with contextlib.suppress(RuntimeError):  # the server's loop is already closed
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@attrs.define
class Faults:
    """Switches for one endpoint. ``None`` counts mean "every request until cleared"."""

    hold: Gate | None = None
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    slow_ms: float = 0.0
    slow_fraction: float = 0.0
    status: int | None = None
    status_times: int | None = None
    status_draw: random.Random | None = None  # with a ratio < 1: which requests get the status
    status_ratio: float = 1.0
    malformed_body: str | None = None
    bad_items: tuple[str, ...] = ()
    foreign_items: int = 0
    invalid_text: str | None = None
    reset: bool = False
    reset_times: int | None = None
    reset_after_apply: bool = False
    reset_draw: random.Random | None = None
    reset_ratio: float = 1.0
    huge_body_bytes: int = 0
    huge_body_declared: bool = True


@attrs.frozen
class Plan:
    """What to do to one request, decided when it arrives."""

    latency_s: float
    status: int | None
    reset: bool
    faults: Faults


class FaultSwitches:
    """The switches MemoryServer offers (it inherits them): each takes an endpoint name."""

    def __init__(self, seed: int) -> None:
        self._faults_lock = threading.Lock()
        self._seed = seed
        self._random = random.Random(seed)
        self._faults = {name: Faults() for name in ENDPOINTS}

    def hold(self, endpoint: str) -> None:
        """Give later requests no answer at all until ``release(endpoint)`` (or ``clear_faults``).

        Use it, not a latency longer than some timeout, when a test needs a timeout to fire: a
        held request cannot be answered in time however the machine schedules the two sides.
        """
        _check_endpoint(endpoint)
        with self._faults_lock:
            if self._faults[endpoint].hold is None:
                self._faults[endpoint] = attrs.evolve(self._faults[endpoint], hold=Gate())

    def release(self, endpoint: str) -> None:
        """Let the held requests of ``endpoint`` go on (and stop holding new ones)."""
        _check_endpoint(endpoint)
        with self._faults_lock:
            gate = self._faults[endpoint].hold
            self._faults[endpoint] = attrs.evolve(self._faults[endpoint], hold=None)
        if gate is not None:
            gate.open()

    def wait_held(self, endpoint: str, count: int = 1, timeout_s: float = 30.0) -> None:
        """Block until ``count`` requests are held at ``endpoint``'s gate (``timeout_s``: a hang guard)."""
        with self._faults_lock:
            gate = self._faults[endpoint].hold
        if gate is None:
            raise RuntimeError(f"{endpoint!r} is not held")
        if not gate.wait_arrived(count, timeout_s):
            raise AssertionError(f"{count} {endpoint} request(s) not held within {timeout_s} s ({gate.arrived} were)")

    def set_latency(self, endpoint: str, ms: float, *, jitter_ms: float = 0.0,
                    slow_ms: float = 0.0, slow_fraction: float = 0.0) -> None:
        """Delay answers by ``ms`` + uniform(0, jitter_ms); a ``slow_fraction`` of them by ``slow_ms``."""
        self._set(endpoint, latency_ms=ms, jitter_ms=jitter_ms, slow_ms=slow_ms, slow_fraction=slow_fraction)

    def force_status(self, endpoint: str, status: int, *, times: int | None = None, ratio: float = 1.0) -> None:
        """Answer ``status`` (before authentication) for the next ``times`` requests, or all.

        With ``ratio`` < 1 (flapping) each request gets it with that probability, drawn from a
        generator seeded by the server's seed and the endpoint (reset at every call of this
        method): the same sequence of requests to one endpoint gets the same answers, whatever the
        other endpoints see. ``times`` then counts the forced answers.
        """
        self._set(endpoint, status=status, status_times=times, status_ratio=_ratio(ratio),
                  status_draw=self._draw(endpoint, "status", ratio))

    def malform_body(self, endpoint: str, kind: str) -> None:
        if kind not in MALFORMED_BODIES:
            raise ValueError(f"unknown malformed body {kind!r}; expected one of {sorted(MALFORMED_BODIES)}")
        self._set(endpoint, malformed_body=kind)

    def inject_bad_items(self, endpoint: str, *kinds: str) -> None:
        """Put one malformed item per kind at the head of the results (before the good ones)."""
        unknown = set(kinds) - set(BAD_ITEM_KINDS)
        if unknown:
            raise ValueError(f"unknown bad item kinds {sorted(unknown)}")
        self._set(endpoint, bad_items=kinds)

    def inject_foreign_items(self, endpoint: str, count: int) -> None:
        """Append ``count`` valid items of another tenant (alternately foreign org, foreign agent)."""
        self._set(endpoint, foreign_items=count)

    def inject_invalid_text(self, endpoint: str, kind: str = "surrogate") -> None:
        """Corrupt the first item's content: "surrogate" (a ``\\ud800`` escape) or "utf8" (raw 0xff)."""
        if kind not in ("surrogate", "utf8"):
            raise ValueError(f"unknown invalid text kind {kind!r}")
        self._set(endpoint, invalid_text=kind)

    def reset_connections(self, endpoint: str, *, times: int | None = None, after_apply: bool = False,
                          ratio: float = 1.0) -> None:
        """Close the TCP connection (RST) instead of answering; feedback may be applied first.

        ``ratio`` < 1: each request is reset with that probability (drawn as in ``force_status``).
        """
        self._set(endpoint, reset=True, reset_times=times, reset_after_apply=after_apply,
                  reset_ratio=_ratio(ratio), reset_draw=self._draw(endpoint, "reset", ratio))

    def huge_body(self, endpoint: str, size_bytes: int, *, declared: bool = True) -> None:
        """Answer 200 with a valid JSON body of exactly ``size_bytes`` (``{"data": {"results": [],
        "padding": "xxx..."}}``), streamed in 256 KiB chunks from one preallocated block, with its
        ``Content-Length`` (``declared``) or chunked; writing stops when the client goes away, so
        the stand-in only pays for what the client reads. ``0`` turns it off."""
        if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
            raise ValueError(f"size_bytes must be an integer >= 0, got {size_bytes!r}")
        if 0 < size_bytes < len(_HUGE_PREFIX) + len(_HUGE_SUFFIX):
            raise ValueError(f"size_bytes must be 0 or at least {len(_HUGE_PREFIX) + len(_HUGE_SUFFIX)}")
        self._set(endpoint, huge_body_bytes=size_bytes, huge_body_declared=bool(declared))

    def clear_faults(self) -> None:
        """Back to normal answers; requests still held are let go."""
        with self._faults_lock:
            gates = [f.hold for f in self._faults.values() if f.hold is not None]
            self._faults = {name: Faults() for name in ENDPOINTS}
        for gate in gates:
            gate.open()

    def _plan(self, endpoint: str) -> Plan:
        """Draw this request's latency and consume one use of the counted switches."""
        with self._faults_lock:
            f = self._faults[endpoint]
            latency = f.latency_ms + self._random.uniform(0.0, f.jitter_ms)
            if f.slow_fraction and self._random.random() < f.slow_fraction:
                latency = f.slow_ms
            status_now = reset_now = False
            if f.status or f.reset:  # counted switches: consume one use (drawn ones only when drawn)
                status_left, reset_left = f.status_times, f.reset_times
                if f.status and _drawn(f.status_draw, f.status_ratio):
                    status_now, status_left = _take(f.status_times)
                if f.reset and _drawn(f.reset_draw, f.reset_ratio):
                    reset_now, reset_left = _take(f.reset_times)
                self._faults[endpoint] = attrs.evolve(
                    f, status=f.status if status_left != 0 else None, status_times=status_left,
                    reset=f.reset and reset_left != 0, reset_times=reset_left,
                )
        return Plan(latency / 1000.0, f.status if status_now else None, reset_now, f)

    def _set(self, endpoint: str, **changes: object) -> None:
        _check_endpoint(endpoint)
        with self._faults_lock:
            self._faults[endpoint] = attrs.evolve(self._faults[endpoint], **changes)

    def _draw(self, endpoint: str, switch: str, ratio: float) -> random.Random | None:
        """A generator of its own for a ratio switch (None: every request), seeded deterministically."""
        return None if _ratio(ratio) >= 1.0 else random.Random(f"{self._seed}/{endpoint}/{switch}")


def _check_endpoint(endpoint: str) -> None:
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}; expected one of {ENDPOINTS}")


def _ratio(ratio: float) -> float:
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be a number in (0, 1], got {ratio!r}")
    return float(ratio)


def _drawn(draw: random.Random | None, ratio: float) -> bool:
    """Whether a ratio switch applies to this request (call with the switches' lock held)."""
    return draw is None or draw.random() < ratio


def _take(count: int | None) -> tuple[bool, int | None]:
    """Consume one use of a possibly counted switch: (applies now, remaining count)."""
    if count is None:
        return True, None
    return (count > 0), max(count - 1, 0)


def reset_connection(request: web.Request) -> web.Response:
    """Abort the connection with a TCP RST; aiohttp then has nowhere to write the answer."""
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response(status=500)


_HUGE_PREFIX = b'{"data": {"results": [], "padding": "'
_HUGE_SUFFIX = b'"}}'
_HUGE_CHUNK = b"x" * (256 * 1024)


async def huge_answer(request: web.Request, size_bytes: int, declared: bool) -> web.StreamResponse:
    """A 200 answer of exactly ``size_bytes`` of valid JSON, streamed until done or the client leaves."""
    answer = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    if declared:
        answer.content_length = size_bytes
    else:
        answer.enable_chunked_encoding()
    padding = size_bytes - len(_HUGE_PREFIX) - len(_HUGE_SUFFIX)
    try:
        await answer.prepare(request)
        await answer.write(_HUGE_PREFIX)
        chunk = memoryview(_HUGE_CHUNK)
        while padding > 0:
            step = min(padding, len(chunk))
            await answer.write(chunk[:step])  # waits while the client's socket is full
            padding -= step
        await answer.write(_HUGE_SUFFIX)
        await answer.write_eof()
    except (ConnectionError, RuntimeError):  # the client went away: stop writing, nothing to answer
        pass
    return answer


def corrupt(answer: web.Response, faults: Faults, endpoint: str) -> web.Response:
    """Apply the body and item faults to a good answer."""
    if faults.malformed_body is not None:
        return web.Response(body=MALFORMED_BODIES[faults.malformed_body], content_type="application/json")
    needs_items = faults.bad_items or faults.foreign_items or faults.invalid_text
    if endpoint == "feedback" or answer.status != 200 or not needs_items:
        return answer
    results = json.loads(answer.body)["data"]["results"]  # type: ignore[arg-type]
    source = "hot_cache" if endpoint == "hot" else "vector"
    base = results[0]["memory"] if results else {"org_id": FOREIGN_ORG_ID, "agent_id": FOREIGN_AGENT_ID}
    template = _template((base["org_id"], base["agent_id"]), source)
    bad = [_bad_item(kind, template, i) for i, kind in enumerate(faults.bad_items, start=1)]
    for item in results:
        item["rank"] += len(bad)
    for i in range(faults.foreign_items):
        foreign = _template((FOREIGN_ORG_ID if i % 2 == 0 else base["org_id"], FOREIGN_AGENT_ID), source)
        foreign["memory"]["content"] = f"foreign item {i}"
        foreign["rank"] = len(bad) + len(results) + i + 1
        results.append(foreign)
    if faults.invalid_text and results:
        mark = "\ud800" if faults.invalid_text == "surrogate" else _INVALID_UTF8_MARK
        results[0]["memory"]["content"] = f"broken {mark} text"
    payload = json.dumps({"data": {"results": bad + results}}).encode()
    payload = payload.replace(_INVALID_UTF8_MARK.encode(), b"\xff\xfe")
    return web.Response(body=payload, content_type="application/json")


def _template(agent_org: tuple[str, str], source: str) -> dict[str, object]:
    org_id, agent_id = agent_org
    memory = StoredMemory(id=str(uuid.uuid4()), org_id=org_id, agent_id=agent_id, content="template")
    return {"memory": memory.to_json(), "similarity": 0.5, "rank": 1, "source": source}


def _bad_item(kind: str, template: dict[str, object], rank: int) -> object:
    if kind == "not_object":
        return f"not an object ({rank})"
    item = json.loads(json.dumps(template))
    item["rank"] = rank
    memory = item["memory"]
    memory["id"] = str(uuid.uuid5(NAMESPACE, f"bad-{kind}"))
    memory["content"] = f"bad item {kind}"
    changes: dict[str, Callable[[], object]] = {
        "rank_zero": lambda: item.update(rank=0), "rank_bool": lambda: item.update(rank=True),
        "bad_uuid": lambda: memory.update(id="not-a-uuid"), "org_not_uuid": lambda: memory.update(org_id=7),
        "confidence_high": lambda: memory.update(confidence=1.5),
        "similarity_nan": lambda: item.update(similarity=float("nan")),
        "similarity_inf": lambda: item.update(similarity=float("inf")),
        "similarity_bool": lambda: item.update(similarity=True),
        "content_not_string": lambda: memory.update(content=42),
        "category_not_string": lambda: memory.update(category=None),
        "missing_source": lambda: item.pop("source"), "missing_memory": lambda: item.pop("memory"),
        "memory_not_object": lambda: item.update(memory="a memory"),
        "usefulness_high": lambda: memory.update(usefulness_score=2.0),
        "created_at_bad": lambda: memory.update(created_at="yesterday"),
        "retrieval_count_negative": lambda: memory.update(retrieval_count=-1),
        "tags_not_list": lambda: memory.update(tags="a,b"),
    }
    changes[kind]()
    return item
