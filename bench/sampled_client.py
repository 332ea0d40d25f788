"""A sampled gRPC client beside h2load (started by ``bench.faults``, in a process of its own).

h2load sees HTTP status 200 for every gRPC answer (the gRPC status travels in trailers), so this
client sends a few percent of the calls itself, with the same request bytes and the same deadline,
and records what each one got. Open loop: call ``i`` is due at ``start + i / rate`` whatever
happened to earlier ones, and its latency is measured from that due time (no coordinated
omission). With ``--health-interval-ms`` it also asks ``grpc.health.v1.Health/Check`` for the
service's name at that interval.

Writes one JSON object to ``--out``: ``calls``, one ``[due, latency_ms, code, level, directive,
outcomes]`` per call (``due`` in seconds since the epoch, ``directive`` 1 when the answer carried
directive tokens, ``outcomes`` the directive/hot/cold branch outcomes joined by ``/``; level and
outcomes empty for a failed call), and ``health``, one ``[at, status]`` per check (the serving
status, or the gRPC code of a failed check).

    python -m bench.sampled_client --target 127.0.0.1:9092 --request-file req.bin --rate 5 \\
        --start 1767225600.0 --duration 10 --deadline-ms 45 --out calls.json [--health-interval-ms 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import grpc
import uvloop
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc

SERVICE = "ibex.context.v1.ContextAssemblyService"
HEALTH_TIMEOUT_S = 0.5


class EpochClock:
    """Seconds since the epoch, read from the monotonic clock (one time.time() reading at start)."""

    def __init__(self) -> None:
        self._epoch = time.time()
        self._mono = time.monotonic()

    def now(self) -> float:
        return self._epoch + (time.monotonic() - self._mono)

    def monotonic(self, epoch: float) -> float:
        return self._mono + (epoch - self._epoch)


async def sample(args: argparse.Namespace) -> dict:
    clock = EpochClock()
    request = pb.AssembleContextRequest.FromString(Path(args.request_file).read_bytes())
    channel = grpc.aio.insecure_channel(args.target)
    stub = pb_grpc.ContextAssemblyServiceStub(channel)
    health = health_pb2_grpc.HealthStub(channel)
    timeout_s = args.deadline_ms / 1000.0
    calls: list[list] = []
    checks: list[list] = []
    end = args.start + args.duration

    async def one(due: float) -> None:
        try:
            answer = await stub.AssembleContext(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            calls.append([due, (clock.now() - due) * 1000.0, exc.code().name, "", 0, ""])
            return
        outcomes = "/".join(branch.outcome for branch in answer.branches)
        calls.append([due, (clock.now() - due) * 1000.0, "OK", answer.degradation_level,
                      int(answer.directive_tokens > 0), outcomes])

    async def check_health() -> None:
        await asyncio.sleep(max(0.0, args.start - clock.now()))
        while clock.now() < end:
            at = clock.now()
            try:
                answer = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=HEALTH_TIMEOUT_S)
                checks.append([at, health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)])
            except grpc.aio.AioRpcError as exc:
                checks.append([at, exc.code().name])
            await asyncio.sleep(max(0.0, at + args.health_interval_ms / 1000.0 - clock.now()))

    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task] = set()
    watcher = asyncio.create_task(check_health()) if args.health_interval_ms > 0 else None
    total = int(args.rate * args.duration)
    for index in range(total):
        due = args.start + index / args.rate
        delay = clock.monotonic(due) - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(due))
        pending.add(task)
        task.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
    if watcher is not None:
        await watcher
    await channel.close()
    calls.sort()
    return {"rate": args.rate, "start": args.start, "duration": args.duration, "calls": calls, "health": checks}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--request-file", required=True, help="a serialized AssembleContextRequest")
    parser.add_argument("--rate", type=float, required=True, help="calls per second")
    parser.add_argument("--start", type=float, required=True, help="the first call's due time, seconds since the epoch")
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--deadline-ms", type=float, default=45.0)
    parser.add_argument("--health-interval-ms", type=float, default=0.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = uvloop.run(sample(args))
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
