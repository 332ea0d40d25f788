"""``python -m bench``: list the benchmarks and how to run each."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import bench

DESCRIPTIONS = {
    "packer": "exact packer vs the reference bucketed DP: latency, optimality, violations",
    "token_count": "exact token counting of 70 memories: cold vs warm cache vs plain tiktoken",
    "memory_client": "httpx vs aiohttp vs our adapter against a loopback memory server",
    "load": "capacity of one `ibex-context serve` under h2load, with the canned and I/O-only floors in the same run",
    "faults": "the fault table: Redis killed/hung/slow, memory slow/flapping/401/403/garbage/50 MB/resets, SIGTERM, overload",
    "scaleout": "replicas on 127.0.0.2-.5 behind loopback DNS: SIGTERM, SIGKILL, scale-up with 0 failed calls",
    "floors": "CPU per call of each piece of an assembly vs the libraries alone (gRPC, aiohttp, redis-py)",
    "quality": "context quality on a seeded data set: evidence recall in the block, noise, duplicates, per policy",
    "hostile_http": "hostile HTTP bodies against serve: /healthz latency while maximum-size bodies are refused, RSS, 500s",
    "grpc_hostile": "hostile gRPC input (12 x 14 MB unauthenticated calls, 1M-tag searches): server RSS, /healthz",
    "tracing_cost": "CPU per assembly with tracing off, on at 100% and at 1% sampling (rounds alternated)",
    "stage_shares": "a py-spy profile of serve (during bench.load) split by assembly stage, as a Markdown table",
    "instructions": "instructions per assembly (use case + proto answer) counted by valgrind: a load-independent A/B figure",
    "grpc_accept": "how fast grpc.aio hands calls to the servicer while the event loop is held N ms a turn (h2load)",
    "decode": "the memory adapter's strict msgspec decode of hot (50) and search (20) answers vs the old decoder",
}


def main() -> None:
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(bench.__file__).parent)]) if not m.name.startswith("_"))
    print("benchmarks (run one with: .venv/bin/python -m bench.<name>):")
    for name in names:
        if name in DESCRIPTIONS:
            print(f"  {name:<14} {DESCRIPTIONS[name]}")


if __name__ == "__main__":
    main()
