"""The fault table: what each dependency fault (and a SIGTERM, and overload) does to answers under load.

Each row runs for ``--duration`` seconds (10 by default) at a fixed offered rate (``--rate``;
default half of ``--capacity``, which is 100 req/s: one serve process saturates near 100 req/s on
the 2-core build machine, see docs/PERFORMANCE.md) with the proxy's deadline (``grpc-timeout``,
``--deadline-ms`` 45), against a private redis-server and the loopback memory stand-in (its own
process; hot 50 memories after 2 ms, search 20 after 10 ms; ``IBEX_CONTEXT_HOT_LIMIT=50``,
``IBEX_CONTEXT_COLD_LIMIT=20``, every hot memory to the packer: the workload of bench.load). Every
row gets a fresh ``ibex-context serve`` process, warmed up for ``--warmup`` seconds at the row's
rate before its RSS is read, so RSS before and after belong to that row.

Drivers: h2load (the C HTTP/2 client of bench.load, open loop, installed with apt-get when
missing; its connections staggered, ``bench.h2load_driver``) for the bulk of the rate, and beside it ``bench.sampled_client`` (python grpc.aio, a
process of its own, the same request bytes and deadline) for ``--sample-rate`` calls per second
of the rate (default: 5% of it, at least 5), which records each call's latency, gRPC code,
degradation level and whether the directive came back, because h2load sees no gRPC status.
Counts by code, by degradation level and by branch outcome come from the service's own
``/metrics`` (``ibex_context_requests_total``, ``ibex_context_assemblies_total``,
``ibex_context_branch_outcomes_total``, and the directive cache's lookups when it has them),
scraped before the row, when the fault starts, when it ends and after the row (a scrape costs the
service about 4.5 ms of CPU), so the codes are also given by phase; calls h2load cancels when its
duration ends (``CANCELLED`` in the last phase, at most its open streams) are reported apart, as in
bench.load. Per row also: the service's CPU per call (``/proc``), its WARNING and ERROR log
records, and how busy the whole machine was and how much of it the hypervisor stole
(``/proc/stat``): the build machine is a shared 2-core VM.

Faults are applied ``--fault-at`` seconds into the row (2 s) and cleared ``--clear-before`` seconds
before its end (3 s), so recovery is inside the row; a killed Redis is restarted on the same port
half way through the row and its directive written again with the proxy's ``PUBLISH
directive_updates:{org}``, and "directive back after" is the time from that restart to the first
sampled answer carrying the directive again. Targets (PASS/FAIL): every dependency fault row
answers 100% OK (degraded levels allowed), p99 (h2load, every call) within the retrieval wall
(read from the settings) + 5 ms, RSS growth < 20%; a killed Redis's directive is back within 1 s
of its restart. ``sigterm`` (``--drain-delay`` 2 s; logs at INFO, so that every call that is not
OK is logged with its code until the process exits): health NOT_SERVING within 0.5 s and before
any UNAVAILABLE, every sampled call during the drain delay OK, nothing but OK or UNAVAILABLE after
the stop, no call the service logs as failed from SIGTERM to its exit, exit code 0. ``overload``
(only with ``--only``: it saturates the machine): 2x capacity for ``--duration`` seconds between
3 s at half capacity before and after; OK answers/s >= 90% of capacity, p99 of OK answers < 40 ms,
refused calls (RESOURCE_EXHAUSTED) answered in < 5 ms, p99 back to normal within 1 s; then the
same drive against the canned floor server (``bench.floor_server``, the service's own answer
bytes), whose sampled p50/p99 say what the transport and the drivers alone give at that load
(``--no-floor`` skips it).

    .venv/bin/python -m bench.faults [--only ROW[,ROW]|all] [--duration 10] [--rate 50] [--capacity 100]
        [--deadline-ms 45] [--sample-rate 5] [--json PATH] [--markdown PATH] [--logs DIR] [--env KEY=VALUE ...]

Rows: baseline, redis_kill, redis_hung, redis_slow, memory_slow, memory_flapping, memory_401,
memory_403, memory_garbage, memory_50mb, memory_50mb_chunked, memory_resets, sigterm (the
default set, in this order), overload.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import redis
from prometheus_client.parser import text_string_to_metric_families

from bench.h2load_driver import ARRIVALS, STREAMS_PER_CONNECTION, H2loadRun, Target
from bench.load import (
    QUERY,
    cpu_seconds,
    ensure_h2load,
    extra_env,
    floor_server,
    grpc_frame,
    machine_share,
    machine_ticks,
    percentile,
    reference_answer,
)
from contracts.ibex.context.v1 import context_pb2 as pb
from entrypoints.settings import Settings
from tests.support.memory_server import MemoryServerProcess
from tests.support.redis_server import RedisServer, free_port

REPO = Path(__file__).resolve().parents[1]
HOT_LATENCY_MS, COLD_LATENCY_MS = 2.0, 10.0
MEMORY_SLOW_EXTRA_MS = 30.0
HUGE_BODY_BYTES = 50 * 1024 * 1024
REDIS_STALL_S, REDIS_STALL_GAP_S = 0.2, 0.05
P99_OVER_WALL_MS = 5.0
RSS_GROWTH_LIMIT = 0.20
DIRECTIVE_BACK_LIMIT_S = 1.0
OVERLOAD_OK_SHARE = 0.90
OVERLOAD_P99_MS = 40.0
REFUSED_LIMIT_MS = 5.0
RECOVERY_LIMIT_S = 1.0
OVERLOAD_EDGE_S = 3.0  # half capacity before and after the overload
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ----------------------------------------------------------------------------------------------- the stack
class Stack:
    """redis-server and the memory stand-in for the whole run; a serve process per row."""

    def __init__(self, stack: ExitStack, args: argparse.Namespace, folder: Path) -> None:
        self.args = args
        debug = ("--enable-debug-command", "yes") if _redis_major() >= 7 else ()
        self.redis = RedisServer.launch(*debug)
        stack.callback(self.close_redis)
        self.memory = MemoryServerProcess.launch("--seed-demo", str(args.memories), "--hot-latency-ms",
                                                 f"{HOT_LATENCY_MS:g}", "--cold-latency-ms", f"{COLD_LATENCY_MS:g}")
        stack.callback(self.memory.close)
        self.directive_key = f"{self.memory.org_id}:directive:{self.memory.agent_id}"
        self.set_directive()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("IBEX_CONTEXT_")}
        self.env.update({
            "IBEX_CONTEXT_REDIS_URL": self.redis.url, "IBEX_CONTEXT_MEMORY_BASE_URL": self.memory.base_url,
            "IBEX_CONTEXT_MEMORY_API_TOKEN": self.memory.token, "IBEX_CONTEXT_LOG_LEVEL": "WARNING",
            "IBEX_CONTEXT_HOT_LIMIT": str(args.hot_limit), "IBEX_CONTEXT_COLD_LIMIT": str(args.cold_limit),
            "IBEX_CONTEXT_HOT_SLOTS": str(args.hot_limit),  # every candidate reaches the packer, as in bench.load
            # h2load does not reconnect after a GOAWAY: no connection age inside a row
            "IBEX_CONTEXT_MAX_CONNECTION_AGE": "0",
        })
        self.env.update(extra_env(args.env))
        self.wall_ms = Settings.from_env({**self.env, "IBEX_CONTEXT_GRPC_ADDR": "127.0.0.1:1",
                                          "IBEX_CONTEXT_HTTP_ADDR": "127.0.0.1:2"}).retrieval_wall_ms
        request = pb.AssembleContextRequest(
            org_id=self.memory.org_id, agent_id=self.memory.agent_id, model="gpt-4o", query=QUERY,
            available_tokens=args.budget,
            recent_messages=[pb.Message(role="user", content="What did we decide about the weekly budget report?")])
        self.request_file = folder / "request.pb"
        self.request_file.write_bytes(request.SerializeToString())
        self.body = folder / "request.bin"
        self.body.write_bytes(grpc_frame(request.SerializeToString()))
        self.folder = folder
        self.stopped = False  # redis-server SIGSTOPped
        self.staller: RedisStaller | None = None

    def h2load_log(self, what: str) -> Path:
        """A fresh stem for one h2load run's per-request logs (a reused one mixed two runs' lines)."""
        return self.folder / f"h2load-{what}-{uuid.uuid4().hex[:8]}"

    def set_directive(self) -> None:
        envelope = {"v": 1, "content": "Answer briefly and cite the memory ids you used.",
                    "injection_mode": "system_first", "version_id": str(uuid.uuid4())}
        with redis.Redis.from_url(self.redis.url, socket_timeout=5) as client:
            client.set(self.directive_key, json.dumps(envelope))
            client.publish(f"directive_updates:{self.memory.org_id}", b"")  # as the proxy does on a write

    def heal(self) -> None:
        """Every dependency back to normal between rows."""
        self.memory.fault("clear_faults")
        if self.staller is not None:
            self.staller.stop()
            self.staller = None
        if self.stopped and self.redis.process is not None:
            self.redis.process.send_signal(signal.SIGCONT)
            self.stopped = False
        if self.redis.process is None or self.redis.process.poll() is not None:
            self.redis.process = None
            self.redis.start()
        self.set_directive()

    def close_redis(self) -> None:
        if self.redis.process is not None and self.stopped:
            self.redis.process.send_signal(signal.SIGCONT)
        if self.staller is not None:
            self.staller.stop()
        self.redis.close()


def _redis_major() -> int:
    done = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"v=(\d+)\.", done.stdout)
    return int(found.group(1)) if found else 0


class RedisStaller:
    """``DEBUG SLEEP`` in a loop from a thread: Redis stalls ``REDIS_STALL_S``, then answers for a gap."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._stop = threading.Event()
        self.stalls = 0
        self._thread = threading.Thread(target=self._run, name="redis-staller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with redis.Redis.from_url(self._url, socket_timeout=10) as client:
            while not self._stop.is_set():
                client.execute_command("DEBUG", "SLEEP", f"{REDIS_STALL_S:g}")
                self.stalls += 1
                self._stop.wait(REDIS_STALL_GAP_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@attrs.define
class Serve:
    process: subprocess.Popen
    grpc_addr: str
    http_addr: str
    log: Path

    def log_records(self) -> list[dict[str, Any]]:
        """The JSON log lines the process wrote on stderr (read after it stopped)."""
        records = []
        for line in self.log.read_text(errors="replace").splitlines() if self.log.exists() else ():
            try:
                record = json.loads(line)
            except ValueError:
                record = {"level": "RAW", "event": line[:120]}
            if isinstance(record, dict):
                records.append(record)
        return records

    def log_errors(self, limit: int = 5) -> list[dict[str, Any]]:
        """The first ERROR and CRITICAL records, whole (exception text cut to 4,000 characters)."""
        errors = [r for r in self.log_records() if r.get("level") in ("ERROR", "CRITICAL")][:limit]
        return [{k: (v[:4000] if isinstance(v, str) else v) for k, v in r.items()} for r in errors]

    def log_summary(self) -> dict[str, int]:
        """WARNING and worse records by level and event."""
        return dict(Counter(f"{r.get('level')} {r.get('event')}" for r in self.log_records()
                            if r.get("level") in ("WARNING", "ERROR", "CRITICAL", "RAW")))

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def metrics(self, timeout_s: float = 10.0) -> Metrics:
        with _LOOPBACK.open(f"http://{self.http_addr}/metrics", timeout=timeout_s) as answer:
            return Metrics.parse(answer.read().decode())

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def answer_bytes(stack: Stack, serve: Serve) -> bytes:
    """The serialized answer the service gives the benchmark's request (the floor's canned bytes)."""
    request = pb.AssembleContextRequest.FromString(stack.request_file.read_bytes())
    return reference_answer(serve.grpc_addr, request).SerializeToString()


def start_serve(stack: Stack, name: str, env: dict[str, str]) -> Serve:
    grpc_addr, http_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    full = {**stack.env, "IBEX_CONTEXT_GRPC_ADDR": grpc_addr, "IBEX_CONTEXT_HTTP_ADDR": http_addr, **env}
    log = stack.folder / f"serve-{name}.log"
    with log.open("w") as stderr:  # the child keeps its own descriptor
        process = subprocess.Popen([sys.executable, "-m", "entrypoints.cli", "serve"], cwd=REPO, env=full,
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    serve = Serve(process, grpc_addr, http_addr, log)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"serve exited with {process.returncode}")
        try:
            with _LOOPBACK.open(f"http://{http_addr}/readyz", timeout=1) as answer:
                if answer.status == 200:
                    return serve
        except OSError:
            pass
        time.sleep(0.1)
    serve.stop()
    raise RuntimeError("serve did not become ready in 90 s")


@attrs.frozen
class Metrics:
    codes: Counter[str]  # AssembleContext over gRPC, by code
    levels: Counter[str]  # assemblies by degradation level
    branches: Counter[str]  # "branch:outcome"
    shed: Counter[str]  # "surface:reason"
    directive_cache: Counter[str] = attrs.field(factory=Counter)  # lookups by result, when the service has a cache

    @classmethod
    def parse(cls, text: str) -> Metrics:
        codes, levels, branches, shed, cache = Counter(), Counter(), Counter(), Counter(), Counter()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                value, labels = int(s.value), s.labels
                if s.name == "ibex_context_requests_total" and labels.get("surface") == "grpc" \
                        and labels.get("method") == "AssembleContext":
                    codes[labels["code"]] += value
                elif s.name == "ibex_context_assemblies_total":
                    levels[labels["level"]] += value
                elif s.name == "ibex_context_branch_outcomes_total":
                    branches[f"{labels['branch']}:{labels['outcome']}"] += value
                elif s.name == "ibex_context_shed_total":
                    shed[f"{labels['surface']}:{labels['reason']}"] += value
                elif s.name == "ibex_context_directive_cache_total":
                    cache[labels["result"]] += value
        return cls(codes, levels, branches, shed, cache)

    def __sub__(self, other: Metrics) -> Metrics:
        return Metrics(self.codes - other.codes, self.levels - other.levels, self.branches - other.branches,
                       self.shed - other.shed, self.directive_cache - other.directive_cache)


# ----------------------------------------------------------------------------------------------- drivers
@attrs.define
class H2load:
    """An h2load run (``bench.h2load_driver``: staggered connections unless ``--arrivals aligned``)."""

    run: H2loadRun

    @classmethod
    def start(cls, stack: Stack, addr: str, rate: float, duration_s: float, log: Path) -> H2load:
        target = Target(stack.args.h2load, addr, stack.body, stack.args.deadline_ms)
        return cls(H2loadRun.start(target, rate, duration_s, connections=stack.args.connections,
                                   arrivals=stack.args.arrivals, log_stem=log))

    def result(self, timeout_s: float) -> dict[str, Any]:
        """Per request (start, HTTP status, latency ms) from the logs, and h2load's own summary."""
        done = self.run.result(timeout_s)
        return {"rows": [(r.start_s, r.status, r.latency_ms) for r in done.requests], "exit": done.exit_code,
                "summary": done.summary}


def h2load_run(stack: Stack, addr: str, rate: float, duration_s: float) -> dict[str, Any]:
    return H2load.start(stack, addr, rate, duration_s, stack.h2load_log("warm-up")).result(duration_s + 60)


@attrs.define
class Sampler:
    process: subprocess.Popen
    out: Path

    @classmethod
    def start(cls, stack: Stack, addr: str, rate: float, start: float, duration_s: float,
              health_interval_ms: float = 0.0) -> Sampler:
        out = stack.folder / f"sampled-{uuid.uuid4().hex}.json"
        command = [sys.executable, "-m", "bench.sampled_client", "--target", addr, "--request-file",
                   str(stack.request_file), "--rate", f"{rate:g}", "--start", repr(start), "--duration",
                   f"{duration_s:g}", "--deadline-ms", f"{stack.args.deadline_ms:g}", "--out", str(out),
                   "--health-interval-ms", f"{health_interval_ms:g}"]
        return cls(subprocess.Popen(command, cwd=REPO), out)

    def result(self, timeout_s: float) -> dict[str, Any]:
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise RuntimeError("the sampled client did not finish") from None
        if self.process.returncode != 0:
            raise RuntimeError(f"the sampled client exited with {self.process.returncode}")
        return json.loads(self.out.read_text())


def wait_until(at: float) -> None:
    delay = at - time.time()
    if delay > 0:
        time.sleep(delay)


# ----------------------------------------------------------------------------------------------- rows
@attrs.frozen
class Fault:
    what: str
    apply: Callable[[Stack], None] | None = None
    clear: Callable[[Stack], None] | None = None
    clear_at_half: bool = False  # cleared half way through the row (a Redis restart) instead of near its end


def _both(operation: str, **arguments: object) -> Callable[[Stack], None]:
    def apply(stack: Stack) -> None:
        for endpoint in ("hot", "search"):
            stack.memory.fault(operation, endpoint=endpoint, **arguments)
    return apply


def _kill_redis(stack: Stack) -> None:
    assert stack.redis.process is not None
    stack.redis.process.kill()
    stack.redis.process.wait()
    stack.redis.process = None


def _restart_redis(stack: Stack) -> None:
    stack.redis.start()  # the same port; returns once it answers PING
    stack.set_directive()  # an empty Redis: the proxy writes the directive again


def _stop_redis(stack: Stack) -> None:
    assert stack.redis.process is not None
    stack.redis.process.send_signal(signal.SIGSTOP)
    stack.stopped = True


def _continue_redis(stack: Stack) -> None:
    assert stack.redis.process is not None
    stack.redis.process.send_signal(signal.SIGCONT)
    stack.stopped = False


def _stall_redis(stack: Stack) -> None:
    stack.staller = RedisStaller(stack.redis.url)


def _unstall_redis(stack: Stack) -> None:
    if stack.staller is not None:
        stack.staller.stop()
        stack.staller = None


def _slow_memory(stack: Stack) -> None:
    stack.memory.fault("set_latency", endpoint="hot", ms=HOT_LATENCY_MS + MEMORY_SLOW_EXTRA_MS)
    stack.memory.fault("set_latency", endpoint="search", ms=COLD_LATENCY_MS + MEMORY_SLOW_EXTRA_MS)


def _garbage(stack: Stack) -> None:
    stack.memory.fault("malform_body", endpoint="hot", kind="not_json")
    stack.memory.fault("malform_body", endpoint="search", kind="truncated")


def _clear_memory(stack: Stack) -> None:
    stack.memory.fault("clear_faults")


FAULTS: dict[str, Fault] = {
    "baseline": Fault("no fault"),
    "redis_kill": Fault("redis-server SIGKILL, restarted on the same port half way", _kill_redis, _restart_redis,
                        clear_at_half=True),
    "redis_hung": Fault("redis-server SIGSTOP, then SIGCONT", _stop_redis, _continue_redis),
    "redis_slow": Fault(f"DEBUG SLEEP {REDIS_STALL_S:g} in a loop ({REDIS_STALL_GAP_S * 1000:g} ms gaps)",
                        _stall_redis, _unstall_redis),
    "memory_slow": Fault(f"+{MEMORY_SLOW_EXTRA_MS:g} ms on hot and search", _slow_memory, _clear_memory),
    "memory_flapping": Fault("50% of hot and search answers 503", _both("force_status", status=503, ratio=0.5),
                             _clear_memory),
    "memory_401": Fault("every hot and search answer 401", _both("force_status", status=401), _clear_memory),
    "memory_403": Fault("every hot and search answer 403", _both("force_status", status=403), _clear_memory),
    "memory_garbage": Fault("hot: HTML, search: truncated JSON (200)", _garbage, _clear_memory),
    "memory_50mb": Fault("hot and search: 50 MiB bodies, Content-Length declared",
                         _both("huge_body", size_bytes=HUGE_BODY_BYTES, declared=True), _clear_memory),
    "memory_50mb_chunked": Fault("hot and search: 50 MiB bodies, chunked (no length)",
                                 _both("huge_body", size_bytes=HUGE_BODY_BYTES, declared=False), _clear_memory),
    "memory_resets": Fault("every hot and search connection reset (RST)", _both("reset_connections"), _clear_memory),
}
DEFAULT_ROWS = (*FAULTS, "sigterm")
ALL_ROWS = (*DEFAULT_ROWS, "overload")


def fault_times(args: argparse.Namespace, fault: Fault) -> tuple[float, float]:
    at = min(args.fault_at, args.duration * 0.25)
    clear = args.duration / 2 if fault.clear_at_half else args.duration - min(args.clear_before, args.duration * 0.3)
    return at, max(clear, at)


def warm_up(stack: Stack, serve: Serve, rate: float) -> None:
    if stack.args.warmup > 0:
        h2load_run(stack, serve.grpc_addr, rate, stack.args.warmup)
        time.sleep(0.5)  # the calls h2load cancelled at its end are counted before the row's first scrape


def run_fault_row(stack: Stack, name: str) -> dict[str, Any]:
    args, fault = stack.args, FAULTS[name]
    serve = start_serve(stack, name, {})
    try:
        warm_up(stack, serve, args.rate)
        rss_before, before = serve.rss_kib(), serve.metrics()
        cpu_before, ticks = cpu_seconds([serve.pid]), machine_ticks()
        start = time.time() + 1.0
        sampler = Sampler.start(stack, serve.grpc_addr, args.sample_rate, start, args.duration)
        wait_until(start)
        h2 = H2load.start(stack, serve.grpc_addr, args.rate - args.sample_rate, args.duration,
                          stack.h2load_log(name))
        marks: dict[str, float] = {}
        at, clear = fault_times(args, fault)
        scraped = [before]  # at the fault and at its end too: counts by code per phase
        try:
            if fault.apply is not None:
                wait_until(start + at)
                fault.apply(stack)
                marks["fault"] = time.time() - start
                scraped.append(serve.metrics())
            if fault.clear is not None:
                wait_until(start + clear)
                fault.clear(stack)
                marks["cleared"] = time.time() - start
                scraped.append(serve.metrics())
        finally:
            h2load = h2.result(args.duration + 60)
            sampled = sampler.result(args.duration + 30)
            stack.heal()
        time.sleep(0.5)
        after = serve.metrics()
        rss_after = serve.rss_kib()
        cpu_s, machine = cpu_seconds([serve.pid]) - cpu_before, machine_share(ticks)
    finally:
        serve.stop()
    row = summarize(stack, name, fault.what, after - before, h2load, sampled, rss_before, rss_after, marks,
                    last_phase=after - scraped[-1])
    row["machine"] = machine
    row["notes"].append(f"machine: {machine['busy_pct']:.0f}% busy, {machine['steal_pct']:.0f}% stolen")
    row["log"] = serve.log_summary()
    row["log_errors"] = serve.log_errors()
    keep_log(serve, args.logs)
    if row["log"]:
        row["notes"].append("log: " + _codes(row["log"]))
    row["cpu_ms_per_call"] = 1000.0 * cpu_s / max(1, row["answered"] + row["cancelled_at_end"])
    if "fault" in marks:
        phases = phase_p99(h2load["rows"], start, marks["fault"], marks.get("cleared", args.duration), args.duration)
        row["p99_by_phase"] = phases
        scraped.append(after)
        codes = [dict(+Counter({k: v for k, v in (b - a).codes.items() if k != "OK"}))
                 for a, b in zip(scraped, scraped[1:])]
        row["non_ok_by_phase"] = codes
        row["notes"].insert(0, "h2load p99 before / during / after the fault: "
                            + " / ".join(_ms(v) for v in phases.values()) + " ms")
        if any(codes):
            row["notes"].insert(1, "non-OK before / during / after: " + " / ".join(_codes(c) for c in codes))
    if name == "redis_kill":
        back, later = directive_back_after(sampled["calls"], start + marks.get("cleared", math.inf))
        row["directive_back_s"], row["without_directive_after_back"] = back, later
        row["notes"].insert(0, "directive back " + ("never" if back is None else f"{back:.2f} s") + " after the restart"
                            + (f" ({later} later sampled answers without it)" if later else ""))
        row["checks"].append(("directive back within 1 s of the restart", back is not None and back <= DIRECTIVE_BACK_LIMIT_S))
    row["verdict"] = "PASS" if all(ok for _, ok in row["checks"]) else "FAIL"
    return row


def phase_p99(rows: list[tuple[float, int, float]], start: float, fault_s: float, cleared_s: float,
              end_s: float) -> dict[str, float]:
    """h2load's p99 (answered calls, by start time) before, during and after the fault."""
    edges = {"before": (0.0, fault_s), "during": (fault_s, cleared_s), "after": (cleared_s, end_s)}
    return {phase: percentile([r[2] for r in rows if r[1] == 200 and low <= r[0] - start < high], 0.99)
            for phase, (low, high) in edges.items()}


def directive_back_after(calls: list[list], restarted: float) -> tuple[float | None, int]:
    """Seconds from the restart to the first sampled answer carrying the directive again (None:
    none did), and how many OK answers after that one still had none (a 5 ms directive branch
    that timed out, as happens without any fault)."""
    after = [c for c in calls if c[0] >= restarted and c[2] == "OK"]
    first = next((i for i, c in enumerate(after) if c[4]), None)
    if first is None:
        return None, 0
    return after[first][0] - restarted, sum(1 for c in after[first:] if not c[4])


def summarize(stack: Stack, name: str, what: str, delta: Metrics, h2load: dict[str, Any], sampled: dict[str, Any],
              rss_before: int, rss_after: int, marks: dict[str, float], *, duration_s: float | None = None,
              last_phase: Metrics | None = None) -> dict[str, Any]:
    """One row's figures. ``last_phase``: the counts of the row's last part only, where the calls h2load
    cancels when its duration ends are (default: the whole row's)."""
    args = stack.args
    duration_s = duration_s or args.duration
    open_streams = STREAMS_PER_CONNECTION * args.connections
    codes = Counter(delta.codes)
    tail = (last_phase or delta).codes["CANCELLED"]
    cancelled_at_end = tail if 0 < tail <= open_streams else 0
    codes["CANCELLED"] -= cancelled_at_end
    codes = +codes
    answered = sum(codes.values())
    ok = codes["OK"]
    non_ok = {code: n for code, n in sorted(codes.items()) if code != "OK"}
    calls = sampled["calls"]
    ok_latencies = [c[1] for c in calls if c[2] == "OK"]
    refused = [c[1] for c in calls if c[2] == "RESOURCE_EXHAUSTED"]
    h2_latencies = [r[2] for r in h2load["rows"] if r[1] == 200]
    h2_failed = sum(1 for r in h2load["rows"] if r[1] != 200)
    growth = (rss_after - rss_before) / rss_before
    p99_limit = stack.wall_ms + P99_OVER_WALL_MS
    h2_p99 = percentile(h2_latencies, 0.99)
    notes = []
    failures = {k: v for k, v in sorted(delta.branches.items()) if not k.endswith(":success")}
    if failures:
        notes.append("branches: " + ", ".join(f"{k} {v}" for k, v in failures.items()))
    without = sum(1 for c in calls if c[2] == "OK" and not c[4])
    if without:
        notes.append(f"no directive in {without}/{len(ok_latencies)} sampled answers")
    if delta.shed:
        notes.append("shed: " + ", ".join(f"{k} {v}" for k, v in sorted(delta.shed.items())))
    if delta.directive_cache:
        notes.append("directive cache: " + ", ".join(f"{k} {v}" for k, v in sorted(delta.directive_cache.items())))
    if cancelled_at_end:
        notes.append(f"{cancelled_at_end} CANCELLED by h2load at its end")
    if h2_failed:
        notes.append(f"h2load: {h2_failed} failed streams")
    checks = [
        ("100% OK", answered > 0 and ok == answered and not h2_failed),
        (f"p99 <= {p99_limit:g} ms", h2_p99 <= p99_limit),
        ("RSS growth < 20%", growth < RSS_GROWTH_LIMIT),
    ]
    return {
        "row": name, "fault": what, "offered": args.rate, "sample_rate": args.sample_rate, "duration_s": duration_s,
        "achieved_ok_per_s": ok / duration_s, "answered": answered, "ok": ok,
        "ok_pct": 100.0 * ok / answered if answered else 0.0, "non_ok": non_ok, "cancelled_at_end": cancelled_at_end,
        "levels": {level: delta.levels.get(level, 0) for level in ("L0", "L1", "L2")},
        "branches": dict(sorted(delta.branches.items())), "shed": dict(delta.shed),
        "directive_cache": dict(sorted(delta.directive_cache.items())),
        "sampled": {"calls": len(calls), "ok": len(ok_latencies), "codes": dict(Counter(c[2] for c in calls)),
                    "p50_ms": percentile(ok_latencies, 0.5), "p99_ms": percentile(ok_latencies, 0.99),
                    "refused": len(refused), "refused_p50_ms": percentile(refused, 0.5),
                    "refused_max_ms": max(refused, default=float("nan")), "without_directive": without},
        "h2load": {"answered": len(h2_latencies), "failed_streams": h2_failed, "p50_ms": percentile(h2_latencies, 0.5),
                   "p99_ms": h2_p99, "summary": h2load["summary"]},
        "rss_before_mib": rss_before / 1024, "rss_after_mib": rss_after / 1024, "rss_growth_pct": 100.0 * growth,
        "marks_s": {k: round(v, 3) for k, v in marks.items()}, "notes": notes, "checks": checks,
        "timeline": timeline(h2load["rows"], calls, sampled["start"]),
        "sampled_calls": [[round(c[0] - sampled["start"], 3), round(c[1], 2), *c[2:]] for c in calls],
    }


def timeline(rows: list[tuple[float, int, float]], calls: list[list], start: float, step_s: float = 0.5) -> list[dict]:
    """Per ``step_s`` of the row (by start or due time): h2load's p50/p99/max and the sampled codes."""
    buckets: dict[int, dict[str, Any]] = {}
    for begun, status, latency in rows:
        bucket = buckets.setdefault(int((begun - start) // step_s), {"h2": [], "failed": 0, "sampled": Counter()})
        if status == 200:
            bucket["h2"].append(latency)
        else:
            bucket["failed"] += 1
    for call in calls:
        bucket = buckets.setdefault(int((call[0] - start) // step_s), {"h2": [], "failed": 0, "sampled": Counter()})
        bucket["sampled"][call[2] if call[2] != "OK" or call[4] else "OK_no_directive"] += 1
    return [{"t": round(index * step_s, 2), "h2load": len(b["h2"]), "p50": round(percentile(b["h2"], 0.5), 1),
             "p99": round(percentile(b["h2"], 0.99), 1), "max": round(max(b["h2"], default=float("nan")), 1),
             "failed": b["failed"], "sampled": dict(b["sampled"])} for index, b in sorted(buckets.items())]


def run_sigterm(stack: Stack) -> dict[str, Any]:
    """SIGTERM while loaded: NOT_SERVING, the drain delay still serving, then only UNAVAILABLE."""
    args = stack.args
    drain_s = args.drain_delay
    # INFO: every call that is not OK is logged with its code and time, until the process exits
    serve = start_serve(stack, "sigterm", {"IBEX_CONTEXT_DRAIN_DELAY": f"{drain_s:g}s", "IBEX_CONTEXT_LOG_LEVEL": "INFO"})
    try:
        warm_up(stack, serve, args.rate)
        rss_before, before, ticks = serve.rss_kib(), serve.metrics(), machine_ticks()
        start = time.time() + 1.0
        sampler = Sampler.start(stack, serve.grpc_addr, args.sample_rate, start, args.duration, health_interval_ms=50)
        wait_until(start)
        h2 = H2load.start(stack, serve.grpc_addr, args.rate - args.sample_rate, args.duration,
                          stack.h2load_log("sigterm"))
        sigterm_at = args.duration * 0.3
        wait_until(start + sigterm_at - 0.3)
        at_stop = serve.metrics()
        rss_after = serve.rss_kib()
        wait_until(start + sigterm_at)
        serve.process.send_signal(signal.SIGTERM)
        signalled = time.time()
        # the last counts before the listeners close: one scrape shortly before the drain delay ends
        # (scraping often would itself cost the loaded service CPU)
        wait_until(signalled + max(0.0, drain_s - 0.25))
        last, last_at = at_stop, time.time()
        try:
            last, last_at = serve.metrics(timeout_s=1.0), time.time()
        except OSError:
            pass
        exit_code = serve.process.wait(timeout=60)
        exited = time.time()
        h2load = h2.result(args.duration + 60)
        sampled = sampler.result(args.duration + 30)
        machine = machine_share(ticks)
    finally:
        serve.stop()
    stop_at = signalled + drain_s
    calls = sampled["calls"]
    phases = {
        "before SIGTERM": [c for c in calls if c[0] < signalled],
        "drain delay": [c for c in calls if signalled <= c[0] < stop_at],
        "after the stop": [c for c in calls if c[0] >= stop_at],
    }
    by_phase = {phase: dict(Counter(c[2] for c in group)) for phase, group in phases.items()}
    not_serving = next((at for at, status in sampled["health"] if at >= signalled and status != "SERVING"), None)
    first_unavailable = next((c[0] for c in calls if c[2] == "UNAVAILABLE"), None)
    row = summarize(stack, "sigterm", f"SIGTERM {sigterm_at:g} s in; drain delay {drain_s:g} s",
                    at_stop - before, h2load, sampled, rss_before, rss_after,
                    {"sigterm": signalled - start, "stop": stop_at - start, "last_scrape": last_at - start,
                     "exit": exited - start}, duration_s=sigterm_at - 0.3)
    during = last - at_stop
    logged = {"before SIGTERM": Counter(), "drain delay": Counter(), "after the stop": Counter()}
    for record in serve.log_records():
        if record.get("event") == "grpc_request" and record.get("method") == "AssembleContext" and record.get("ts"):
            at = datetime.fromisoformat(record["ts"]).timestamp()
            if at >= start:
                phase = "before SIGTERM" if at < signalled else "drain delay" if at < stop_at else "after the stop"
                logged[phase][record.get("code", "?")] += 1
    row["notes"] = [
        "sampled by phase: " + "; ".join(f"{phase}: {_codes(codes)}" for phase, codes in by_phase.items()),
        "service log, calls not OK by phase: " + "; ".join(f"{phase}: {_codes(codes)}" for phase, codes in logged.items()),
        f"/metrics from SIGTERM to the last scrape ({last_at - signalled:.2f} s later): {_codes(dict(during.codes))}",
        "health NOT_SERVING " + ("never seen" if not_serving is None else f"{not_serving - signalled:.2f} s after SIGTERM")
        + ("" if first_unavailable is None else f", first UNAVAILABLE {first_unavailable - signalled:.2f} s after it"),
        "h2load: " + ", ".join(f"{k} {v}" for k, v in h2load["summary"].items()), f"exit code {exit_code}",
        f"machine: {machine['busy_pct']:.0f}% busy, {machine['steal_pct']:.0f}% stolen",
    ]
    row["machine"] = machine
    row["sigterm"] = {
        "by_phase": by_phase, "metrics_before_sigterm": dict(at_stop.codes - before.codes),
        "metrics_after_sigterm": dict(during.codes), "logged_not_ok": {k: dict(v) for k, v in logged.items()},
        "sampled_calls_near_stop": [[round(c[0] - stop_at, 3), round(c[1], 1), c[2]] for c in calls
                                    if abs(c[0] - stop_at) < 0.5],
        "not_serving_after_s": None if not_serving is None else not_serving - signalled,
        "first_unavailable_after_s": None if first_unavailable is None else first_unavailable - signalled,
        "exit_code": exit_code,
    }
    row["checks"] = [
        ("NOT_SERVING within 0.5 s of SIGTERM, before any UNAVAILABLE", not_serving is not None
         and not_serving - signalled <= 0.5 and (first_unavailable is None or not_serving <= first_unavailable)),
        ("drain delay: every sampled call OK", bool(phases["drain delay"])
         and all(c[2] == "OK" for c in phases["drain delay"])),
        ("after the stop: nothing but OK or UNAVAILABLE", all(c[2] in ("OK", "UNAVAILABLE") for c in phases["after the stop"])),
        ("service log: no call other than OK from SIGTERM to the exit",
         not logged["drain delay"] and not logged["after the stop"]),
        ("exit code 0", exit_code == 0),
    ]
    row["verdict"] = "PASS" if all(ok for _, ok in row["checks"]) else "FAIL"
    return row


def keep_log(serve: Any, folder: str | None) -> None:
    """Copy the row's serve log (JSON lines) into ``folder`` (``--logs``), if one was given."""
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(serve.log, Path(folder) / serve.log.name)


@attrs.frozen
class Surge:
    """One drive of the overload pattern: half capacity, 2x for ``--duration`` s, half again."""

    start: float  # the sampled client's first due time (epoch s)
    sampled: dict[str, Any]
    steady: dict[str, Any]  # h2load at half capacity, the whole pattern
    surge: dict[str, Any]  # h2load adding the other 1.5x, the overload only
    at_surge: Any  # what ``scrape`` returned when the surge started, and when it ended
    at_end: Any
    surge_scraped: float
    end_scraped: float
    machine: dict[str, float]


def overload_rates(args: argparse.Namespace) -> tuple[float, float, float]:
    """(half capacity, 2x capacity, the sampled client's share) of the overload pattern, req/s."""
    half, over = args.capacity / 2, args.capacity * 2
    return half, over, max(args.sample_rate, 0.05 * over)


def during_surge(calls: list[list], run: Surge, args: argparse.Namespace) -> list[list]:
    """The sampled calls due while the surge ran."""
    start = run.start + OVERLOAD_EDGE_S
    return [c for c in calls if start <= c[0] < start + args.duration]


def drive_surge(stack: Stack, addr: str, scrape: Callable[[], Any]) -> Surge:
    args = stack.args
    half, over, sample_rate = overload_rates(args)
    edge, total = OVERLOAD_EDGE_S, OVERLOAD_EDGE_S * 2 + args.duration
    ticks = machine_ticks()
    start = time.time() + 1.0
    sampler = Sampler.start(stack, addr, sample_rate, start, total)
    wait_until(start)
    steady = H2load.start(stack, addr, half - sample_rate, total, stack.h2load_log("steady"))
    wait_until(start + edge)
    surge = H2load.start(stack, addr, over - half, args.duration, stack.h2load_log("surge"))
    at_surge, surge_scraped = scrape(), time.time()
    surge_result = surge.result(args.duration + 60)
    at_end, end_scraped = scrape(), time.time()
    steady_result = steady.result(total + 60)
    sampled = sampler.result(total + 30)
    return Surge(start, sampled, steady_result, surge_result, at_surge, at_end, surge_scraped, end_scraped,
                 machine_share(ticks))


def floor_surge(stack: Stack, response: Path) -> dict[str, Any]:
    """The same overload pattern against a canned grpc.aio server answering ``response``'s bytes:
    what the transport, the drivers and the sampled client alone give at that load, to read the
    service's figures against (the floor of "OK p99 < 40 ms" and "refused in < 5 ms")."""
    args = stack.args
    with floor_server(response, None, args) as (addr, _pid):
        h2load_run(stack, addr, args.capacity / 2, max(1.0, args.warmup))
        run = drive_surge(stack, addr, lambda: None)
    during = during_surge(run.sampled["calls"], run, args)
    ok = [c[1] for c in during if c[2] == "OK"]
    surge_all = [r[2] for r in run.surge["rows"] if r[1] == 200]
    return {"sampled_codes": dict(Counter(c[2] for c in during)), "ok_p50_ms": percentile(ok, 0.5),
            "ok_p99_ms": percentile(ok, 0.99), "h2load_surge_p50_ms": percentile(surge_all, 0.5),
            "h2load_surge_p99_ms": percentile(surge_all, 0.99), "machine": run.machine}


def run_overload(stack: Stack) -> dict[str, Any]:
    """2x capacity for ``--duration`` s between 3 s at half capacity before and after; then the
    same against the canned floor (``--no-floor``: not)."""
    args = stack.args
    half, over, sample_rate = overload_rates(args)
    edge = OVERLOAD_EDGE_S
    serve = start_serve(stack, "overload", {})
    try:
        warm_up(stack, serve, half)
        answer = stack.folder / "overload-answer.bin"
        answer.write_bytes(answer_bytes(stack, serve))
        rss_before, before = serve.rss_kib(), serve.metrics()
        run = drive_surge(stack, serve.grpc_addr, serve.metrics)
        time.sleep(0.5)
        after = serve.metrics()
        rss_after = serve.rss_kib()
    finally:
        serve.stop()
    keep_log(serve, args.logs)
    floor = None if args.no_floor else floor_surge(stack, answer)
    overload_from, overload_to = run.start + edge, run.start + edge + args.duration
    calls = run.sampled["calls"]
    pre = [c for c in calls if c[0] < overload_from]
    during = during_surge(calls, run, args)
    post = [c for c in calls if c[0] >= overload_to]
    normal_ms = max(OVERLOAD_P99_MS, percentile([c[1] for c in pre if c[2] == "OK"], 0.99))
    abnormal = [c[0] for c in post if c[2] != "OK" or c[1] > normal_ms]
    recovery_s = (max(abnormal) - overload_to) if abnormal else 0.0
    delta = run.at_end - run.at_surge
    ok_per_s = delta.codes["OK"] / (run.end_scraped - run.surge_scraped)
    ok_during = [c[1] for c in during if c[2] == "OK"]
    refused = [c[1] for c in during if c[2] == "RESOURCE_EXHAUSTED"]
    surge_all = [r[2] for r in run.surge["rows"] if r[1] == 200]
    whole = after - before
    codes_during = {k: v for k, v in sorted(delta.codes.items())}
    row = {
        "row": "overload", "fault": f"{over:g} req/s for {args.duration:g} s between {edge:g} s at {half:g} req/s",
        "capacity": args.capacity, "offered": over, "sample_rate": sample_rate, "duration_s": args.duration,
        "ok_per_s": ok_per_s, "ok_share_of_capacity": ok_per_s / args.capacity,
        "codes_during": codes_during, "codes_whole_row": dict(sorted(whole.codes.items())),
        "shed_during": dict(delta.shed), "levels_during": dict(delta.levels),
        "sampled": {"pre": dict(Counter(c[2] for c in pre)), "during": dict(Counter(c[2] for c in during)),
                    "post": dict(Counter(c[2] for c in post)), "ok_p50_ms": percentile(ok_during, 0.5),
                    "ok_p99_ms": percentile(ok_during, 0.99), "refused": len(refused),
                    "refused_p50_ms": percentile(refused, 0.5), "refused_p99_ms": percentile(refused, 0.99),
                    "refused_max_ms": max(refused, default=float("nan")), "normal_p99_ms": normal_ms},
        "h2load_surge": {"p50_ms": percentile(surge_all, 0.5), "p99_ms": percentile(surge_all, 0.99),
                         "summary": run.surge["summary"]},
        "h2load_steady_summary": run.steady["summary"],
        "recovery_s": recovery_s, "machine": run.machine, "floor": floor,
        "timeline": timeline(run.steady["rows"] + run.surge["rows"], calls, run.start),
        "rss_before_mib": rss_before / 1024, "rss_after_mib": rss_after / 1024,
        "rss_growth_pct": 100.0 * (rss_after - rss_before) / rss_before,
    }
    row["checks"] = [
        (f"OK answers/s >= {OVERLOAD_OK_SHARE:.0%} of capacity", row["ok_per_s"] >= OVERLOAD_OK_SHARE * args.capacity),
        (f"p99 of OK answers < {OVERLOAD_P99_MS:g} ms", row["sampled"]["ok_p99_ms"] < OVERLOAD_P99_MS),
        # refused by the service but none seen as refused by the sampled client: they reached it after its own
        # deadline (it saw DEADLINE_EXCEEDED), so they were not refused in time either
        (f"refused in < {REFUSED_LIMIT_MS:g} ms (p99)", (not refused and not codes_during.get("RESOURCE_EXHAUSTED"))
         or (bool(refused) and row["sampled"]["refused_p99_ms"] < REFUSED_LIMIT_MS)),
        (f"p99 back to normal within {RECOVERY_LIMIT_S:g} s", recovery_s <= RECOVERY_LIMIT_S),
        ("RSS growth < 20%", row["rss_growth_pct"] < 100 * RSS_GROWTH_LIMIT),
    ]
    row["verdict"] = "PASS" if all(ok for _, ok in row["checks"]) else "FAIL"
    return row


# ----------------------------------------------------------------------------------------------- output
def _ms(value: float) -> str:
    return "-" if value != value else f"{value:.1f}"  # NaN: no such calls


def _codes(codes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(codes.items())) or "-"


TABLE_HEADER = ("| row | fault | offered / OK req/s | OK % | L0 / L1 / L2 | non-OK by code | OK p50 / p99 ms (sampled) "
                "| p50 / p99 ms (h2load) | refused ms (p50 / max) | svc CPU ms/call | RSS MiB before → after (growth) "
                "| verdict |\n"
                "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")


def _verdict(r: dict[str, Any]) -> str:
    """PASS, or FAIL with the checks that failed."""
    failed = [label for label, ok in r["checks"] if not ok]
    return r["verdict"] + (f" ({'; '.join(failed)})" if failed else "")


def table_line(r: dict[str, Any], *, notes: bool = True) -> str:
    s, h, lv = r["sampled"], r["h2load"], r["levels"]
    refused = "-" if not s["refused"] else f"{_ms(s['refused_p50_ms'])} / {_ms(s['refused_max_ms'])} ({s['refused']})"
    verdict = _verdict(r)
    return (f"| {r['row']} | {r['fault']} | {r['offered']:g} / {r['achieved_ok_per_s']:.1f} | {r['ok_pct']:.2f} | "
            f"{lv['L0']} / {lv['L1']} / {lv['L2']} | {_codes(r['non_ok'])} | {_ms(s['p50_ms'])} / {_ms(s['p99_ms'])} "
            f"({s['ok']}) | {_ms(h['p50_ms'])} / {_ms(h['p99_ms'])} | {refused} | {_ms(r.get('cpu_ms_per_call', float('nan')))} "
            f"| {r['rss_before_mib']:.0f} → "
            f"{r['rss_after_mib']:.0f} ({r['rss_growth_pct']:+.1f}%) | {verdict} |"
            + (f"\n    {'; '.join(r['notes'])}" if notes and r["notes"] else ""))


OVERLOAD_HEADER = ("| capacity | offered | OK answers/s (share) | codes during the overload | OK p50 / p99 ms (sampled) "
                   "| refused p50 / p99 / max ms | h2load surge p50 / p99 ms | back to normal after | RSS growth "
                   "| machine busy / stolen | canned floor: OK p50 / p99 ms (sampled), h2load surge p99 ms | verdict |\n"
                   "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")


def overload_line(r: dict[str, Any]) -> str:
    s = r["sampled"]
    verdict = _verdict(r)
    return (f"| {r['capacity']:g} | {r['offered']:g} | {r['ok_per_s']:.1f} ({r['ok_share_of_capacity']:.0%}) | "
            f"{_codes(r['codes_during'])} (shed: {_codes(r['shed_during'])}) | {_ms(s['ok_p50_ms'])} / {_ms(s['ok_p99_ms'])} | "
            f"{_ms(s['refused_p50_ms'])} / {_ms(s['refused_p99_ms'])} / {_ms(s['refused_max_ms'])} ({s['refused']}) | "
            f"{_ms(r['h2load_surge']['p50_ms'])} / {_ms(r['h2load_surge']['p99_ms'])} | {r['recovery_s']:.2f} s "
            f"(normal: p99 <= {s['normal_p99_ms']:.1f} ms) | {r['rss_growth_pct']:+.1f}% | "
            f"{r['machine']['busy_pct']:.0f}% / {r['machine']['steal_pct']:.0f}% | {_floor(r['floor'])} | {verdict} |")


def _floor(floor: dict[str, Any] | None) -> str:
    if floor is None:
        return "-"
    return f"{_ms(floor['ok_p50_ms'])} / {_ms(floor['ok_p99_ms'])}, {_ms(floor['h2load_surge_p99_ms'])}"


def tree_version() -> str:
    """The commit the run used, and whether the tree had changes on top of it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True, check=False)
    return (head.stdout.strip() or "unknown") + (" + uncommitted changes" if dirty.stdout.strip() else "")


def markdown(rows: list[dict[str, Any]], stack: Stack) -> str:
    args = stack.args
    lines = [f"{time.strftime('%Y-%m-%d %H:%M')}, tree {tree_version()}, {os.cpu_count()} cores, grpc-timeout "
             f"{args.deadline_ms:g} ms, retrieval wall {stack.wall_ms:g} ms (from the settings).", ""]
    faults = [r for r in rows if r["row"] != "overload"]
    if faults:
        lines[0] += (f" {args.duration:g} s a row, {args.rate:g} req/s offered ({args.rate - args.sample_rate:g} by h2load "
                     f"over {args.connections} {args.arrivals} connections, {args.sample_rate:g} by the sampled client); p99 target "
                     f"{stack.wall_ms + P99_OVER_WALL_MS:g} ms; faults {min(args.fault_at, args.duration * 0.25):g} s into "
                     f"a row, cleared {min(args.clear_before, args.duration * 0.3):g} s before its end.")
        lines += [TABLE_HEADER, *(table_line(r, notes=False) for r in faults), "", "Per row:", ""]
        lines += [f"- **{r['row']}**: {'; '.join(r['notes'])}." for r in faults if r["notes"]]
    overload = [r for r in rows if r["row"] == "overload"]
    if overload:
        r = overload[0]
        lines += ["", f"Overload: {r['fault']}, {r['sample_rate']:g} req/s of it from the sampled client.", "",
                  OVERLOAD_HEADER, *(overload_line(r) for r in overload)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help=f"comma-separated rows, of: {', '.join(ALL_ROWS)} (all: every one)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds a row (the overload's length)")
    parser.add_argument("--capacity", type=float, default=100.0,
                        help="req/s one serve process sustains (about 100 on the 2-core build machine)")
    parser.add_argument("--rate", type=float, default=None, help="offered req/s (default: half the capacity)")
    parser.add_argument("--sample-rate", type=float, default=None,
                        help="req/s of the sampled client, part of the rate (default: 5%% of it, at least 5)")
    parser.add_argument("--deadline-ms", type=float, default=45.0, help="grpc-timeout of every call")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds at the row's rate before RSS is read")
    parser.add_argument("--fault-at", type=float, default=2.0, help="seconds into a row the fault starts")
    parser.add_argument("--clear-before", type=float, default=3.0, help="seconds before a row's end the fault ends")
    parser.add_argument("--drain-delay", type=float, default=2.0, help="IBEX_CONTEXT_DRAIN_DELAY of the sigterm row")
    parser.add_argument("--no-floor", action="store_true",
                        help="overload: skip the same drive against the canned floor server")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--arrivals", choices=ARRIVALS, default="staggered",
                        help="staggered: each connection its own h2load clock, calls spread evenly; aligned: one "
                             "h2load -c N, the connections' calls in bursts (bench/h2load_driver.py)")
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--hot-limit", type=int, default=50)
    parser.add_argument("--cold-limit", type=int, default=20)
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--logs", help="copy each row's serve log (JSON lines, stderr) into this folder")
    parser.add_argument("--markdown", help="write the markdown table here")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for the serve processes (repeatable)")
    args = parser.parse_args(argv)
    rows = [r.strip() for r in args.only.split(",") if r.strip()] or list(DEFAULT_ROWS)
    rows = [name for r in rows for name in (ALL_ROWS if r == "all" else (r,))]
    unknown = [r for r in rows if r not in ALL_ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ALL_ROWS)}")
    args.rate = args.capacity / 2 if args.rate is None else args.rate
    args.sample_rate = max(5.0, 0.05 * args.rate) if args.sample_rate is None else args.sample_rate
    if not 0 < args.sample_rate < args.rate:
        parser.error("--sample-rate must be > 0 and below --rate")
    args.h2load = ensure_h2load()
    results: list[dict[str, Any]] = []
    with ExitStack() as exits, tempfile.TemporaryDirectory(prefix="ibex-faults-") as folder:
        stack = Stack(exits, args, Path(folder))
        print(f"retrieval wall {stack.wall_ms:g} ms (from the settings); {args.rate:g} req/s offered, "
              f"{args.sample_rate:g} of them sampled; {args.duration:g} s a row; rows: {', '.join(rows)}", flush=True)
        for name in rows:
            began = time.monotonic()
            if name == "sigterm":
                row = run_sigterm(stack)
            elif name == "overload":
                row = run_overload(stack)
            else:
                row = run_fault_row(stack, name)
            stack.heal()
            results.append(row)
            print(f"{name}: {row['verdict']} in {time.monotonic() - began:.0f} s", flush=True)
            print("  " + (overload_line(row) if name == "overload" else table_line(row)), flush=True)
            for label, ok in row["checks"]:
                print(f"    {'ok  ' if ok else 'FAIL'} {label}", flush=True)
        table = markdown(results, stack)
    print("\n" + table, flush=True)
    if args.markdown:
        Path(args.markdown).write_text(table)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": results}, indent=1, default=str))


if __name__ == "__main__":
    main()
