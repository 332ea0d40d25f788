"""Hostile HTTP bodies against ``ibex-context serve``: /healthz latency, RSS, and 500s.

    .venv/bin/python -m bench.hostile_http [--bodies 10000] [--rounds 3] [--senders 4]

Starts one ``serve`` process (embedded backend, loopback ports), then:

1. for each hostile shape, ``--senders`` clients send a maximum-size body (just under
   AssembleContext's limit, or past it for the 413 shape) ``--rounds`` times each, while a prober
   asks ``GET /healthz`` every 5 ms on its own connection: /healthz p50 and max per shape (target:
   max < 250 ms), and the status every big body got;
2. the server's RSS before, its peak (VmHWM) and after;
3. ``--bodies`` hostile requests drawn from ``tests.support.hostile_http.hostile_requests``
   (hypothesis: random JSON, wrong types, huge numbers, deep nesting, surrogates, unknown and doubled
   fields, random bytes, wrong content types, methods and paths), one after another: how many were
   answered 500 (target: 0) and how many broke the error shape.

Loopback only; every loop is bounded (the shapes by ``--rounds``, the bodies by ``--bodies``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
from hypothesis import HealthCheck, Phase, given, settings

from entrypoints.http_api.limits import ASSEMBLE_BODY_LIMIT
from tests.support.hostile_http import check_error_shape, dumps, hostile_requests, valid_assemble
from tests.support.redis_server import free_port

REPO = Path(__file__).resolve().parent.parent
ASSEMBLE = "/v1/context:assemble"
HEALTH_TARGET_MS = 250.0
JSON_HEADERS = {"content-type": "application/json"}
CHUNKED = "over the limit, chunked (413)"  # no Content-Length: refused while reading


def _shapes() -> dict[str, bytes]:
    room = ASSEMBLE_BODY_LIMIT - 1024
    escaped = valid_assemble()
    escaped["orgId"] = "not-a-uuid"  # refused only after every byte is decoded: the most work a refusal costs
    escaped["recentMessages"] = [{"role": "user", "content": "\u00e9" * 32768} for _ in range(100)]
    escaped["toolSchemas"] = ["\u00e9" * 8192] * 64
    return {
        "unknown field {x: [{},...]}": b'{"x": [' + b"{}," * (room // 3) + b"{}]}",
        "101+ messages [{},...]": b'{"recentMessages": [' + b"{}," * (room // 3) + b"{}]}",
        "nested [[[...": b'{"query": ' + b"[" * room + b"}",
        "whitespace padding": b'{"model": ' + b" " * room + b'"x", "orgId": "nope"}',
        "escaped max, bad orgId": dumps(escaped),
        "over the limit (413)": b'{"query": "' + b"a" * (ASSEMBLE_BODY_LIMIT + 1024 * 1024) + b'"}',
        CHUNKED: b'{"query": "' + b"a" * (ASSEMBLE_BODY_LIMIT + 1024 * 1024) + b'"}',
    }


class Server:
    def __init__(self, data_dir: Path) -> None:
        self.http = f"127.0.0.1:{free_port()}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("IBEX_CONTEXT_")}
        env.update({"IBEX_CONTEXT_GRPC_ADDR": f"127.0.0.1:{free_port()}", "IBEX_CONTEXT_HTTP_ADDR": self.http,
                    "IBEX_CONTEXT_DATA_PATH": str(data_dir / "ibex.db"), "IBEX_CONTEXT_LOG_LEVEL": "WARNING"})
        self.process = subprocess.Popen([sys.executable, "-m", "entrypoints.cli", "serve"], cwd=REPO, env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://{self.http}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit("serve exited during start-up")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit("serve did not become ready within 60 s")

    def memory(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) in MB."""
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines())
        return tuple(int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM"))  # type: ignore[return-value]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


# The prober is a process of its own, so that the senders' work in this one never delays it.
_PROBE = """
import http.client, json, signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
connection = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=30)
latencies = []
print("ready", flush=True)
while not stop:
    started = time.perf_counter()
    connection.request("GET", "/healthz")
    answer = connection.getresponse()
    answer.read()
    assert answer.status == 200, answer.status
    latencies.append((time.perf_counter() - started) * 1000)
    time.sleep(0.005)
print(json.dumps(latencies), flush=True)
"""


class Prober:
    def __init__(self, http_addr: str) -> None:
        host, _, port = http_addr.rpartition(":")
        self.process = subprocess.Popen([sys.executable, "-c", _PROBE, host, port], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "ready"

    def stop(self) -> list[float]:
        self.process.send_signal(signal.SIGTERM)
        output, _ = self.process.communicate(timeout=60)
        return json.loads(output.strip().splitlines()[-1])


def _chunks(body: bytes, size: int = 1 << 20) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


def _request_bytes(body: bytes, chunked: bool) -> bytes:
    head = f"POST {ASSEMBLE} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    if not chunked:
        return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    framed = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in _chunks(body))
    return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + framed + b"0\r\n\r\n"


def _send(http_addr: str, request: bytes, rounds: int, statuses: list[int]) -> None:
    """Raw sockets (one connection a body): the senders cost this process as little CPU as possible."""
    host, _, port = http_addr.rpartition(":")
    for _ in range(rounds):
        with socket.create_connection((host, int(port)), timeout=120) as sock:
            try:
                sock.sendall(request)
                answer = sock.recv(65536)
                statuses.append(int(answer.split(b" ", 2)[1]))
            except OSError as exc:  # a refused body the server stopped reading
                statuses.append(-1)
                print(f"    send failed: {type(exc).__name__}", file=sys.stderr)


def run_shape(server: Server, body: bytes, senders: int, rounds: int,
              chunked: bool = False) -> tuple[list[float], Counter[int], float]:
    request = _request_bytes(body, chunked)
    statuses: list[int] = []
    prober = Prober(server.http)
    time.sleep(0.05)
    started = time.perf_counter()
    threads = [threading.Thread(target=_send, args=(server.http, request, rounds, statuses)) for _ in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return prober.stop(), Counter(statuses), elapsed


def run_hostile(url: str, count: int) -> tuple[Counter[int], int, list[str]]:
    statuses: Counter[int] = Counter()
    broken: list[str] = []
    client = httpx.Client(base_url=url, timeout=30)

    @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(request=hostile_requests())
    def send(request) -> None:  # type: ignore[no-untyped-def]
        response = request.send(client)
        statuses[response.status_code] += 1
        try:
            check_error_shape(response)
        except (AssertionError, ValueError, KeyError) as exc:
            broken.append(f"{request.method} {request.path} {request.body[:60]!r}: {exc!s:.200}")

    try:
        send()
    finally:
        client.close()
    return statuses, statuses[500], broken


def _percentiles(values: list[float]) -> tuple[float, float]:
    return (statistics.median(values), max(values)) if values else (0.0, 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.hostile_http", description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=10_000, help="hostile requests to send (default 10000)")
    parser.add_argument("--rounds", type=int, default=3, help="maximum-size bodies per sender and shape (default 3)")
    parser.add_argument("--senders", type=int, default=4, help="concurrent senders of maximum-size bodies (default 4)")
    args = parser.parse_args(argv)
    shapes = _shapes()
    with tempfile.TemporaryDirectory(prefix="ibex-hostile-") as tmp:
        server = Server(Path(tmp))
        try:
            return _report(server, shapes, args)
        finally:
            server.stop()


def _report(server: Server, shapes: dict[str, bytes], args: argparse.Namespace) -> int:
    rss_start, _ = server.memory()
    idle: list[float] = []
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for _ in range(200):
            started = time.perf_counter()
            client.get("/healthz")
            idle.append((time.perf_counter() - started) * 1000)
    p50, worst = _percentiles(idle)
    print(f"ibex-context serve (embedded backend), AssembleContext body limit {ASSEMBLE_BODY_LIMIT:,} bytes")
    print(f"RSS at start {rss_start:.0f} MB; /healthz idle p50 {p50:.2f} ms, max {worst:.2f} ms\n")
    print(f"{args.senders} senders x {args.rounds} maximum-size bodies each, /healthz probed every 5 ms meanwhile")
    print(f"{'shape':<30} {'MB':>6} {'answers':<22} {'s':>6} {'probes':>7} {'p50 ms':>8} {'max ms':>8}")
    worst_all = 0.0
    for name, body in shapes.items():
        latencies, statuses, elapsed = run_shape(server, body, args.senders, args.rounds, name == CHUNKED)
        p50, worst = _percentiles(latencies)
        worst_all = max(worst_all, worst)
        answers = " ".join(f"{status}x{n}" for status, n in sorted(statuses.items()))
        print(f"{name:<30} {len(body) / 1e6:6.1f} {answers:<22} {elapsed:6.2f} {len(latencies):7d} {p50:8.2f} {worst:8.2f}")
    rss_after_big, peak = server.memory()
    print(f"\nRSS: start {rss_start:.0f} MB, peak {peak:.0f} MB, after the big bodies {rss_after_big:.0f} MB")
    started = time.perf_counter()
    statuses, errors_500, broken = run_hostile(server.url, args.bodies)
    elapsed = time.perf_counter() - started
    rss_end, peak = server.memory()
    total = sum(statuses.values())
    print(f"\n{total} hostile requests in {elapsed:.1f} s: "
          + ", ".join(f"{status}: {n}" for status, n in sorted(statuses.items())))
    print(f"500s: {errors_500}; answers outside the JSON error shape: {len(broken)}")
    for line in broken[:10]:
        print(f"  {line}")
    print(f"RSS at the end {rss_end:.0f} MB (peak {peak:.0f} MB)")
    passed = worst_all < HEALTH_TARGET_MS and errors_500 == 0 and not broken and total >= args.bodies
    print(f"\ntargets: /healthz max {worst_all:.1f} ms (< {HEALTH_TARGET_MS:g}), 500s {errors_500} (0): "
          f"{'met' if passed else 'NOT met'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
