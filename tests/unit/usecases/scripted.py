"""Scripted port doubles for use-case unit tests: fixed answers, delays and failures."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from domain.model.catalog import ModelSpec, TokenizerFamily
from domain.model.directive import Directive
from domain.model.errors import UnknownModelError
from domain.model.feedback import FeedbackItem, FeedbackResult
from domain.model.memory import HotQuery, MemoryBatch, MemoryHit, SearchQuery
from ports.clock import Clock
from ports.directive_store import DirectiveStore
from ports.feedback_sink import FeedbackSink
from ports.memory_source import MemorySource
from ports.model_catalog import ModelCatalog

ORG = "7f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
AGENT = "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d"
OTHER_ORG = "99999999-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def make_hit(memory_id: str, *, similarity: float = 0.8, confidence: float = 0.9, content: str = "fact",
             category: str = "preference", source: str = "hot_cache", rank: int = 1,
             org_id: str = ORG, agent_id: str = AGENT) -> MemoryHit:
    return MemoryHit(memory_id=memory_id, org_id=org_id, agent_id=agent_id, content=content, category=category,
                     confidence=confidence, similarity=similarity, rank=rank, source=source)


class ScriptedMemorySource(MemorySource):
    """Answers hot/search with fixed batches, after an optional delay, or raises."""

    def __init__(self, hot: MemoryBatch | BaseException = MemoryBatch(), cold: MemoryBatch | BaseException = MemoryBatch(),
                 hot_delay_s: float = 0.0, cold_delay_s: float = 0.0) -> None:
        self.hot_answer, self.cold_answer = hot, cold
        self.hot_delay_s, self.cold_delay_s = hot_delay_s, cold_delay_s
        self.hot_calls: list[HotQuery] = []
        self.search_calls: list[SearchQuery] = []
        self.cancelled: list[str] = []

    async def _answer(self, name: str, answer: MemoryBatch | BaseException, delay_s: float) -> MemoryBatch:
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def hot(self, query: HotQuery, *, timeout_s: float) -> MemoryBatch:
        self.hot_calls.append(query)
        return await self._answer("hot", self.hot_answer, self.hot_delay_s)

    async def search(self, query: SearchQuery, *, timeout_s: float) -> MemoryBatch:
        self.search_calls.append(query)
        return await self._answer("cold", self.cold_answer, self.cold_delay_s)

    async def close(self) -> None:
        return None


class ScriptedDirectiveStore(DirectiveStore):
    def __init__(self, answer: Directive | None | BaseException = None, delay_s: float = 0.0) -> None:
        self.answer, self.delay_s = answer, delay_s

    async def get(self, org_id: str, agent_id: str, *, timeout_s: float) -> Directive | None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    async def close(self) -> None:
        return None


class ScriptedFeedbackSink(FeedbackSink):
    """Per memory id: a list of answers consumed in order (exceptions are raised)."""

    def __init__(self, script: dict[str, list[FeedbackResult | BaseException]]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.calls: list[FeedbackItem] = []

    async def record(self, item: FeedbackItem, *, timeout_s: float) -> FeedbackResult:
        self.calls.append(item)
        answer = self.script[item.memory_id].pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


class StaticCatalog(ModelCatalog):
    def __init__(self, models: Sequence[ModelSpec], families: Sequence[TokenizerFamily]) -> None:
        self._models = {m.model_id: m for m in models}
        self._families = {f.name: f for f in families}

    def for_model(self, model_id: str) -> ModelSpec:
        try:
            return self._models[model_id.strip()]
        except KeyError:
            raise UnknownModelError(model_id) from None

    def family(self, name: str) -> TokenizerFamily:
        try:
            return self._families[name]
        except KeyError:
            raise UnknownModelError(name) from None

    def models(self) -> tuple[ModelSpec, ...]:
        return tuple(sorted(self._models.values(), key=lambda m: m.model_id))


class RealTimeClock(Clock):
    """Real monotonic time (the use case measures real asyncio delays) and a fixed 'now'."""

    def __init__(self, now: datetime = datetime(2026, 11, 1, tzinfo=UTC)) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return time.perf_counter()
