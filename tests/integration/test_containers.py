"""The composition root with real backends: selection by settings, opening, closing, overriding,
warm-up (no tenant named), caller authentication."""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

import pytest
import redis.asyncio as redis_asyncio
from dependency_injector import providers

from adapters.directive_cache import CachedDirectiveStore
from adapters.embedded.directive_store import EmbeddedDirectiveStore
from adapters.embedded.memory_store import EmbeddedMemoryStore
from adapters.json_model_catalog import JsonModelCatalog
from adapters.memory_http import HttpMemorySource
from adapters.redis_directive_store import DEFAULT_COOLDOWN_S, DEFAULT_MAX_COOLDOWN_S, RedisDirectiveStore
from domain.model.assembly import AssembleRequest
from domain.model.errors import UnknownModelError
from domain.model.messages import Message
from domain.relevance_policy import RelevancePolicy
from entrypoints.auth.grpc_auth import GrpcAuthenticator
from entrypoints.auth.http_auth import HttpAuthenticator
from entrypoints.containers import EMBEDDED_WORKERS, StartupError, build_container, open_application
from entrypoints.settings import Settings
from tests.fakes.clock import FixedClock
from tests.support.go_envelope import go_envelope
from tests.support.memory_server import MemoryServer
from tests.support.polling import until
from tests.support.principal_proofs import ed_entry, write_key_file
from tests.support.redis_proxy import HoldingRedisProxy
from tests.support.redis_server import RedisServer, free_port

ORG, AGENT = str(uuid.uuid4()), str(uuid.uuid4())


def request(model: str = "gpt-4o") -> AssembleRequest:
    return AssembleRequest(org_id=ORG, agent_id=AGENT, model=model, query="dark theme",
                           recent_messages=(Message("user", "hello"),))


async def test_the_embedded_backend_is_the_default_and_answers(tmp_path: Path) -> None:
    settings = Settings.from_env({"IBEX_CONTEXT_DATA_PATH": str(tmp_path / "data" / "ibex.db")})
    container = build_container(settings)
    app = await open_application(settings, container)
    try:
        assert isinstance(await container.adapters.directive_store(), EmbeddedDirectiveStore)
        assert isinstance(await container.adapters.memory_source(), EmbeddedMemoryStore)
        memories = await container.adapters.memory_source()
        await memories.add(org_id=ORG, agent_id=AGENT, content="The user likes the dark theme", category="preference",
                           confidence=0.9)
        result = await app.assemble.execute(request())
    finally:
        await app.close()
    assert (tmp_path / "data" / "ibex.db").exists()
    assert result.degradation_level == "L0" and result.memories_included == 1
    assert "dark theme" in result.assembled_context


async def test_redis_and_the_memory_service_are_chosen_by_their_urls(redis_url: str, tmp_path: Path) -> None:
    settings = Settings.from_env({
        "IBEX_CONTEXT_REDIS_URL": redis_url, "IBEX_CONTEXT_MEMORY_BASE_URL": "http://127.0.0.1:9",
        "IBEX_CONTEXT_MEMORY_API_TOKEN": "t", "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "unused.db"),
        "IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS": "500",
    })
    container = build_container(settings)
    app = await open_application(settings, container)
    try:
        assert isinstance(await container.adapters.directive_store(), CachedDirectiveStore)  # over Redis
        assert isinstance(await container.adapters.redis_directives(), RedisDirectiveStore)
        assert isinstance(await container.adapters.memory_source(), HttpMemorySource)
        result = await app.assemble.execute(request())  # the memory URL refuses connections: degraded, not failed
    finally:
        await app.close()
    assert result.degradation_level == "L2"
    assert {b.name: b.outcome for b in result.branches}["directive"] == "success"
    assert not (tmp_path / "unused.db").exists()  # the embedded file is never opened when not selected


def test_use_case_configuration_comes_from_the_settings() -> None:
    settings = Settings.from_env({
        "IBEX_CONTEXT_TIMEOUT": "45ms", "IBEX_CONTEXT_DEADLINE_MS": "30", "IBEX_CONTEXT_COLD_TIMEOUT_MS": "1s",
        "IBEX_CONTEXT_FORMATTER_NONCE_BYTES": "8", "IBEX_CONTEXT_HOT_LIMIT": "40", "IBEX_CONTEXT_COLD_LIMIT": "25",
        "IBEX_CONTEXT_SCORE_POLICY": "interim_v1", "IBEX_CONTEXT_RELEVANCE_FLOOR": "0.4",
        "IBEX_CONTEXT_RELEVANCE_SHARPNESS": "2", "IBEX_CONTEXT_HOT_SLOTS": "3", "IBEX_CONTEXT_CORE_SLOTS": "1",
    })
    container = build_container(settings)
    config = container.usecases.assemble.kwargs["config"]()
    assert config == settings.assembly_config()
    assert (config.wall_s, config.directive_timeout_s, config.hot_timeout_s, config.cold_timeout_s) == (0.030, 0.005, 0.015, 1.0)
    assert (config.nonce_bytes, config.hot_limit, config.cold_limit, config.deadline_headroom_s) == (8, 40, 25, 0.010)
    assert (config.score_policy, config.relevance) == ("interim_v1", RelevancePolicy(floor=0.4, sharpness=2.0, hot_slots=3, core_slots=1))
    assert container.usecases.search.kwargs["config"]() == settings.search_config()


async def test_a_provider_can_be_overridden_before_opening(tmp_path: Path) -> None:
    builtin = JsonModelCatalog.builtin()
    only_one = JsonModelCatalog({"gpt-4o": builtin.for_model("gpt-4o")}, {"o200k_base": builtin.family("o200k_base")})
    settings = Settings.from_env({"IBEX_CONTEXT_DATA_PATH": str(tmp_path / "ibex.db")})
    container = build_container(settings)
    container.adapters.catalog.override(providers.Object(only_one))
    app = await open_application(settings, container)
    try:
        assert app.catalog is only_one
        assert (await app.assemble.execute(request("gpt-4o"))).degradation_level == "L0"
        with pytest.raises(UnknownModelError, match="gpt-4o-mini"):
            await app.assemble.execute(request("gpt-4o-mini"))
    finally:
        await app.close()


async def test_a_bad_catalog_file_stops_start_up_naming_the_variable(tmp_path: Path) -> None:
    bad = tmp_path / "catalog.json"
    bad.write_text("{not json")
    settings = Settings.from_env({"IBEX_CONTEXT_CATALOG_PATH": str(bad), "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "ibex.db")})
    with pytest.raises(StartupError, match="^IBEX_CONTEXT_CATALOG_PATH: "):
        await open_application(settings)


async def test_an_unusable_data_path_stops_start_up_naming_the_variable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    settings = Settings.from_env({"IBEX_CONTEXT_DATA_PATH": str(blocker / "ibex.db")})
    with pytest.raises(StartupError, match="^IBEX_CONTEXT_DATA_PATH: "):
        await open_application(settings)


# ------------------------------------------------------------------ warm-up: no tenant named
def _sqlite_workers() -> set[str]:
    return {thread.name for thread in threading.enumerate() if thread.name.startswith("ibex-sqlite")}


async def test_warm_up_starts_every_embedded_worker_before_the_first_call(tmp_path: Path) -> None:
    settings = Settings.from_env({"IBEX_CONTEXT_DATA_PATH": str(tmp_path / "ibex.db")})
    before = _sqlite_workers()
    app = await open_application(settings)
    try:
        assert len(_sqlite_workers() - before) == EMBEDDED_WORKERS  # each with its prepared connection
    finally:
        await app.close()
    assert not _sqlite_workers() - before  # closed with the application


async def test_warm_up_asks_no_backend_about_any_tenant(private_redis: RedisServer, tmp_path: Path) -> None:
    """Redis gets a PING (a connection opened before the first call's 5 ms branch), no GET;
    the memory service nothing at all."""
    probe = redis_asyncio.from_url(private_redis.url)
    await probe.config_resetstat()
    with MemoryServer.running() as memory_server:
        memory_server.add_token("t", ORG)
        memory_server.add_agent(ORG, AGENT)
        settings = Settings.from_env({
            "IBEX_CONTEXT_REDIS_URL": private_redis.url, "IBEX_CONTEXT_MEMORY_BASE_URL": memory_server.base_url,
            "IBEX_CONTEXT_MEMORY_API_TOKEN": "t", "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "unused.db"),
            "IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS": "2s", "IBEX_CONTEXT_HOT_TIMEOUT_MS": "2s",
            "IBEX_CONTEXT_COLD_TIMEOUT_MS": "2s", "IBEX_CONTEXT_DEADLINE_MS": "5s", "IBEX_CONTEXT_TIMEOUT": "5s",
        })
        app = await open_application(settings)
        try:
            assert memory_server.connections_accepted == 0 and memory_server.requests() == ()
            stats = await probe.info("commandstats")
            assert "cmdstat_get" not in stats and stats["cmdstat_ping"]["calls"] >= 1  # a connection is open
            result = await app.assemble.execute(request())  # the first call connects, for its own tenant
        finally:
            await app.close()
        assert {r.endpoint for r in memory_server.requests()} == {"hot", "search"}
    assert (await probe.info("commandstats"))["cmdstat_get"]["calls"] == 1
    await probe.aclose()
    assert {b.name: b.outcome for b in result.branches} == {"directive": "success", "hot": "success", "cold": "success"}
    assert not (tmp_path / "unused.db").exists()  # and no embedded file to warm


async def test_an_unreachable_redis_at_start_up_degrades_instead_of_failing(tmp_path: Path) -> None:
    settings = Settings.from_env({"IBEX_CONTEXT_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
                                  "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "ibex.db")})
    app = await open_application(settings)  # the PING is refused: logged, not fatal
    try:
        result = await app.assemble.execute(request())
    finally:
        await app.close()
    directive = next(b for b in result.branches if b.name == "directive")
    assert directive.outcome == "error" and "PING" not in directive.detail


# ------------------------------------------------------------------ the directive cache
def subscription_up(app) -> float | None:  # type: ignore[no-untyped-def]
    return app.metrics.registry.get_sample_value("ibex_context_directive_subscription_up")


def redis_settings(url: str, tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({"IBEX_CONTEXT_REDIS_URL": url, "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "unused.db"),
                              "IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS": "2s", **env})


async def test_a_zero_ttl_turns_the_directive_cache_and_its_subscription_off(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    probe = redis_asyncio.from_url(private_redis.url)
    app = await open_application(redis_settings(private_redis.url, tmp_path, IBEX_CONTEXT_DIRECTIVE_CACHE_TTL_MS="0"))
    try:
        store = await app.container.adapters.directive_store()
        assert isinstance(store, RedisDirectiveStore) and store is await app.container.adapters.redis_directives()
        await app.assemble.execute(request())
        assert (await probe.info("commandstats"))["cmdstat_get"]["calls"] == 1  # the GET: connected by now
        assert await probe.execute_command("PUBSUB", "NUMPAT") == 0
        assert "cmdstat_psubscribe" not in await probe.info("commandstats")
        assert subscription_up(app) == 0
    finally:
        await app.close()
        await probe.aclose()


async def test_the_subscription_is_counted_and_its_transitions_logged_once_each(
    private_redis: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = await HoldingRedisProxy.start(private_redis.port)  # the whole service reaches Redis through it
    probe = redis_asyncio.from_url(private_redis.url)
    caplog.set_level(logging.INFO, logger="ibex_context")
    app = await open_application(redis_settings(proxy.url, tmp_path))
    try:
        store = await app.container.adapters.directive_store()
        assert isinstance(store, CachedDirectiveStore)
        await until(lambda: subscription_up(app) == 1, "the subscription confirmed")
        assert store.live and await probe.execute_command("PUBSUB", "NUMPAT") == 1
        await app.assemble.execute(request())
        await app.assemble.execute(request())
        results = {result: app.metrics.registry.get_sample_value("ibex_context_directive_cache_total",
                                                                 {"result": result}) for result in ("miss", "hit")}
        assert results == {"miss": 1.0, "hit": 1.0}
        proxy.refuse_connections(True)  # the feed's reconnects are refused (the store keeps its connection)
        assert await probe.execute_command("CLIENT", "KILL", "TYPE", "pubsub") == 1
        await until(lambda: subscription_up(app) == 0, "the subscription lost")
        await proxy.wait_for(lambda: proxy.refused >= 3, "three refused reconnects")
        await app.assemble.execute(request())
        assert app.metrics.registry.get_sample_value("ibex_context_directive_cache_total", {"result": "bypass"}) == 1
        proxy.refuse_connections(False)
        await until(lambda: subscription_up(app) == 1, "the subscription confirmed again")
        await probe.publish(f"directive_updates:{ORG}", "")
        await until(lambda: app.metrics.registry.get_sample_value(
            "ibex_context_directive_invalidations_total", {"scope": "org"}) == 1, "the invalidation counted")
    finally:
        await app.close()
        await proxy.close()
        await probe.aclose()
    events = [(record.getMessage(), record.levelname) for record in caplog.records
              if record.getMessage().startswith("directive_subscription_")]
    assert events == [("directive_subscription_up", "INFO"), ("directive_subscription_down", "WARNING"),
                      ("directive_subscription_up", "INFO"), ("directive_subscription_down", "INFO")]  # last: closed


# ------------------------------------------------------------------ caller authentication
def circuit_sample(app, name: str, state: str | None = None) -> float | None:  # type: ignore[no-untyped-def]
    labels = {} if state is None else {"state": state}
    return app.metrics.registry.get_sample_value(f"ibex_context_directive_circuit_{name}", labels)


async def test_the_directive_circuit_is_counted_and_its_opening_and_closing_logged_once_each(
    private_redis: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the composition root, the clock overridden: a directive GET held at the proxy runs
    out the branch budget (the store sees the branch's cancellation), twice, and the circuit opens; the next
    call's directive fails fast without reaching Redis, a failed probe re-opens it (no second
    warning), and a probe answered closes it and serves the directive again."""
    probe = redis_asyncio.from_url(private_redis.url)
    await probe.set(f"{ORG}:directive:{AGENT}", go_envelope("Be brief.", "system_first"))
    proxy = await HoldingRedisProxy.start(private_redis.port)
    clock = FixedClock()
    caplog.set_level(logging.INFO, logger="ibex_context")
    settings = redis_settings(proxy.url, tmp_path, IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS="200ms",
                              IBEX_CONTEXT_TIMEOUT="5s", IBEX_CONTEXT_DEADLINE_MS="5s")
    container = build_container(settings)
    container.adapters.clock.override(providers.Object(clock))
    app = await open_application(settings, container)

    async def directive_branch() -> tuple[str, str]:
        result = await app.assemble.execute(request())
        branch = next(b for b in result.branches if b.name == "directive")
        return branch.outcome, branch.detail

    try:
        assert circuit_sample(app, "open") == 0
        proxy.hold_gets(f"{ORG}:directive:{AGENT}")
        assert (await directive_branch())[0] == "timeout"
        assert circuit_sample(app, "open") == 0  # one failure: suspect, still closed
        assert (await directive_branch())[0] == "timeout"  # sent after the first failed: confirms it
        assert circuit_sample(app, "open") == 1 and circuit_sample(app, "transitions_total", "open") == 1
        commands = proxy.commands
        outcome, detail = await directive_branch()
        assert outcome == "error" and detail.startswith("directive store circuit open: ") and ORG not in detail
        assert proxy.commands == commands  # failed fast: Redis not asked
        clock.advance(DEFAULT_COOLDOWN_S)
        assert (await directive_branch())[0] == "timeout"  # the probe, held too
        assert circuit_sample(app, "transitions_total", "half_open") == 1
        assert circuit_sample(app, "transitions_total", "open") == 2 and circuit_sample(app, "open") == 1
        proxy.release()
        clock.advance(DEFAULT_MAX_COOLDOWN_S)
        result = await app.assemble.execute(request())
        assert {b.name: b.outcome for b in result.branches}["directive"] == "success"
        assert result.assembled_context.startswith("Be brief.")
        assert circuit_sample(app, "open") == 0 and circuit_sample(app, "transitions_total", "closed") == 1
    finally:
        await app.close()
        await proxy.close()
        await probe.aclose()
    events = [(record.getMessage(), record.levelname) for record in caplog.records
              if record.getMessage().startswith("directive_circuit_")]
    assert events == [("directive_circuit_open", "WARNING"), ("directive_circuit_closed", "INFO")]
    opened = next(record for record in caplog.records if record.getMessage() == "directive_circuit_open")
    assert opened.detail.startswith("interrupted while waiting for Redis") and opened.cooldown_ms == 250


def test_without_keys_or_certificates_there_is_no_caller_authentication() -> None:
    auth = build_container(Settings()).auth
    assert (auth.keyring(), auth.grpc_authenticator(), auth.http_authenticator()) == (None, None, None)
    assert (auth.grpc_credentials(), auth.http_tls()) == (None, {})


def test_principal_keys_give_both_edges_an_authenticator(tmp_path: Path) -> None:
    keys = write_key_file(tmp_path / "keys.json", ed_entry("k1"))
    auth = build_container(Settings.from_env({"IBEX_CONTEXT_PRINCIPAL_KEYS": str(keys)})).auth
    grpc_authenticator, http_authenticator = auth.grpc_authenticator(), auth.http_authenticator()
    assert isinstance(grpc_authenticator, GrpcAuthenticator) and grpc_authenticator.enabled
    assert isinstance(http_authenticator, HttpAuthenticator) and http_authenticator.enabled


def test_a_bad_key_file_stops_start_up_naming_the_variable(tmp_path: Path) -> None:
    bad = tmp_path / "keys.json"
    bad.write_text("{not json")
    with pytest.raises(StartupError, match="^IBEX_CONTEXT_PRINCIPAL_KEYS: "):
        build_container(Settings.from_env({"IBEX_CONTEXT_PRINCIPAL_KEYS": str(bad)})).auth.keyring()
