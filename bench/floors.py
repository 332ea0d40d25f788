"""What one assembly costs in CPU, piece by piece, against what the libraries alone cost.

The load benchmark (``bench.load``) reports the service's CPU per request; this one splits it. Each
figure is process CPU time per call (user + system, best of three rounds), so it does not depend
on wall-clock noise from other processes as much as latency does:

* gRPC layer: a grpc.aio server on uvloop returning a canned response shaped like a real one
  (``bench.floor_server``), driven by the load driver; also the driver's own CPU per call.
* Memory service calls: raw aiohttp (no cookie jar) against the loopback memory service, then our
  adapter (pooling, decoding, tenant fence) on the same calls; and the memory service's own CPU.
* Directive: raw redis-py GET against a private redis-server, then our adapter.
* Assembly: the AssembleContext use case alone with the same 80 candidates, I/O answered
  in-process, so what remains is scoring, pricing, packing, formatting and the explain records;
  for each score policy (``relevance_v1``, ``interim_v1``), unbounded and at 2,000 tokens.

    .venv/bin/python -m bench.floors [--rate 300] [--calls 300] [--grpc-seconds 10]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import redis
import redis.asyncio as redis_asyncio
import uvloop

from adapters.json_model_catalog import JsonModelCatalog
from adapters.memory_http import HttpMemorySource
from adapters.redis_directive_store import RedisDirectiveStore
from adapters.secrets_nonce_source import SecretsNonceSource
from adapters.system_clock import SystemClock
from adapters.text_profiles import CachedTextProfiles
from adapters.token_counters import TokenCountersRegistry
from bench.load import cpu_seconds
from domain.model.assembly import SCORE_POLICIES, AssembleRequest, ScoreSchema
from domain.model.directive import Directive
from domain.model.memory import HotQuery, SearchQuery
from domain.model.messages import Message
from domain.usecases.assemble_context import AssembleContext
from entrypoints.settings import Settings
from tests.support.memory_server import MemoryServerProcess
from tests.support.redis_server import RedisServer, free_port
from tests.unit.usecases.scripted import ScriptedDirectiveStore, ScriptedMemorySource

REPO = Path(__file__).resolve().parents[1]
QUERY = "dark theme python deploy budget weekly report"
LIMIT = 40


async def cpu_per_call(call: Callable[[], Awaitable[object]], calls: int, rounds: int = 3) -> float:
    """Best-of-rounds process CPU milliseconds per sequential call (after a warm-up)."""
    for _ in range(min(50, calls)):
        await call()
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(calls):
            await call()
        best = min(best, (time.process_time() - started) * 1000.0 / calls)
    return best


def grpc_floor(rate: float, build: bool, seconds: float) -> dict[str, float]:
    port = free_port()
    command = [sys.executable, "-m", "bench.floor_server", "--port", str(port), *(["--build"] if build else [])]
    server = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        if (server.stdout.readline() if server.stdout else "").strip() != "ready":
            raise RuntimeError("floor server did not start")
        before = cpu_seconds([server.pid])
        driver = subprocess.run(
            [sys.executable, "-m", "bench.load_driver", "--target", f"127.0.0.1:{port}", "--rate", str(rate),
             "--duration", str(seconds), "--org", str(uuid.uuid4()), "--agent", str(uuid.uuid4()), "--channels", "8"],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
        result = json.loads(driver.stdout)
        return {"server": (cpu_seconds([server.pid]) - before) * 1000.0 / result["sent"],
                "driver": result["driver_cpu_s"] * 1000.0 / result["sent"]}
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout:
            server.stdout.close()


async def memory_floors(memory: MemoryServerProcess, calls: int) -> dict[str, float]:
    hot_url = f"{memory.base_url}/v1/memories/hot?agent_id={memory.agent_id}&limit={LIMIT}"
    headers = {"Authorization": f"Bearer {memory.token}", "X-Org-ID": memory.org_id}
    figures: dict[str, float] = {}
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
        async def raw_hot() -> bytes:
            async with session.get(hot_url, headers=headers) as response:
                return await response.read()
        served_before = cpu_seconds([memory.process.pid])
        figures["raw aiohttp GET hot"] = await cpu_per_call(raw_hot, calls)
        figures["memory service per call"] = (cpu_seconds([memory.process.pid]) - served_before) * 1000.0 / (calls * 3 + 50)
    source = HttpMemorySource(memory.base_url, memory.token, pool_size=16)
    hot = HotQuery(memory.org_id, memory.agent_id, LIMIT)
    cold = SearchQuery(memory.org_id, memory.agent_id, QUERY, LIMIT)
    figures["adapter hot()"] = await cpu_per_call(lambda: source.hot(hot, timeout_s=1.0), calls)
    figures["adapter search()"] = await cpu_per_call(lambda: source.search(cold, timeout_s=1.0), calls)
    await source.close()
    return figures


async def redis_floors(store: RedisServer, calls: int) -> dict[str, float]:
    org_id, agent_id = str(uuid.uuid4()), str(uuid.uuid4())
    key = f"{org_id}:directive:{agent_id}"
    envelope = {"v": 1, "content": "Answer briefly.", "injection_mode": "system_first", "version_id": str(uuid.uuid4())}
    with redis.Redis.from_url(store.url) as client:
        client.set(key, json.dumps(envelope))
    raw = redis_asyncio.Redis.from_url(store.url)
    adapter = RedisDirectiveStore.for_branch_timeout(store.url, branch_timeout_s=0.005)
    figures = {"raw redis-py GET": await cpu_per_call(lambda: raw.get(key), calls),
               "adapter get()": await cpu_per_call(lambda: adapter.get(org_id, agent_id, timeout_s=0.05), calls)}
    await raw.aclose()
    await adapter.close()
    return figures


async def assembly_floor(memory: MemoryServerProcess, calls: int) -> dict[str, float]:
    """The use case alone, for each score policy, with the memory budget unbounded (everything the
    policy lets through fits) and bounded to 2,000 tokens (the packer has to choose)."""
    source = HttpMemorySource(memory.base_url, memory.token, pool_size=4)
    hot = await source.hot(HotQuery(memory.org_id, memory.agent_id, LIMIT), timeout_s=2.0)
    cold = await source.search(SearchQuery(memory.org_id, memory.agent_id, QUERY, LIMIT), timeout_s=2.0)
    await source.close()
    counters = TokenCountersRegistry()
    counters.preload()
    figures: dict[str, float] = {}
    for policy in SCORE_POLICIES:
        use_case = AssembleContext(
            directives=ScriptedDirectiveStore(Directive("Answer briefly and cite the memory ids you used.")),
            memories=ScriptedMemorySource(hot=hot, cold=cold), catalog=JsonModelCatalog.builtin(), counters=counters,
            clock=SystemClock(), nonces=SecretsNonceSource(), profiles=CachedTextProfiles(),
            config=Settings().assembly_config(hot_limit=LIMIT, cold_limit=LIMIT, wall_s=1.0, directive_timeout_s=1.0,
                                              hot_timeout_s=1.0, cold_timeout_s=1.0, score_policy=policy))
        for available, budget in ((0, ""), (2000, ", 2,000 tokens")):
            request = AssembleRequest(
                org_id=memory.org_id, agent_id=memory.agent_id, model="gpt-4o", query=QUERY, available_tokens=available,
                recent_messages=(Message("user", "What did we decide about the weekly budget report?"),))
            result = await use_case.execute(request)
            label = "" if policy == ScoreSchema.RELEVANCE else f" with {policy}"
            name = f"assembly{label}{budget}, I/O in-process ({len(result.memories_used)} candidates)"
            figures[name] = await cpu_per_call(lambda: use_case.execute(request), calls)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="CPU per call of each piece of an assembly")
    parser.add_argument("--rate", type=float, default=300.0, help="offered rate for the gRPC floor")
    parser.add_argument("--calls", type=int, default=300, help="calls per round for the in-process figures")
    parser.add_argument("--grpc-seconds", type=float, default=10.0, help="how long the gRPC floor is driven")
    args = parser.parse_args(argv)
    rows: list[tuple[str, float, int]] = []
    for build in (False, True):
        grpc = grpc_floor(args.rate, build, args.grpc_seconds)
        label = "built per call" if build else "prebuilt"
        rows.append((f"gRPC server, canned response {label}", grpc["server"], 1))
        rows.append((f"gRPC load driver (client), response {label}", grpc["driver"], 1))
    memory = MemoryServerProcess.launch("--seed-demo", "200")
    store = RedisServer.launch()
    try:
        memory_figures = uvloop.run(memory_floors(memory, args.calls))
        redis_figures = uvloop.run(redis_floors(store, args.calls))
        assembly = uvloop.run(assembly_floor(memory, args.calls))
    finally:
        memory.close()
        store.close()
    per_assembly = {"raw aiohttp GET hot": 2, "memory service per call": 2}
    rows += [(name, value, per_assembly.get(name, 1)) for name, value in memory_figures.items()]
    rows += [(name, value, 1) for name, value in {**redis_figures, **assembly}.items()]
    print(f"{'piece':<58} {'CPU ms/call':>11} {'calls/assembly':>14}")
    for name, value, count in rows:
        print(f"{name:<58} {value:>11.3f} {count:>14d}")


if __name__ == "__main__":
    main()
