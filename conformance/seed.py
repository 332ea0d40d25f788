"""What the conformance kit stores in a backend before it checks it, and the backend's shape.

A team provides a ``ConformanceBackend``: the port objects under test plus a way to store memories
(``seed``) and to release everything (``close``). The kit seeds the same small corpus into three
tenants that differ by org or by agent, so any leak across the tenant fence shows up.
"""

from __future__ import annotations

import uuid
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Protocol

import attrs

from ports.feedback_sink import FeedbackSink
from ports.memory_source import MemorySource

SEED_TIME = datetime(2026, 1, 1, tzinfo=timezone.utc)


@attrs.frozen
class SeedMemory:
    """A memory as the backend must hold it (created through the backend's own write path)."""

    memory_id: str
    org_id: str
    agent_id: str
    content: str
    category: str
    confidence: float
    usefulness: float = 0.5
    tags: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    created_at: datetime = SEED_TIME
    retrieval_count: int = 0


class ConformanceBackend(Protocol):
    """An implementation under test, as the ``conformance_backend`` fixture returns it."""

    source: MemorySource
    feedback: FeedbackSink

    @abstractmethod
    async def seed(self, memories: Sequence[SeedMemory]) -> None:
        """Store every memory exactly as given (ids, tenants, scores, tags, creation time)."""

    @abstractmethod
    async def close(self) -> None:
        """Close the source and the sink (must be safe to call twice)."""


@attrs.frozen
class Tenant:
    org_id: str
    agent_id: str


@attrs.frozen
class World:
    """Fresh ids for one test: the tenant under test and two neighbours across the fence."""

    home: Tenant
    sibling_agent: Tenant  # same org, other agent
    foreign_org: Tenant  # other org, same agent id (unless agent ids are global)

    @classmethod
    def fresh(cls, *, agent_ids_are_global: bool = False) -> World:
        """New ids; with ``agent_ids_are_global`` the foreign org gets an agent id of its own."""
        org, other_org, agent, other_agent, foreign_agent = (str(uuid.uuid4()) for _ in range(5))
        foreign = Tenant(other_org, foreign_agent if agent_ids_are_global else agent)
        return cls(Tenant(org, agent), Tenant(org, other_agent), foreign)

    @property
    def tenants(self) -> tuple[Tenant, Tenant, Tenant]:
        return (self.home, self.sibling_agent, self.foreign_org)


@attrs.frozen
class CorpusEntry:
    key: str
    content: str
    category: str
    confidence: float
    tags: tuple[str, ...]


# Distinct vocabulary per memory (no memory's words contain another's), except the three
# "animal" memories, which share 3 / 2 / 1 of the words of ANIMAL_QUERY to grade similarity.
CORPUS: tuple[CorpusEntry, ...] = (
    CorpusEntry("dark_mode", "The user prefers dark mode in every code editor", "preference", 0.9, ("ui",)),
    CorpusEntry("espresso", "Morning routine starts with a double espresso", "preference", 0.4, ("food",)),
    CorpusEntry("deploy", "Deployments go through the blue green pipeline on Fridays", "procedural", 0.8, ("ops",)),
    CorpusEntry("billing", "The billing service is written in Python using asyncio", "factual", 0.7, ("code",)),
    CorpusEntry("planning", "Weekly planning meeting happens on Monday mornings", "episodic", 0.6, ("calendar",)),
    CorpusEntry("animals3", "zebra giraffe okapi herd grazing", "factual", 0.95, ("animals",)),
    CorpusEntry("animals2", "zebra giraffe near the waterhole", "factual", 0.5, ("animals",)),
    CorpusEntry("animals1", "okapi hiding in the rainforest", "behavioral", 0.2, ("animals", "rare")),
)
ANIMAL_QUERY = "zebra giraffe okapi"


def corpus_for(tenant: Tenant, *, age_step: timedelta = timedelta(hours=1)) -> Mapping[str, SeedMemory]:
    """The corpus for one tenant with fresh memory ids, keyed by entry key (newest first)."""
    return {
        entry.key: SeedMemory(
            memory_id=str(uuid.uuid4()),
            org_id=tenant.org_id,
            agent_id=tenant.agent_id,
            content=entry.content,
            category=entry.category,
            confidence=entry.confidence,
            tags=entry.tags,
            created_at=SEED_TIME - age_step * position,
            retrieval_count=position,
        )
        for position, entry in enumerate(CORPUS)
    }
