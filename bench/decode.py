"""CPU cost of decoding memory-service answers: the msgspec decoder vs the one it replaced.

Run: ``.venv/bin/python -m bench.decode [rounds]`` (default 30 rounds; about 40 s on 2 cores).

Answers, as the memory service writes them (compact JSON, UTF-8, a ``meta.request_id`` per answer,
microsecond timestamps, one memory in ten with a non-ASCII word): a hot list of 50 memories and a
search answer of 20. Each mode decodes a pool of 256 answers in turn, so an answer's bytes come
back only after 255 others:

  new                          adapters.memory_http.decode as it is now (it keeps no caches), on
                               the answers of "old, byte cache defeated"
  new, fresh memories          the same on the answers of "old, every cache cold"
  new, one refused item        the same answers with one malformed item at the end: the one-shot
                               decode refuses it, so the answer is read again by Python's json and
                               every item checked on its own (the fallback path)
  old, byte cache defeated     the decoder of commit c14d03f; the answers differ by their request id
                               only, so its answer cache (keyed by the bytes) always misses while its
                               id and timestamp caches stay warm (a hot list re-read between writes)
  old, every cache cold        new memory ids and timestamps in every answer (256 x 50 > its caches)
  old, byte cache hit          one answer's exact bytes again and again (the old decoder's best case)

The old decoder is loaded from git (``git show c14d03f:adapters/memory_http/decode.py``) into a
temporary module, so no old code stays in the repository. Before timing, every answer of every
pool is decoded by both and must give the same MemoryHits (and as many dropped items).

Rounds alternate the modes; each figure is the median over rounds (the best round in brackets).
"""

from __future__ import annotations

import gc
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import msgspec

from adapters.memory_http import decode as new_decode
from domain.model.memory import MemoryBatch

OLD_COMMIT = "c14d03f"
OLD_PATH = "adapters/memory_http/decode.py"
POOL = 256  # answers per pool: more than the old answer cache (64) holds
PASSES = 1  # times each pool is decoded per mode and round
HOT, SEARCH = 50, 20
CATEGORIES = ("procedural", "factual", "preference", "behavioral", "episodic")
TAGS = ("ui", "deploy", "billing", "python", "go", "oncall", "review", "docs")
WORDS = (
    "the user prefers short answers about deployment and wants tests to run before every merge into main;"
    " they work in Python and Go, deploy on Kubernetes, review pull requests on Monday mornings, dislike"
    " flaky integration suites, keep notes in Markdown, use dark mode, and team meetings are on Fridays"
).split()
NON_ASCII = ("café", "naïve", "Zürich", "→", "✓")  # one memory in ten has one of these words
EPOCH = datetime(2025, 6, 1, tzinfo=UTC)

Decode = Callable[[bytes], MemoryBatch]


def load_old_decoder() -> ModuleType:
    """The decoder of ``OLD_COMMIT``, imported from a temporary file (removed once imported)."""
    root = Path(__file__).resolve().parent.parent
    try:
        source = subprocess.run(["git", "show", f"{OLD_COMMIT}:{OLD_PATH}"], cwd=root, check=True,
                                capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"bench.decode needs git and commit {OLD_COMMIT} for the old decoder: {exc}") from None
    name = "bench_old_memory_decode"
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "old_memory_decode.py"
        path.write_bytes(source)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


def content(rng: random.Random) -> str:
    words = rng.choices(WORDS, k=rng.randint(8, 60))
    if rng.random() < 0.1:
        words.insert(rng.randrange(len(words)), rng.choice(NON_ASCII))
    return " ".join(words)


def memory(rng: random.Random, org_id: str, agent_id: str) -> dict[str, object]:
    created = EPOCH + timedelta(seconds=rng.randrange(200 * 86400), microseconds=rng.randrange(10**6))
    updated = created + timedelta(seconds=rng.randrange(86400))
    return {
        "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)), "org_id": org_id, "agent_id": agent_id,
        "content": content(rng), "category": rng.choice(CATEGORIES),
        "confidence": round(rng.uniform(0.3, 1.0), 4), "status": "active",
        "created_at": created.isoformat(), "updated_at": updated.isoformat(),
        "usefulness_score": rng.choice((None, round(rng.random(), 6))), "retrieval_count": rng.randrange(40),
        "tags": rng.sample(TAGS, rng.randint(0, 3)),
    }


def answer(memories: Sequence[dict[str, object]], source: Callable[[int], str], similarity: Callable[[int], float],
           request_id: str, bad_item: bool = False) -> bytes:
    results: list[object] = [{"memory": m, "similarity": similarity(rank), "rank": rank, "source": source(rank)}
                             for rank, m in enumerate(memories, start=1)]
    if bad_item:  # the last item's similarity is a string: refused by both decoders
        last = dict(results[-1])  # type: ignore[arg-type]
        last["similarity"] = "0.5"
        results[-1] = last
    document = {"data": {"results": results}, "meta": {"request_id": request_id}}
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def pools(seed: int, count: int, source: Callable[[int], str], similarity: Callable[[int], float]
          ) -> dict[str, list[bytes]]:
    """The answer pools of one answer kind: repeated memories, fresh memories, with a refused item."""
    rng = random.Random(seed)
    org_id, agent_id = (str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(2))
    same = [memory(rng, org_id, agent_id) for _ in range(count)]
    request_ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(POOL)]
    return {
        "repeated": [answer(same, source, similarity, r) for r in request_ids],
        "fresh": [answer([memory(rng, org_id, agent_id) for _ in range(count)], source, similarity, r)
                  for r in request_ids],
        "refused": [answer(same, source, similarity, r, bad_item=True) for r in request_ids],
    }


def check_same(old: ModuleType, pool_sets: dict[str, dict[str, list[bytes]]]) -> int:
    checked = 0
    for kind, pool_set in pool_sets.items():
        for pool_name, bodies in pool_set.items():
            for body in bodies:
                mine, theirs = new_decode.decode_batch(body), old.decode_batch(body)
                if mine.hits != theirs.hits or len(mine.dropped) != len(theirs.dropped):
                    raise SystemExit(f"{kind}/{pool_name}: the decoders disagree on an answer")
                checked += 1
    return checked


def timed(decode: Decode, bodies: Sequence[bytes]) -> float:
    """Seconds per answer over ``PASSES`` passes of ``bodies``."""
    gc.collect()
    start = time.perf_counter()
    for _ in range(PASSES):
        for body in bodies:
            decode(body)
    return (time.perf_counter() - start) / (PASSES * len(bodies))


def main(argv: Sequence[str]) -> None:
    rounds = int(argv[0]) if argv else 30
    old = load_old_decoder()
    kinds = {
        "hot": (HOT, pools(1, HOT, lambda rank: "hot_cache", lambda rank: round(1.0 - rank / 80, 6))),
        "search": (SEARCH, pools(2, SEARCH, lambda rank: "vector" if rank <= 15 else "full_text",
                                 lambda rank: round(0.92 - rank / 50, 6))),
    }
    checked = check_same(old, {kind: pool_set for kind, (_, pool_set) in kinds.items()})
    modes: dict[str, tuple[Decode, str]] = {
        "new": (new_decode.decode_batch, "repeated"),
        "new, fresh memories": (new_decode.decode_batch, "fresh"),
        "new, one refused item": (new_decode.decode_batch, "refused"),
        "old, byte cache defeated": (old.decode_batch, "repeated"),
        "old, every cache cold": (old.decode_batch, "fresh"),
        "old, byte cache hit": (old.decode_batch, "hit"),
    }
    samples: dict[tuple[str, str], list[float]] = {(mode, kind): [] for mode in modes for kind in kinds}
    for _ in range(rounds):
        for kind, (_, pool_set) in kinds.items():
            for mode, (decode, pool_name) in modes.items():
                bodies = [pool_set["repeated"][0]] * POOL if pool_name == "hit" else pool_set[pool_name]
                samples[mode, kind].append(timed(decode, bodies))
    print(f"bench.decode: {rounds} rounds x {PASSES} passes x {POOL} answers per mode; "
          f"{checked} answers decoded alike by both decoders first")
    print(f"python {sys.version.split()[0]}, msgspec {msgspec.__version__}; "
          "median over rounds [best round], microseconds")
    header = f"{'mode':<26}"
    for kind, (count, _) in kinds.items():
        header += f" | {kind + f' ({count}) /answer':>22} {'/memory':>8}"
    print(header)
    print("-" * len(header))
    for mode in modes:
        line = f"{mode:<26}"
        for kind, (count, _) in kinds.items():
            values = samples[mode, kind]
            median, best = statistics.median(values) * 1e6, min(values) * 1e6
            line += f" | {median:>12.1f} [{best:>7.1f}] {median / count:>8.2f}"
        print(line)
    base = {kind: statistics.median(samples["new", kind]) for kind in kinds}
    for mode in ("old, byte cache defeated", "old, every cache cold"):
        ratios = ", ".join(f"{kind} x{statistics.median(samples[mode, kind]) / base[kind]:.2f}" for kind in kinds)
        print(f"{mode} / new: {ratios}")


if __name__ == "__main__":
    main(sys.argv[1:])
