"""Attribute a py-spy profile of ``serve`` to the stages of an assembly.

    py-spy record -p <serve pid> -d 20 -r 200 --format raw -o serve.raw   # during a bench.load run
    .venv/bin/python -m bench.stage_shares serve.raw --ms-per-call 7.76

Each sample goes to the stage of the innermost frame of its stack that names one (a stage is a
set of frame prefixes); prints a Markdown table of each stage's share and share × ``--ms-per-call``
(the service CPU per call that bench.load measured in the same run).
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("retrieval: memory-service decode + memo", ("AnswerMemo.batch", "decode_batch")),
    ("budget (frame + counts)", ("calculate_budget", "frame (domain/layout")),
    ("scoring + relevance gates (BM25, floor, near duplicates)", ("build_pool",)),
    ("pricing (elements rendered, count_each)", ("_price_and_pack", "ExactTokenCounter.count_each", "Frame.element")),
    ("packing (exact knapsack)", ("pack (domain/packer",)),
    ("formatting + final count", ("AssembleContext._render",)),
    ("explain records + result", ("AssembleContext._result",)),
    ("response building (proto)", ("assembly_to_proto",)),
    ("metrics + log line", ("_observe_assembly", "observe_request", "MetricWrapperBase")),
    ("retrieval: Redis client", ("RedisDirectiveStore",)),
    ("retrieval: memory-service HTTP client (aiohttp)", ("PooledExchange", "HttpMemorySource")),
    ("retrieval: orchestration (tasks, timeouts)", ("Retriever",)),
    ("request read + validation + translation", ("_read_request", "assemble_request_from_proto", "validate_assemble")),
    ("rest of the servicer (auth, span, scope)", ("ContextAssemblyServicer",)),
)
REST = "gRPC core + event loop (C) and everything else"


def shares(raw: str) -> dict[str, int]:
    """Samples per stage of a py-spy ``--format raw`` profile (``frame;frame;... count`` lines)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        stack, _, number = line.rstrip().rpartition(" ")
        if not stack or not number.isdigit():
            continue
        frames = stack.split(";")[::-1]  # innermost first
        label = next((label for frame in frames for label, keys in STAGES if frame.startswith(keys)), REST)
        counts[label] += int(number)
    return {label: counts[label] for label in (*(label for label, _ in STAGES), REST)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="py-spy samples of serve by assembly stage")
    parser.add_argument("profile", type=Path, help="py-spy record --format raw output")
    parser.add_argument("--ms-per-call", type=float, required=True, help="service CPU per call from bench.load")
    args = parser.parse_args(argv)
    counts = shares(args.profile.read_text())
    total = sum(counts.values()) or 1
    print("| stage | share of samples | ≈ ms per call |\n|---|---:|---:|")
    for label, count in counts.items():
        print(f"| {label} | {count / total * 100:.1f}% | {count / total * args.ms_per_call:.2f} |")


if __name__ == "__main__":
    main()
