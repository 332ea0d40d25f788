"""The whole service in one event loop: one opened Application behind the gRPC and HTTP edges.

``start_service`` opens the backends, builds caller authentication from the settings (signed
principal keys, TLS / mTLS), starts gRPC and, unless disabled, the HTTP API (uvicorn in the same
loop, on a socket bound here so that a port in use is a clear start-up error). ``shutdown`` is
the graceful path: health and readiness turn NOT_SERVING while both edges still serve for
``drain_delay_s`` (so that load balancers and health-checking clients move away first), then both
edges stop accepting, in-flight calls get ``grace_s`` to finish, then the backends' clients close.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from datetime import timedelta
from collections.abc import Iterator
from contextlib import contextmanager

import attrs
import grpc
import uvicorn

from entrypoints.auth.bind import InsecureBindError, bind_guard
from entrypoints.auth.grpc_auth import GrpcAuthenticator, server_credentials
from entrypoints.auth.http_auth import HttpAuthenticator, uvicorn_ssl_options
from entrypoints.auth.keys import KeyRing, keyring_from_setting
from entrypoints.containers import Application, ApplicationContainer, StartupError, open_application
from entrypoints.grpc_api.server import (
    DEFAULT_GRACE_S, GrpcServer, ServerStartError, build_server, connection_age_options,
)
from entrypoints.grpc_api.servicer import ContextAssemblyServicer
from entrypoints.http_api.app import count_connection_errors, make_app
from entrypoints.http_api.protocol import guarded_protocol
from entrypoints.settings import Settings

HTTP_STARTUP_TIMEOUT_S = 10.0
_log = logging.getLogger("ibex_context.http")


class _EmbeddedUvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers: the process root owns SIGTERM/SIGINT."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@attrs.define
class HttpServer:
    server: uvicorn.Server
    task: asyncio.Task
    url: str
    port: int

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


@attrs.define
class RunningService:
    app: Application
    grpc: GrpcServer
    grpc_address: str
    http: HttpServer | None = None
    draining: bool = False

    def ready(self) -> bool:
        return not self.draining

    async def shutdown(self, grace_s: float = DEFAULT_GRACE_S, drain_delay_s: float = 0.0) -> None:
        """NOT_SERVING, ``drain_delay_s`` still serving, then drain both edges (in-flight calls get
        ``grace_s``), then close the backends. Idempotent."""
        if self.draining:
            return
        self.draining = True  # /readyz answers 503 from here
        try:
            await self.grpc.not_serving()
            if drain_delay_s > 0:
                await drain_pause(drain_delay_s)
            stops = [self.grpc.drain(grace_s)]
            if self.http is not None:
                stops.append(self.http.stop())
            await asyncio.gather(*stops)
        finally:
            await self.app.close()


async def drain_pause(seconds: float) -> None:
    """The drain delay: calls are still served while health reports NOT_SERVING (a seam for tests)."""
    await asyncio.sleep(seconds)


async def start_service(
    settings: Settings, *, container: ApplicationContainer | None = None, with_http: bool = True,
    grace_s: float = DEFAULT_GRACE_S, reuse_port: bool = False,
) -> RunningService:
    """Open the application and start serving.

    Raises:
        StartupError: bad credentials/keys, a refused or failed bind, or a backend that cannot open.
    """
    _check_binds(settings, with_http)  # before opening anything: a refused address fails fast
    credentials, keyring = _security(settings)
    app = await open_application(settings, container)
    service: RunningService | None = None
    try:
        authenticator = GrpcAuthenticator(keyring, on_failure=app.metrics.auth_failure,
                                          max_lifetime=principal_max_lifetime(settings)) if keyring else None
        servicer = ContextAssemblyServicer(
            assemble=app.assemble, search=app.search, feedback=app.feedback, metrics=app.metrics,
            authenticator=authenticator, deadline_headroom_s=settings.deadline_headroom_ms / 1000.0,
            tracing=app.tracing.edge,
        )
        grpc_server, port = build_server(
            servicer, settings.grpc_addr, has_auth=settings.has_auth,
            allow_insecure_bind=settings.allow_insecure_bind, credentials=credentials, reuse_port=reuse_port,
            extra_options=connection_age_options(settings.max_connection_age_ms / 1000.0,
                                                 settings.max_connection_age_grace_ms / 1000.0),
        )
        if settings.health_addr:  # no bind guard: it answers health statuses only, never tenant data
            grpc_server.add_health_listener(settings.health_addr)
        service = RunningService(app, grpc_server, with_port(settings.grpc_addr, port))
        if with_http:
            service.http = await _start_http(settings, app, service, keyring, grace_s, reuse_port)
        await grpc_server.start()
    except BaseException as exc:
        if service is not None and service.http is not None:
            await service.http.stop()
        await app.close()
        if isinstance(exc, ServerStartError):
            raise StartupError(str(exc)) from None
        raise
    return service


def principal_max_lifetime(settings: Settings) -> timedelta:
    """``IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME``: the longest validity window a principal proof may have."""
    return timedelta(milliseconds=settings.principal_max_lifetime_ms)


def _check_binds(settings: Settings, with_http: bool) -> None:
    addresses = [("", settings.grpc_addr)] + ([("HTTP: ", settings.http_addr)] if with_http else [])
    for label, addr in addresses:
        try:
            bind_guard(addr, settings.has_auth, settings.allow_insecure_bind)
        except InsecureBindError as exc:
            raise StartupError(f"{label}{exc}") from None


def _security(settings: Settings) -> tuple[grpc.ServerCredentials | None, KeyRing | None]:
    try:
        credentials = server_credentials(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
        keyring = keyring_from_setting(settings.principal_keys)
    except ValueError as exc:  # TlsConfigError, KeyFileError: messages name the variable
        raise StartupError(str(exc)) from None
    return credentials, keyring


async def _start_http(settings: Settings, app: Application, service: RunningService, keyring: KeyRing | None,
                      grace_s: float, reuse_port: bool) -> HttpServer:
    warning = bind_guard(settings.http_addr, settings.has_auth, settings.allow_insecure_bind)
    if warning:
        _log.warning("http_insecure_bind", extra={"addr": settings.http_addr, "detail": warning})
    authenticate = HttpAuthenticator(keyring, on_failure=app.metrics.auth_failure,
                                     max_lifetime=principal_max_lifetime(settings)).authenticate if keyring else None
    read_timeout_s = settings.http_read_timeout_ms / 1000.0
    asgi = make_app(assemble=app.assemble, search=app.search, feedback=app.feedback, metrics=app.metrics,
                    readiness=service.ready, authenticate=authenticate, read_timeout_s=read_timeout_s,
                    tracing=app.tracing.edge)
    protocol = guarded_protocol(read_timeout_s=read_timeout_s, max_connections=settings.http_max_connections,
                                on_error=count_connection_errors(app.metrics))
    ssl = uvicorn_ssl_options(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
    sock = bind_socket(settings.http_addr, reuse_port=reuse_port)
    config = uvicorn.Config(asgi, log_config=None, access_log=False, lifespan="off", http=protocol,
                            timeout_graceful_shutdown=max(1, round(grace_s)), **ssl)
    server = _EmbeddedUvicorn(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await _until_started(server, task)
    port = sock.getsockname()[1]
    scheme = "https" if ssl else "http"
    return HttpServer(server, task, f"{scheme}://{with_port(settings.http_addr, port)}", port)


async def _until_started(server: uvicorn.Server, task: asyncio.Task) -> None:
    deadline = asyncio.get_running_loop().time() + HTTP_STARTUP_TIMEOUT_S
    while not server.started:
        if task.done():
            task.result()  # re-raise what stopped it
            raise StartupError("HTTP server stopped during start-up")
        if asyncio.get_running_loop().time() > deadline:
            server.should_exit = True
            raise StartupError("HTTP server did not start within 10 s")
        await asyncio.sleep(0.005)


def bind_socket(addr: str, *, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket on ``host:port``; StartupError naming the address when it fails."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    sock: socket.socket | None = None
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(sockaddr)
        sock.listen(1024)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise StartupError(f"cannot bind HTTP address {addr}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def with_port(addr: str, port: int) -> str:
    """``addr`` with its port replaced by the bound one (``127.0.0.1:0`` -> ``127.0.0.1:54321``)."""
    host, _, _ = addr.rpartition(":")
    return f"{host}:{port}"
