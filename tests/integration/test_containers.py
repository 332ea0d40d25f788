"""The composition root with real backends: selection by settings, opening, closing, overriding."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from dependency_injector import providers

from adapters.embedded.directive_store import EmbeddedDirectiveStore
from adapters.embedded.memory_store import EmbeddedMemoryStore
from adapters.json_model_catalog import JsonModelCatalog
from adapters.memory_http import HttpMemorySource
from adapters.redis_directive_store import RedisDirectiveStore
from domain.model.assembly import AssembleRequest
from domain.model.errors import UnknownModelError
from domain.model.messages import Message
from domain.relevance_policy import RelevancePolicy
from entrypoints.containers import StartupError, build_container, container_config, open_application
from entrypoints.settings import Settings

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
        assert isinstance(await container.adapters.directive_store(), RedisDirectiveStore)
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
    usecases = container_config(settings)["usecases"]
    assert usecases == {"wall_s": 0.030, "directive_timeout_s": 0.005, "hot_timeout_s": 0.015, "cold_timeout_s": 1.0,
                        "nonce_bytes": 8, "hot_limit": 40, "cold_limit": 25, "deadline_headroom_s": 0.005,
                        "score_policy": "interim_v1",
                        "relevance": {"floor": 0.4, "sharpness": 2.0, "hot_slots": 3, "core_slots": 1}}
    container = build_container(settings)
    config = container.usecases.assemble.kwargs["config"]()
    assert (config.score_policy, config.relevance) == ("interim_v1", RelevancePolicy(floor=0.4, sharpness=2.0, hot_slots=3, core_slots=1))


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
