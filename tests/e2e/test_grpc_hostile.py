"""Hostile input at the gRPC edge, over real loopback gRPC against the real service.

Mechanisms, checked deterministically:

- a failed call leaves nothing behind: with the garbage collector off from before the call to
  the check, no object of the call's request survives it (protobuf messages take no weak
  references, so the check looks the request up by a marker among the collector's tracked
  objects; with the collector off, only reference counting can have freed it). A control shows
  the check sees the cycle ``context.abort`` leaves;
- with principal keys, an unauthenticated call is refused before its body is read: the reader
  never runs and no byte of a 14 MB body is allocated in Python (tracemalloc's peak);
- undecodable bytes are INVALID_ARGUMENT naming ``request``; a repeated field over its bound is
  refused from the bytes, before decoding (the wire walk's message carries no count); the largest
  valid request reaches validation and one byte more is RESOURCE_EXHAUSTED;
- a proof longer lived than ``IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME`` is UNAUTHENTICATED;
- property: random bytes and garbled messages, with and without auth, never end UNKNOWN or
  INTERNAL, always with a known code and a message.
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from domain.model.assembly import AssembleRequest
from entrypoints.auth.proof import PROOF_METADATA_KEY
from entrypoints.grpc_api import servicer as servicer_module
from entrypoints.grpc_api import wire
from entrypoints.grpc_api.server import SERVICE_NAME
from tests.e2e.conftest import Harness, StartService
from tests.e2e.tenant import AGENT_ID, ORG_ID, assemble_request
from tests.support.principal_proofs import context as principal_context
from tests.support.principal_proofs import ed_entry, ed_proof, write_key_file

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

METHODS = ("AssembleContext", "SearchMemories", "RecordMemoryFeedback")
NEVER = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
BIG_CHANNEL = (("grpc.max_send_message_length", 64 * 1024 * 1024),
               ("grpc.max_receive_message_length", 64 * 1024 * 1024))


# ------------------------------------------------------------------ helpers
def raw_call(channel: grpc.aio.Channel, method: str) -> grpc.aio.UnaryUnaryMultiCallable:
    """A unary call that sends and receives bytes as they are (no serializer)."""
    return channel.unary_unary(f"/{SERVICE_NAME}/{method}")


async def outcome(call: Any) -> tuple[grpc.StatusCode, str]:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


@pytest.fixture
async def keys(tmp_path: Path) -> Path:
    return write_key_file(tmp_path / "keys.json", ed_entry("ed-1"))


def own_proof(**changes: Any) -> tuple[tuple[str, bytes], ...]:
    fields: dict[str, Any] = {"org_id": ORG_ID, "agent_id": AGENT_ID, "issued_at": datetime.now(UTC), **changes}
    return ((PROOF_METADATA_KEY, ed_proof(principal_context(**fields), "ed-1")),)


@contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def survivors(marker: str) -> int:
    """Live request objects of a call (the proto message and the domain request) carrying ``marker``."""
    return sum(1 for obj in gc.get_objects()
               if type(obj) in (pb.AssembleContextRequest, AssembleRequest) and obj.trace_id == marker)


async def settled_survivors(marker: str, wait_s: float = 10.0) -> int:
    """``survivors`` once the server side has finished, polled up to ``wait_s`` (a hang guard: with the
    collector off, a request in a reference cycle stays, so waiting can only let reference counting
    finish its work and never hides a cycle)."""
    deadline = time.monotonic() + wait_s
    while (count := survivors(marker)) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return count


def marked_body(marker: str, **changes: Any) -> bytes:
    return assemble_request(trace_id=marker, **changes).SerializeToString()


# ------------------------------------------------------------------ a failed call frees its request
FAILURES: dict[str, tuple[dict[str, Any], bool, Callable[[], Any], grpc.StatusCode, str]] = {
    # name: (request changes, server needs proofs, metadata, code, details fragment)
    "unauthenticated": ({}, True, lambda: (), grpc.StatusCode.UNAUTHENTICATED, "missing_proof: "),
    "permission_denied": ({"agent_id": str(uuid.uuid4())}, True, own_proof, grpc.StatusCode.PERMISSION_DENIED,
                          "agent_mismatch: "),
    "invalid_argument": ({"org_id": "not-a-uuid"}, False, lambda: (), grpc.StatusCode.INVALID_ARGUMENT, "org_id"),
    "invalid_after_translation": ({"available_tokens": -1, "recent_messages": [pb.Message(role="user", content="x")] * 50},
                                  False, lambda: (), grpc.StatusCode.INVALID_ARGUMENT, "available_tokens"),
    "unknown_model": ({"model": "gpt-unknown-9"}, False, lambda: (), grpc.StatusCode.INVALID_ARGUMENT, "model: "),
}


@pytest.mark.parametrize("case", list(FAILURES))
async def test_a_failed_call_frees_its_request_at_once(case: str, start_service_under_test: StartService,
                                                       keys: Path) -> None:
    changes, needs_proofs, metadata, code, fragment = FAILURES[case]
    harness = await start_service_under_test(**({"IBEX_CONTEXT_PRINCIPAL_KEYS": str(keys)} if needs_proofs else {}))
    call = raw_call(harness.channel, "AssembleContext")
    await outcome(call(marked_body("warm-up", **changes), metadata=metadata(), timeout=10))  # first-call caches
    marker = f"marker-{uuid.uuid4()}"
    body = marked_body(marker, **changes)
    with collector_off():
        seen = await outcome(call(body, metadata=metadata(), timeout=10))
        left = await settled_survivors(marker)
    assert seen[0] == code and fragment in seen[1]
    assert left == 0, f"{left} request object(s) of a failed {case} call outlived it"


async def test_the_check_sees_the_cycle_that_context_abort_leaves() -> None:
    """Control: a handler that aborts keeps its (decoded) request alive until the collector runs.

    (grpc.aio's accept loop also holds the latest call's state until the next call arrives, so a
    second call is made before looking: then only the cycle can hold the first request.)"""
    class Aborting(pb_grpc.ContextAssemblyServiceServicer):
        async def AssembleContext(self, request, context):  # type: ignore[no-untyped-def]
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no")

    server = grpc.aio.server()
    pb_grpc.add_ContextAssemblyServiceServicer_to_server(Aborting(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    marker = f"marker-{uuid.uuid4()}"
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with collector_off():
                seen = await outcome(raw_call(channel, "AssembleContext")(marked_body(marker), timeout=10))
                await outcome(raw_call(channel, "AssembleContext")(b"", timeout=10))
                left = await settled_survivors(marker, wait_s=0.5)  # a cycle stays: waiting longer changes nothing
                gc.collect()
                after_collection = survivors(marker)
    finally:
        await server.stop(None)
    assert seen[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert left >= 1 and after_collection == 0


# ------------------------------------------------------------------ refused before the body is read
async def test_an_unauthenticated_call_is_refused_before_its_body_is_read(
        start_service_under_test: StartService, keys: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    harness = await start_service_under_test(IBEX_CONTEXT_PRINCIPAL_KEYS=str(keys))
    reads: list[str] = []
    real_read = servicer_module._read_request

    async def counting_read(context: Any, shape: wire.RequestShape) -> Any:
        reads.append(shape.full_name)
        return await real_read(context, shape)

    monkeypatch.setattr(servicer_module, "_read_request", counting_read)
    body = pb.AssembleContextRequest(org_id=ORG_ID, agent_id=AGENT_ID, model="gpt-4o",
                                     recent_messages=[pb.Message(role="u", content="hi")] * 1_500_000,
                                     ).SerializeToString()
    assert len(body) > 10 * 1024 * 1024
    async with grpc.aio.insecure_channel(harness.service.grpc_address, options=BIG_CHANNEL) as channel:
        call = raw_call(channel, "AssembleContext")
        await outcome(call(b"", timeout=10))  # warm the channel and the handlers
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            unauthenticated = await outcome(call(body, timeout=10))
            peak_unauthenticated = tracemalloc.get_traced_memory()[1] - before
            tracemalloc.reset_peak()
            authenticated = await outcome(call(body, metadata=own_proof(), timeout=10))
            peak_authenticated = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
    assert unauthenticated[0] == grpc.StatusCode.UNAUTHENTICATED and unauthenticated[1].startswith("missing_proof: ")
    assert authenticated == (grpc.StatusCode.INVALID_ARGUMENT, "recent_messages exceeds 100 items")
    assert reads == ["ibex.context.v1.AssembleContextRequest"]  # only the authenticated call read its body
    assert peak_unauthenticated < 1024 * 1024, "the unauthenticated body reached Python"
    assert peak_authenticated > len(body), "the control: an authenticated call does read the body"


# ------------------------------------------------------------------ undecodable bytes, bounds, limits
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x0a\x05ab", b"\x12\x02\xff\xfe", b"\x0c"],
                         ids=["bad-varint", "truncated", "bad-utf8", "stray-group-end"])
async def test_undecodable_bytes_are_invalid_argument_naming_the_request(harness: Harness, method: str,
                                                                         body: bytes) -> None:
    code, details = await outcome(raw_call(harness.channel, method)(body, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(f"request: the bytes are not a valid ibex.context.v1.{method}Request (")
    assert harness.requests_seen(method, "INVALID_ARGUMENT") == 1


async def test_a_call_without_a_request_message_is_invalid_argument(harness: Harness) -> None:
    async def nothing() -> AsyncIterator[bytes]:
        return
        yield b""  # pragma: no cover  (an async generator that sends no message)

    call = harness.channel.stream_unary(f"/{SERVICE_NAME}/AssembleContext")
    code, details = await outcome(call(nothing(), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("request: no ibex.context.v1.AssembleContextRequest arrived (none was sent")


@pytest.mark.parametrize(("method", "message", "field"), [
    ("AssembleContext", pb.AssembleContextRequest(recent_messages=[pb.Message()] * 1_000_000), "recent_messages"),
    ("AssembleContext", pb.AssembleContextRequest(tool_schemas=[""] * 1_000_000), "tool_schemas"),
    ("SearchMemories", pb.SearchMemoriesRequest(tags=[""] * 1_000_000), "tags"),
    ("SearchMemories", pb.SearchMemoriesRequest(categories=["c"] * 17), "categories"),
    ("RecordMemoryFeedback", pb.RecordMemoryFeedbackRequest(memory_ids=[""] * 1_000_000), "memory_ids"),
], ids=["messages", "tool-schemas", "tags", "categories", "memory-ids"])
async def test_a_repeated_field_over_its_bound_is_refused_from_the_bytes(harness: Harness, method: str,
                                                                         message: Any, field: str) -> None:
    body = message.SerializeToString()
    code, details = await outcome(raw_call(harness.channel, method)(body, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(f"{field} exceeds ") and details.endswith(" items")  # the walk's (no count)


async def test_the_largest_valid_request_reaches_validation_and_one_byte_more_is_refused(harness: Harness) -> None:
    wide = "\U0001f600"  # 4 UTF-8 bytes
    message = assemble_request(recent_messages=[pb.Message(role="user", content=wide * 32_768)] * 100,
                               tool_schemas=[wide * 8192] * 64, available_tokens=-1)  # refused last
    body = message.SerializeToString()
    async with grpc.aio.insecure_channel(harness.service.grpc_address, options=BIG_CHANNEL) as channel:
        call = raw_call(channel, "AssembleContext")
        valid = await outcome(call(body, timeout=30))
        at_limit = await outcome(call(padded_to(body, wire.MAX_RECEIVE_BYTES), timeout=30))
        over = await outcome(call(padded_to(body, wire.MAX_RECEIVE_BYTES + 1), timeout=30))
    assert valid[0] == grpc.StatusCode.INVALID_ARGUMENT and valid[1].startswith("available_tokens")
    assert at_limit[0] == grpc.StatusCode.INVALID_ARGUMENT and at_limit[1].startswith("available_tokens")
    assert over[0] == grpc.StatusCode.RESOURCE_EXHAUSTED


def padded_to(body: bytes, total: int) -> bytes:
    """``body`` plus an unknown bytes field 15 (tag 0x7a, a 3-byte length) making it ``total`` bytes."""
    length = total - len(body) - 4
    assert wire.varint_size(length) == 3
    return body + b"\x7a" + bytes([length & 0x7F | 0x80, length >> 7 & 0x7F | 0x80, length >> 14]) + b"\0" * length


# ------------------------------------------------------------------ the maximum proof lifetime
async def test_a_proof_living_longer_than_the_maximum_is_unauthenticated(
        start_service_under_test: StartService, keys: Path, directive: str) -> None:
    harness = await start_service_under_test(IBEX_CONTEXT_PRINCIPAL_KEYS=str(keys),
                                             IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME="120s")
    long_lived = harness.stub.AssembleContext(assemble_request(), metadata=own_proof(ttl=timedelta(minutes=5)),
                                              timeout=10)
    code, details = await outcome(long_lived)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert details == ("lifetime_too_long: expires_at - issued_at exceeds the maximum proof lifetime "
                       "(IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME)")
    ok = await harness.stub.AssembleContext(assemble_request(), metadata=own_proof(ttl=timedelta(minutes=2)),
                                            timeout=10)
    assert ok.degradation_level == "L0"
    century = await outcome(harness.stub.AssembleContext(
        assemble_request(), metadata=own_proof(ttl=timedelta(days=36_525)), timeout=10))
    assert century[0] == grpc.StatusCode.UNAUTHENTICATED and century[1].startswith("lifetime_too_long: ")


# ------------------------------------------------------------------ property: never UNKNOWN or INTERNAL
_ids = st.sampled_from([ORG_ID, AGENT_ID, "", "not-a-uuid", ORG_ID.upper(), " " * 300]) | st.text(max_size=40)
_texts = st.text(max_size=60) | st.sampled_from(["gpt-4o", "gpt-4o-mini", "positive", "user", "\U0001f600" * 10])
_floats = st.floats(width=32, allow_nan=True, allow_infinity=True)
_int32 = st.integers(-(2**31), 2**31 - 1)
_options = st.builds(pb.AssemblyOptions, skip_cold_memories=st.booleans(), skip_hot_memories=st.booleans(),
                     recency_weight=_floats, relevance_weight=_floats, usefulness_weight=_floats,
                     confidence_weight=_floats, max_memories=_int32)
_assemble = st.builds(pb.AssembleContextRequest, org_id=_ids, agent_id=_ids, model=_texts, query=_texts,
                      recent_messages=st.lists(st.builds(pb.Message, role=_texts, content=_texts), max_size=110),
                      tool_schemas=st.lists(_texts, max_size=70), available_tokens=_int32, options=_options,
                      request_id=_texts, trace_id=_texts, span_id=_texts, session_id=_texts)
_search = st.builds(pb.SearchMemoriesRequest, org_id=_ids, agent_id=_ids, query=_texts, limit=_int32,
                    min_similarity=_floats, categories=st.lists(_texts, max_size=20), tags=st.lists(_texts, max_size=70),
                    session_id=_texts)
_feedback = st.builds(pb.RecordMemoryFeedbackRequest, org_id=_ids, memory_ids=st.lists(_ids, max_size=110),
                      feedback=_texts, session_id=_texts, trace_id=_texts)
_MESSAGES = {"AssembleContext": _assemble, "SearchMemories": _search, "RecordMemoryFeedback": _feedback}


@st.composite
def garbled(draw: st.DrawFn) -> tuple[str, bytes]:
    """A method and a body: random bytes, or a random message of the method, maybe garbled."""
    method = draw(st.sampled_from(METHODS))
    if draw(st.integers(0, 3)) == 0:
        return method, draw(st.binary(max_size=512))
    body = bytearray(draw(_MESSAGES[method]).SerializeToString())
    for _ in range(draw(st.integers(0, 3))):
        position = draw(st.integers(0, len(body)))
        action = draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip" and position < len(body):
            body[position] ^= draw(st.integers(1, 255))
        elif action == "cut":
            del body[position:]
        else:
            body[position:position] = draw(st.binary(min_size=1, max_size=8))
    return method, bytes(body)


def assert_known(code: grpc.StatusCode, details: str, what: str) -> None:
    assert code not in NEVER, f"{what} ended {code.name}: {details}"
    assert code == grpc.StatusCode.OK or details, f"{what} ended {code.name} without a message"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=garbled())
async def test_garbled_bytes_never_end_unknown_or_internal(harness: Harness, case: tuple[str, bytes]) -> None:
    method, body = case
    code, details = await outcome(raw_call(harness.channel, method)(body, timeout=10))
    assert_known(code, details, f"{method}({body[:80]!r}...)")


@pytest.fixture
async def guarded(start_service_under_test: StartService, keys: Path, directive: str) -> Harness:
    return await start_service_under_test(IBEX_CONTEXT_PRINCIPAL_KEYS=str(keys))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=garbled(), proof=st.one_of(st.none(), st.binary(max_size=300), st.just(b"own")))
async def test_with_proofs_required_garbled_calls_end_with_a_known_code(guarded: Harness, case: tuple[str, bytes],
                                                                        proof: bytes | None) -> None:
    method, body = case
    metadata = () if proof is None else own_proof() if proof == b"own" else ((PROOF_METADATA_KEY, proof),)
    code, details = await outcome(raw_call(guarded.channel, method)(body, metadata=metadata, timeout=10))
    assert_known(code, details, f"{method}({body[:80]!r}...)")
    if proof != b"own":
        assert code == grpc.StatusCode.UNAUTHENTICATED  # refused on the metadata, whatever the body
