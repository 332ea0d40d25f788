"""The loopback memory service as a separate process (benchmarks, load tests).

``python -m tests.support.memory_server --port 0 --hot-latency-ms 2 --cold-latency-ms 10
--seed-demo 100`` prints one JSON line (base_url, token, org_id, agent_id) and serves until
SIGTERM/SIGINT. ``MemoryServerProcess.launch(...)`` does that from Python.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import attrs
import uvloop

from tests.support.memory_server.records import NAMESPACE
from tests.support.memory_server.server import MemoryServer

DEMO_ORG_ID = str(uuid.uuid5(NAMESPACE, "demo-org"))
DEMO_AGENT_ID = str(uuid.uuid5(NAMESPACE, "demo-agent"))
DEMO_TOKEN = "demo-token"
_WORDS = ("dark", "mode", "theme", "python", "deploy", "budget", "weekly", "report", "coffee",
          "meeting", "invoice", "travel", "latency", "cache", "review", "friday")


def seed_demo(server: MemoryServer, count: int, *, seed: int = 7) -> None:
    """Register DEMO_TOKEN for DEMO_ORG_ID and ``count`` deterministic memories of DEMO_AGENT_ID."""
    rng = random.Random(seed)
    server.add_token(DEMO_TOKEN, DEMO_ORG_ID)
    server.add_agent(DEMO_ORG_ID, DEMO_AGENT_ID)
    for i in range(count):
        text = " ".join(rng.choice(_WORDS) for _ in range(12))
        server.add_memory(DEMO_ORG_ID, DEMO_AGENT_ID, f"memory {i}: {text}",
                          id=str(uuid.uuid5(NAMESPACE, f"demo-{i}")), confidence=round(rng.random(), 3),
                          hot_score=round(rng.random(), 4), category=rng.choice(("factual", "preference")))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Loopback memory service (tests, benchmarks)")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--hot-latency-ms", type=float, default=0.0)
    parser.add_argument("--cold-latency-ms", type=float, default=0.0)
    parser.add_argument("--feedback-latency-ms", type=float, default=0.0)
    parser.add_argument("--seed-demo", type=int, default=0, metavar="N", help="memories for the demo tenant")
    args = parser.parse_args(argv)
    server = MemoryServer(loop_factory=uvloop.new_event_loop)  # a process of its own: the cheaper loop
    seed_demo(server, args.seed_demo)
    server.set_latency("hot", args.hot_latency_ms)
    server.set_latency("search", args.cold_latency_ms)
    server.set_latency("feedback", args.feedback_latency_ms)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start(port=args.port)
    print(json.dumps({"base_url": server.base_url, "token": DEMO_TOKEN, "org_id": DEMO_ORG_ID,
                      "agent_id": DEMO_AGENT_ID}), flush=True)
    while not stop.wait(0.2):
        continue
    server.stop()


@attrs.define
class MemoryServerProcess:
    """The server in a child process; ``close()`` stops it. Args are main()'s command line."""

    process: subprocess.Popen
    base_url: str
    token: str
    org_id: str
    agent_id: str

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
        return cls(process, info["base_url"], info["token"], info["org_id"], info["agent_id"])

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        if self.process.stdout:
            self.process.stdout.close()
