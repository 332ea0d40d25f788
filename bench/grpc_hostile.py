"""Hostile gRPC input against one ``ibex-context serve`` process: server RSS and ``/healthz`` latency.

The service runs as a subprocess (embedded backend, signed principals required, a fresh key file)
so that its resident set is measured alone: ``VmRSS`` from ``/proc/<pid>/status`` before a
scenario, its peak while the scenario runs (sampled every 5 ms) and 1 s after it. A second
thread asks ``GET /healthz`` every 20 ms and reports the slowest answer: a blocked event loop
shows there.

Scenarios (issue 13):

* ``unauth-assemble``: 12 unauthenticated AssembleContext calls of ~14 MB (1M tiny messages),
  one after another;
* ``unauth-search``: 4 parallel unauthenticated SearchMemories calls of ~8.9 MB (1M tags), twice;
* ``auth-assemble``: the 12 calls of the first scenario with a valid proof (the body is read,
  refused by the shape walk before it is decoded).

``--open`` runs the server without principal keys (loopback, no authentication): every call
then reaches the request reader, so the scenarios measure the shape walk and the limits.

``--source DIR`` runs the server from another checkout (e.g. ``git archive HEAD | tar -x -C DIR``)
to compare with the code before a change; the client always comes from this one.

    .venv/bin/python -m bench.grpc_hostile [--calls 12] [--messages 1000000] [--open] [--source DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import grpc

from contracts.ibex.context.v1 import context_pb2 as pb
from tests.support.principal_proofs import context, ed_entry, ed_proof, write_key_file

REPO = Path(__file__).resolve().parents[1]
ORG = "0b5f6a1e-7c4d-4e2a-9f3b-1a2b3c4d5e6f"
AGENT = "4a3b2c1d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
SERVICE = "/ibex.context.v1.ContextAssemblyService"
PROOF_KEY = "ibex-principal-proof-bin"
CHANNEL_OPTIONS = (("grpc.max_send_message_length", 64 * 1024 * 1024),
                   ("grpc.max_receive_message_length", 64 * 1024 * 1024))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@contextmanager
def serving(source: Path, keys: Path | None, data: Path) -> Iterator[tuple[subprocess.Popen, str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IBEX_CONTEXT_")}
    env.update({"IBEX_CONTEXT_GRPC_ADDR": "127.0.0.1:0", "IBEX_CONTEXT_HTTP_ADDR": "127.0.0.1:0",
                "IBEX_CONTEXT_DATA_PATH": str(data), "IBEX_CONTEXT_PRINCIPAL_KEYS": str(keys or ""),
                "IBEX_CONTEXT_LOG_LEVEL": "WARNING", "PYTHONPATH": str(source)})
    process = subprocess.Popen([sys.executable, "-m", "entrypoints.cli", "serve"], cwd=source, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    grpc_target = http_url = ""
    try:
        while not (grpc_target and http_url):
            line = process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise RuntimeError(f"serve exited: {process.wait()}")
            if line.startswith("ibex-context: gRPC listening on "):
                grpc_target = line.rsplit(" ", 1)[1].strip()
            elif line.startswith("ibex-context: HTTP listening on "):
                http_url = line.rsplit(" ", 1)[1].strip()
        yield process, grpc_target, http_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Watch:
    """Peak RSS of ``pid`` and the slowest ``/healthz`` while running."""

    def __init__(self, pid: int, healthz: str) -> None:
        self.pid, self.healthz = pid, healthz
        self.peak_mb = rss_mb(pid)
        self.slowest_ms = 0.0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._sample), threading.Thread(target=self._probe)]

    def __enter__(self) -> Watch:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak_mb = max(self.peak_mb, rss_mb(self.pid))

    def _probe(self) -> None:
        while not self._stop.wait(0.02):
            started = time.perf_counter()
            with urllib.request.urlopen(self.healthz, timeout=30) as answer:
                answer.read()
            self.slowest_ms = max(self.slowest_ms, (time.perf_counter() - started) * 1000)


def assemble_body(messages: int) -> bytes:
    request = pb.AssembleContextRequest(org_id=ORG, agent_id=AGENT, model="gpt-4o", query="q")
    request.recent_messages.extend([pb.Message(role="user", content="hey!")] * messages)
    return request.SerializeToString()


def search_body(tags: int) -> bytes:
    return pb.SearchMemoriesRequest(org_id=ORG, agent_id=AGENT, query="q", tags=["tag1234"] * tags).SerializeToString()


def call(channel: grpc.Channel, method: str, body: bytes, metadata: tuple = ()) -> str:
    try:
        channel.unary_unary(f"{SERVICE}/{method}")(body, metadata=metadata, timeout=60)
    except grpc.RpcError as error:
        return error.code().name  # type: ignore[attr-defined]
    return "OK"


def run(name: str, process: subprocess.Popen, http_url: str, work: Callable[[], list[str]]) -> None:
    time.sleep(1.0)
    before = rss_mb(process.pid)
    with Watch(process.pid, f"{http_url}/healthz") as watch:
        codes = work()
    time.sleep(1.0)
    after = rss_mb(process.pid)
    print(f"{name:<16} {before:>8.1f} {watch.peak_mb:>8.1f} {watch.peak_mb - before:>+9.1f} {after:>8.1f} "
          f"{after - before:>+8.1f} {watch.slowest_ms:>11.1f}  {','.join(sorted(set(codes)))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--tags", type=int, default=1_000_000)
    parser.add_argument("--source", type=Path, default=REPO, help="the checkout the server runs from")
    parser.add_argument("--open", action="store_true", help="no principal keys: no caller authentication")
    args = parser.parse_args()
    assemble, search = assemble_body(args.messages), search_body(args.tags)
    with tempfile.TemporaryDirectory() as tmp:
        keys = None if args.open else write_key_file(Path(tmp) / "keys.json", ed_entry("ed-1"))
        with serving(args.source, keys, Path(tmp) / "ibex.db") as (process, target, http_url), \
                grpc.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
            print(f"server from {args.source}{' without authentication' if args.open else ''}; AssembleContext body {len(assemble) / 1e6:.1f} MB, "
                  f"SearchMemories body {len(search) / 1e6:.1f} MB")
            print(f"{'scenario':<16} {'rss MB':>8} {'peak':>8} {'growth':>9} {'after':>8} {'kept':>8} "
                  f"{'healthz ms':>11}  codes")
            call(channel, "AssembleContext", b"")  # warm up

            def proof() -> tuple:
                return ((PROOF_KEY, ed_proof(context(org_id=ORG, agent_id=AGENT, issued_at=datetime.now(UTC)))),)

            prefix = "open" if args.open else "unauth"
            run(f"{prefix}-assemble", process, http_url,
                lambda: [call(channel, "AssembleContext", assemble) for _ in range(args.calls)])
            with ThreadPoolExecutor(4) as pool:
                run(f"{prefix}-search", process, http_url,
                    lambda: list(pool.map(lambda _: call(channel, "SearchMemories", search), range(8))))
            if not args.open:
                run("auth-assemble", process, http_url,
                    lambda: [call(channel, "AssembleContext", assemble, proof()) for _ in range(args.calls)])


if __name__ == "__main__":
    main()
