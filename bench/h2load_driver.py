"""h2load as the open-loop driver of ``bench.load`` and ``bench.faults``: the command, the arrivals, the log.

h2load's ``--rps`` is a rate per connection, and every connection of one h2load process starts its
clock when it connects, all within a millisecond of each other: with ``-c 4`` the calls come in
**bursts of four** at the same instant, a quarter of the rate apart. That is not what an offered
rate means, nor what the proxy sends (its replicas' connections are independent), and a burst of
four assemblies makes the fourth wait for three others' CPU: at 60 req/s here it moved the
service's p99 from 28-38 ms (spread) to 47-52 ms (bursts), with 15-57 DEADLINE_EXCEEDED of 1,200
instead of 0-1 (docs/PERFORMANCE.md, "Arrivals").

So by default (``staggered``) each connection is an h2load process of its own (``-c 1``), the
next started ``1 / rate`` seconds after the previous one: the connections keep their own clocks
and the calls arrive evenly spread over the same number of connections. ``aligned`` is the one
process with ``-c N`` (the bursts), kept to compare with.

Each process writes its own per-request log (start µs, HTTP status, latency µs); ``result`` merges
them and adds up h2load's summaries.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

ARRIVALS = ("staggered", "aligned")
STREAMS_PER_CONNECTION = 64  # h2load's -m: enough that the open loop never waits for a free stream
METHOD_PATH = "/ibex.context.v1.ContextAssemblyService/AssembleContext"
SUMMARY_KEYS = ("total", "started", "done", "succeeded", "failed", "errored", "timeout")
_SUMMARY = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                      r"(\d+) errored, (\d+) timeout")


@attrs.frozen
class Target:
    """What every call posts, and where."""

    h2load: str  # the binary
    addr: str  # host:port of the gRPC server
    body: Path  # the length-prefixed request
    deadline_ms: float = 0.0  # grpc-timeout sent (0: none)


def commands(target: Target, rate: float, duration_s: float, connections: int, arrivals: str,
             logs: Sequence[Path]) -> list[list[str]]:
    """The h2load command lines of one run: one per connection (staggered) or one in all (aligned)."""
    if arrivals not in ARRIVALS:
        raise ValueError(f"arrivals must be one of {', '.join(ARRIVALS)}, got {arrivals!r}")
    if connections < 1 or rate <= 0:
        raise ValueError(f"need at least one connection and a positive rate, got {connections} and {rate!r}")
    processes = connections if arrivals == "staggered" else 1
    if len(logs) != processes:
        raise ValueError(f"{processes} log paths needed, got {len(logs)}")
    per_process = connections // processes
    headers = grpc_headers(target.deadline_ms)
    return [[target.h2load, f"http://{target.addr}{METHOD_PATH}", "-d", str(target.body), "-c", str(per_process),
             "-m", str(STREAMS_PER_CONNECTION), f"--rps={rate / connections:g}", "-D", f"{duration_s:g}",
             f"--log-file={log}", *headers] for log in logs]


def grpc_headers(deadline_ms: float = 0.0) -> list[str]:
    """h2load's ``-H`` arguments of a gRPC call (``grpc-timeout`` only with a deadline)."""
    headers = ["-H", "content-type: application/grpc", "-H", "te: trailers"]
    if deadline_ms:
        headers += ["-H", f"grpc-timeout: {int(deadline_ms)}m"]
    return headers


@attrs.frozen
class Request:
    start_s: float  # epoch seconds
    status: int  # HTTP status (h2load sees no gRPC status)
    latency_ms: float


@attrs.frozen
class Outcome:
    requests: tuple[Request, ...]  # in order of start, over every connection
    exit_code: int  # the first non-zero exit code of the processes, else 0
    summary: dict[str, int]  # h2load's "requests:" line, added up ({} if a process printed none)
    output: str  # what the processes printed, one after the other


@attrs.define
class H2loadRun:
    """A running open-loop run; ``result`` waits for it."""

    processes: list[subprocess.Popen[str]]
    logs: list[Path]

    @classmethod
    def start(cls, target: Target, rate: float, duration_s: float, *, connections: int, arrivals: str,
              log_stem: Path) -> H2loadRun:
        processes = connections if arrivals == "staggered" else 1
        logs = [log_stem.with_name(f"{log_stem.name}-{i}.log") for i in range(processes)]
        lines = commands(target, rate, duration_s, connections, arrivals, logs)
        running: list[subprocess.Popen[str]] = []
        try:
            for i, line in enumerate(lines):
                if i:
                    time.sleep(1.0 / rate)  # the next connection's clock starts one call later
                running.append(subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        except BaseException:
            for process in running:
                process.kill()
                process.communicate()
            raise
        return cls(running, logs)

    def result(self, timeout_s: float) -> Outcome:
        deadline = time.monotonic() + timeout_s
        outputs, codes = [], []
        for process in self.processes:
            try:
                out, _ = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                out, _ = process.communicate()
            outputs.append(out or "")
            codes.append(process.returncode)
        requests = []
        for log in self.logs:
            if log.exists():
                requests.extend(parse_log(log.read_text()))
            log.unlink(missing_ok=True)
        requests.sort(key=lambda r: r.start_s)
        summaries = [_SUMMARY.search(out) for out in outputs]
        summary = ({key: sum(int(s.group(i + 1)) for s in summaries if s) for i, key in enumerate(SUMMARY_KEYS)}
                   if all(summaries) else {})
        return Outcome(tuple(requests), next((c for c in codes if c), 0), summary, "\n".join(outputs))


def parse_log(text: str) -> list[Request]:
    """The requests of one h2load ``--log-file``: start (µs since the epoch), HTTP status, latency (µs), tab-separated."""
    requests = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) >= 3:
            requests.append(Request(int(fields[0]) / 1e6, int(fields[1]), int(fields[2]) / 1000.0))
    return requests
