"""A private, throw-away redis-server for the test session."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import attrs
import redis.asyncio as redis_asyncio


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@attrs.define
class RedisServer:
    """One redis-server process on a free loopback port; ``stop()``/``start()`` simulate outages."""

    port: int
    workdir: Path
    process: subprocess.Popen | None = None
    extra_args: tuple[str, ...] = ()  # more redis-server options, e.g. ("--enable-debug-command", "yes")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    def launch(cls, *extra_args: str) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install -y redis-server)")
        server = cls(port=free_port(), workdir=Path(tempfile.mkdtemp(prefix="ibex-redis-")), extra_args=extra_args)
        server.start()
        return server

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.workdir), *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_until_ready()

    def _wait_until_ready(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


async def seed(url: str, values: dict[str, bytes]) -> None:
    """Write ``values`` (key -> bytes) into the Redis at ``url`` in one MSET."""
    admin = redis_asyncio.from_url(url)
    try:
        await admin.mset(values)
    finally:
        await admin.aclose()
