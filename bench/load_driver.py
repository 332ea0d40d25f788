"""Open-loop AssembleContext load from a process of its own (started by ``bench.load``).

Request ``i`` is due at ``start + i / rate`` whatever happened to earlier ones (open loop); its
latency is measured from that due time, so a slow generator or a queueing server shows up in the
figures instead of silently lowering the offered rate (no coordinated omission). Calls are spread
over several channels, each with its own TCP connection. Prints one JSON line: the offered rate, latencies in ms and the answer counts.

    python -m bench.load_driver --target 127.0.0.1:9092 --rate 300 --duration 30 --org U --agent U
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import attrs
import grpc
import uvloop

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc

CALL_TIMEOUT_S = 1.0
QUERY = "dark theme python deploy budget weekly report"
MESSAGES = (
    ("user", "Can you summarise what we decided about the weekly budget report?"),
    ("assistant", "We agreed to send the budget report every Friday after the deploy review."),
    ("user", "And which theme should the dashboard use for the python team?"),
)


@attrs.define
class Tally:
    latencies_ms: list[float] = attrs.Factory(list)
    errors: dict[str, int] = attrs.Factory(dict)
    degraded: int = 0
    candidates: int = 0
    server_total_ms: list[int] = attrs.Factory(list)
    branch_failures: dict[str, int] = attrs.Factory(dict)

    def error(self, code: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1


def build_request(org_id: str, agent_id: str, index: int) -> pb.AssembleContextRequest:
    return pb.AssembleContextRequest(
        org_id=org_id, agent_id=agent_id, model="gpt-4o", query=QUERY,
        recent_messages=[pb.Message(role=role, content=content) for role, content in MESSAGES],
        request_id=f"load-{index}", trace_id=f"trace-{index}",
    )


async def one_call(stub: pb_grpc.ContextAssemblyServiceStub, request: pb.AssembleContextRequest,
                   due: float, tally: Tally) -> None:
    try:
        response = await stub.AssembleContext(request, timeout=CALL_TIMEOUT_S)
    except grpc.aio.AioRpcError as exc:
        tally.error(exc.code().name)
        return
    tally.latencies_ms.append((time.perf_counter() - due) * 1000.0)
    tally.server_total_ms.append(response.metrics.total_ms)
    tally.degraded += response.degradation_level != "L0"
    for branch in response.branches:
        if branch.outcome != "success":
            key = f"{branch.name}:{branch.outcome}"
            tally.branch_failures[key] = tally.branch_failures.get(key, 0) + 1
    tally.candidates += sum(1 for m in response.memories_used if m.detail != "duplicate")


async def drive(target: str, rate: float, duration_s: float, org_id: str, agent_id: str, channels: int) -> dict:
    opened = [grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(channels)]
    stubs = [pb_grpc.ContextAssemblyServiceStub(c) for c in opened]
    await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), 10) for c in opened))
    total = int(rate * duration_s)
    requests = [build_request(org_id, agent_id, i) for i in range(total)]
    tally = Tally()
    tasks: list[asyncio.Task] = []
    start = time.perf_counter() + 0.05
    for index in range(total):
        due = start + index / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one_call(stubs[index % channels], requests[index], due, tally)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    for channel in opened:
        await channel.close()
    return {
        "rate": rate, "duration_s": duration_s, "sent": total, "elapsed_s": elapsed,
        "ok": len(tally.latencies_ms), "latencies_ms": tally.latencies_ms, "errors": tally.errors,
        "degraded": tally.degraded, "candidates": tally.candidates, "server_total_ms": tally.server_total_ms,
        "branch_failures": tally.branch_failures,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--org", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--channels", type=int, default=4)
    args = parser.parse_args(argv)
    started_cpu = time.process_time()
    result = uvloop.run(drive(args.target, args.rate, args.duration, args.org, args.agent, args.channels))
    result["driver_cpu_s"] = time.process_time() - started_cpu
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
