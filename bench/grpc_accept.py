"""How fast grpc.aio hands new calls to the servicer while its event loop is busy.

Why: under overload the service's refusals reach the caller after about 40 ms, and calls reach
the servicer with 15-20 ms of their deadline already spent, with an assembly slot free
(docs/RELIABILITY.md). No admission rule can act on a call before grpc hands it over, so this
measures the hand-over alone.

How: a grpc.aio server on uvloop (as ``serve`` runs) whose handler answers at once; beside it, on
the same loop, a task that holds the loop for ``--block-ms`` of synchronous work on each turn of
the loop, what an assembly's CPU-bound part does (scoring, packing, formatting: 2-4 ms here);
then ``h2load`` (a C client in its own process) sends ``--calls`` calls at once on one connection.
grpc.aio accepts calls one after the other (its server loop asks core for one call, awaits it,
then asks for the next), and each hand-over takes a few turns of the loop, so a busy loop caps
the rate at which calls are even seen. Per block: the time from the first call sent to the last
answer received (h2load's log), that time per call, and the calls' latencies as h2load saw them.

    .venv/bin/python -m bench.grpc_accept [--calls 100] [--block-ms 0 1 3.5 10]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import grpc
import uvloop

from bench.h2load_driver import METHOD_PATH, grpc_headers, parse_log
from bench.load import ensure_h2load, grpc_frame, percentile

SERVICE, METHOD = METHOD_PATH.strip("/").split("/")


async def _answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return b""


async def _hold_the_loop(block_s: float, stop: asyncio.Event) -> None:
    """``block_s`` of synchronous work on every turn of the loop until ``stop``."""
    while not stop.is_set():
        until = time.perf_counter() + block_s
        while time.perf_counter() < until:  # CPU work, as an assembly's, not a sleep
            pass
        await asyncio.sleep(0)


async def burst(h2load_bin: str, addr: str, body: Path, calls: int, block_s: float, folder: Path) -> dict[str, float]:
    """``calls`` calls sent at once while the loop is held ``block_s`` a turn; wall time and latencies (ms)."""
    stop = asyncio.Event()
    holder = asyncio.get_running_loop().create_task(_hold_the_loop(block_s, stop)) if block_s > 0 else None
    log = folder / f"burst-{len(list(folder.glob('burst-*.log')))}.log"
    try:
        process = await asyncio.create_subprocess_exec(
            h2load_bin, f"http://{addr}{METHOD_PATH}", "-d", str(body), "-n", str(calls), "-c", "1", "-m", str(calls),
            *grpc_headers(), f"--log-file={log}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        output, _ = await process.communicate()
    finally:
        stop.set()
        if holder is not None:
            await holder
    if process.returncode != 0:
        raise RuntimeError(f"h2load failed ({process.returncode}): {output.decode()[-1000:]}")
    requests = parse_log(log.read_text())
    latencies = [r.latency_ms for r in requests if r.status == 200]
    if len(latencies) != calls:
        raise RuntimeError(f"{calls} calls sent, {len(latencies)} answered with HTTP 200: {output.decode()[-1000:]}")
    # From the first call sent to the last answer received, as h2load logged them (its start-up left out).
    wall_ms = max(r.start_s * 1000.0 + r.latency_ms for r in requests) - min(r.start_s for r in requests) * 1000.0
    return {"wall_ms": wall_ms, "per_call_ms": wall_ms / calls, "p50": percentile(latencies, 0.5),
            "p99": percentile(latencies, 0.99), "max": max(latencies)}


async def run(calls: int, blocks_ms: list[float]) -> list[tuple[float, dict[str, float]]]:
    h2load_bin = ensure_h2load()
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(_answer)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        with tempfile.TemporaryDirectory(prefix="grpc-accept-") as name:
            folder = Path(name)
            body = folder / "request.bin"
            body.write_bytes(grpc_frame(b""))
            addr = f"127.0.0.1:{port}"
            await burst(h2load_bin, addr, body, min(calls, 20), 0.0, folder)  # warm-up: the connection, the code paths
            return [(block, await burst(h2load_bin, addr, body, calls, block / 1000.0, folder)) for block in blocks_ms]
    finally:
        await server.stop(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100, help="calls sent at once, on one connection")
    parser.add_argument("--block-ms", type=float, nargs="+", default=[0.0, 1.0, 3.5, 10.0],
                        help="synchronous work on each turn of the loop (0: an idle loop)")
    args = parser.parse_args(argv)
    if not 1 <= args.calls <= 1000:
        parser.error(f"--calls must be 1-1000 (h2load's streams on one connection), got {args.calls}")
    if any(block < 0 or block > 100 for block in args.block_ms):
        parser.error(f"--block-ms must be 0-100 ms, got {args.block_ms}")
    rows = uvloop.run(run(args.calls, args.block_ms))
    print(f"{args.calls} calls at once on one connection to a grpc.aio server (uvloop) that answers at once")
    print(f"{'loop held per turn ms':>21} {'all answered ms':>15} {'ms per call':>11} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}")
    for block, r in rows:
        print(f"{block:>21g} {r['wall_ms']:>15.1f} {r['per_call_ms']:>11.2f} {r['p50']:>7.1f} {r['p99']:>7.1f} {r['max']:>7.1f}")


if __name__ == "__main__":
    main()
