"""The grpc.aio server: the service, standard health checking, reflection, limits and keepalive.

Health: both the overall service ``""`` and ``ibex.context.v1.ContextAssemblyService`` report
SERVING once started and NOT_SERVING from the moment a drain begins (``not_serving()``);
``liveness`` stays SERVING until the process stops serving, so a liveness probe never kills a pod
that is draining. ``add_health_listener(addr)`` opens a second, plaintext listener that serves
only ``grpc.health.v1.Health`` with the same statuses (``IBEX_CONTEXT_HEALTH_ADDR``): the
kubelet's gRPC probe speaks no TLS and sends no client certificate or principal proof, so with
mTLS on the main port it can only probe such a port. It answers nothing but health statuses.

Limits (``SERVER_OPTIONS``):
- receive ``wire.MAX_RECEIVE_BYTES`` (15,346,061 bytes, 14.6 MiB): the serialized size of the
  largest request the validation bounds allow (100 messages x 32,768 characters and 524,288
  characters of tool schemas, at 4 UTF-8 bytes each, plus every id and framing: 15,280,525
  bytes; computed in ``wire``) plus 64 KiB, so every valid request reaches validation, which
  names the field it refuses; anything larger is refused by the transport (RESOURCE_EXHAUSTED)
  before it is decoded. Send 8 MiB: an answer is bounded by the model window.
- keepalive: the server pings an idle connection every 30 s and drops it when the ping is not
  answered in 10 s; clients may ping every 10 s (also without calls); a client that pings more often
  gets a strike per ping and, past 2 strikes, a GOAWAY (``too_many_pings``).
- connection age (``connection_age_options``): a connection is sent GOAWAY after
  ``max_connection_age`` (gRPC adds +-10% jitter) and closed ``max_connection_age_grace`` later,
  so clients re-resolve their DNS target and spread over new replicas; 0 turns it off.
- ``grpc.so_reuseport`` is off unless asked for, so that a port already in use fails start-up
  instead of silently sharing it.

Bind guard (``entrypoints.auth.bind_guard``): a non-loopback address with no caller authentication
refuses to start unless the insecure override is set, and then a WARNING is logged at every start.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from entrypoints.auth.bind_guard import InsecureBindError, bind_guard
from entrypoints.grpc_api import undelivered, wire

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ContextAssemblyService"].full_name
HEALTH_NAMES = ("", SERVICE_NAME)
MAX_RECEIVE_BYTES = wire.MAX_RECEIVE_BYTES
MAX_SEND_BYTES = 8 * 1024 * 1024
SERVER_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
    ("grpc.max_send_message_length", MAX_SEND_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 2),
    ("grpc.http2.max_pings_without_data", 0),  # keep pinging idle clients every 30 s, not only twice
)
DEFAULT_GRACE_S = 5.0
LIVENESS_NAME = "liveness"
HEALTH_LISTENER_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", 4096),  # health requests are a service name
    ("grpc.so_reuseport", 0),
)


def connection_age_options(max_age_s: float, grace_s: float) -> tuple[tuple[str, Any], ...]:
    """``grpc.max_connection_age_ms`` / ``_grace_ms`` channel arguments; none when ``max_age_s`` is 0."""
    if max_age_s <= 0:
        return ()
    return (("grpc.max_connection_age_ms", max(1, round(max_age_s * 1000))),
            ("grpc.max_connection_age_grace_ms", max(0, round(grace_s * 1000))))


_log = logging.getLogger("ibex_context.grpc")


class ServerStartError(RuntimeError):
    """The server cannot start (address refused by the bind guard, or the bind failed)."""


class GrpcServer:
    """A built server: ``start()``, then ``drain(grace_s)`` to shut down gracefully."""

    def __init__(self, server: grpc.aio.Server, health: health_aio.HealthServicer, address: str, port: int) -> None:
        self.server = server
        self.health = health
        self.address = address
        self.port = port
        self.health_server: grpc.aio.Server | None = None
        self.health_address = ""  # host:bound-port of the health-only listener, "" when there is none

    def add_health_listener(self, addr: str) -> int:
        """Bind a plaintext listener on ``addr`` serving only the health service; returns its port.

        Raises:
            ServerStartError: the address could not be bound.
        """
        server = grpc.aio.server(options=HEALTH_LISTENER_OPTIONS)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        _probe(addr)
        try:
            port = server.add_insecure_port(addr)
        except RuntimeError as exc:
            raise ServerStartError(f"cannot bind health address {addr}: {exc}") from None
        self.health_server, self.health_address = server, f"{addr.rpartition(':')[0]}:{port}"
        return port

    async def start(self) -> None:
        await self.server.start()
        if self.health_server is not None:
            await self.health_server.start()
        for name in (*HEALTH_NAMES, LIVENESS_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def not_serving(self) -> None:
        """Health ``""`` and the service report NOT_SERVING; calls are still served. Idempotent."""
        for name in HEALTH_NAMES:
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)

    async def drain(self, grace_s: float = DEFAULT_GRACE_S) -> None:
        """Report NOT_SERVING, refuse new calls, let in-flight calls finish within ``grace_s``."""
        await self.not_serving()
        try:
            await self.server.stop(grace_s)
        finally:
            await self.health.enter_graceful_shutdown()  # every name, liveness too
            if self.health_server is not None:
                await self.health_server.stop(0)

    async def wait_for_termination(self) -> None:
        await self.server.wait_for_termination()


def build_server(
    servicer: pb_grpc.ContextAssemblyServiceServicer,
    addr: str,
    *,
    has_auth: bool = False,
    allow_insecure_bind: bool = False,
    credentials: grpc.ServerCredentials | None = None,
    extra_options: Sequence[tuple[str, Any]] = (),
) -> tuple[GrpcServer, int]:
    """Build (not start) the server bound to ``addr`` (port 0 picks a free port).

    Args:
        servicer: the ContextAssemblyService implementation.
        addr: ``host:port`` to bind.
        has_auth: a caller authentication mode is configured (mTLS CA or principal keys).
        allow_insecure_bind: ``IBEX_CONTEXT_ALLOW_INSECURE_BIND``.
        credentials: TLS credentials (None: plaintext).
        extra_options: more channel arguments; one that ``SERVER_OPTIONS`` also names replaces its value
            there (``grpc.so_reuseport`` stays 0).

    Returns:
        The server and the bound port.

    Raises:
        ServerStartError: the bind guard refused the address, or the address could not be bound.
    """
    try:
        warning = bind_guard(addr, has_auth, allow_insecure_bind)
    except InsecureBindError as exc:
        raise ServerStartError(str(exc)) from None
    if warning:
        _log.warning("grpc_insecure_bind", extra={"addr": addr, "detail": warning})
    undelivered.install()  # grpc's ERROR for an answer it could not send becomes our count and WARNING
    options = dict(SERVER_OPTIONS)
    options.update(extra_options)  # each key once: the extra value replaces the default
    options["grpc.so_reuseport"] = 0  # grpc shares ports by default: never
    server = grpc.aio.server(options=tuple(options.items()))
    add_service(servicer, server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection((SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server)
    port = _bind(server, addr, credentials)
    return GrpcServer(server, health, addr, port), port


def add_service(servicer: pb_grpc.ContextAssemblyServiceServicer, server: grpc.aio.Server) -> None:
    """Register the service: the servicer's own ``method_handlers()`` when it has them (they read the
    request bytes after authentication, see ``servicer``), else the generated registration."""
    method_handlers = getattr(servicer, "method_handlers", None)
    if method_handlers is None:
        pb_grpc.add_ContextAssemblyServiceServicer_to_server(servicer, server)
        return
    handlers = method_handlers()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def _bind(server: grpc.aio.Server, addr: str, credentials: grpc.ServerCredentials | None) -> int:
    _probe(addr)
    try:
        port = server.add_secure_port(addr, credentials) if credentials else server.add_insecure_port(addr)
    except RuntimeError as exc:
        raise ServerStartError(f"cannot bind gRPC address {addr}: {exc}") from None
    return port


def _probe(addr: str) -> None:
    """Fail with a one-line reason (port in use, address not local) before grpc tries and logs."""
    host, _, port = addr.rpartition(":")
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host.strip("[]"), int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(sockaddr)
    except OSError as exc:
        raise ServerStartError(f"cannot bind gRPC address {addr}: {exc.strerror or exc}") from None
