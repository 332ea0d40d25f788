"""A directive update published by the proxy reaches the next answer over gRPC (the in-process
directive cache and its PSUBSCRIBE, through the composition root; real Redis, real gRPC).

The cache's TTL is an hour here, so only the published invalidation can bring the new directive
into an answer: a change without a publish is shown to stay cached. The test waits on the
service's own metrics (the subscription gauge, the invalidation counter), never on time.
"""

from __future__ import annotations

import json
import uuid

import pytest
import redis.asyncio as redis_asyncio

from tests.e2e.conftest import Harness, StartService
from tests.e2e.tenant import AGENT_ID, DIRECTIVE, ORG_ID, assemble_request
from tests.support.polling import until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY = f"{ORG_ID}:directive:{AGENT_ID}"
CHANNEL = f"directive_updates:{ORG_ID}"


def sample(harness: Harness, name: str, labels: dict[str, str] | None = None) -> float:
    return harness.service.app.metrics.registry.get_sample_value(name, labels or {}) or 0.0


def envelope(content: str) -> str:
    return json.dumps({"v": 1, "content": content, "injection_mode": "system_first", "version_id": str(uuid.uuid4())})


async def context(harness: Harness) -> str:
    response = await harness.stub.AssembleContext(assemble_request(), timeout=30)
    assert [b.outcome for b in response.branches if b.name == "directive"] == ["success"]
    return response.assembled_context


async def test_a_published_directive_update_reaches_the_next_answer(
    start_service_under_test: StartService, directive: str, redis_client: redis_asyncio.Redis
) -> None:
    harness = await start_service_under_test(IBEX_CONTEXT_DIRECTIVE_CACHE_TTL_MS="3600s")
    await until(lambda: sample(harness, "ibex_context_directive_subscription_up") == 1, "subscribed")
    assert DIRECTIVE in await context(harness)
    updated = "Answer in one sentence, in French."
    await redis_client.set(KEY, envelope(updated))  # no publish: the cached directive is still answered
    assert DIRECTIVE in await context(harness)
    assert sample(harness, "ibex_context_directive_cache_total", {"result": "hit"}) == 1

    assert await redis_client.publish(CHANNEL, "") == 1  # the proxy's invalidation
    await until(lambda: sample(harness, "ibex_context_directive_invalidations_total", {"scope": "org"}) == 1,
                "the invalidation received")
    answer = await context(harness)
    assert updated in answer and DIRECTIVE not in answer

    await redis_client.delete(KEY)  # the proxy's DEL + PUBLISH: the agent has no directive any more
    await redis_client.publish(CHANNEL, "")
    await until(lambda: sample(harness, "ibex_context_directive_invalidations_total", {"scope": "org"}) == 2,
                "the second invalidation received")
    assert updated not in await context(harness)
