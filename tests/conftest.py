"""Shared fixtures: a real redis-server for the session, and the sanity guard on package names."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as redis_asyncio

from tests.support.redis_server import RedisServer

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--redis-url", default=None, help="use this Redis instead of spawning redis-server")


def pytest_sessionstart(session: pytest.Session) -> None:
    # Our top-level packages share names with PyPI distributions (domain, adapters, entrypoints...):
    # make sure every one of them is ours before any test runs.
    for name in ("domain", "ports", "adapters", "entrypoints", "contracts", "conformance"):
        module = importlib.import_module(name)
        location = Path(module.__file__ or "").resolve()
        if REPO_ROOT not in location.parents:
            raise pytest.UsageError(f"package {name!r} resolves outside the repository: {location}")


@pytest.fixture(scope="session")
def redis_server(request: pytest.FixtureRequest) -> Iterator[RedisServer | None]:
    """The session's private redis-server (None when --redis-url points at an existing one)."""
    if request.config.getoption("--redis-url"):
        yield None
        return
    server = RedisServer.launch()
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_url(request: pytest.FixtureRequest, redis_server: RedisServer | None) -> str:
    return request.config.getoption("--redis-url") or redis_server.url  # type: ignore[union-attr]


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[redis_asyncio.Redis]:
    """A raw client on the test Redis; the database is flushed after each test."""
    client = redis_asyncio.from_url(redis_url)
    yield client
    await client.flushdb()
    await client.aclose()


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """A redis-server of the test's own, which the test may stop and restart."""
    server = RedisServer.launch()
    yield server
    server.close()
