"""Composition root: Settings -> adapters -> use cases, caller authentication, tracing, the edges (dependency-injector).

``build_container(settings)`` gives a configured, not yet opened ``ApplicationContainer``; every
provider reads the one ``Settings`` value (its declarations are in ``entrypoints.settings``; the
use cases' configuration values come from ``Settings.assembly_config()`` / ``search_config()``,
restated nowhere here).

Backends are chosen by the settings: the directive store is Redis when ``redis_url`` is set (its
circuit breaker on the process clock, counted and logged: ``open_redis_directives``; behind the
in-process directive cache and its invalidation subscription unless its TTL is 0:
``open_directive_cache``), the embedded SQLite file otherwise; the memory source (and feedback sink) is the memory service over
HTTP when ``memory_base_url`` is set, the embedded file otherwise. Clients are async ``Resource``
providers: they open when first asked for and close in ``shutdown_resources()`` (``Application.close()``);
only the selected backends are ever opened. The embedded stores are also provided on their own
(``embedded_memories``, ``embedded_directives``) for the commands that manage the embedded file.
Tests swap a provider with ``.override(...)`` on the container before passing it to ``open_application``.

Caller authentication (``auth``: the principal key ring, TLS material, the gRPC and HTTP
authenticators) is provided here too, and the edges over an opened application (``Edges``,
``build_edges``): the gRPC servicer and server, the ASGI app, its guarded protocol, socket and
uvicorn server, built and never started; the process root (``entrypoints.cli.service``) starts
them. Nothing else in the process wires anything.

Tracing (``observability.tracing``) is a provider of its own: when it is on, the use case's stage
spans go through ``adapters.otel_tracing`` (the port's null tracer otherwise), and
``Application.close()`` flushes it last, with a bounded wait.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import grpc
from dependency_injector import containers, providers

from adapters.directive_cache import CachedDirectiveStore
from adapters.embedded.database import DEFAULT_WORKERS, EmbeddedDatabase
from adapters.embedded.directive_store import EmbeddedDirectiveStore
from adapters.embedded.memory_store import EmbeddedMemoryStore
from adapters.json_model_catalog import JsonModelCatalog
from adapters.memory_http import HttpMemorySource
from adapters.otel_tracing import OpenTelemetryStages
from adapters.redis_directive_store import RedisDirectiveStore, RedisInvalidations, backstop_timeout_s, org_and_key
from adapters.redis_directive_store.circuit import CLOSED as CIRCUIT_CLOSED, OPEN as CIRCUIT_OPEN
from adapters.redis_directive_store.invalidations import CLOSED
from adapters.secrets_nonce_source import SecretsNonceSource
from adapters.system_clock import SystemClock
from adapters.text_profiles import CachedTextProfiles
from adapters.token_counters import TokenCountersRegistry
from domain.usecases.assemble_context import AssembleContext
from domain.usecases.record_feedback import FeedbackConfig, RecordMemoryFeedback
from domain.usecases.search_memories import SearchMemories
from entrypoints.admission import Admission
from entrypoints.auth.grpc_auth import GrpcAuthenticator, server_credentials
from entrypoints.grpc_api.server import DEFAULT_GRACE_S, GrpcServer, build_server, connection_age_options
from entrypoints.grpc_api.servicer import ContextAssemblyServicer
from entrypoints.http_api.app import count_connection_errors, make_app
from entrypoints.http_api.protocol import guarded_protocol
from entrypoints.http_api.server import Readiness, build_http_server, open_http_socket
from entrypoints.auth.http_auth import HttpAuthenticator, uvicorn_ssl_options
from entrypoints.auth.keys import KeyRing, keyring_from_setting
from entrypoints.observability.metrics import ServiceMetrics
from entrypoints.observability.tracing import Tracing, open_tracing
from entrypoints.settings import Settings
from ports.clock import Clock
from ports.directive_store import DirectiveStore
from ports.errors import DirectiveStoreError
from ports.model_catalog import ModelCatalog
from ports.tracing import NO_TRACER, Tracer

WARM_UP_TIMEOUT_S = 2.0
EMBEDDED_WORKERS = DEFAULT_WORKERS  # worker threads (each with its SQLite connection) of the embedded file
_log = logging.getLogger("ibex_context")


class StartupError(RuntimeError):
    """A backend or credential could not be opened; the message is one line naming the variable."""


# ------------------------------------------------------------------ resource openers
async def open_embedded_database(settings: Settings) -> AsyncIterator[EmbeddedDatabase]:
    database = _named("IBEX_CONTEXT_DATA_PATH",
                      lambda: EmbeddedDatabase.open(settings.data_path, workers=EMBEDDED_WORKERS))
    try:
        yield database
    finally:
        await database.close()


async def open_redis_directives(settings: Settings, clock: Clock,
                                metrics: ServiceMetrics) -> AsyncIterator[RedisDirectiveStore]:
    """The Redis store, its circuit breaker on the process clock: its state is a gauge and a
    counter of transitions; it is logged once when it opens (a warning, with the failure) and
    once when it closes again, not at each failed probe in between."""
    last = [CIRCUIT_CLOSED]

    def on_circuit(state: str) -> None:
        metrics.directive_circuit(state)
        previous, last[0] = last[0], state
        if state == CIRCUIT_OPEN and previous == CIRCUIT_CLOSED:
            _log.warning("directive_circuit_open", extra={
                "detail": store.circuit.last_failure, "cooldown_ms": round(store.circuit.cooldown_s * 1000),
                "effect": "directive reads fail fast; one probe asks Redis after each cool-down"})
        elif state == CIRCUIT_CLOSED:
            _log.info("directive_circuit_closed", extra={"detail": "Redis answered again: directive reads resume"})

    store: RedisDirectiveStore = _named("IBEX_CONTEXT_REDIS_URL", lambda: RedisDirectiveStore.for_branch_timeout(
        settings.redis_url, branch_timeout_s=settings.directive_timeout_ms / 1000.0,
        monotonic=clock.monotonic, on_circuit=on_circuit))
    try:
        yield store
    finally:
        await store.close()


async def open_directive_cache(settings: Settings, store: RedisDirectiveStore, clock: Clock,
                               metrics: ServiceMetrics) -> AsyncIterator[DirectiveStore]:
    """The Redis store behind the in-process directive cache, fed by one PSUBSCRIBE per process
    (``adapters.directive_cache``, ``adapters.redis_directive_store.invalidations``); the store
    itself when ``IBEX_CONTEXT_DIRECTIVE_CACHE_TTL_MS`` is 0 (no cache, no subscription).

    The feed starts here, in the background (the cache is bypassed until its first subscription
    is confirmed), and is closed before the cache and the store. Lookups, subscription state and
    invalidations are counted; the subscription's down and up transitions are logged once each.
    """
    if not settings.uses_directive_cache:
        yield store
        return
    refresh_timeout_s = backstop_timeout_s(settings.directive_timeout_ms / 1000.0)  # the store's own socket bound
    cache = CachedDirectiveStore(store, clock, key_of=org_and_key, ttl_s=settings.directive_cache_ttl_s,
                                 max_entries=settings.directive_cache_entries, refresh_timeout_s=refresh_timeout_s,
                                 on_lookup=metrics.directive_cache_lookup)

    def on_invalidate(org_id: str | None) -> None:
        cache.invalidate(org_id)
        metrics.directive_invalidation(org_id)

    def on_state(live: bool, detail: str) -> None:
        cache.subscription_changed(live)
        metrics.directive_subscription(live)
        if live:
            _log.info("directive_subscription_up", extra={"detail": detail})
        else:
            _log.log(logging.INFO if detail == CLOSED else logging.WARNING, "directive_subscription_down",
                     extra={"detail": detail, "effect": "directive cache bypassed until resubscribed"})

    feed = _named("IBEX_CONTEXT_REDIS_URL", lambda: RedisInvalidations.from_url(
        settings.redis_url, on_invalidate=on_invalidate, on_state=on_state))
    feed.start()
    try:
        yield cache
    finally:
        try:
            await feed.close()
        finally:
            await cache.close()


async def open_http_memory(settings: Settings) -> AsyncIterator[HttpMemorySource]:
    source = _named("IBEX_CONTEXT_MEMORY_BASE_URL",
                    lambda: HttpMemorySource(settings.memory_base_url, settings.memory_api_token,
                                             max_body_bytes=settings.memory_max_body_bytes))
    try:
        yield source
    finally:
        await source.close()


def load_catalog(path: str) -> ModelCatalog:
    if not path:
        return _named("built-in model catalog", JsonModelCatalog.builtin)
    return _named("IBEX_CONTEXT_CATALOG_PATH", lambda: JsonModelCatalog.from_path(path))


def load_keyring(settings: Settings) -> KeyRing | None:
    """The principal key ring (None: no principal keys configured); KeyFileError names the variable."""
    return _checked(lambda: keyring_from_setting(settings.principal_keys))


def load_grpc_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS / mTLS credentials of the gRPC port (None: plaintext); TlsConfigError names the variable."""
    return _checked(lambda: server_credentials(settings.tls_cert, settings.tls_key, settings.tls_client_ca))


def load_http_tls(settings: Settings) -> dict[str, Any]:
    """uvicorn's TLS options for the HTTP port (empty: plaintext); the same files as gRPC."""
    return _checked(lambda: uvicorn_ssl_options(settings.tls_cert, settings.tls_key, settings.tls_client_ca))


def build_grpc_authenticator(keyring: KeyRing | None, metrics: ServiceMetrics,
                             settings: Settings) -> GrpcAuthenticator | None:
    """Signed-principal authentication of gRPC calls; None when no principal keys are configured."""
    if keyring is None:
        return None
    return GrpcAuthenticator(keyring, on_failure=metrics.auth_failure, max_lifetime=settings.principal_max_lifetime)


def build_http_authenticator(keyring: KeyRing | None, metrics: ServiceMetrics,
                             settings: Settings) -> HttpAuthenticator | None:
    """Signed-principal authentication of HTTP requests; None when no principal keys are configured."""
    if keyring is None:
        return None
    return HttpAuthenticator(keyring, on_failure=metrics.auth_failure, max_lifetime=settings.principal_max_lifetime)


def tracing_for(settings: Settings, metrics: ServiceMetrics) -> Tracing:
    """The process's tracing (off, no SDK imported, without an endpoint); drops and exports are counted."""
    return open_tracing(settings, on_drop=metrics.trace_span_dropped, on_export=metrics.trace_export)


def tracer_for_stages(tracing: Tracing) -> Tracer:
    """The use case's stage spans: through the SDK when tracing is on, the port's null tracer otherwise."""
    return NO_TRACER if tracing.tracer is None else OpenTelemetryStages(tracing.tracer)


def _named(variable: str, build: Callable[[], Any]) -> Any:
    try:
        return build()
    except Exception as exc:  # start-up only: whatever the adapter raised, name the variable
        raise StartupError(f"{variable}: {exc}") from exc


def _checked(build: Callable[[], Any]) -> Any:
    try:
        return build()
    except ValueError as exc:  # TlsConfigError, KeyFileError: their messages name the variable
        raise StartupError(str(exc)) from None


# ------------------------------------------------------------------ containers
class Adapters(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    tracing = providers.Dependency(instance_of=Tracing)
    metrics = providers.Dependency(instance_of=ServiceMetrics)

    clock = providers.Singleton(SystemClock)
    nonces = providers.Singleton(SecretsNonceSource)
    text_profiles = providers.Singleton(CachedTextProfiles)
    embedded_database = providers.Resource(open_embedded_database, settings)
    embedded_directives = providers.Singleton(EmbeddedDirectiveStore, embedded_database, clock)
    embedded_memories = providers.Singleton(EmbeddedMemoryStore, embedded_database, clock)
    redis_directives = providers.Resource(open_redis_directives, settings, clock, metrics)
    directive_store = providers.Selector(
        settings.provided.directive_backend,
        redis=providers.Resource(open_directive_cache, settings, redis_directives, clock, metrics),
        embedded=embedded_directives,
    )
    memory_source = providers.Selector(
        settings.provided.memory_backend,
        http=providers.Resource(open_http_memory, settings),
        embedded=embedded_memories,
    )
    catalog = providers.Singleton(load_catalog, settings.provided.catalog_path)
    catalog_file = providers.Factory(JsonModelCatalog.from_path)  # ``catalog diff``: any catalog file, unchecked
    counters = providers.Singleton(TokenCountersRegistry)
    stage_tracer = providers.Singleton(tracer_for_stages, tracing)


class UseCases(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    adapters = providers.DependenciesContainer()

    assemble = providers.Singleton(
        AssembleContext,
        directives=adapters.directive_store,
        memories=adapters.memory_source,
        catalog=adapters.catalog,
        counters=adapters.counters,
        clock=adapters.clock,
        nonces=adapters.nonces,
        profiles=adapters.text_profiles,
        tracer=adapters.stage_tracer,
        config=settings.provided.assembly_config.call(),
    )
    search = providers.Singleton(
        SearchMemories, memories=adapters.memory_source, clock=adapters.clock,
        config=settings.provided.search_config.call(),
    )
    feedback = providers.Singleton(
        RecordMemoryFeedback, sink=adapters.memory_source, clock=adapters.clock, nonces=adapters.nonces,
        config=providers.Factory(FeedbackConfig),  # retry policy: the domain's own, not a setting
    )


class Auth(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    metrics = providers.Dependency(instance_of=ServiceMetrics)

    keyring = providers.Singleton(load_keyring, settings)
    grpc_credentials = providers.Singleton(load_grpc_credentials, settings)
    http_tls = providers.Singleton(load_http_tls, settings)
    grpc_authenticator = providers.Singleton(build_grpc_authenticator, keyring, metrics, settings)
    http_authenticator = providers.Singleton(build_http_authenticator, keyring, metrics, settings)


class ApplicationContainer(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    metrics = providers.Singleton(ServiceMetrics)
    tracing = providers.Singleton(tracing_for, settings, metrics)
    adapters = providers.Container(Adapters, settings=settings, tracing=tracing, metrics=metrics)
    usecases = providers.Container(UseCases, settings=settings, adapters=adapters)
    auth = providers.Container(Auth, settings=settings, metrics=metrics)


def build_container(settings: Settings) -> ApplicationContainer:
    """A configured, not yet opened container (override providers on it before opening)."""
    return ApplicationContainer(settings=providers.Object(settings))


# ------------------------------------------------------------------ the opened application
@attrs.frozen
class Application:
    """Opened use cases and shared services; ``close()`` releases every opened client."""

    settings: Settings
    assemble: AssembleContext
    search: SearchMemories
    feedback: RecordMemoryFeedback
    catalog: ModelCatalog
    metrics: ServiceMetrics
    container: ApplicationContainer = attrs.field(repr=False)
    tracing: Tracing = attrs.field(factory=Tracing, repr=False)

    async def close(self) -> None:
        try:
            await shut_down(self.container)
        finally:
            await self.tracing.close()  # last: the spans of the final calls are flushed (bounded)


async def open_application(settings: Settings, container: ApplicationContainer | None = None) -> Application:
    """Open the selected backends, build the use cases and warm up (``warm_up``).

    Raises:
        StartupError: a backend could not be opened (one line naming the variable).
    """
    container = container or build_container(settings)
    tracing = container.tracing()
    try:
        assemble = await _resolved(container.usecases.assemble())
        search = await _resolved(container.usecases.search())
        feedback = await _resolved(container.usecases.feedback())
        catalog = await _resolved(container.adapters.catalog())
        await warm_up(container)
    except BaseException:
        await shut_down(container)
        await tracing.close()
        raise
    return Application(settings, assemble, search, feedback, catalog, container.metrics(), container, tracing)


async def warm_up(container: ApplicationContainer) -> None:
    """Pay, before serving, what the first calls would otherwise pay inside their 5-15 ms branch
    budgets, without asking any backend about any tenant:

    * the tokenizer vocabularies: every exact counter is built (the encodings loaded and parsed);
    * the embedded backend, when one of the stores is embedded: every worker thread of the SQLite
      file is started and its connection opened and prepared (FTS5 scratch tables), as the first
      store calls would;
    * Redis: one pooled connection opened with a PING (no key read). A Redis that does not answer
      is logged and left to the directive branch, which degrades without it. When it answers and
      the directive cache is on, its first subscription (a PSUBSCRIBE, no tenant named) is
      awaited as long again, so the first calls use the cache; if it is not confirmed in time that
      is logged and the cache stays bypassed until it is.

    The memory service is left to connect on its first call: its API has no tenant-free request
    to open a connection with.
    """
    container.adapters.counters().preload()
    settings = container.settings()
    if settings.uses_embedded_directives or settings.uses_embedded_memory:
        await warm_embedded_database(await _resolved(container.adapters.embedded_database()))
    if not settings.uses_embedded_directives:
        store = await _resolved(container.adapters.redis_directives())
        try:
            await store.ping(timeout_s=WARM_UP_TIMEOUT_S)
        except DirectiveStoreError as exc:
            _log.warning("warm_up_incomplete", extra={"what": "redis", "detail": str(exc)})
            return
        cache = await _resolved(container.adapters.directive_store())
        if isinstance(cache, CachedDirectiveStore) and not await cache.until_live(timeout_s=WARM_UP_TIMEOUT_S):
            _log.warning("warm_up_incomplete", extra={
                "what": "redis subscription",
                "detail": f"PSUBSCRIBE not confirmed within {WARM_UP_TIMEOUT_S:g} s: the directive cache is "
                          "bypassed until it is"})


async def warm_embedded_database(database: EmbeddedDatabase, workers: int = EMBEDDED_WORKERS,
                                 timeout_s: float = WARM_UP_TIMEOUT_S) -> None:
    """Start ``workers`` worker threads of ``database``, each opening its connection.

    Each call waits at a barrier until all have started, so the calls cannot share a thread; a
    barrier that times out (fewer threads than ``workers``) only leaves the rest to the first calls.
    """
    barrier = threading.Barrier(workers)

    def meet(_connection: object) -> None:
        barrier.wait(timeout_s)

    outcomes = await asyncio.gather(*(database.run(meet) for _ in range(workers)), return_exceptions=True)
    failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if failures:
        _log.warning("warm_up_incomplete", extra={"what": "embedded database", "detail": repr(failures[0])})


async def shut_down(container: ApplicationContainer) -> None:
    """Close every opened resource of ``container`` (the backends' clients, the embedded file)."""
    result = container.shutdown_resources()
    if result is not None:
        await result


async def _resolved(value: Any) -> Any:
    """A provider's value, awaited when the provider is async (it depends on an async resource)."""
    if hasattr(value, "__await__"):
        return await value
    return value


# ------------------------------------------------------------------ the edges over an opened application
def build_grpc_server(servicer: ContextAssemblyServicer, settings: Settings, credentials: Any) -> GrpcServer:
    """The gRPC server bound to ``IBEX_CONTEXT_GRPC_ADDR`` (not started), with the health-only
    listener when ``IBEX_CONTEXT_HEALTH_ADDR`` is set (no bind guard: it answers health only).

    Raises:
        ServerStartError: the bind guard refused the address, or an address could not be bound.
    """
    server, _port = build_server(
        servicer, settings.grpc_addr, has_auth=settings.has_auth, allow_insecure_bind=settings.allow_insecure_bind,
        credentials=credentials,
        extra_options=connection_age_options(settings.max_connection_age_ms / 1000.0,
                                             settings.max_connection_age_grace_ms / 1000.0),
    )
    if settings.health_addr:
        server.add_health_listener(settings.health_addr)
    return server


def build_admission(settings: Settings, metrics: ServiceMetrics) -> Admission:
    """The process's admission control (``entrypoints.admission``), counting refusals in the metrics."""
    return Admission(max_in_flight=settings.max_in_flight, max_wait_s=settings.admission_wait_ms / 1000.0,
                     min_deadline_s=settings.min_start_deadline_ms / 1000.0,
                     busy_deadline_s=max(settings.busy_start_deadline_ms, settings.min_start_deadline_ms) / 1000.0,
                     on_shed=metrics.call_shed)


class Edges(containers.DeclarativeContainer):
    """What the edges run, over one opened Application (``app``) and its container's ``auth``."""

    app = providers.Dependency(instance_of=Application)
    auth = providers.DependenciesContainer()
    grace_s = providers.Object(DEFAULT_GRACE_S)  # in-flight calls' time to finish at shutdown (uvicorn's too)

    settings = app.provided.settings
    readiness = providers.Singleton(Readiness)
    admission = providers.Singleton(build_admission, settings, app.provided.metrics)  # one, shared by both edges
    servicer = providers.Singleton(
        ContextAssemblyServicer,
        assemble=app.provided.assemble, search=app.provided.search, feedback=app.provided.feedback,
        metrics=app.provided.metrics, authenticator=auth.grpc_authenticator,
        deadline_headroom_s=settings.deadline_headroom_s, tracing=app.provided.tracing.edge, admission=admission,
    )
    grpc_server = providers.Singleton(build_grpc_server, servicer, settings, auth.grpc_credentials)
    asgi_app = providers.Singleton(
        make_app,
        assemble=app.provided.assemble, search=app.provided.search, feedback=app.provided.feedback,
        metrics=app.provided.metrics, readiness=readiness,
        authenticator=auth.http_authenticator, admission=admission,
        read_timeout_s=settings.http_read_timeout_s, tracing=app.provided.tracing.edge,
    )
    http_protocol = providers.Singleton(
        guarded_protocol, read_timeout_s=settings.http_read_timeout_s,
        max_connections=settings.http_max_connections,
        on_error=providers.Callable(count_connection_errors, app.provided.metrics),
    )
    http_socket = providers.Singleton(open_http_socket, settings)
    http_server = providers.Singleton(build_http_server, asgi_app, http_protocol, auth.http_tls, grace_s)


def build_edges(app: Application, *, grace_s: float = DEFAULT_GRACE_S) -> Edges:
    """The edges' container over ``app`` (its container provides caller authentication)."""
    return Edges(app=providers.Object(app), auth=app.container.auth, grace_s=providers.Object(grace_s))
