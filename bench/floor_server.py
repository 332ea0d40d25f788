"""Floors for the capacity benchmark: gRPC servers that answer AssembleContext without assembling.

Started by ``bench.floors`` and ``bench.load`` as processes of their own, on the same stack as
``ibex-context serve`` (grpc.aio on uvloop), so the CPU each spends per call is what its layers
alone cost:

* default: a canned response shaped like a real one (``--build``: built per call, as the service
  does, instead of one prebuilt message);
* ``--response-file F``: the exact serialized bytes of a real answer, returned as they are (no
  decode, no encode of the response);
* ``--io``: with ``--response-file``, first the same I/O an assembly does (one Redis GET of the
  directive, the hot list and the search from the memory service, bodies read and JSON-decoded)
  with the plain libraries, then the canned bytes: the I/O-only pipeline.

Prints ``ready`` once it listens.

    python -m bench.floor_server --port 9500 [--build]
    python -m bench.floor_server --port 9500 --response-file answer.bin [--io --redis-url URL
        --memory-url URL --token T --org ORG --agent AGENT --query Q --hot-limit 50 --cold-limit 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable

import aiohttp
import grpc
import redis.asyncio as redis_asyncio
import uvloop

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc

RECORDS = 73
CONTEXT_TEXT = "memory text " * 700  # about the size of a real assembled context with 73 memories
SERVICE = "ibex.context.v1.ContextAssemblyService"


def canned_response() -> pb.AssembleContextResponse:
    response = pb.AssembleContextResponse(assembled_context=CONTEXT_TEXT, tokens_used=4000, degradation_level="L0",
                                          score_schema="interim_v1", estimate_kind="exact_o200k_base")
    add = response.memories_used.add
    for index in range(RECORDS):
        add(memory_id=f"{index:08x}-0000-4000-8000-000000000000", composite_score=0.5, relevance_score=0.4,
            recency_score=0.3, usefulness_score=0.5, rank=index + 1, category="factual", exclusion="included",
            similarity=0.5, confidence=0.4, token_estimate=50, detail="")
    return response


class CannedServicer(pb_grpc.ContextAssemblyServiceServicer):
    def __init__(self, build: bool) -> None:
        self._build = build
        self._response = canned_response()

    async def AssembleContext(self, request: pb.AssembleContextRequest, context: grpc.aio.ServicerContext) -> pb.AssembleContextResponse:
        return canned_response() if self._build else self._response


class IoPipeline:
    """The I/O of one assembly with the plain libraries: a Redis GET and the two memory calls."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._redis = redis_asyncio.from_url(args.redis_url, max_connections=16)
        self._key = f"{args.org}:directive:{args.agent}"
        self._hot_url, self._search_url = f"{args.memory_url}/v1/memories/hot", f"{args.memory_url}/v1/memories/search"
        self._params = {"agent_id": args.agent, "limit": str(args.hot_limit), "min_confidence": "0.0"}
        self._search = json.dumps({"agent_id": args.agent, "query": args.query, "limit": args.cold_limit,
                                   "min_confidence": 0.0}).encode()
        self._headers = {"Authorization": f"Bearer {args.token}", "Accept": "application/json"}
        self._session: aiohttp.ClientSession | None = None

    async def run(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(),
                                                  connector=aiohttp.TCPConnector(limit=16))
        session = self._session

        async def hot() -> None:
            async with session.get(self._hot_url, params=self._params, headers=self._headers) as answer:
                json.loads(await answer.read())

        async def search() -> None:
            headers = {**self._headers, "Content-Type": "application/json"}
            async with session.post(self._search_url, data=self._search, headers=headers) as answer:
                json.loads(await answer.read())

        await self._redis.get(self._key)
        async with asyncio.TaskGroup() as group:
            group.create_task(hot())
            group.create_task(search())


def bytes_handler(answer: bytes, before: Callable[[], Awaitable[None]] | None) -> grpc.GenericRpcHandler:
    async def assemble(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        if before is not None:
            await before()
        return answer

    method = grpc.unary_unary_rpc_method_handler(assemble)  # no (de)serializers: raw bytes both ways
    return grpc.method_handlers_generic_handler(SERVICE, {"AssembleContext": method})


async def serve(args: argparse.Namespace) -> None:
    server = grpc.aio.server()
    if args.response_file:
        with open(args.response_file, "rb") as handle:
            answer = handle.read()
        before = IoPipeline(args).run if args.io else None
        server.add_generic_rpc_handlers((bytes_handler(answer, before),))
    else:
        pb_grpc.add_ContextAssemblyServiceServicer_to_server(CannedServicer(args.build), server)
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--build", action="store_true", help="build the response on every call")
    parser.add_argument("--response-file", help="answer with these serialized bytes")
    parser.add_argument("--io", action="store_true", help="do an assembly's I/O before answering")
    for name in ("--redis-url", "--memory-url", "--token", "--org", "--agent", "--query"):
        parser.add_argument(name, default="")
    parser.add_argument("--hot-limit", type=int, default=50)
    parser.add_argument("--cold-limit", type=int, default=20)
    args = parser.parse_args()
    if args.io and not (args.response_file and args.redis_url and args.memory_url):
        parser.error("--io needs --response-file, --redis-url and --memory-url")
    uvloop.run(serve(args))


if __name__ == "__main__":
    main()
