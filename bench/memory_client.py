"""HTTP client choice for the memory service: httpx vs aiohttp vs our adapter.

Starts the loopback memory service in a separate process, then, for each client and each
concurrency, runs closed-loop workers for a fixed time against ``GET /v1/memories/hot`` (limit 20;
each answer is read and JSON-decoded) and prints req/s, latency percentiles and the client
process's CPU time per request (the figure least disturbed by a busy machine).

    .venv/bin/python -m bench.memory_client [--duration 3] [--concurrency 1 4 16] [--hot-latency-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx

from adapters.memory_http import HttpMemorySource
from domain.model.memory import HotQuery
from tests.support.memory_server import MemoryServerProcess

Fetch = Callable[[], Awaitable[object]]
POOL = 100


class Target:
    def __init__(self, server: MemoryServerProcess) -> None:
        self.url = f"{server.base_url}/v1/memories/hot"
        self.params = {"agent_id": server.agent_id, "limit": "20", "min_confidence": "0.0"}
        self.headers = {"Authorization": f"Bearer {server.token}", "Accept": "application/json"}
        self.server = server


async def httpx_client(target: Target) -> tuple[Fetch, Callable[[], Awaitable[None]]]:
    limits = httpx.Limits(max_connections=POOL, max_keepalive_connections=POOL)
    client = httpx.AsyncClient(limits=limits, timeout=5.0)

    async def fetch() -> object:
        response = await client.get(target.url, params=target.params, headers=target.headers)
        return response.json()
    return fetch, client.aclose


async def aiohttp_client(target: Target) -> tuple[Fetch, Callable[[], Awaitable[None]]]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=POOL, limit_per_host=POOL))

    async def fetch() -> object:
        async with session.get(target.url, params=target.params, headers=target.headers) as response:
            return json.loads(await response.read())
    return fetch, session.close


async def adapter_client(target: Target) -> tuple[Fetch, Callable[[], Awaitable[None]]]:
    source = HttpMemorySource(target.server.base_url, target.server.token, pool_size=POOL)
    query = HotQuery(org_id=target.server.org_id, agent_id=target.server.agent_id, limit=20)

    async def fetch() -> object:
        return await source.hot(query, timeout_s=5.0)
    return fetch, source.close


CLIENTS = {"httpx.AsyncClient": httpx_client, "aiohttp.ClientSession": aiohttp_client,
           "HttpMemorySource (aiohttp+decode)": adapter_client}


async def run(fetch: Fetch, concurrency: int, duration_s: float) -> tuple[list[float], float]:
    """Closed-loop workers for ``duration_s``: (latencies, client CPU seconds used)."""
    latencies: list[float] = []
    deadline = time.perf_counter() + duration_s
    cpu_start = time.process_time()

    async def worker() -> None:
        while (start := time.perf_counter()) < deadline:
            await fetch()
            latencies.append(time.perf_counter() - start)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.process_time() - cpu_start


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def measure(target: Target, concurrencies: list[int], duration_s: float) -> list[str]:
    rows = []
    for name, make in CLIENTS.items():
        fetch, close = await make(target)
        try:
            for _ in range(20):
                await fetch()  # warm the pool
            for concurrency in concurrencies:
                latencies, cpu_s = await run(fetch, concurrency, duration_s)
                rows.append(f"| {name} | {concurrency} | {len(latencies) / duration_s:,.0f} | "
                            f"{percentile(latencies, 0.50) * 1000:.2f} | {percentile(latencies, 0.99) * 1000:.2f} | "
                            f"{cpu_s / len(latencies) * 1e6:,.0f} |")
                print(rows[-1], flush=True)
        finally:
            await close()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per run")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--hot-latency-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    server = MemoryServerProcess.launch("--seed-demo", "200", "--hot-latency-ms", str(args.hot_latency_ms))
    try:
        print(f"memory server {server.base_url} (separate process), hot latency {args.hot_latency_ms} ms, "
              f"{args.duration:g} s per run, GET /v1/memories/hot limit 20")
        print("| client | concurrency | req/s | p50 ms | p99 ms | client CPU µs/req |\n"
              "|---|---:|---:|---:|---:|---:|")
        asyncio.run(measure(Target(server), args.concurrency, args.duration))
    finally:
        server.close()


if __name__ == "__main__":
    main()
