"""A loopback memory service for tests, benchmarks and load tests.

It speaks the memory-service HTTP contract (reference section 3, SPEC section 1): ``GET
/v1/memories/hot``, ``POST /v1/memories/search``, ``POST /v1/memories/{id}/feedback`` (with
``Idempotency-Key``: a repeated key counts once), Bearer tokens mapped to an org, error bodies
``{"detail": {"code", "message"}}`` (422 uses FastAPI's list form). Memories live in memory; search
similarity is the Jaccard overlap of lower-cased words, deterministic and in [0, 1]; hot order is
the stored ``hot_score`` descending (reported as similarity). ``min_similarity`` defaults to 0.0
here (the real service: 0.70), and a memory sharing no word with the query is never returned.

In a test::

    with MemoryServer.running() as server:        # 127.0.0.1, free port, own thread
        server.add_token("t", org_id); server.add_memory(org_id, agent_id, "text")
        server.set_latency("search", 20)          # hot | search | feedback
        server.hold("search"); ...; server.wait_held("search"); server.release("search")
        ... HttpMemorySource(server.base_url, "t") ...
        server.requests("search"); server.traceparents("hot"); server.connections_accepted

As a process: ``python -m tests.support.memory_server --port 0 --seed-demo 100`` (see process.py),
or ``MemoryServerProcess.launch("--seed-demo", "100")``.
"""

from __future__ import annotations

from tests.support.memory_server.faults import (
    BAD_ITEM_KINDS,
    ENDPOINTS,
    FOREIGN_AGENT_ID,
    FOREIGN_ORG_ID,
    MALFORMED_BODIES,
    FaultSwitches,
)
from tests.support.memory_server.process import (
    DEMO_AGENT_ID,
    DEMO_ORG_ID,
    DEMO_TOKEN,
    MemoryServerProcess,
    seed_demo,
)
from tests.support.memory_server.records import ANY_ORG, LoggedRequest, StoredMemory, similarity
from tests.support.memory_server.server import MemoryServer

__all__ = [
    "ANY_ORG", "BAD_ITEM_KINDS", "DEMO_AGENT_ID", "DEMO_ORG_ID", "DEMO_TOKEN", "ENDPOINTS",
    "FOREIGN_AGENT_ID", "FOREIGN_ORG_ID", "MALFORMED_BODIES", "FaultSwitches", "LoggedRequest",
    "MemoryServer", "MemoryServerProcess", "StoredMemory", "seed_demo", "similarity",
]
