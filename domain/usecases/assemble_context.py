"""AssembleContext: retrieve -> classify -> budget -> score -> pack -> format -> explain.

Business rules:
- Unknown model or out-of-bounds request: rejected before any I/O (InvalidRequestError /
  UnknownModelError).
- Retrieval runs three branches under ``min(wall, caller deadline - headroom)``; a missing source
  degrades the answer (L1: one memory side unusable, L2: both), never fails it. A side is usable
  when it ran and succeeded; a cold side skipped for a blank query counts as usable (nothing to
  search), one skipped on request does not. Directive failures never change the level.
- Only the request's own tenant's memories can be packed (tenant fence before scoring).
- ``domain.layout`` owns the block: the budget charges its frame's texts, the packer charges each
  memory its element (rendered once, reused in the block) and never exceeds the usable budget;
  the block is counted with the model's counter and memories are dropped (lowest utility first)
  in the rare case the count exceeds window - reserve - safety.

Tracing (``ports.tracing``): one stage span per retrieval branch (``retrieval.py``), then
``budget``, ``scoring_and_packing`` (scoring, the schema's gates, pricing and the packer: path,
evaluated, included, ranked, excluded), ``formatting`` and ``final_count``; attributes are
counts, paths and token figures, never a memory's content, the query or the directive. Scoring
and packing share one span on purpose: every span costs CPU on the call and at export.
"""

from __future__ import annotations

import attrs

from domain.budget import TokenBudget, calculate_budget
from domain.layout import Element, Frame, frame
from domain.model.assembly import (
    AssembleRequest,
    AssemblyMetrics,
    AssemblyResult,
    Branch,
    BranchOutcome,
    DegradationLevel,
)
from domain.model.memory import CallContext
from domain.packer import PackItem, PackResult, pack
from domain.relevance_policy import UncachedTextProfiles
from domain.scoring import ScoredCandidate, score_schema
from domain.usecases.assembly_config import AssemblyConfig
from domain.usecases.candidates import CandidatePool, PoolRequest, build_pool, packed_records
from domain.usecases.retrieval import RetrievalOutcome, RetrievalPlan, Retriever
from domain.usecases.validation import validate_assemble
from ports.clock import Clock
from ports.directive_store import DirectiveStore
from ports.memory_source import MemorySource
from ports.model_catalog import ModelCatalog
from ports.nonce_source import NonceSource
from ports.text_profiles import TextProfiles
from ports.token_counter import TokenCounter, TokenCounters
from ports.tracing import NO_TRACER, StageSpan, Tracer

_BLANK_QUERY = "blank_query"


@attrs.frozen
class _Timings:
    budget_ms: float
    ranking_ms: float
    packing_ms: float
    formatting_ms: float
    total_ms: float


@attrs.frozen
class _Packed:
    selected: tuple[ScoredCandidate, ...]
    result: PackResult
    costs: tuple[int, ...]
    text: str
    tokens_used: int


@attrs.frozen
class _Priced:
    elements: tuple[Element, ...]  # one per ranked candidate, rendered once
    costs: tuple[int, ...]
    result: PackResult


class AssembleContext:
    def __init__(
        self,
        *,
        directives: DirectiveStore,
        memories: MemorySource,
        catalog: ModelCatalog,
        counters: TokenCounters,
        clock: Clock,
        nonces: NonceSource,
        config: AssemblyConfig,
        profiles: TextProfiles = UncachedTextProfiles(),
        tracer: Tracer = NO_TRACER,
    ) -> None:
        self._retriever = Retriever(directives, memories, clock, tracer)
        self._tracer = tracer
        self._catalog = catalog
        self._counters = counters
        self._clock = clock
        self._nonces = nonces
        self._config = config
        self._profiles = profiles

    async def execute(self, request: AssembleRequest) -> AssemblyResult:
        started = self._clock.monotonic()
        request = validate_assemble(request)
        spec = self._catalog.for_model(request.model)
        family = self._catalog.family(spec.tokenizer_family)
        counter = self._counters.for_kind(family.estimate_kind)
        retrieval = await self._retriever.retrieve(self._plan(request))
        level = degradation_level(retrieval)

        tracer = self._tracer
        mark = self._clock.monotonic()
        nonce = self._nonces.new_nonce(self._config.nonce_bytes)
        directive = retrieval.directive.content if retrieval.directive else ""
        block = frame(nonce, directive, request.recent_messages, request.tool_schemas)
        with tracer.stage("budget") as span:
            budget = calculate_budget(spec, family, block, counter, request.available_tokens)
            _describe_budget(span, budget)
        budget_ms, mark = self._lap(mark)
        with tracer.stage("scoring_and_packing") as span:
            pool = self._pool(request, retrieval, level)
            ranking_ms, mark = self._lap(mark)
            priced = _price_and_pack(pool, block, budget, counter)
            _describe_packing(span, pool, priced.result)
        packing_ms, mark = self._lap(mark)
        packed = self._render(pool, block, budget, counter, priced)
        formatting_ms, _ = self._lap(mark)
        timings = _Timings(budget_ms, ranking_ms, packing_ms, formatting_ms, (self._clock.monotonic() - started) * 1000.0)
        return self._result(request, retrieval, level, budget, pool, packed, nonce, timings)

    def _plan(self, request: AssembleRequest) -> RetrievalPlan:
        cfg = self._config
        wall_s = cfg.wall_s
        if request.deadline_s is not None:
            wall_s = min(wall_s, request.deadline_s - cfg.deadline_headroom_s)
        return RetrievalPlan(
            org_id=request.org_id, agent_id=request.agent_id, query=request.query,
            call=CallContext(request.request_id, request.trace_id), wall_s=max(0.0, wall_s),
            directive_timeout_s=cfg.directive_timeout_s, hot_timeout_s=cfg.hot_timeout_s,
            cold_timeout_s=cfg.cold_timeout_s, hot_limit=cfg.hot_limit, cold_limit=cfg.cold_limit,
            min_confidence=cfg.min_confidence, skip_hot=request.options.skip_hot_memories,
            skip_cold=request.options.skip_cold_memories,
        )

    def _pool(self, request: AssembleRequest, retrieval: RetrievalOutcome, level: str) -> CandidatePool:
        if level == DegradationLevel.L2:
            hot, found, dropped = (), (), ()
        else:
            hot, found = retrieval.hot.hits, retrieval.cold.hits
            dropped = retrieval.hot.dropped + retrieval.cold.dropped
        return build_pool(
            PoolRequest(
                org_id=request.org_id, agent_id=request.agent_id, hot=hot, found=found, dropped=dropped,
                options=request.options, schema=score_schema(request.options, self._config.score_policy),
                query_text=relevance_text(request), now=self._clock.now(), relevance=self._config.relevance,
            ),
            self._profiles,
        )

    def _render(self, pool: CandidatePool, block: Frame, budget: TokenBudget, counter: TokenCounter, priced: _Priced) -> _Packed:
        """Render the packed elements and count the block; drop the lowest-utility memory while the
        count exceeds the prompt limit (``domain.layout`` says when that can happen)."""
        chosen = set(priced.result.selected)
        kept = [i for i, c in enumerate(pool.ranked) if c.memory_id in chosen]
        tracer = self._tracer
        while True:
            with tracer.stage("formatting") as span:
                text = block.render([priced.elements[i] for i in kept])
                span.set_attributes({"ibex.format.memories": len(kept)})
            with tracer.stage("final_count") as span:
                tokens_used = counter.count(text)
                span.set_attributes({"ibex.count.tokens_used": tokens_used})
            if tokens_used <= budget.prompt_limit or not kept:
                break
            kept.pop()  # the lowest utility is last in canonical order
        selected = tuple(pool.ranked[i] for i in kept)
        result = priced.result
        if len(selected) != len(result.selected):
            result = _shrink(result, [c.memory_id for c in selected], pool.ranked, priced.costs)
        return _Packed(selected, result, priced.costs, text, tokens_used)

    def _lap(self, mark: float) -> tuple[float, float]:
        now = self._clock.monotonic()
        return (now - mark) * 1000.0, now

    def _result(
        self, request: AssembleRequest, retrieval: RetrievalOutcome, level: str, budget: TokenBudget,
        pool: CandidatePool, packed: _Packed, nonce: str, timings: _Timings,
    ) -> AssemblyResult:
        branch = {b.name: b for b in retrieval.branches}
        records = packed_records(pool.ranked, packed.costs, packed.result.selected) + pool.explained
        return AssemblyResult(
            assembled_context=packed.text,
            tokens_used=packed.tokens_used,
            memories_included=len(packed.selected),
            memories_used=records,
            directive_tokens=budget.directive_tokens,
            history_tokens=budget.messages_tokens,
            memory_tokens=packed.result.total_cost,
            metrics=AssemblyMetrics(
                budget_calculation_ms=timings.budget_ms,
                directive_load_ms=branch["directive"].latency_ms,
                hot_memory_retrieval_ms=branch[Branch.HOT].latency_ms,
                cold_memory_retrieval_ms=branch[Branch.COLD].latency_ms,
                ranking_ms=timings.ranking_ms,
                packing_ms=timings.packing_ms,
                formatting_ms=timings.formatting_ms,
                total_ms=timings.total_ms,
                candidates_evaluated=packed.result.evaluated,
            ),
            score_schema=score_schema(request.options, self._config.score_policy),
            degradation_level=level,
            branches=retrieval.branches,
            usable_budget=budget.usable_budget,
            estimate_kind=budget.estimate_kind,
            packing_path=packed.result.path,
            nonce=nonce,
            request_id=request.request_id,
            trace_id=request.trace_id,
            span_id=request.span_id,
        )


def _describe_budget(span: StageSpan, budget: TokenBudget) -> None:
    span.set_attributes({"ibex.budget.usable": budget.usable_budget, "ibex.budget.prompt_limit": budget.prompt_limit})


def _describe_packing(span: StageSpan, pool: CandidatePool, result: PackResult) -> None:
    """Scoring and screening (what reached the packer, what was excluded before it), then packing."""
    attributes: dict[str, str | int] = {
        "ibex.packing.path": result.path, "ibex.packing.evaluated": result.evaluated,
        "ibex.packing.included": len(result.selected), "ibex.screening.ranked": len(pool.ranked),
        "ibex.screening.excluded": len(pool.explained),
    }
    if pool.fenced:
        attributes["ibex.screening.fenced"] = pool.fenced
    if pool.malformed:
        attributes["ibex.screening.malformed"] = pool.malformed
    span.set_attributes(attributes)


def _price_and_pack(pool: CandidatePool, block: Frame, budget: TokenBudget, counter: TokenCounter) -> _Priced:
    """Each ranked candidate's element, rendered once and charged its count; then the packer."""
    elements = tuple([block.element(c.memory_id, c.hit.category, c.hit.content) for c in pool.ranked])
    costs = counter.count_each([e.text for e in elements])
    items = [PackItem(key=c.memory_id, score=c.score, cost=cost) for c, cost in zip(pool.ranked, costs, strict=True)]
    return _Priced(elements, costs, pack(items, budget.usable_budget))


def relevance_text(request: AssembleRequest) -> str:
    """What relevance is measured against: the query and the last user message."""
    last_user = next((m.content for m in reversed(request.recent_messages) if m.role == "user"), "")
    return f"{request.query}\n{last_user}" if last_user else request.query


def degradation_level(retrieval: RetrievalOutcome) -> str:
    usable = sum(_side_usable(retrieval, name) for name in (Branch.HOT, Branch.COLD))
    return {2: DegradationLevel.L0, 1: DegradationLevel.L1}.get(usable, DegradationLevel.L2)


def _side_usable(retrieval: RetrievalOutcome, name: str) -> bool:
    status = retrieval.status(name)
    if status.outcome == BranchOutcome.SKIPPED:
        return status.detail == _BLANK_QUERY
    return status.outcome == BranchOutcome.SUCCESS


def _shrink(result: PackResult, keep: list[str], ranked: tuple[ScoredCandidate, ...], costs: tuple[int, ...]) -> PackResult:
    """The pack result after the final-count guard dropped memories (moved to budget_excluded)."""
    kept = set(keep)
    cost = dict(zip((c.memory_id for c in ranked), costs, strict=True))
    score = {c.memory_id: c.score for c in ranked}
    dropped = [k for k in result.selected if k not in kept]
    return attrs.evolve(
        result,
        selected=tuple(k for k in result.selected if k in kept),
        total_cost=sum(cost[k] for k in kept),
        total_score=sum(score[k] for k in kept),
        budget_excluded=tuple(sorted((*result.budget_excluded, *dropped), key=lambda k: (-score[k], k))),
        budget_reached=True,
    )
