"""Scale-out on loopback: replicas behind DNS, a client configured like the Go proxy, churn.

Stands in for a headless Service on one machine: every replica is an ``ibex-context serve``
process on its own loopback address (127.0.0.2, .3, .4, later .5; all of 127/8 is loopback on
Linux) and the same ports, and a small DNS server on 127.0.0.1 (``bench.loopback_dns``) is the
authority of the target ``dns://127.0.0.1:PORT/ibex.test:GRPC_PORT``, answering one A record per
live replica. The client is a grpc.aio channel configured exactly as docs/DEPLOYMENT.md tells the
Go proxy: ``deploy/grpc/service-config.json`` (round_robin, client-side health checking, retry on
UNAVAILABLE), keepalive 30 s / 10 s, and re-resolution at most once a second. Every call carries a
signed principal proof, as in production.

Open loop at ``--rate`` AssembleContext calls per second (each due at its own time; latency is
measured from that time) through five phases:

1. ``three``: .2, .3 and .4 serve;
2. ``sigterm``: .2 leaves DNS and gets SIGTERM (NOT_SERVING, drain delay, stop(grace)) -> 0 failed;
3. ``scale_up``: .5 starts and joins DNS; the time until it answers its first call is measured
   (the client finds it when a connection reaches its max age and it re-resolves);
4. ``sigkill``: .3 leaves DNS and gets SIGKILL (in-flight calls retried elsewhere) -> 0 failed;
5. ``two``: .4 and .5 serve.

At least two replicas serve at any time, as in a Deployment with a PodDisruptionBudget. The
connection-age grace is longer than the client's call deadline (5 s), as docs/DEPLOYMENT.md
requires: a connection closed at the end of its grace cancels the calls still on it.

Per phase: calls, failed (by code), p50/p99/max ms, and each replica's share of the calls it
answered (from its own ``/metrics``); plus the new replica's discovery time against
``max connection age + 1 s``. ``--json FILE`` writes the same figures (tests/e2e/test_scaleout.py
asserts the mechanisms on them).

    .venv/bin/python -m bench.scaleout [--rate 300] [--phase-s 8] [--max-age-s 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import grpc
from prometheus_client.parser import text_string_to_metric_families

from bench.loopback_dns import LoopbackDns
from contracts.ibex.auth.v1 import principal_context_pb2 as auth_pb
from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from entrypoints.auth.proof import PROOF_METADATA_KEY, sign_proof
from entrypoints.auth.signing_keys import ed25519_public_key
from entrypoints.cli.demo_data import DEMO_ORG, DEVOPS_AGENT

REPO = Path(__file__).resolve().parents[1]
SERVICE_CONFIG_PATH = REPO / "deploy" / "grpc" / "service-config.json"
NAME = "ibex.test"
FIRST_ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
NEW_ADDRESS = "127.0.0.5"
CALL_TIMEOUT_S = 5.0
KEY_SEED = bytes(range(7, 39))


def client_options(service_config: str) -> list[tuple[str, Any]]:
    """The channel arguments docs/DEPLOYMENT.md gives the Go proxy, in grpc-core spelling."""
    return [
        ("grpc.service_config", service_config),
        ("grpc.enable_retries", 1),
        ("grpc.keepalive_time_ms", 30_000),  # >= the server's 10 s minimum ping interval
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.dns_min_time_between_resolutions_ms", 1000),  # Go: dns.SetMinResolutionInterval(time.Second)
    ]


@attrs.define
class Replica:
    address: str
    process: subprocess.Popen
    http_url: str
    served_before_exit: float = 0.0

    def served(self) -> float:
        """AssembleContext calls this replica answered OK (its own /metrics)."""
        if self.process.poll() is not None:
            return self.served_before_exit
        try:
            with urllib.request.urlopen(f"{self.http_url}/metrics", timeout=5) as answer:
                text = answer.read().decode()
        except OSError:
            return self.served_before_exit
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if (sample.name == "ibex_context_requests_total" and sample.labels.get("surface") == "grpc"
                        and sample.labels.get("method") == "AssembleContext" and sample.labels.get("code") == "OK"):
                    self.served_before_exit = sample.value
                    return sample.value
        return 0.0


@attrs.define
class Cluster:
    workdir: Path
    grpc_port: int
    http_port: int
    env: dict[str, str]
    seed_db: Path
    replicas: dict[str, Replica] = attrs.field(factory=dict)

    def start(self, address: str) -> Replica:
        data = self.workdir / address
        data.mkdir()
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{self.seed_db}{suffix}").exists():
                shutil.copy2(f"{self.seed_db}{suffix}", data / f"ibex.db{suffix}")
        env = {**self.env, "IBEX_CONTEXT_GRPC_ADDR": f"{address}:{self.grpc_port}",
               "IBEX_CONTEXT_HTTP_ADDR": f"{address}:{self.http_port}",
               "IBEX_CONTEXT_DATA_PATH": str(data / "ibex.db")}
        with (self.workdir / f"{address}.log").open("w") as log:  # the child keeps its own descriptor
            process = subprocess.Popen([sys.executable, "-m", "entrypoints.cli", "serve"], cwd=REPO, env=env,
                                       stdout=subprocess.PIPE, stderr=log, text=True)
        replica = Replica(address, process, f"http://{address}:{self.http_port}")
        self.replicas[address] = replica
        return replica

    def wait_ready(self, replica: Replica, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        announced = 0
        while announced < 2:
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {replica.address} did not start")
            line = replica.process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                log = (self.workdir / f"{replica.address}.log").read_text()[-2000:]
                raise RuntimeError(f"replica {replica.address} exited: {replica.process.wait()}\n{log}")
            announced += line.startswith("ibex-context: ") and " listening on " in line

    def stop_all(self) -> None:
        for replica in self.replicas.values():
            if replica.process.poll() is None:
                replica.process.kill()
            replica.process.wait()
            if replica.process.stdout:
                replica.process.stdout.close()


@attrs.define
class Call:
    due: float
    latency_ms: float
    code: str


def free_shared_ports(addresses: tuple[str, ...]) -> tuple[int, int]:
    """Two TCP ports free on every address (replicas bind the same ports, as pods do)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            first = probe.getsockname()[1]
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            second = probe.getsockname()[1]
        if first != second and all(_free(a, p) for a in addresses for p in (first, second)):
            return first, second
    raise RuntimeError("no shared free ports")


def _free(address: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def proof() -> bytes:
    context = auth_pb.PrincipalContext(org_id=DEMO_ORG, agent_id=DEVOPS_AGENT, principal_id="bench-scaleout")
    now = datetime.now(UTC)
    context.issued_at.FromDatetime(now - timedelta(seconds=5))
    context.expires_at.FromDatetime(now + timedelta(minutes=5))
    return sign_proof(context, "bench-1", "ed25519", KEY_SEED)


async def drive(stub: pb_grpc.ContextAssemblyServiceStub, rate: float, stop: asyncio.Event,
                calls: list[Call], metadata: tuple[tuple[str, bytes], ...]) -> None:
    request = pb.AssembleContextRequest(
        org_id=DEMO_ORG, agent_id=DEVOPS_AGENT, model="gpt-4o-mini", query="database failover",
        recent_messages=[pb.Message(role="user", content="Can we fail over the primary database now?")],
        available_tokens=400)
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task] = set()

    async def one(due: float) -> None:
        try:
            await stub.AssembleContext(request, metadata=metadata, timeout=CALL_TIMEOUT_S)
            code = "OK"
        except grpc.aio.AioRpcError as exc:
            code = exc.code().name
        calls.append(Call(due, (loop.time() - due) * 1000.0, code))

    start = loop.time()
    sent = 0
    while not stop.is_set():
        due = start + sent / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(due))
        pending.add(task)
        task.add_done_callback(pending.discard)
        sent += 1
    await asyncio.gather(*pending)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def scenario(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="ibex-scaleout-"))
    dns = LoopbackDns()
    grpc_port, http_port = free_shared_ports((*FIRST_ADDRESSES, NEW_ADDRESS))
    keys = workdir / "principal-keys.json"
    keys.write_text(json.dumps({"keys": [{"key_id": "bench-1", "algorithm": "ed25519",
                                          "public_key": base64.b64encode(ed25519_public_key(KEY_SEED)).decode()}]}))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("IBEX_CONTEXT_", "GRPC_"))}
    env = {
        **base_env,
        "IBEX_CONTEXT_PRINCIPAL_KEYS": str(keys),
        "IBEX_CONTEXT_MAX_CONNECTION_AGE": f"{args.max_age_s}s",
        "IBEX_CONTEXT_MAX_CONNECTION_AGE_GRACE": f"{CALL_TIMEOUT_S + 1:g}s",
        "IBEX_CONTEXT_DRAIN_DELAY": f"{args.drain_s}s",
        "IBEX_CONTEXT_SHUTDOWN_GRACE": "3s",
        "IBEX_CONTEXT_LOG_LEVEL": "WARNING",
        "IBEX_CONTEXT_TIMEOUT": "200ms", "IBEX_CONTEXT_DEADLINE_MS": "200",
    }
    seed_db = workdir / "seed" / "ibex.db"
    loaded = subprocess.run([sys.executable, "-m", "entrypoints.cli", "demo", "load"], cwd=REPO, text=True,
                            env={**base_env, "IBEX_CONTEXT_DATA_PATH": str(seed_db)}, capture_output=True)
    if loaded.returncode != 0:
        raise RuntimeError(f"demo load failed: {loaded.stderr}")
    cluster = Cluster(workdir, grpc_port, http_port, env, seed_db)
    report: dict[str, Any] = {"rate": args.rate, "phase_s": args.phase_s, "max_connection_age_s": args.max_age_s,
                              "drain_delay_s": args.drain_s, "phases": {}}
    try:
        first = [cluster.start(address) for address in FIRST_ADDRESSES]
        for replica in first:
            cluster.wait_ready(replica)
        dns.set_addresses(NAME, FIRST_ADDRESSES)
        service_config = json.dumps(json.loads(SERVICE_CONFIG_PATH.read_text()))
        channel = grpc.aio.insecure_channel(dns.target(NAME, grpc_port), options=client_options(service_config))
        stub = pb_grpc.ContextAssemblyServiceStub(channel)
        metadata = ((PROOF_METADATA_KEY, proof()),)
        await stub.AssembleContext(pb.AssembleContextRequest(org_id=DEMO_ORG, agent_id=DEVOPS_AGENT, model="gpt-4o"),
                                   metadata=metadata, timeout=30, wait_for_ready=True)
        await asyncio.sleep(1.0)  # round_robin has connected to every address

        calls: list[Call] = []
        stop = asyncio.Event()
        driver = asyncio.create_task(drive(stub, args.rate, stop, calls, metadata))
        loop = asyncio.get_running_loop()
        marks: list[tuple[str, float, dict[str, float]]] = []

        def mark(name: str) -> None:
            marks.append((name, loop.time(), {a: r.served() for a, r in cluster.replicas.items()}))

        mark("three")
        await asyncio.sleep(args.phase_s)

        mark("sigterm")  # the pod is deleted: its endpoint leaves DNS as SIGTERM arrives
        dns.set_addresses(NAME, FIRST_ADDRESSES[1:])
        leaving = cluster.replicas[FIRST_ADDRESSES[0]]
        leaving.served()
        leaving.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(args.phase_s)
        report["sigterm_exit_code"] = await asyncio.to_thread(leaving.process.wait, 30)

        mark("scale_up")
        newcomer = cluster.start(NEW_ADDRESS)
        await asyncio.to_thread(cluster.wait_ready, newcomer)
        joined = loop.time()
        dns.set_addresses(NAME, (*FIRST_ADDRESSES[1:], NEW_ADDRESS))
        found_after: float | None = None
        cap = max(args.phase_s, 10 * args.max_age_s + 10)
        while loop.time() - joined < cap:
            if await asyncio.to_thread(newcomer.served) > 0:
                found_after = loop.time() - joined
                break
            await asyncio.sleep(0.05)
        report["new_replica_found_after_s"] = found_after
        report["new_replica_bound_s"] = args.max_age_s * 1.1 + 1.0  # max age (+10% jitter) + 1 s
        await asyncio.sleep(max(0.0, args.phase_s - (loop.time() - joined)))

        mark("sigkill")
        dns.set_addresses(NAME, (FIRST_ADDRESSES[2], NEW_ADDRESS))
        killed = cluster.replicas[FIRST_ADDRESSES[1]]
        killed.served()
        killed.process.send_signal(signal.SIGKILL)
        await asyncio.sleep(args.phase_s)

        mark("two")
        await asyncio.sleep(args.phase_s)
        mark("end")
        stop.set()
        await driver
        await channel.close()
    finally:
        cluster.stop_all()
        dns.stop()
        report["dns_queries"] = dns.queries
        shutil.rmtree(workdir, ignore_errors=True)

    for (name, start, before), (_, end, after) in zip(marks, marks[1:]):
        in_phase = [c for c in calls if start <= c.due < end]
        served = {address: after.get(address, 0.0) - before.get(address, 0.0) for address in after}
        total = sum(served.values()) or 1.0
        report["phases"][name] = {
            "calls": len(in_phase),
            "failed": dict(Counter(c.code for c in in_phase if c.code != "OK")),
            "p50_ms": round(percentile([c.latency_ms for c in in_phase], 0.50), 1),
            "p99_ms": round(percentile([c.latency_ms for c in in_phase], 0.99), 1),
            "max_ms": round(max((c.latency_ms for c in in_phase), default=0.0), 1),
            "served": {a: int(n) for a, n in served.items() if n > 0},
            "share": {a: round(n / total, 3) for a, n in served.items() if n > 0},
        }
    report["total_calls"] = len(calls)
    report["total_failed"] = sum(1 for c in calls if c.code != "OK")
    return report


def print_report(report: dict[str, Any]) -> None:
    print(f"offered {report['rate']} req/s, phases of {report['phase_s']} s, max connection age "
          f"{report['max_connection_age_s']} s, drain delay {report['drain_delay_s']} s")
    print(f"{'phase':<9} {'calls':>6} {'failed':>7} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}  share per replica")
    for name, phase in report["phases"].items():
        shares = ", ".join(f"{a.rsplit('.', 1)[1]}: {s:.0%}" for a, s in sorted(phase["share"].items()))
        failed = sum(phase["failed"].values())
        codes = " (" + ", ".join(f"{code} {n}" for code, n in sorted(phase["failed"].items())) + ")" if failed else ""
        print(f"{name:<9} {phase['calls']:>6} {failed:>7} {phase['p50_ms']:>7} {phase['p99_ms']:>7} "
              f"{phase['max_ms']:>7}  {shares}{codes}")
    found = report["new_replica_found_after_s"]
    shown = "never" if found is None else f"{found:.2f} s"
    print(f"SIGTERMed replica exit code: {report['sigterm_exit_code']}; new replica (.5) answered its first call "
          f"{shown} after joining DNS (bound: max age + 10% jitter + 1 s = {report['new_replica_bound_s']:.1f} s)")
    print(f"total: {report['total_calls']} calls, {report['total_failed']} failed; {report['dns_queries']} DNS queries")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.scaleout", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=300.0, help="AssembleContext calls per second (open loop)")
    parser.add_argument("--phase-s", type=float, default=8.0, help="seconds per phase")
    parser.add_argument("--max-age-s", type=float, default=3.0, help="the replicas' IBEX_CONTEXT_MAX_CONNECTION_AGE")
    parser.add_argument("--drain-s", type=float, default=1.0, help="the replicas' IBEX_CONTEXT_DRAIN_DELAY")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if os.environ.get("GRPC_DNS_RESOLVER", "ares").lower() != "ares":
        parser.error("GRPC_DNS_RESOLVER must be unset or ares: the native resolver ignores a dns:// authority")
    report = asyncio.run(scenario(args))
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
