"""Token counting cost per request: 70 memory elements, fresh nonce each request.

Run: ``.venv/bin/python -m bench.token_count [requests]`` (default 400).

Modes, per request (the same 70 memories every request, a new 22-character nonce each time):
  plain tiktoken   len(encode_ordinary(element)) for each element (no cache, no chunking)
  cold cache       a new ExactTokenCounter per request (empty chunk cache)
  warm cache       one ExactTokenCounter shared by every request (what the service does)
and the same three for the assembled context (the 70 elements joined, counted as one text).
"""

from __future__ import annotations

import gc
import random
import statistics
import string
import sys
import time
import uuid
from collections.abc import Callable, Sequence

import tiktoken

from adapters.token_counters.exact import ENCODING_SPECS, PROCESS_ENCODINGS, ExactTokenCounter

MEMORIES = 70
NONCE_ALPHABET = string.ascii_letters + string.digits
CATEGORIES = ("factual", "preference", "episodic", "procedural")
WORDS = (
    "the user prefers short answers about deployment and wants tests to run before every merge into main;"
    " they work in Python and Go, deploy on Kubernetes, review pull requests on Monday mornings, dislike"
    " flaky integration suites, and keep notes in Markdown with links like docs/runbooks/oncall.md"
).split()

Request = Callable[[Sequence[str]], int]


def memory_bodies(rng: random.Random) -> list[tuple[str, str, str]]:
    """(id, category, body) of each memory; bodies of 3-9 words give elements of ~60 tokens."""
    return [
        (
            str(uuid.UUID(int=rng.getrandbits(128))),
            rng.choice(CATEGORIES),
            " ".join(rng.choices(WORDS, k=rng.randint(3, 9))),
        )
        for _ in range(MEMORIES)
    ]


def elements(memories: list[tuple[str, str, str]], rng: random.Random) -> list[str]:
    nonce = "".join(rng.choices(NONCE_ALPHABET, k=22))
    return [
        f'<ibex_memory nonce="{nonce}" id="{memory_id}" category="{category}">\n{body}\n</ibex_memory>\n'
        for memory_id, category, body in memories
    ]


def per_element(count: Callable[[str], int]) -> Request:
    return lambda items: sum(count(item) for item in items)


def joined(count: Callable[[str], int]) -> Request:
    return lambda items: count("".join(items))


def time_requests(
    request: Callable[[], Request], memories: list[tuple[str, str, str]], requests: int
) -> list[float]:
    """Microseconds per request; ``request()`` is called per request (so cold modes build afresh)."""
    rng = random.Random(7)
    samples: list[float] = []
    request()(elements(memories, rng))  # warm-up: imports, first allocation
    gc.collect()
    for _ in range(requests):
        items = elements(memories, rng)
        run = request()
        start = time.perf_counter_ns()
        run(items)
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def modes(kind: str, encoding: tiktoken.Encoding) -> dict[str, Callable[[], Request]]:
    warm = ExactTokenCounter(kind, encoding)
    warm_joined = ExactTokenCounter(kind, encoding)

    def plain(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    return {
        "70 elements, plain tiktoken": lambda: per_element(plain),
        "70 elements, cold cache": lambda: per_element(ExactTokenCounter(kind, encoding).count),
        "70 elements, warm cache": lambda: per_element(warm.count),
        "joined context, plain tiktoken": lambda: joined(plain),
        "joined context, cold cache": lambda: joined(ExactTokenCounter(kind, encoding).count),
        "joined context, warm cache": lambda: joined(warm_joined.count),
    }


def main(argv: Sequence[str]) -> None:
    requests = int(argv[0]) if argv else 400
    memories = memory_bodies(random.Random(42))
    print(f"{MEMORIES} memories per request, fresh nonce per request, {requests} requests per row")
    print(f"{'encoding':<18} {'mode':<32} {'tokens/elem':>11} {'p50 us':>9} {'p99 us':>9} {'mean us':>9}")
    for kind, spec in ENCODING_SPECS.items():
        encoding = PROCESS_ENCODINGS.get(spec)
        sample = elements(memories, random.Random(1))
        tokens = statistics.mean(len(encoding.encode_ordinary(item)) for item in sample)
        for label, request in modes(kind, encoding).items():
            times = time_requests(request, memories, requests)
            print(
                f"{spec.name:<18} {label:<32} {tokens:>11.1f} {percentile(times, 0.5):>9.0f}"
                f" {percentile(times, 0.99):>9.0f} {statistics.mean(times):>9.0f}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
