"""Packer benchmark: latency, optimality and budget violations, ours against the reference.

Run: ``.venv/bin/python -m bench.packer``; ``--ablation`` compares algorithm variants,
``--degenerate`` times tie-heavy inputs where the bounds prove little.

Workloads are seeded: memory costs lognormal with median 60 tokens (sigma 0.9) clipped to
5..2000, scores uniform in [0, 1]. The optimum comes from an independent numpy DP over token
capacity (float scores, value only). Percentiles follow the reference's latency test:
``sorted[max(0, int(len * p) - 1)]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence

import attrs
import numpy as np

import domain.packer as packer_module
from bench.reference_packer import reference_pack
from domain.packer import PackItem, pack

SIZES = (10, 30, 70, 150, 500, 2000)
BUDGETS = (2000, 8000, 32000, 100000)
WARMUP = 20


@attrs.frozen
class Workload:
    n: int
    budget: int
    instances: int
    repeats: int


@attrs.frozen
class Measure:
    p50_ms: float
    p99_ms: float
    cpu_p99_ms: float
    worst_ratio: float
    mean_ratio: float
    violations: int


def make_items(n: int, seed: int) -> list[PackItem]:
    rng = np.random.default_rng(seed)
    costs = np.clip(np.rint(rng.lognormal(np.log(60.0), 0.9, n)), 5, 2000).astype(int)
    scores = rng.random(n)
    return [PackItem(f"mem-{seed}-{i:05d}", float(scores[i]), int(costs[i])) for i in range(n)]


def optimum(items: Sequence[PackItem], budget: int) -> float:
    """Best total score within the budget: plain DP over every token of capacity."""
    fitting = [item for item in items if item.cost <= budget]
    if sum(item.cost for item in fitting) <= budget:
        return sum(item.score for item in fitting)
    best = np.zeros(budget + 1)
    for item in fitting:
        with_item = best[: budget + 1 - item.cost] + item.score
        np.maximum(best[item.cost :], with_item, out=best[item.cost :])
    return float(best[-1])


def percentile(samples: Sequence[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, int(len(ordered) * p) - 1)]


def workload_for(n: int, budget: int, scale: float) -> Workload:
    instances, repeats = (300, 1) if n <= 150 else (100, 2) if n <= 500 else (30, 4)
    return Workload(n, budget, max(3, int(instances * scale)), repeats)


def measure(
    run: Callable[[list[PackItem], int], tuple[float, int]],
    cases: list[tuple[list[PackItem], float]],
    budget: int,
    repeats: int,
) -> Measure:
    """Time ``run`` on every case; ``run`` returns (total score, total cost)."""
    for items, _ in cases[:WARMUP]:
        run(items, budget)
    latencies, cpu_times, ratios, violations = [], [], [], 0
    for items, best in cases:
        for _ in range(repeats):
            started, cpu_started = time.perf_counter_ns(), time.thread_time_ns()
            score, cost = run(items, budget)
            cpu_times.append((time.thread_time_ns() - cpu_started) / 1e6)
            latencies.append((time.perf_counter_ns() - started) / 1e6)
        ratios.append(score / best if best > 0 else 1.0)
        violations += cost > budget
    return Measure(
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        cpu_p99_ms=percentile(cpu_times, 0.99),
        worst_ratio=min(ratios),
        mean_ratio=float(np.mean(ratios)),
        violations=violations,
    )


def ours(items: list[PackItem], budget: int) -> tuple[float, int]:
    result = pack(items, budget)
    return result.total_score, result.total_cost


def reference(items: list[PackItem], budget: int) -> tuple[float, int]:
    result = reference_pack(items, budget)
    return result.total_score, result.total_cost


def build_cases(load: Workload) -> list[tuple[list[PackItem], float]]:
    first = load.n * 1_000_003 + load.budget
    instances = [make_items(load.n, seed) for seed in range(first, first + load.instances)]
    return [(items, optimum(items, load.budget)) for items in instances]


def main_table(scale: float) -> None:
    print("| n | budget | runs | ours p50 ms | ours p99 ms | ours p99 CPU ms | ours opt. (worst) "
          "| ours viol. | ref p50 ms | ref p99 ms | ref opt. mean (worst) | ref viol. "
          "| p50 ours/ref | p99 ours/ref |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in SIZES:
        for budget in BUDGETS:
            load = workload_for(n, budget, scale)
            cases = build_cases(load)
            mine = measure(ours, cases, budget, load.repeats)
            theirs = measure(reference, cases, budget, 1)
            print(
                f"| {n} | {budget} | {load.instances * load.repeats} | {mine.p50_ms:.3f} | "
                f"{mine.p99_ms:.3f} | {mine.cpu_p99_ms:.3f} | {mine.worst_ratio:.6f} | "
                f"{mine.violations} | {theirs.p50_ms:.3f} | {theirs.p99_ms:.3f} | "
                f"{theirs.mean_ratio:.3f} ({theirs.worst_ratio:.3f}) | {theirs.violations} | "
                f"{mine.p50_ms / theirs.p50_ms:.2f} | {mine.p99_ms / theirs.p99_ms:.2f} |",
                flush=True,
            )


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """Temporarily switch the packer to an ablated variant (benchmark only)."""
    saved = (packer_module._reduce, packer_module._DIRECT_ROWS)
    if name == "plain DP":
        packer_module._reduce = lambda costs, units, capacity: (
            np.zeros(0, dtype=np.intp), np.arange(costs.size))
    elif name == "greedy bound only":
        packer_module._DIRECT_ROWS = 1 << 62
    try:
        yield
    finally:
        packer_module._reduce, packer_module._DIRECT_ROWS = saved


def ablation_table(scale: float) -> None:
    names = ("plain DP", "greedy bound only", "chosen")
    print("| n | budget | " + " | ".join(f"{name} p50 / p99 ms" for name in names) + " |")
    print("|---:|---:|" + "---:|" * len(names))
    for n in (70, 500, 2000):
        for budget in (2000, 32000):
            load = workload_for(n, budget, scale * 0.25)
            cases = build_cases(load)
            cells = []
            for name in names:
                with variant(name):
                    found = measure(ours, cases, budget, 1)
                if found.worst_ratio < 1 - 1e-9:
                    raise AssertionError(f"variant {name} lost optimality at n={n} budget={budget}")
                cells.append(f"{found.p50_ms:.3f} / {found.p99_ms:.3f}")
            print(f"| {n} | {budget} | " + " | ".join(cells) + " |", flush=True)


def degenerate_items(kind: str, n: int, seed: int) -> list[PackItem]:
    """Inputs where bounds prove little: ties everywhere, or score proportional to cost."""
    base = make_items(n, seed)
    levels = (0.3, 0.6, 0.9)
    score_of = {
        "equal scores": lambda i, item: 0.5,
        "three score levels": lambda i, item: levels[i % 3],
        "score proportional to cost": lambda i, item: item.cost / 2000.0,
    }[kind]
    return [PackItem(item.key, score_of(i, item), item.cost) for i, item in enumerate(base)]


def degenerate_table() -> None:
    kinds = ("equal scores", "three score levels", "score proportional to cost")
    print("| input (n=2000) | budget | path | p50 ms | max ms | opt. (worst) |")
    print("|---|---:|---|---:|---:|---:|")
    for kind in kinds:
        for budget in BUDGETS:
            cases = [degenerate_items(kind, 2000, seed) for seed in range(3)]
            latencies, ratios, paths = [], [], set()
            for items in cases:
                started = time.perf_counter_ns()
                result = pack(items, budget)
                latencies.append((time.perf_counter_ns() - started) / 1e6)
                ratios.append(result.total_score / optimum(items, budget))
                paths.add(result.path)
            print(f"| {kind} | {budget} | {', '.join(sorted(paths))} | "
                  f"{percentile(latencies, 0.5):.1f} | {max(latencies):.1f} | {min(ratios):.6f} |",
                  flush=True)


def load_average() -> str:
    """The 1/5/15-minute load averages: other processes on the machine inflate the p99s."""
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            return "load average " + " ".join(handle.read().split()[:3])
    except OSError:
        return "load average unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ablation", action="store_true", help="compare algorithm variants")
    parser.add_argument("--degenerate", action="store_true", help="time tie-heavy inputs")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the instance counts")
    args = parser.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs; {load_average()}")
    started = time.perf_counter()
    if args.ablation:
        ablation_table(args.scale)
    elif args.degenerate:
        degenerate_table()
    else:
        main_table(args.scale)
    print(f"\nbench wall time {time.perf_counter() - started:.0f} s; {load_average()}")


if __name__ == "__main__":
    main()
