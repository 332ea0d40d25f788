"""``ibex-context serve``: gRPC and the HTTP API in one process until SIGTERM or SIGINT.

Prints one line per listener on stdout (``ibex-context: gRPC listening on 127.0.0.1:9092``,
``ibex-context: HTTP listening on http://127.0.0.1:9093``); logs are JSON lines on stderr at
``IBEX_CONTEXT_LOG_LEVEL``. On SIGTERM/SIGINT: health NOT_SERVING (readiness 503) while calls are
still served for ``IBEX_CONTEXT_DRAIN_DELAY`` (0 by default; clients and endpoints move away), then
stop accepting, in-flight calls get ``--grace`` seconds (``IBEX_CONTEXT_SHUTDOWN_GRACE``, 5 s by
default), then the backends' clients close and the exit code is 0. With ``IBEX_CONTEXT_HEALTH_ADDR``
a third line announces the health-only listener (``ibex-context: gRPC health listening on ...``).
A start-up failure (bad settings, refused or failed bind, a backend that cannot open) prints one
line on stderr and exits with code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys

from entrypoints.cli.errors import CliError
from entrypoints.cli.event_loop import run_loop
from entrypoints.cli.service import RunningService, start_service
from entrypoints.containers import StartupError
from entrypoints.grpc_api.server import DEFAULT_GRACE_S
from entrypoints.observability.logs import configure_logging
from entrypoints.settings import Settings

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_log = logging.getLogger("ibex_context.serve")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="serve gRPC and the HTTP JSON API until SIGTERM/SIGINT")
    parser.add_argument("--no-http", action="store_true", help="serve gRPC only")
    parser.add_argument("--grace", type=float, default=None, metavar="SECONDS",
                        help="how long in-flight calls may run after a shutdown signal "
                             "(default: IBEX_CONTEXT_SHUTDOWN_GRACE, 5 s)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env(os.environ)
    grace_s = settings.shutdown_grace_ms / 1000.0 if args.grace is None else args.grace
    if not grace_s >= 0:
        raise CliError(f"--grace: expected seconds >= 0, got {args.grace}")
    configure_logging(settings.log_level)
    served = serve(settings, with_http=not args.no_http, grace_s=grace_s)
    return run_loop(served, settings.event_loop)


async def serve(settings: Settings, *, with_http: bool = True, grace_s: float = DEFAULT_GRACE_S) -> int:
    """Serve until a shutdown signal (or the gRPC server terminates), then drain; returns 0."""
    try:
        service = await start_service(settings, with_http=with_http, grace_s=grace_s)
    except StartupError as exc:
        raise CliError(str(exc)) from None
    _announce(service, settings)
    # Everything loaded so far (vocabularies, catalog, modules) lives for the whole process: move it
    # out of the collector's generations so full collections stay short (tail latency).
    gc.collect()
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in _SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    signalled = asyncio.create_task(stop.wait())
    # never cancelled: it shares grpc's internal shutdown future, which a cancel would break
    terminated = asyncio.create_task(service.grpc.wait_for_termination())
    try:
        await asyncio.wait({signalled, terminated}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
        drain_delay_s = settings.drain_delay_ms / 1000.0 if stop.is_set() else 0.0  # not when gRPC ended by itself
        _log.info("service_draining", extra={"grace_s": grace_s, "drain_delay_s": drain_delay_s})
        await service.shutdown(grace_s, drain_delay_s)
        await asyncio.gather(signalled, terminated, return_exceptions=True)
        for sig in _SIGNALS:
            loop.remove_signal_handler(sig)
    _log.info("service_stopped")
    return 0


def _announce(service: RunningService, settings: Settings) -> None:
    print(f"ibex-context: gRPC listening on {service.grpc_address}", flush=True)
    if service.grpc.health_address:
        print(f"ibex-context: gRPC health listening on {service.grpc.health_address}", flush=True)
    if service.http is not None:
        print(f"ibex-context: HTTP listening on {service.http.url}", flush=True)
    _log.info("service_started", extra={
        "grpc": service.grpc_address, "http": service.http.url if service.http else "",
        "retrieval_wall_ms": settings.retrieval_wall_ms,
        "directives": "embedded" if settings.uses_embedded_directives else "redis",
        "memories": "embedded" if settings.uses_embedded_memory else "http",
        "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
    })
    sys.stdout.flush()
