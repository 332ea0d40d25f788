"""Composition root: Settings -> adapters -> use cases (dependency-injector).

Backends are chosen by the settings: the directive store is Redis when ``redis_url`` is set, the
embedded SQLite file otherwise; the memory source (and feedback sink) is the memory service over
HTTP when ``memory_base_url`` is set, the embedded file otherwise. Clients are async ``Resource``
providers: they open when the application is opened and close in ``Application.close()``; only
the selected backends are ever opened. Tests swap a provider with ``.override(...)`` on the
container returned by ``build_container`` before passing it to ``open_application``.

Tracing (``observability.tracing``) is opened by ``open_application`` from the settings, beside
the container: when it is on, the use case's stage spans go through ``adapters.otel_tracing``
(the ``stage_tracer`` provider, the port's null tracer otherwise), and ``Application.close()``
flushes it last, with a bounded wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
from dependency_injector import containers, providers

from adapters.embedded.database import EmbeddedDatabase
from adapters.embedded.directive_store import EmbeddedDirectiveStore
from adapters.embedded.memory_store import EmbeddedMemoryStore
from adapters.json_model_catalog import JsonModelCatalog
from adapters.memory_http import HttpMemorySource
from adapters.otel_tracing import OpenTelemetryStages
from adapters.redis_directive_store import RedisDirectiveStore
from adapters.secrets_nonce_source import SecretsNonceSource
from adapters.text_profiles import CachedTextProfiles
from adapters.system_clock import SystemClock
from adapters.token_counters import TokenCountersRegistry
from domain.relevance_policy import RelevancePolicy
from domain.usecases.assemble_context import AssembleContext, AssemblyConfig
from domain.usecases.record_feedback import FeedbackConfig, RecordMemoryFeedback
from domain.usecases.search_memories import SearchConfig, SearchMemories
from entrypoints.observability.metrics import ServiceMetrics
from entrypoints.observability.tracing import Tracing, open_tracing
from entrypoints.settings import Settings
from domain.model.memory import HotQuery, SearchQuery
from ports.directive_store import DirectiveStore
from ports.memory_source import MemorySource
from ports.model_catalog import ModelCatalog
from ports.tracing import NO_TRACER


WARM_UP_TIMEOUT_S = 2.0
WARM_UP_CALLS = 2
_NIL_ID = "00000000-0000-0000-0000-000000000000"


class StartupError(RuntimeError):
    """A backend could not be opened; the message is one line naming the variable."""


# ------------------------------------------------------------------ resource openers
async def open_embedded_database(path: str) -> AsyncIterator[EmbeddedDatabase]:
    database = _named("IBEX_CONTEXT_DATA_PATH", lambda: EmbeddedDatabase.open(path))
    try:
        yield database
    finally:
        await database.close()


async def open_redis_directives(url: str, branch_timeout_s: float) -> AsyncIterator[RedisDirectiveStore]:
    store = _named("IBEX_CONTEXT_REDIS_URL", lambda: RedisDirectiveStore.for_branch_timeout(url, branch_timeout_s=branch_timeout_s))
    try:
        yield store
    finally:
        await store.close()


async def open_http_memory(base_url: str, api_token: str) -> AsyncIterator[HttpMemorySource]:
    source = _named("IBEX_CONTEXT_MEMORY_BASE_URL", lambda: HttpMemorySource(base_url, api_token))
    try:
        yield source
    finally:
        await source.close()


def load_catalog(path: str) -> ModelCatalog:
    if not path:
        return _named("built-in model catalog", JsonModelCatalog.builtin)
    return _named("IBEX_CONTEXT_CATALOG_PATH", lambda: JsonModelCatalog.from_path(path))


def open_token_counters() -> Iterator[TokenCountersRegistry]:
    registry = TokenCountersRegistry()
    registry.preload()  # no request pays the vocabulary load
    yield registry


def _named(variable: str, build: Any) -> Any:
    try:
        return build()
    except Exception as exc:  # start-up only: whatever the adapter raised, name the variable
        raise StartupError(f"{variable}: {exc}") from exc


# ------------------------------------------------------------------ containers
class Adapters(containers.DeclarativeContainer):
    config = providers.Configuration()

    clock = providers.Singleton(SystemClock)
    nonces = providers.Singleton(SecretsNonceSource)
    text_profiles = providers.Singleton(CachedTextProfiles)
    embedded_database = providers.Resource(open_embedded_database, path=config.data_path)
    directive_store = providers.Selector(
        config.directive_backend,
        redis=providers.Resource(open_redis_directives, url=config.redis_url, branch_timeout_s=config.directive_timeout_s),
        embedded=providers.Singleton(EmbeddedDirectiveStore, embedded_database, clock),
    )
    memory_source = providers.Selector(
        config.memory_backend,
        http=providers.Resource(open_http_memory, base_url=config.memory_base_url, api_token=config.memory_api_token),
        embedded=providers.Singleton(EmbeddedMemoryStore, embedded_database, clock),
    )
    catalog = providers.Singleton(load_catalog, path=config.catalog_path)
    counters = providers.Resource(open_token_counters)
    stage_tracer = providers.Object(NO_TRACER)  # open_application: OpenTelemetryStages when tracing is on


class UseCases(containers.DeclarativeContainer):
    config = providers.Configuration()
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
        config=providers.Factory(
            AssemblyConfig,
            wall_s=config.wall_s,
            directive_timeout_s=config.directive_timeout_s,
            hot_timeout_s=config.hot_timeout_s,
            cold_timeout_s=config.cold_timeout_s,
            nonce_bytes=config.nonce_bytes,
            hot_limit=config.hot_limit,
            cold_limit=config.cold_limit,
            deadline_headroom_s=config.deadline_headroom_s,
            score_policy=config.score_policy,
            relevance=providers.Factory(
                RelevancePolicy,
                floor=config.relevance.floor,
                sharpness=config.relevance.sharpness,
                hot_slots=config.relevance.hot_slots,
                core_slots=config.relevance.core_slots,
            ),
        ),
    )
    search = providers.Singleton(
        SearchMemories,
        memories=adapters.memory_source,
        clock=adapters.clock,
        config=providers.Factory(SearchConfig, timeout_s=config.cold_timeout_s, deadline_headroom_s=config.deadline_headroom_s),
    )
    feedback = providers.Singleton(
        RecordMemoryFeedback, sink=adapters.memory_source, clock=adapters.clock, nonces=adapters.nonces,
        config=providers.Factory(FeedbackConfig),
    )


class ApplicationContainer(containers.DeclarativeContainer):
    config = providers.Configuration(strict=True)
    adapters = providers.Container(Adapters, config=config.adapters)
    usecases = providers.Container(UseCases, config=config.usecases, adapters=adapters)
    metrics = providers.Singleton(ServiceMetrics)


def container_config(settings: Settings) -> dict[str, Any]:
    """The container's configuration tree, derived from the settings only."""
    return {
        "adapters": {
            "directive_backend": "embedded" if settings.uses_embedded_directives else "redis",
            "memory_backend": "embedded" if settings.uses_embedded_memory else "http",
            "data_path": settings.data_path,
            "redis_url": settings.redis_url,
            "directive_timeout_s": settings.directive_timeout_ms / 1000.0,
            "memory_base_url": settings.memory_base_url,
            "memory_api_token": settings.memory_api_token,
            "catalog_path": settings.catalog_path,
        },
        "usecases": {
            "wall_s": settings.retrieval_wall_ms / 1000.0,
            "directive_timeout_s": settings.directive_timeout_ms / 1000.0,
            "hot_timeout_s": settings.hot_timeout_ms / 1000.0,
            "cold_timeout_s": settings.cold_timeout_ms / 1000.0,
            "nonce_bytes": settings.formatter_nonce_bytes,
            "hot_limit": settings.hot_limit,
            "cold_limit": settings.cold_limit,
            "deadline_headroom_s": settings.deadline_headroom_ms / 1000.0,
            "score_policy": settings.score_policy,
            "relevance": {
                "floor": settings.relevance_floor,
                "sharpness": settings.relevance_sharpness,
                "hot_slots": settings.hot_slots,
                "core_slots": settings.core_slots,
            },
        },
    }


def build_container(settings: Settings) -> ApplicationContainer:
    """A configured, not yet opened container (override providers on it before opening)."""
    container = ApplicationContainer()
    container.config.from_dict(container_config(settings))
    return container


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
            result = self.container.shutdown_resources()
            if result is not None:
                await result
        finally:
            await self.tracing.close()  # last: the spans of the final calls are flushed (bounded)


async def open_application(settings: Settings, container: ApplicationContainer | None = None) -> Application:
    """Open the selected backends and build the use cases.

    Raises:
        StartupError: a backend could not be opened (one line naming the variable).
    """
    container = container or build_container(settings)
    metrics = container.metrics()
    tracing = open_tracing(settings, on_drop=metrics.trace_span_dropped, on_export=metrics.trace_export)
    if tracing.tracer is not None:
        container.adapters.stage_tracer.override(providers.Object(OpenTelemetryStages(tracing.tracer)))
    try:
        assemble = await _resolved(container.usecases.assemble())
        search = await _resolved(container.usecases.search())
        feedback = await _resolved(container.usecases.feedback())
        catalog = await _resolved(container.adapters.catalog())
        await warm_up(await _resolved(container.adapters.directive_store()), await _resolved(container.adapters.memory_source()))
    except BaseException:
        result = container.shutdown_resources()
        if result is not None:
            await result
        await tracing.close()
        raise
    return Application(settings, assemble, search, feedback, catalog, metrics, container, tracing)


async def warm_up(directives: DirectiveStore, memories: MemorySource) -> None:
    """Open the backends' first connections (and the embedded worker threads) before serving, so
    that the first real calls do not pay connection set-up inside their 5-15 ms branch budgets.
    The calls name a tenant that cannot exist; their answers and failures are irrelevant."""
    calls = [directives.get(_NIL_ID, _NIL_ID, timeout_s=WARM_UP_TIMEOUT_S) for _ in range(WARM_UP_CALLS)]
    calls += [memories.hot(HotQuery(_NIL_ID, _NIL_ID, limit=1), timeout_s=WARM_UP_TIMEOUT_S) for _ in range(WARM_UP_CALLS)]
    calls += [
        memories.search(SearchQuery(_NIL_ID, _NIL_ID, "warm up", limit=1), timeout_s=WARM_UP_TIMEOUT_S)
        for _ in range(WARM_UP_CALLS)
    ]
    await asyncio.gather(*calls, return_exceptions=True)


async def _resolved(value: Any) -> Any:
    """A provider's value, awaited when the provider is async (it depends on an async resource)."""
    if hasattr(value, "__await__"):
        return await value
    return value
