"""Open-loop load on AssembleContext over gRPC against ``ibex-context serve``.

Everything runs in its own process: a private redis-server (the directive), the loopback memory
service (hot ~2 ms, cold ~10 ms latency, 200 memories; hot and cold limits 40 each so that about
70 distinct candidates reach packing), one or more ``ibex-context serve`` workers sharing the
port (SO_REUSEPORT), and the load driver (``bench.load_driver``). Phases: a warm-up, fixed rates
(100 and 300 req/s for 30 s by default), then a step-up from 150 req/s by 25 until p99 >= 40 ms
or any error: the last rate that passed is the max sustainable rate. Prints a table with the CPU
each process spent per request (service workers, memory service, load driver); ``bench.floors``
splits the service's share piece by piece.

    .venv/bin/python -m bench.load [--workers 4] [--duration 30] [--rates 100 300] [--no-step]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import redis

from tests.support.memory_server import MemoryServerProcess
from tests.support.redis_server import RedisServer, free_port

REPO = Path(__file__).resolve().parents[1]
P99_LIMIT_MS = 40.0
HEADER = (f"{'phase':<6} {'offered':>7} {'achieved':>8} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7} "
          f"{'errors':>6} {'degraded':>8} {'cands':>5} {'svc cpu ms/req':>14} {'mem cpu ms/req':>14} {'drv cpu ms/req':>14}")
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of processes (all their threads), from /proc."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def row(phase: str, result: dict) -> str:
    lat = result["latencies_ms"]
    errors = sum(result["errors"].values())
    achieved = result["ok"] / result["duration_s"]
    per_request = 1000.0 / max(1, result["sent"])
    cands = result["candidates"] / result["ok"] if result["ok"] else 0.0
    return (f"{phase:<6} {result['rate']:>7.0f} {achieved:>8.1f} {percentile(lat, .5):>7.1f} {percentile(lat, .95):>7.1f} "
            f"{percentile(lat, .99):>7.1f} {max(lat, default=float('nan')):>7.1f} {errors:>6d} {result['degraded']:>8d} "
            f"{cands:>5.1f} {result['service_cpu_s'] * per_request:>14.2f} {result['memory_cpu_s'] * per_request:>14.2f} "
            f"{result['driver_cpu_s'] * per_request:>14.2f}")


@contextmanager
def backends(memories: int) -> Iterator[tuple[RedisServer, MemoryServerProcess]]:
    with ExitStack() as stack:
        store = RedisServer.launch()
        stack.callback(store.close)
        memory = MemoryServerProcess.launch("--seed-demo", str(memories), "--hot-latency-ms", "2", "--cold-latency-ms", "10")
        stack.callback(memory.close)
        envelope = {"v": 1, "content": "Answer briefly and cite the memory ids you used.",
                    "injection_mode": "system_first", "version_id": str(uuid.uuid4())}
        with redis.Redis.from_url(store.url) as client:
            client.set(f"{memory.org_id}:directive:{memory.agent_id}", json.dumps(envelope))
        yield store, memory


@contextmanager
def serve_workers(workers: int, store: RedisServer, memory: MemoryServerProcess,
                  args: argparse.Namespace) -> Iterator[tuple[str, list[int]]]:
    target = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IBEX_CONTEXT_")}
    env.update({
        "IBEX_CONTEXT_GRPC_ADDR": target, "IBEX_CONTEXT_REDIS_URL": store.url,
        "IBEX_CONTEXT_MEMORY_BASE_URL": memory.base_url, "IBEX_CONTEXT_MEMORY_API_TOKEN": memory.token,
        "IBEX_CONTEXT_HOT_LIMIT": str(args.hot_limit), "IBEX_CONTEXT_COLD_LIMIT": str(args.cold_limit),
        "IBEX_CONTEXT_LOG_LEVEL": "WARNING", "IBEX_CONTEXT_EVENT_LOOP": args.event_loop,
    })
    command = [sys.executable, "-m", "entrypoints.cli", "serve", "--no-http", *(["--reuse-port"] if workers > 1 else [])]
    processes: list[subprocess.Popen] = []
    try:
        for _ in range(workers):
            process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
            processes.append(process)
            line = process.stdout.readline() if process.stdout else ""
            if "gRPC listening on" not in line:
                raise RuntimeError(f"serve did not start: {line!r} (exit {process.poll()})")
        yield target, [p.pid for p in processes]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
            if process.stdout:
                process.stdout.close()


def phase(target: str, memory: MemoryServerProcess, rate: float, duration_s: float, service_pids: list[int]) -> dict:
    cpu_before = cpu_seconds(service_pids), cpu_seconds([memory.process.pid])
    command = [sys.executable, "-m", "bench.load_driver", "--target", target, "--rate", str(rate),
               "--duration", str(duration_s), "--org", memory.org_id, "--agent", memory.agent_id, "--channels", "8"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=duration_s + 120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"load driver failed: {done.stderr}")
    result = json.loads(done.stdout)
    result["service_cpu_s"] = cpu_seconds(service_pids) - cpu_before[0]
    result["memory_cpu_s"] = cpu_seconds([memory.process.pid]) - cpu_before[1]
    return result


def note(result: dict) -> str:
    """Where the errors and degraded answers came from, and the server's own view of latency."""
    server = [float(v) for v in result["server_total_ms"]]
    return (f"{result['rate']:.0f} req/s: server total_ms p50/p99 {percentile(server, .5):.0f}/{percentile(server, .99):.0f}; "
            f"errors {result['errors'] or '-'}; non-success branches {result['branch_failures'] or '-'}")


def passed(result: dict) -> bool:
    return not result["errors"] and result["ok"] == result["sent"] and percentile(result["latencies_ms"], .99) < P99_LIMIT_MS


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Open-loop gRPC load on AssembleContext")
    parser.add_argument("--workers", type=int, default=4,
                        help="serve processes sharing the port (SO_REUSEPORT); 4 gave the best tail on 2 cores")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per fixed-rate phase")
    parser.add_argument("--rates", type=float, nargs="*", default=[100.0, 300.0])
    parser.add_argument("--step-from", type=float, default=150.0)
    parser.add_argument("--step", type=float, default=25.0)
    parser.add_argument("--step-duration", type=float, default=10.0)
    parser.add_argument("--no-step", action="store_true", help="skip the max-sustainable-rate search")
    parser.add_argument("--event-loop", choices=("uvloop", "asyncio"), default="uvloop", help="the workers' event loop")
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--hot-limit", type=int, default=40)
    parser.add_argument("--cold-limit", type=int, default=40)
    args = parser.parse_args(argv)
    with backends(args.memories) as (store, memory), serve_workers(args.workers, store, memory, args) as (target, pids):
        phase(target, memory, 100.0, 5.0, pids)  # warm-up: connections, caches
        print(f"workers={args.workers} event_loop={args.event_loop} target={target} (latency from each request's due time)\n{HEADER}", flush=True)
        notes: list[str] = []
        for rate in args.rates:
            result = phase(target, memory, rate, args.duration, pids)
            print(row("fixed", result), flush=True)
            notes.append(note(result))
        best, rate = 0.0, args.step_from
        while not args.no_step:
            result = phase(target, memory, rate, args.step_duration, pids)
            print(row("step", result), flush=True)
            notes.append(note(result))
            if not passed(result):
                break
            best, rate = rate, rate + args.step
        print("\n".join(notes))
        if not args.no_step:
            print(f"max sustainable rate (p99 < {P99_LIMIT_MS:.0f} ms, 0 errors): {best:.0f} req/s")


if __name__ == "__main__":
    main()
