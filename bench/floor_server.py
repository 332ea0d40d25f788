"""A gRPC server that answers AssembleContext with a canned response shaped like a real one.

Started by ``bench.floors`` as a process of its own: same stack as ``ibex-context serve``
(grpc.aio on uvloop), no retrieval and no assembly, so the CPU it spends per call is what the gRPC
layer alone costs. ``--build`` builds the response per call (as the service does) instead of
returning one prebuilt message. Prints ``ready`` once it listens.

    python -m bench.floor_server --port 9500 [--build]
"""

from __future__ import annotations

import argparse

import grpc
import uvloop

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc

RECORDS = 73
CONTEXT_TEXT = "memory text " * 700  # about the size of a real assembled context with 73 memories


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


async def serve(port: int, build: bool) -> None:
    server = grpc.aio.server()
    pb_grpc.add_ContextAssemblyServiceServicer_to_server(CannedServicer(build), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--build", action="store_true", help="build the response on every call")
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.build))


if __name__ == "__main__":
    main()
