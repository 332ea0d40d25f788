"""Capacity of one ``ibex-context serve`` process: AssembleContext over gRPC, driven by h2load.

The driver is ``h2load`` (Debian's ``nghttp2-client``, installed with apt-get when missing): a C
HTTP/2 client that posts one length-prefixed ``AssembleContextRequest`` with ``content-type:
application/grpc`` and ``te: trailers`` (and ``grpc-timeout`` with ``--deadline-ms``), open loop at
a fixed request rate (``--rps`` per connection; each connection its own h2load process with its
own clock by default, so that the calls arrive spread out and not in bursts: ``bench.h2load_driver``),
costing a few microseconds of CPU per call, so the figures describe the service and not the driver. Beside it, each in its own process: a private
redis-server holding the directive, and the loopback memory stand-in (canned answers; hot after
2 ms, search after 10 ms; its memories carry the query's words so that every candidate is relevant, among
varied words by default, `--corpus narrow` for the worst case of the near-duplicate gate).

Correctness is checked, not assumed: h2load sees only HTTP status 200 (the gRPC status travels in
trailers), so answers are counted by gRPC code from the service's own ``/metrics``
(``ibex_context_requests_total``) before and after each step. Calls that h2load leaves in flight
when its duration ends are cancelled by it: they show up as ``CANCELLED`` and are reported apart,
bounded by the streams that can be in flight, not as failures.

Floors in the same run, at the same rate, with the same driver, as ratios:

* canned: a grpc.aio server on the same stack answering with the exact bytes of a real answer;
* I/O only: the same server doing an assembly's I/O first (the Redis GET and the two memory calls
  to the same stand-in, with the plain libraries), then the same bytes.

With ``--rounds N`` the service and the floors are measured in turn N times at each rate, and the
median of the N ratios is printed with their range: on a machine whose hypervisor steals a
varying share of the time, a ratio from adjacent steps is steadier than one of a single round.

Per step: offered and achieved rate, p50/p95/p99/max (from h2load's per-request log), service CPU
ms per call (``/proc/<pid>/stat`` of the serve process), the stand-in's and Redis's CPU per call,
and answers by code. The step-up reports the highest rate with p99 < 40 ms and no errors. With
``--step-floors`` the same search then runs against each floor server (by ``--floor-step``): the
rate this machine and driver allow a server that does almost nothing, which bounds any capacity
target for this machine.

    .venv/bin/python -m bench.load [--rates 300 500] [--duration 20] [--budget 2000] [--deadline-ms 45]
        [--step-from 300 --step 100 --step-to R] [--no-step] [--step-floors --floor-step 100] [--no-floors] [--rounds 1]
        [--connections 4] [--arrivals staggered|aligned]
        [--corpus varied|narrow]
        [--env KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import grpc
import redis

from bench.h2load_driver import ARRIVALS, STREAMS_PER_CONNECTION, H2loadRun, Target
from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from tests.support.memory_server import MemoryServerProcess
from tests.support.memory_server.demo_corpus import CORPORA
from tests.support.redis_server import RedisServer, free_port

REPO = Path(__file__).resolve().parents[1]
P99_LIMIT_MS = 40.0
QUERY = "dark theme python deploy budget weekly report"
_TICKS = os.sysconf("SC_CLK_TCK")
_REQUESTS = re.compile(r'^ibex_context_requests_total\{code="(\w+)",method="AssembleContext",surface="grpc"\} (\S+)$', re.M)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of processes (all their threads), from /proc."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def machine_ticks() -> tuple[int, int, int]:
    """(busy, steal, total) CPU ticks of the whole machine since boot (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle, steal = fields[3] + fields[4], fields[7] if len(fields) > 7 else 0
    total = sum(fields[:8])
    return total - idle - steal, steal, total


def machine_share(before: tuple[int, int, int]) -> dict[str, float]:
    """Busy and stolen shares of all cores since ``before`` (steal: the hypervisor ran someone else)."""
    busy, steal, total = (now - then for now, then in zip(machine_ticks(), before))
    return {"busy_pct": 100.0 * busy / max(1, total), "steal_pct": 100.0 * steal / max(1, total)}


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def ensure_h2load() -> str:
    found = shutil.which("h2load")
    if found:
        return found
    print("installing nghttp2-client (h2load, the load driver)", file=sys.stderr, flush=True)
    subprocess.run("apt-get update -qq && apt-get install -y -qq nghttp2-client", shell=True, check=True,
                   stdout=subprocess.DEVNULL)
    return shutil.which("h2load") or sys.exit("bench.load: h2load is not installed and could not be installed")


def grpc_frame(message: bytes) -> bytes:
    """One gRPC length-prefixed message: not compressed, 4-byte big-endian length."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


class Stack:
    """redis-server, the memory stand-in and one serve process (gRPC + HTTP for /metrics)."""

    def __init__(self, stack: ExitStack, args: argparse.Namespace) -> None:
        self.redis = RedisServer.launch()
        stack.callback(self.redis.close)
        self.memory = MemoryServerProcess.launch("--seed-demo", str(args.memories), "--corpus", args.corpus,
                                                 "--hot-latency-ms", "2", "--cold-latency-ms", "10")
        stack.callback(self.memory.close)
        envelope = {"v": 1, "content": "Answer briefly and cite the memory ids you used.",
                    "injection_mode": "system_first", "version_id": str(uuid.uuid4())}
        with redis.Redis.from_url(self.redis.url) as client:
            client.set(f"{self.memory.org_id}:directive:{self.memory.agent_id}", json.dumps(envelope))
        self.grpc_addr, self.http_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("IBEX_CONTEXT_")}
        env.update({
            "IBEX_CONTEXT_GRPC_ADDR": self.grpc_addr, "IBEX_CONTEXT_HTTP_ADDR": self.http_addr,
            "IBEX_CONTEXT_REDIS_URL": self.redis.url, "IBEX_CONTEXT_MEMORY_BASE_URL": self.memory.base_url,
            "IBEX_CONTEXT_MEMORY_API_TOKEN": self.memory.token, "IBEX_CONTEXT_LOG_LEVEL": "WARNING",
            "IBEX_CONTEXT_HOT_LIMIT": str(args.hot_limit), "IBEX_CONTEXT_COLD_LIMIT": str(args.cold_limit),
            # every candidate reaches the packer, as in the reference workload (no hot bound)
            "IBEX_CONTEXT_HOT_SLOTS": str(args.hot_limit),
        })
        env.update(extra_env(args.env))
        self.serve = subprocess.Popen([sys.executable, "-m", "entrypoints.cli", "serve"], cwd=REPO, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        stack.callback(_stop, self.serve)
        _wait_ready(f"http://{self.http_addr}/readyz", self.serve)

    def request(self, budget: int) -> pb.AssembleContextRequest:
        return pb.AssembleContextRequest(
            org_id=self.memory.org_id, agent_id=self.memory.agent_id, model="gpt-4o", query=QUERY,
            available_tokens=budget,
            recent_messages=[pb.Message(role="user", content="What did we decide about the weekly budget report?")])

    def codes(self) -> Counter[str]:
        with urllib.request.urlopen(f"http://{self.http_addr}/metrics", timeout=10) as answer:  # noqa: S310 - loopback
            text = answer.read().decode()
        return Counter({code: int(float(value)) for code, value in _REQUESTS.findall(text)})


def extra_env(pairs: list[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` options as a dict (for the serve process; later ones win)."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"bench.load: --env expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _wait_ready(url: str, process: subprocess.Popen) -> None:  # type: ignore[type-arg]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"serve exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:  # noqa: S310 - loopback
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("serve did not become ready in 60 s")


def _stop(process: subprocess.Popen) -> None:  # type: ignore[type-arg]
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


@contextmanager
def floor_server(response: Path, stack_: Stack | None, args: argparse.Namespace) -> Iterator[tuple[str, int]]:
    """A floor server (canned bytes; with ``stack_``: the I/O-only pipeline) on a free port."""
    port = free_port()
    command = [sys.executable, "-m", "bench.floor_server", "--port", str(port), "--response-file", str(response)]
    if stack_ is not None:
        memory = stack_.memory
        command += ["--io", "--redis-url", stack_.redis.url, "--memory-url", memory.base_url, "--token", memory.token,
                    "--org", memory.org_id, "--agent", memory.agent_id, "--query", QUERY,
                    "--hot-limit", str(args.hot_limit), "--cold-limit", str(args.cold_limit)]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        if process.stdout is None or process.stdout.readline().strip() != "ready":
            raise RuntimeError("floor server did not start")
        yield f"127.0.0.1:{port}", process.pid
    finally:
        _stop(process)


def h2load(h2load_bin: str, addr: str, body: Path, rate: float, duration_s: float, args: argparse.Namespace) -> dict:
    """One open-loop h2load run (``bench.h2load_driver``); latencies (ms) of the completed requests."""
    with tempfile.TemporaryDirectory(prefix="h2load-") as folder:
        run = H2loadRun.start(Target(h2load_bin, addr, body, args.deadline_ms), rate, duration_s,
                              connections=args.connections, arrivals=args.arrivals, log_stem=Path(folder) / "run")
        done = run.result(duration_s + 60)
    if done.exit_code != 0:
        raise RuntimeError(f"h2load failed ({done.exit_code}): {done.output[-1000:]}")
    latencies = [r.latency_ms for r in done.requests if r.status == 200]
    return {"completed": len(latencies), "latencies_ms": latencies, "http_errors": len(done.requests) - len(latencies),
            "driver": done.output}


def measure(h2load_bin: str, addr: str, body: Path, rate: float, duration_s: float, pids: dict[str, int],
            args: argparse.Namespace, stack_: Stack | None = None) -> dict:
    before_cpu = {name: cpu_seconds([pid]) for name, pid in pids.items()}
    before_codes = stack_.codes() if stack_ else Counter()
    before_machine = machine_ticks()
    run = h2load(h2load_bin, addr, body, rate, duration_s, args)
    cpu = {name: cpu_seconds([pid]) - before_cpu[name] for name, pid in pids.items()}
    machine = machine_share(before_machine)
    codes = (stack_.codes() - before_codes) if stack_ else Counter({"OK": run["completed"]})
    answered = max(1, sum(codes.values()))
    lat = run["latencies_ms"]
    return {
        "offered": rate, "achieved": codes.get("OK", 0) / duration_s, "p50": percentile(lat, 0.5),
        "p95": percentile(lat, 0.95), "p99": percentile(lat, 0.99), "max": max(lat, default=float("nan")),
        "codes": dict(codes), "http_errors": run["http_errors"],
        "cpu_ms_per_call": {name: seconds * 1000.0 / answered for name, seconds in cpu.items()},
        "machine": machine,
    }


def errors(result: dict, open_streams: int) -> dict[str, int]:
    """Non-OK answers, without the calls h2load cancels when its duration ends (at most its open streams)."""
    codes = dict(result["codes"])
    codes.pop("OK", None)
    if codes.get("CANCELLED", 0) <= open_streams:
        codes.pop("CANCELLED", None)
    if result["http_errors"]:
        codes["http"] = result["http_errors"]
    return codes


def passed(result: dict, open_streams: int) -> bool:
    return not errors(result, open_streams) and result["p99"] < P99_LIMIT_MS


HEADER = (f"{'what':<22} {'offered':>7} {'achieved':>8} {'p50':>6} {'p95':>6} {'p99':>6} {'max':>7} "
          f"{'svc cpu ms/call':>15} {'stand-in':>8} {'redis':>6} {'stolen%':>7}  non-OK")


def line(what: str, r: dict) -> str:
    cpu = r["cpu_ms_per_call"]
    non_ok = ", ".join(f"{k} {v}" for k, v in sorted(r["codes"].items()) if k != "OK") or "-"
    return (f"{what:<22} {r['offered']:>7.0f} {r['achieved']:>8.1f} {r['p50']:>6.1f} {r['p95']:>6.1f} {r['p99']:>6.1f} "
            f"{r['max']:>7.1f} {cpu.get('service', 0.0):>15.3f} {cpu.get('stand-in', 0.0):>8.3f} "
            f"{cpu.get('redis', 0.0):>6.3f} {r['machine']['steal_pct']:>7.1f}  {non_ok}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Capacity of one serve process under h2load")
    parser.add_argument("--rates", type=float, nargs="*", default=[300.0, 500.0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per step")
    parser.add_argument("--budget", type=int, default=2000, help="available_tokens (2000 binds; 0: everything fits)")
    parser.add_argument("--deadline-ms", type=float, default=45.0, help="grpc-timeout sent (0: none)")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--arrivals", choices=ARRIVALS, default="staggered",
                        help="staggered: each connection its own h2load clock, calls spread evenly; aligned: one "
                             "h2load -c N, the connections' calls in bursts (bench/h2load_driver.py)")
    parser.add_argument("--step-from", type=float, default=300.0)
    parser.add_argument("--step", type=float, default=100.0)
    parser.add_argument("--no-step", action="store_true")
    parser.add_argument("--no-floors", action="store_true")
    parser.add_argument("--step-floors", action="store_true",
                        help="after the service's step-up search, the same search against each floor server: what "
                             "this machine and driver allow a process that does (almost) nothing")
    parser.add_argument("--floor-step", type=float, default=100.0, help="the floors' step (req/s)")
    parser.add_argument("--step-to", type=float, default=None,
                        help="no step above this rate (req/s): a search that passes it reports it as '>= rate'")
    parser.add_argument("--rounds", type=int, default=1,
                        help="service and floors measured this many times in turn at each rate (the median ratio is printed)")
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--corpus", choices=CORPORA, default="varied",
                        help="the stand-in's memory texts (tests/support/memory_server/demo_corpus.py)")
    parser.add_argument("--hot-limit", type=int, default=50)
    parser.add_argument("--cold-limit", type=int, default=20)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for the serve process (repeatable), e.g. OTEL_EXPORTER_OTLP_ENDPOINT=...")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.step <= 0 or args.floor_step <= 0 or args.step_from <= 0:
        parser.error(f"--step-from, --step and --floor-step must be > 0, got {args.step_from:g}, {args.step:g}, "
                     f"{args.floor_step:g}")
    if args.step_to is not None and args.step_to < args.step_from:
        parser.error(f"--step-to must be at least --step-from, got {args.step_to:g} < {args.step_from:g}")
    if args.step_floors and (args.no_floors or args.no_step):
        parser.error("--step-floors needs the floors and the step-up search (drop --no-floors and --no-step)")
    h2load_bin = ensure_h2load()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="ibex-load-") as folder:
        services = Stack(stack, args)
        request = services.request(args.budget)
        body = Path(folder) / "request.bin"
        body.write_bytes(grpc_frame(request.SerializeToString()))
        answer = reference_answer(services.grpc_addr, request)
        reached = sum(1 for m in answer.memories_used if m.exclusion in ("included", "budget"))
        response = Path(folder) / "response.bin"
        response.write_bytes(answer.SerializeToString())
        pids = {"service": services.serve.pid, "stand-in": services.memory.process.pid, "redis": services.redis.process.pid}
        measure(h2load_bin, services.grpc_addr, body, 100.0, 5.0, pids, args, services)  # warm-up
        print(f"one serve process, {len(answer.memories_used)} candidates ({reached} reached the packer, "
              f"{answer.memories_included} packed), available_tokens {args.budget}, grpc-timeout "
              f"{args.deadline_ms:g} ms, {args.connections} connections ({args.arrivals}), {args.duration:g} s a step\n{HEADER}", flush=True)
        floors: list[tuple[str, str, dict[str, int]]] = []  # (label, address, pids) of each floor server
        if not args.no_floors:
            for label, io in (("floor: canned", None), ("floor: I/O only", services)):
                addr, pid = stack.enter_context(floor_server(response, io, args))
                floor_pids = {"service": pid, "stand-in": pids["stand-in"], "redis": pids["redis"]}
                measure(h2load_bin, addr, body, 100.0, 3.0, floor_pids, args)  # warm-up
                floors.append((label, addr, floor_pids))
        for rate in args.rates:
            ratios: dict[str, list[float]] = {label: [] for label, _, _ in floors}
            for _ in range(args.rounds):  # each round: the service, then each floor, one after the other
                result = measure(h2load_bin, services.grpc_addr, body, rate, args.duration, pids, args, services)
                print(line("service", result), flush=True)
                for label, addr, floor_pids in floors:
                    floor = measure(h2load_bin, addr, body, rate, args.duration, floor_pids, args)
                    ratio = result["cpu_ms_per_call"]["service"] / max(1e-9, floor["cpu_ms_per_call"]["service"])
                    ratios[label].append(ratio)
                    print(line(label, floor) + f"   service / floor = {ratio:.2f}", flush=True)
            if args.rounds > 1 and floors:
                print(f"{rate:g} req/s, median of {args.rounds} rounds: " + "; ".join(
                    f"service / {label.removeprefix('floor: ')} = {statistics.median(r):.2f} "
                    f"({min(r):.2f}-{max(r):.2f})" for label, r in ratios.items()), flush=True)
        if args.no_step:
            return
        best = step_up(h2load_bin, services.grpc_addr, body, pids, args, args.step, "step", services)
        print(f"highest rate with p99 < {P99_LIMIT_MS:.0f} ms and no errors: {best} req/s", flush=True)
        if args.step_floors:
            reached = {label: step_up(h2load_bin, addr, body, floor_pids, args, args.floor_step, f"step: {label}")
                       for label, addr, floor_pids in floors}
            print(f"the same search (from {args.step_from:g} req/s by {args.floor_step:g}) against each floor: " + "; ".join(
                f"{label.removeprefix('floor: ')} {rate} req/s" for label, rate in reached.items()), flush=True)


def reference_answer(addr: str, request: pb.AssembleContextRequest, attempts: int = 10) -> pb.AssembleContextResponse:
    """The first complete (L0: directive, hot and search answered) answer to ``request``: its bytes are what the
    floors send, and its candidates are what the header reports. A process just started can miss a branch's
    timeout on its first calls (imports, connections, the tokenizer's first use)."""
    with grpc.insecure_channel(addr) as channel:
        stub = pb_grpc.ContextAssemblyServiceStub(channel)
        for _ in range(attempts):
            answer = stub.AssembleContext(request, timeout=5)
            if answer.degradation_level == "L0":
                return answer
            time.sleep(0.2)
    raise RuntimeError(f"no complete answer in {attempts} calls (the last was {answer.degradation_level}): "
                       "is the memory stand-in answering?")


def step_up(h2load_bin: str, addr: str, body: Path, pids: dict[str, int], args: argparse.Namespace, step: float,
            label: str, stack_: Stack | None = None) -> str:
    """The highest rate, from ``--step-from`` by ``step``, with p99 < 40 ms and no errors, printed ("0": not even
    the first; ">= R": every step passed up to ``--step-to``).

    A floor server's answers are not counted by status (it has no metrics): it is judged on h2load's
    p99, which a call ended by its deadline exceeds (the deadline is 45 ms)."""
    best, rate = 0.0, args.step_from
    while args.step_to is None or rate <= args.step_to:
        result = measure(h2load_bin, addr, body, rate, args.duration, pids, args, stack_)
        print(line(label, result), flush=True)
        if not passed(result, STREAMS_PER_CONNECTION * args.connections):
            return f"{best:.0f}"
        best, rate = rate, rate + step
    return f">= {best:.0f}"


if __name__ == "__main__":
    main()
