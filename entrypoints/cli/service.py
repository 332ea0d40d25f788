"""The whole service in one event loop: one opened Application behind the gRPC and HTTP edges.

``start_service`` checks the bind addresses and loads the callers' credentials (fail fast: before
any backend opens), opens the application (``entrypoints.containers``), then starts what the
edges' container (``entrypoints.containers.Edges``) built: gRPC and, unless disabled, the HTTP API
(uvicorn in the same loop, on a socket bound at start-up so that a port in use is a clear start-up
error). It wires nothing itself. ``shutdown`` is the graceful path: health and readiness turn
NOT_SERVING while both edges still serve for ``drain_delay_s`` (so that load balancers and
health-checking clients move away first), then both edges stop accepting, in-flight calls get
``grace_s`` to finish, then the backends' clients close.
"""

from __future__ import annotations

import asyncio

import attrs
import uvicorn

from entrypoints.auth.bind_guard import InsecureBindError, bind_guard
from entrypoints.containers import (
    Application,
    ApplicationContainer,
    Edges,
    StartupError,
    build_container,
    build_edges,
    open_application,
)
from entrypoints.grpc_api.server import DEFAULT_GRACE_S, GrpcServer, ServerStartError
from entrypoints.http_api.server import HttpBindError, Readiness
from entrypoints.settings import Settings

HTTP_STARTUP_TIMEOUT_S = 10.0


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
    readiness: Readiness = attrs.field(factory=Readiness)
    http: HttpServer | None = None

    @property
    def draining(self) -> bool:
        return self.readiness.draining

    def ready(self) -> bool:
        return self.readiness()

    async def shutdown(self, grace_s: float = DEFAULT_GRACE_S, drain_delay_s: float = 0.0) -> None:
        """NOT_SERVING, ``drain_delay_s`` still serving, then drain both edges (in-flight calls get
        ``grace_s``), then close the backends. Idempotent."""
        if self.readiness.draining:
            return
        self.readiness.draining = True  # /readyz answers 503 from here
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
    grace_s: float = DEFAULT_GRACE_S,
) -> RunningService:
    """Open the application and start serving.

    Raises:
        StartupError: bad credentials/keys, a refused or failed bind, or a backend that cannot open.
    """
    _check_binds(settings, with_http)  # before opening anything: a refused address fails fast
    container = container or build_container(settings)
    container.auth.keyring()  # and bad keys or TLS files, before any backend opens
    container.auth.grpc_credentials()
    if with_http:
        container.auth.http_tls()
    app = await open_application(settings, container)
    edges = build_edges(app, grace_s=grace_s)
    service: RunningService | None = None
    try:
        grpc_server = edges.grpc_server()
        service = RunningService(app, grpc_server, with_port(settings.grpc_addr, grpc_server.port), edges.readiness())
        if with_http:
            service.http = await _start_http(edges)
        await grpc_server.start()
    except BaseException as exc:
        if service is not None and service.http is not None:
            await service.http.stop()
        await app.close()
        if isinstance(exc, (ServerStartError, HttpBindError)):
            raise StartupError(str(exc)) from None
        raise
    return service


def _check_binds(settings: Settings, with_http: bool) -> None:
    addresses = [("", settings.grpc_addr)] + ([("HTTP: ", settings.http_addr)] if with_http else [])
    for label, addr in addresses:
        try:
            bind_guard(addr, settings.has_auth, settings.allow_insecure_bind)
        except InsecureBindError as exc:
            raise StartupError(f"{label}{exc}") from None


async def _start_http(edges: Edges) -> HttpServer:
    sock = edges.http_socket()
    server = edges.http_server()
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await _until_started(server, task)
    port = sock.getsockname()[1]
    scheme = "https" if edges.auth.http_tls() else "http"
    return HttpServer(server, task, f"{scheme}://{with_port(edges.settings().http_addr, port)}", port)


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


def with_port(addr: str, port: int) -> str:
    """``addr`` with its port replaced by the bound one (``127.0.0.1:0`` -> ``127.0.0.1:54321``)."""
    host, _, _ = addr.rpartition(":")
    return f"{host}:{port}"
