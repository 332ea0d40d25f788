"""Throw-away Redis high availability on loopback: a master, a replica and sentinels; TLS Redis.

``SentinelCluster.launch()`` starts a password-protected master and its replica (redis-server) and
``sentinels`` redis-sentinel processes (password-protected too) monitoring them as ``service``.
``url`` is the ``redis+sentinel://`` URL the service is configured with; ``failover()`` asks a
sentinel for a manual failover (``SENTINEL FAILOVER``) and waits until the sentinels name the
replica as the new master. ``TlsRedis.launch(pki)`` starts a TLS-only redis-server.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import attrs
import redis

from tests.support.redis_server import free_port

MASTER_PASSWORD = "master-secret"
SENTINEL_PASSWORD = "sentinel-secret"
SERVICE = "ibex-directives"
HOST = "127.0.0.1"


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed (apt-get install -y {name}); `make test` installs it")
    return found


def _wait(predicate, what: str, timeout_s: float = 15.0, interval_s: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (redis.RedisError, OSError) as exc:
            last = exc
        time.sleep(interval_s)
    raise RuntimeError(f"timed out waiting for {what} (last error: {last!r})")


@attrs.define
class Node:
    port: int
    process: subprocess.Popen

    def client(self, password: str | None = MASTER_PASSWORD) -> redis.Redis:
        return redis.Redis(host=HOST, port=self.port, password=password, socket_timeout=2, socket_connect_timeout=2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@attrs.define
class SentinelCluster:
    workdir: Path
    master: Node
    replica: Node
    sentinels: list[Node]

    @property
    def url(self) -> str:
        hosts = ",".join(f"{HOST}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://:{MASTER_PASSWORD}@{hosts}/{SERVICE}/0?sentinel_password={SENTINEL_PASSWORD}"

    @classmethod
    def launch(cls, sentinels: int = 2) -> SentinelCluster:
        workdir = Path(tempfile.mkdtemp(prefix="ibex-sentinel-"))
        started: list[Node] = []
        try:
            master = _redis_node(workdir / "master", [])
            started.append(master)
            replica = _redis_node(workdir / "replica", ["--replicaof", HOST, str(master.port)])
            started.append(replica)
            _wait(lambda: replica.client().info("replication").get("master_link_status") == "up", "replication")
            watchers = []
            for index in range(sentinels):
                watcher = _sentinel_node(workdir / f"sentinel-{index}", master.port)
                started.append(watcher)
                watchers.append(watcher)
            cluster = cls(workdir, master, replica, watchers)
            for watcher in watchers:  # each sentinel knows the replica before anyone asks for a failover
                _wait(lambda w=watcher: cluster._knows_replica(w), f"sentinel on {watcher.port} to find the replica")
            return cluster
        except BaseException:
            for node in started:
                node.stop()
            shutil.rmtree(workdir, ignore_errors=True)
            raise

    def sentinel_client(self, index: int = 0) -> redis.Redis:
        return self.sentinels[index].client(SENTINEL_PASSWORD)

    def master_port(self, index: int = 0) -> int:
        _, port = self.sentinel_client(index).sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def _knows_replica(self, watcher: Node) -> bool:
        replicas = watcher.client(SENTINEL_PASSWORD).sentinel_slaves(SERVICE)
        return any(int(r["port"]) == self.replica.port and r.get("master-link-status") == "ok"
                   and not r.get("is_sdown") for r in replicas)

    def failover(self, timeout_s: float = 20.0) -> None:
        """Manual failover: the replica becomes the master; returns once every sentinel says so."""
        self.sentinel_client().execute_command("SENTINEL", "FAILOVER", SERVICE)
        for index in range(len(self.sentinels)):
            _wait(lambda i=index: self.master_port(i) == self.replica.port, "the sentinels to name the new master",
                  timeout_s)
        _wait(lambda: self.replica.client().info("replication").get("role") == "master", "promotion", timeout_s)

    def close(self) -> None:
        for node in (*self.sentinels, self.replica, self.master):
            node.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _redis_node(directory: Path, extra: list[str]) -> Node:
    directory.mkdir(parents=True)
    port = free_port()
    process = subprocess.Popen(
        [_binary("redis-server"), "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no",
         "--dir", str(directory), "--requirepass", MASTER_PASSWORD, "--masterauth", MASTER_PASSWORD,
         "--repl-diskless-sync-delay", "0", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    node = Node(port, process)
    _wait(lambda: node.client().ping(), f"redis-server on {port}")
    return node


def _sentinel_node(directory: Path, master_port: int) -> Node:
    directory.mkdir(parents=True)
    port = free_port()
    config = directory / "sentinel.conf"  # sentinel rewrites its config: a file of its own
    config.write_text("\n".join((
        f"port {port}",
        f"bind {HOST}",
        f"dir {directory}",
        f"requirepass {SENTINEL_PASSWORD}",
        f"sentinel sentinel-pass {SENTINEL_PASSWORD}",
        f"sentinel monitor {SERVICE} {HOST} {master_port} 1",
        f"sentinel auth-pass {SERVICE} {MASTER_PASSWORD}",
        f"sentinel down-after-milliseconds {SERVICE} 2000",
        f"sentinel failover-timeout {SERVICE} 10000",
        f"sentinel parallel-syncs {SERVICE} 1",
        "",
    )))
    process = subprocess.Popen([_binary("redis-sentinel"), str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    node = Node(port, process)
    _wait(lambda: node.client(SENTINEL_PASSWORD).ping(), f"redis-sentinel on {port}")
    return node


@attrs.define
class TlsRedis:
    """A redis-server that speaks only TLS; with ``client_ca`` it also requires client certificates."""

    workdir: Path
    node: Node

    @classmethod
    def launch(cls, cert: Path, key: Path, ca: Path, *, client_cert: Path, client_key: Path,
               require_client_certificates: bool) -> TlsRedis:
        workdir = Path(tempfile.mkdtemp(prefix="ibex-redis-tls-"))
        port = free_port()
        process = subprocess.Popen(
            [_binary("redis-server"), "--port", "0", "--tls-port", str(port), "--bind", HOST, "--save", "",
             "--appendonly", "no", "--dir", str(workdir), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
             "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "yes" if require_client_certificates else "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        node = Node(port, process)
        server = cls(workdir, node)
        try:
            _wait(lambda: process.poll() is None and _tls_ping(port, ca, client_cert, client_key), f"TLS redis-server on {port}")
        except BaseException:
            server.close()
            raise
        return server

    def close(self) -> None:
        self.node.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _tls_ping(port: int, ca: Path, cert: Path, key: Path) -> bool:
    client = redis.Redis(host=HOST, port=port, ssl=True, ssl_ca_certs=str(ca), ssl_certfile=str(cert),
                         ssl_keyfile=str(key), socket_timeout=2, socket_connect_timeout=2)
    try:
        return bool(client.ping())
    finally:
        client.close()
