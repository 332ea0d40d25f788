"""RedisDirectiveStore behind a real Redis Sentinel (and over TLS) on loopback.

The failover test keeps reading two tenants' directives through the store while a sentinel
promotes the replica (``SENTINEL FAILOVER``): every answer is its own tenant's, reads resume within
5 s, and once the old master is gone the store still reads, so it did move to the new master.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from adapters.redis_directive_store import RedisDirectiveStore
from entrypoints.containers import StartupError, open_application
from entrypoints.settings import Settings
from ports.errors import DirectiveStoreError
from tests.support.go_envelope import go_envelope
from tests.support.redis_sentinel import MASTER_PASSWORD, SERVICE, SentinelCluster, TlsRedis
from tests.support.tls_certs import make_pki

pytestmark = pytest.mark.redis

TENANTS = {  # (org, agent) -> the directive only that tenant may ever read
    (str(uuid.uuid5(uuid.NAMESPACE_URL, "org-a")), str(uuid.uuid5(uuid.NAMESPACE_URL, "agent-a"))): "Tenant A rules.",
    (str(uuid.uuid5(uuid.NAMESPACE_URL, "org-b")), str(uuid.uuid5(uuid.NAMESPACE_URL, "agent-b"))): "Tenant B rules.",
}
BRANCH_TIMEOUT_S = 0.05
RESUME_BOUND_S = 5.0


@pytest.fixture
def cluster() -> Iterator[SentinelCluster]:
    cluster = SentinelCluster.launch()
    master = cluster.master.client()
    for (org, agent), content in TENANTS.items():
        master.set(f"{org}:directive:{agent}", go_envelope(content, "system_first"))
    assert master.execute_command("WAIT", 1, 5000) == 1  # the replica has both before any failover
    yield cluster
    cluster.close()


@pytest.fixture
async def store(cluster: SentinelCluster) -> AsyncIterator[RedisDirectiveStore]:
    store = RedisDirectiveStore.for_branch_timeout(cluster.url, branch_timeout_s=BRANCH_TIMEOUT_S)
    yield store
    await store.close()


async def test_reads_through_the_sentinels(store: RedisDirectiveStore) -> None:
    for (org, agent), content in TENANTS.items():
        directive = await store.get(org, agent, timeout_s=1.0)
        assert directive is not None and directive.content == content


async def test_a_dead_first_sentinel_is_skipped(cluster: SentinelCluster) -> None:
    cluster.sentinels[0].stop()
    store = RedisDirectiveStore.for_branch_timeout(cluster.url, branch_timeout_s=BRANCH_TIMEOUT_S)
    try:
        (org, agent), content = next(iter(TENANTS.items()))
        directive = await store.get(org, agent, timeout_s=1.0)
        assert directive is not None and directive.content == content
    finally:
        await store.close()


async def test_a_wrong_master_password_is_an_error_not_a_hang(cluster: SentinelCluster) -> None:
    url = cluster.url.replace(f":{MASTER_PASSWORD}@", ":wrong@")
    store = RedisDirectiveStore.for_branch_timeout(url, branch_timeout_s=BRANCH_TIMEOUT_S)
    try:
        with pytest.raises(DirectiveStoreError) as excinfo:
            (org, agent) = next(iter(TENANTS))
            await store.get(org, agent, timeout_s=1.0)
        assert "wrong" not in str(excinfo.value)
    finally:
        await store.close()


async def test_failover_reads_resume_within_5_s_and_never_cross_tenants(
    cluster: SentinelCluster, store: RedisDirectiveStore
) -> None:
    outcomes: list[tuple[float, str]] = []  # (monotonic time, "ok" or the error type)
    crossed: list[tuple[tuple[str, str], str]] = []
    stop = asyncio.Event()

    async def reader() -> None:
        tenants = list(TENANTS.items())
        index = 0
        while not stop.is_set():
            (org, agent), content = tenants[index % len(tenants)]
            index += 1
            try:
                directive = await store.get(org, agent, timeout_s=BRANCH_TIMEOUT_S)
            except DirectiveStoreError as exc:
                outcomes.append((time.monotonic(), type(exc).__name__))
            else:
                if directive is None or directive.content != content:
                    crossed.append(((org, agent), directive.content if directive else "<missing>"))
                outcomes.append((time.monotonic(), "ok"))
            await asyncio.sleep(0.005)

    async def reads_after(moment: float, count: int) -> None:
        """Until ``count`` reads succeeded after ``moment`` (a hang guard, not a timing figure)."""
        async with asyncio.timeout(60):
            while sum(1 for t, outcome in outcomes if outcome == "ok" and t > moment) < count:
                await asyncio.sleep(0.01)

    task = asyncio.create_task(reader())
    await reads_after(0.0, 20)
    old_master_port = cluster.master_port()
    started = time.monotonic()
    await asyncio.to_thread(cluster.failover)
    switched = time.monotonic()
    assert cluster.master_port() == cluster.replica.port != old_master_port
    await reads_after(switched, 20)
    cluster.master.stop()  # from here only the new master can answer
    killed = time.monotonic()
    await reads_after(killed, 20)
    stop.set()
    await task

    assert crossed == []
    successes = [t for t, outcome in outcomes if outcome == "ok"]
    assert successes and successes[0] < started, "reads worked before the failover"
    assert sum(t > killed for t in successes) >= 20, "reads resumed on the new master"
    gaps = [b - a for a, b in zip([started, *successes], successes) if b > started]
    assert max(gaps) < RESUME_BOUND_S, f"longest gap without a read {max(gaps):.2f} s"
    failures_after = [t for t, outcome in outcomes if outcome != "ok" and t > killed + RESUME_BOUND_S]
    assert failures_after == []
    print(f"failover took {switched - started:.2f} s; longest read gap {max(gaps) * 1000:.0f} ms; "
          f"{len(outcomes) - len(successes)} failed reads of {len(outcomes)}")


async def test_the_composition_root_opens_a_sentinel_url(cluster: SentinelCluster, tmp_path: Path) -> None:
    settings = Settings.from_env({"IBEX_CONTEXT_REDIS_URL": cluster.url, "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "db")})
    app = await open_application(settings)
    try:
        store = await app.container.adapters.directive_store()
        (org, agent), content = next(iter(TENANTS.items()))
        directive = await store.get(org, agent, timeout_s=1.0)
        assert directive is not None and directive.content == content
    finally:
        await app.close()


async def test_a_malformed_sentinel_url_stops_start_up_naming_the_variable(tmp_path: Path) -> None:
    settings = Settings.from_env({"IBEX_CONTEXT_REDIS_URL": f"redis+sentinel://:hunter2@127.0.0.1:1/{SERVICE}/x",
                                  "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "db")})
    with pytest.raises(StartupError, match="^IBEX_CONTEXT_REDIS_URL: ") as excinfo:
        await open_application(settings)
    assert "hunter2" not in str(excinfo.value)


# ------------------------------------------------------------------ rediss:// (TLS, mTLS)
@pytest.mark.parametrize("client_certificate", [False, True], ids=["tls", "mtls"])
async def test_rediss_reads_over_tls(tmp_path: Path, client_certificate: bool) -> None:
    pki = make_pki(tmp_path)
    server = TlsRedis.launch(pki.server.cert_path, pki.server.key_path, pki.ca.cert_path,
                             client_cert=pki.client.cert_path, client_key=pki.client.key_path,
                             require_client_certificates=client_certificate)
    (org, agent), content = next(iter(TENANTS.items()))
    seed = redis.Redis(host="127.0.0.1", port=server.node.port, ssl=True, ssl_ca_certs=str(pki.ca.cert_path),
                       ssl_certfile=str(pki.client.cert_path), ssl_keyfile=str(pki.client.key_path))
    seed.set(f"{org}:directive:{agent}", go_envelope(content, "system_first"))
    seed.close()
    url = f"rediss://127.0.0.1:{server.node.port}/0?ssl_ca_certs={pki.ca.cert_path}"
    if client_certificate:
        url += f"&ssl_certfile={pki.client.cert_path}&ssl_keyfile={pki.client.key_path}"
    store = RedisDirectiveStore.for_branch_timeout(url, branch_timeout_s=0.25)
    untrusted = RedisDirectiveStore.for_branch_timeout(
        f"rediss://127.0.0.1:{server.node.port}/0?ssl_ca_certs={pki.other_ca.cert_path}", branch_timeout_s=0.25)
    try:
        directive = await store.get(org, agent, timeout_s=1.0)
        assert directive is not None and directive.content == content
        with pytest.raises(DirectiveStoreError):  # a server certificate from an unknown CA is refused
            await untrusted.get(org, agent, timeout_s=1.0)
    finally:
        await store.close()
        await untrusted.close()
        server.close()
