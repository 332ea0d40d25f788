"""Three concurrent, deadline-bounded retrieval branches: directive, hot memories, cold search.

Each branch has its own timeout; all three run under one outer wall. Branches still running at
the wall are cancelled (outcome ``timeout``, detail ``outer_deadline``); completed ones are kept.
A branch never raises: its failure becomes an outcome (``timeout``, ``error``, ``denied``) with a
detail, and ``skipped`` when the request asked not to run it or there is nothing to search for.

Each branch, skipped ones included, is one stage span (``retrieval.<branch>``, the tracing port)
with its outcome, detail, latency, timeout and candidate counts. A branch's span is current while
its source call runs, so the memory-service request carries it as its parent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from domain.model.assembly import Branch, BranchOutcome, BranchStatus
from domain.model.directive import Directive
from domain.model.memory import CallContext, HotQuery, MemoryBatch, SearchQuery
from ports.clock import Clock
from ports.directive_store import DirectiveStore
from ports.errors import (
    DirectiveStoreError,
    DirectiveStoreTimeoutError,
    MemorySourceDeniedError,
    MemorySourceError,
    MemorySourceTimeoutError,
)
from ports.memory_source import MemorySource
from ports.tracing import NO_TRACER, StageSpan, Tracer


@attrs.frozen
class RetrievalPlan:
    org_id: str
    agent_id: str
    query: str
    call: CallContext
    wall_s: float
    directive_timeout_s: float
    hot_timeout_s: float
    cold_timeout_s: float
    hot_limit: int = attrs.field(kw_only=True)  # these three: from AssemblyConfig, no defaults of their own
    cold_limit: int = attrs.field(kw_only=True)
    min_confidence: float = attrs.field(kw_only=True)
    skip_hot: bool = False
    skip_cold: bool = False


@attrs.frozen
class RetrievalOutcome:
    directive: Directive | None
    hot: MemoryBatch
    cold: MemoryBatch
    branches: tuple[BranchStatus, ...]

    def status(self, name: Branch) -> BranchStatus:
        return next(branch for branch in self.branches if branch.name == name)


@attrs.frozen
class _BranchResult:
    status: BranchStatus
    value: Any = None


class Retriever:
    """Runs the three branches of one assembly against the directive store and memory source."""

    def __init__(self, directives: DirectiveStore, memories: MemorySource, clock: Clock,
                 tracer: Tracer = NO_TRACER) -> None:
        self._directives = directives
        self._memories = memories
        self._clock = clock
        self._tracer = tracer

    async def retrieve(self, plan: RetrievalPlan) -> RetrievalOutcome:
        started = self._clock.monotonic()
        skipped = self._skipped(plan)
        for result in skipped.values():
            with self._tracer.stage(stage_name(result.status.name)) as span:
                describe_branch(span, result.status, None, 0.0)
        tasks = {
            name: asyncio.ensure_future(self._run(name, factory, timeout_s))
            for name, factory, timeout_s in self._branches(plan)
            if name not in skipped
        }
        try:
            if tasks:
                await asyncio.wait(tasks.values(), timeout=max(0.0, plan.wall_s))
        finally:
            pending = [task for task in tasks.values() if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        wall_ms = (self._clock.monotonic() - started) * 1000.0
        results = {name: skipped[name] for name in skipped}
        for name, task in tasks.items():
            results[name] = self._collect(name, task, wall_ms)
        return RetrievalOutcome(
            directive=results[Branch.DIRECTIVE].value,
            hot=results[Branch.HOT].value or MemoryBatch(),
            cold=results[Branch.COLD].value or MemoryBatch(),
            branches=tuple(results[name].status for name in (Branch.DIRECTIVE, Branch.HOT, Branch.COLD)),
        )

    def _branches(self, plan: RetrievalPlan) -> list[tuple[Branch, Callable[[], Awaitable[Any]], float]]:
        hot_query = HotQuery(plan.org_id, plan.agent_id, plan.hot_limit, plan.min_confidence, plan.call)
        cold_query = SearchQuery(
            plan.org_id, plan.agent_id, plan.query, plan.cold_limit, None, plan.min_confidence, call=plan.call
        )
        return [
            (Branch.DIRECTIVE, lambda: self._directives.get(plan.org_id, plan.agent_id, timeout_s=plan.directive_timeout_s), plan.directive_timeout_s),
            (Branch.HOT, lambda: self._memories.hot(hot_query, timeout_s=plan.hot_timeout_s), plan.hot_timeout_s),
            (Branch.COLD, lambda: self._memories.search(cold_query, timeout_s=plan.cold_timeout_s), plan.cold_timeout_s),
        ]

    @staticmethod
    def _skipped(plan: RetrievalPlan) -> dict[Branch, _BranchResult]:
        skipped: dict[Branch, _BranchResult] = {}
        if plan.skip_hot:
            skipped[Branch.HOT] = _BranchResult(BranchStatus(Branch.HOT, BranchOutcome.SKIPPED, 0.0, "skip_hot_memories"))
        if plan.skip_cold:
            skipped[Branch.COLD] = _BranchResult(BranchStatus(Branch.COLD, BranchOutcome.SKIPPED, 0.0, "skip_cold_memories"))
        elif not plan.query.strip():
            skipped[Branch.COLD] = _BranchResult(BranchStatus(Branch.COLD, BranchOutcome.SKIPPED, 0.0, "blank_query"))
        return skipped

    async def _run(self, name: Branch, factory: Callable[[], Awaitable[Any]], timeout_s: float) -> _BranchResult:
        with self._tracer.stage(stage_name(name)) as span:
            started = self._clock.monotonic()
            try:
                result = await self._attempt(name, factory, timeout_s)
            except asyncio.CancelledError:  # the outer wall: ``_collect`` reports it the same way
                latency_ms = (self._clock.monotonic() - started) * 1000.0
                describe_branch(span, BranchStatus(name, BranchOutcome.TIMEOUT, latency_ms, "outer_deadline"), None, timeout_s)
                raise
            describe_branch(span, result.status, result.value, timeout_s)
            return result

    async def _attempt(self, name: Branch, factory: Callable[[], Awaitable[Any]], timeout_s: float) -> _BranchResult:
        started = self._clock.monotonic()

        def status(outcome: BranchOutcome, detail: str = "") -> BranchStatus:
            return BranchStatus(name, outcome, (self._clock.monotonic() - started) * 1000.0, detail)

        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                value = await factory()
        except TimeoutError:
            return _BranchResult(status(BranchOutcome.TIMEOUT, f"{name}_timeout"))
        except MemorySourceTimeoutError:
            return _BranchResult(status(BranchOutcome.TIMEOUT, f"{name}_source_timeout"))
        except MemorySourceDeniedError as exc:
            return _BranchResult(status(BranchOutcome.DENIED, f"denied_http_{exc.status_code}" if exc.status_code else "denied"))
        except DirectiveStoreTimeoutError as exc:
            return _BranchResult(status(BranchOutcome.TIMEOUT, str(exc) or type(exc).__name__))
        except (MemorySourceError, DirectiveStoreError) as exc:
            return _BranchResult(status(BranchOutcome.ERROR, str(exc) or type(exc).__name__))
        except Exception as exc:  # a branch never fails the assembly
            return _BranchResult(status(BranchOutcome.ERROR, f"unexpected_{type(exc).__name__}"))
        return _BranchResult(status(BranchOutcome.SUCCESS), value)

    @staticmethod
    def _collect(name: Branch, task: asyncio.Future, wall_ms: float) -> _BranchResult:
        if task.done() and not task.cancelled():
            return task.result()
        return _BranchResult(BranchStatus(name, BranchOutcome.TIMEOUT, wall_ms, "outer_deadline"))


def stage_name(branch: str) -> str:
    """The stage span of a branch: ``retrieval.directive``, ``retrieval.hot``, ``retrieval.cold``."""
    return f"retrieval.{branch}"


def describe_branch(span: StageSpan, status: BranchStatus, value: Any, timeout_s: float) -> None:
    """A branch's outcome as span attributes: counts and statuses only, never the texts."""
    attributes: dict[str, str | float | int] = {
        "ibex.branch.outcome": status.outcome, "ibex.branch.latency_ms": status.latency_ms,
        "ibex.branch.timeout_ms": timeout_s * 1000.0,
    }
    if status.detail:
        attributes["ibex.branch.detail"] = status.detail
    if isinstance(value, MemoryBatch):
        attributes["ibex.branch.candidates"] = len(value.hits)
        if value.dropped:
            attributes["ibex.branch.dropped"] = len(value.dropped)
    elif status.name == Branch.DIRECTIVE and status.outcome == BranchOutcome.SUCCESS:
        attributes["ibex.branch.candidates"] = int(value is not None)  # a directive found, or none
    span.set_attributes(attributes)
