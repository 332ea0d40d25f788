"""``python -m bench``: list the benchmarks and how to run each."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import bench

DESCRIPTIONS = {
    "packer": "exact packer vs the reference bucketed DP: latency, optimality, violations",
    "token_count": "exact token counting of 70 memories: cold vs warm cache vs plain tiktoken",
    "memory_client": "httpx vs aiohttp vs our adapter against a loopback memory server",
    "load": "open-loop gRPC load against `ibex-context serve` with Redis and a memory server",
    "floors": "CPU per call of each piece of an assembly vs the libraries alone (gRPC, aiohttp, redis-py)",
    "quality": "context quality on a seeded data set: evidence recall in the block, noise, duplicates, per policy",
}


def main() -> None:
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(bench.__file__).parent)]) if not m.name.startswith("_"))
    print("benchmarks (run one with: .venv/bin/python -m bench.<name>):")
    for name in names:
        if name in DESCRIPTIONS:
            print(f"  {name:<14} {DESCRIPTIONS[name]}")


if __name__ == "__main__":
    main()
