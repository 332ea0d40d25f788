"""The HTTP API's server: uvicorn on the guarded protocol, over a socket bound here.

Built (never started) by the composition root (``entrypoints.containers.Edges``); the process
root (``entrypoints.cli.service``) starts it and owns the signals.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import uvicorn

from entrypoints.auth.bind_guard import bind_guard
from entrypoints.settings import Settings

_log = logging.getLogger("ibex_context.http")


class HttpBindError(RuntimeError):
    """The HTTP address could not be bound (the message names it)."""


@attrs.define
class Readiness:
    """Whether the process takes calls: true until the shutdown starts draining (``/readyz``)."""

    draining: bool = False

    def __call__(self) -> bool:
        return not self.draining


class EmbeddedUvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers: the process root owns SIGTERM/SIGINT."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def open_http_socket(settings: Settings) -> socket.socket:
    """The HTTP listening socket on ``IBEX_CONTEXT_HTTP_ADDR`` (a non-loopback bind without auth,
    when allowed, is logged); HttpBindError naming the address when it cannot be bound."""
    warning = bind_guard(settings.http_addr, settings.has_auth, settings.allow_insecure_bind)
    if warning:
        _log.warning("http_insecure_bind", extra={"addr": settings.http_addr, "detail": warning})
    return bind_socket(settings.http_addr)


def build_http_server(asgi: Any, protocol: type, tls: dict[str, Any], grace_s: float) -> EmbeddedUvicorn:
    """uvicorn for the HTTP API (not started): the guarded protocol, TLS as for gRPC, plain logs."""
    config = uvicorn.Config(asgi, log_config=None, access_log=False, lifespan="off", http=protocol,
                            timeout_graceful_shutdown=max(1, round(grace_s)), **tls)
    return EmbeddedUvicorn(config)


def bind_socket(addr: str) -> socket.socket:
    """A listening TCP socket on ``host:port``; HttpBindError naming the address when it fails."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    sock: socket.socket | None = None
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(1024)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise HttpBindError(f"cannot bind HTTP address {addr}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock
