"""The loopback memory service as a separate process (benchmarks, load tests).

``python -m tests.support.memory_server --port 0 --hot-latency-ms 2 --cold-latency-ms 10
--seed-demo 100`` prints one JSON line (base_url, token, org_id, agent_id, admin_url) and serves
until SIGTERM/SIGINT. ``MemoryServerProcess.launch(...)`` does that from Python.

Runtime control (``admin_url``, loopback only, on a port of its own: ``--admin-port``, 0 a free
one): the fault switches of the running process, for benchmarks that break the stand-in under load.

* ``POST /faults/<operation>`` with a JSON object of the method's keyword arguments, for the
  operations in ``ADMIN_OPERATIONS`` (``FaultSwitches`` methods of the same name), e.g.
  ``/faults/set_latency {"endpoint": "hot", "ms": 32}``, ``/faults/force_status {"endpoint":
  "search", "status": 503, "ratio": 0.5}``, ``/faults/huge_body {"endpoint": "hot", "size_bytes":
  52428800, "declared": false}``, ``/faults/clear_faults {}``. 200 ``{"ok": true}``; 400
  ``{"error": ...}`` for arguments the method refuses; 404 for an unknown operation.
  ``clear_faults`` goes back to the start-up state: the command line's latencies stay.
* ``GET /stats``: ``{"connections_accepted": N}``.

``MemoryServerProcess.fault(operation, **kwargs)`` and ``.stats()`` call them.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import uvloop

from tests.support.memory_server.demo_corpus import CORPORA, demo_text
from tests.support.memory_server.records import NAMESPACE
from tests.support.memory_server.server import MemoryServer

DEMO_ORG_ID = str(uuid.uuid5(NAMESPACE, "demo-org"))
DEMO_AGENT_ID = str(uuid.uuid5(NAMESPACE, "demo-agent"))
DEMO_TOKEN = "demo-token"
ADMIN_OPERATIONS = ("set_latency", "force_status", "malform_body", "reset_connections", "huge_body",
                    "clear_faults")
_ADMIN_BODY_LIMIT = 64 * 1024
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy


def seed_demo(server: MemoryServer, count: int, *, seed: int = 7, corpus: str = "varied") -> None:
    """Register DEMO_TOKEN for DEMO_ORG_ID and ``count`` deterministic memories of DEMO_AGENT_ID,
    their texts from ``corpus`` (see demo_corpus)."""
    rng = random.Random(seed)
    server.add_token(DEMO_TOKEN, DEMO_ORG_ID)
    server.add_agent(DEMO_ORG_ID, DEMO_AGENT_ID)
    for i in range(count):
        text = demo_text(corpus, rng)
        server.add_memory(DEMO_ORG_ID, DEMO_AGENT_ID, f"memory {i}: {text}",
                          id=str(uuid.uuid5(NAMESPACE, f"demo-{i}")), confidence=round(rng.random(), 3),
                          hot_score=round(rng.random(), 4), category=rng.choice(("factual", "preference")))


class AdminServer:
    """The loopback-only control channel: HTTP on a thread of its own, calling the fault switches.

    ``baseline`` re-applies the start-up state after ``clear_faults`` (the command line's latencies).
    """

    def __init__(self, server: MemoryServer, baseline: Callable[[], None], port: int = 0) -> None:
        self._server = server
        self._baseline = baseline
        self._http = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._http.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.1,), name="memory-admin",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        if self._thread is not None:
            self._thread.join(5.0)

    def apply(self, operation: str, arguments: dict[str, Any]) -> None:
        """Call one fault switch. Raises ValueError (an unknown operation or a refused value) or
        TypeError (arguments the method does not take)."""
        if operation not in ADMIN_OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; expected one of {list(ADMIN_OPERATIONS)}")
        getattr(self._server, operation)(**arguments)
        if operation == "clear_faults":
            self._baseline()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        admin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
                return  # quiet: the benchmark's output is its own

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if not self._loopback():
                    return
                if self.path == "/stats":
                    self._answer(200, {"connections_accepted": admin._server.connections_accepted})
                else:
                    self._answer(404, {"error": f"unknown path {self.path!r}"})

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                if not self._loopback():
                    return
                prefix, _, operation = self.path.partition("/faults/")
                if prefix or operation not in ADMIN_OPERATIONS:
                    self._answer(404, {"error": f"POST /faults/<operation>, one of {list(ADMIN_OPERATIONS)}; "
                                                f"got {self.path!r}"})
                    return
                declared = self.headers.get("Content-Length") or "0"
                length = int(declared) if declared.isdigit() else -1
                if not 0 <= length <= _ADMIN_BODY_LIMIT:
                    self.close_connection = True
                    self._answer(413, {"error": f"a body of at most {_ADMIN_BODY_LIMIT} bytes"})
                    return
                try:
                    arguments = json.loads(self.rfile.read(length) or b"{}")
                    if not isinstance(arguments, dict):
                        raise ValueError("the body must be a JSON object of keyword arguments")
                    admin.apply(operation, arguments)
                except (TypeError, ValueError) as exc:
                    self._answer(400, {"error": f"{operation}: {exc}"})
                else:
                    self._answer(200, {"ok": True})

            def _loopback(self) -> bool:
                if ipaddress.ip_address(self.client_address[0]).is_loopback:
                    return True
                self._answer(403, {"error": "loopback only"})
                return False

            def _answer(self, status: int, payload: dict[str, object]) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Loopback memory service (tests, benchmarks)")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--admin-port", type=int, default=0,
                        help="the control channel's port (0: a free one, printed as admin_url)")
    parser.add_argument("--hot-latency-ms", type=float, default=0.0)
    parser.add_argument("--cold-latency-ms", type=float, default=0.0)
    parser.add_argument("--feedback-latency-ms", type=float, default=0.0)
    parser.add_argument("--seed-demo", type=int, default=0, metavar="N", help="memories for the demo tenant")
    parser.add_argument("--corpus", choices=CORPORA, default="varied", help="the demo memories' texts (demo_corpus)")
    args = parser.parse_args(argv)
    server = MemoryServer(loop_factory=uvloop.new_event_loop)  # a process of its own: the cheaper loop
    seed_demo(server, args.seed_demo, corpus=args.corpus)

    def baseline() -> None:
        server.set_latency("hot", args.hot_latency_ms)
        server.set_latency("search", args.cold_latency_ms)
        server.set_latency("feedback", args.feedback_latency_ms)

    baseline()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start(port=args.port)
    admin = AdminServer(server, baseline, args.admin_port)
    admin.start()
    print(json.dumps({"base_url": server.base_url, "token": DEMO_TOKEN, "org_id": DEMO_ORG_ID,
                      "agent_id": DEMO_AGENT_ID, "admin_url": admin.url}), flush=True)
    while not stop.wait(0.2):
        continue
    admin.stop()
    server.stop()


@attrs.define
class MemoryServerProcess:
    """The server in a child process; ``close()`` stops it. Args are main()'s command line."""

    process: subprocess.Popen
    base_url: str
    token: str
    org_id: str
    agent_id: str
    admin_url: str = ""

    @classmethod
    def launch(cls, *args: str) -> MemoryServerProcess:
        root = Path(__file__).resolve().parents[3]
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.memory_server", *args],
            cwd=root, stdout=subprocess.PIPE, text=True)
        line = process.stdout.readline() if process.stdout else ""
        if not line:
            process.kill()
            raise RuntimeError(f"memory server process did not start (exit {process.wait()})")
        info = json.loads(line)
        return cls(process, info["base_url"], info["token"], info["org_id"], info["agent_id"], info["admin_url"])

    def fault(self, operation: str, **arguments: object) -> None:
        """Flip one fault switch of the running process (see ADMIN_OPERATIONS).

        Raises:
            ValueError: the process refused it (unknown operation or bad arguments; its message).
        """
        request = urllib.request.Request(f"{self.admin_url}/faults/{operation}", data=json.dumps(arguments).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        try:
            with _LOOPBACK.open(request, timeout=10):
                return
        except urllib.error.HTTPError as exc:
            raise ValueError(json.loads(exc.read() or b"{}").get("error", f"HTTP {exc.code}")) from None

    def stats(self) -> dict[str, Any]:
        with _LOOPBACK.open(f"{self.admin_url}/stats", timeout=10) as answer:
            return json.loads(answer.read())

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        if self.process.stdout:
            self.process.stdout.close()
