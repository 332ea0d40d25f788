"""Prometheus metrics of the service (one registry per process, passed to both edges)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from domain.model.assembly import AssemblyResult, BranchOutcome
from domain.model.operations import FeedbackOutcome

FEEDBACK_APPLIED = "applied"

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)
_TOKEN_BUCKETS = (0, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)


class ServiceMetrics:
    """Every metric the service exports; ``render()`` yields the Prometheus text format."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("ibex_context_requests", "Requests by surface, method and status code", ("surface", "method", "code"), registry=r)
        self.request_latency = Histogram("ibex_context_request_latency_seconds", "Request latency", ("surface", "method"), buckets=_LATENCY_BUCKETS, registry=r)
        self.in_flight_requests = Gauge("ibex_context_in_flight_requests", "Requests being served", ("surface",), registry=r)
        self.assemblies = Counter("ibex_context_assemblies", "Assemblies by degradation level", ("level",), registry=r)
        self.branch_outcomes = Counter("ibex_context_branch_outcomes", "Retrieval branch outcomes", ("branch", "outcome"), registry=r)
        self.branch_latency = Histogram("ibex_context_branch_latency_seconds", "Retrieval branch latency", ("branch",), buckets=_LATENCY_BUCKETS, registry=r)
        self.packing_paths = Counter("ibex_context_packing_path", "Packer paths taken", ("path",), registry=r)
        self.usable_budget = Histogram("ibex_context_usable_budget_tokens", "Memory budget after all reserves", buckets=_TOKEN_BUCKETS, registry=r)
        self.tokens_used = Histogram("ibex_context_tokens_used", "Tokens of the assembled context", buckets=_TOKEN_BUCKETS, registry=r)
        self.memory_tokens = Histogram("ibex_context_memory_tokens", "Tokens charged for included memories", buckets=_TOKEN_BUCKETS, registry=r)
        self.candidates = Counter("ibex_context_candidates", "Memory candidates by disposition", ("disposition",), registry=r)
        self.answers_not_sent = Counter(
            "ibex_context_answers_not_sent",
            "Answers the transport could not send because the call had already ended (deadline, cancel, connection); "
            "each is also in ibex_context_requests_total under the code it was counted with",
            ("surface", "method", "counted_code"), registry=r)
        self.shed = Counter("ibex_context_shed", "Calls refused before they started, by surface and reason",
                            ("surface", "reason"), registry=r)
        self.auth_failures = Counter("ibex_context_auth_failures", "Rejected callers by reason", ("reason",), registry=r)
        self.feedback_updates = Counter("ibex_context_feedback_updates", "Feedback writes by result", ("result",), registry=r)
        self.trace_spans_dropped = Counter("ibex_context_trace_spans_dropped", "Spans dropped because the export queue was full", registry=r)
        self.trace_exports = Counter("ibex_context_trace_exports", "Spans handed to the OTLP exporter, by export result", ("result",), registry=r)
        self.directive_cache = Counter("ibex_context_directive_cache", "Directive lookups by in-process cache result (bypass: the invalidation subscription is down)", ("result",), registry=r)
        self.directive_subscription_up = Gauge("ibex_context_directive_subscription_up", "1 while the directive invalidation subscription (PSUBSCRIBE directive_updates:*) is confirmed", registry=r)
        self.directive_circuit_open = Gauge("ibex_context_directive_circuit_open", "1 while directive reads from Redis fail fast (circuit open, or half-open: one probe asks Redis), 0 while it is closed", registry=r)
        self.directive_circuit_transitions = Counter("ibex_context_directive_circuit_transitions", "Directive store circuit transitions, by the state entered (open, half_open, closed)", ("state",), registry=r)
        self.directive_invalidations = Counter("ibex_context_directive_invalidations", "Directive invalidation messages by scope (org: one org dropped; all: a channel naming no org dropped the cache)", ("scope",), registry=r)

    def observe_assembly(self, result: AssemblyResult) -> None:
        self.assemblies.labels(result.degradation_level).inc()
        for branch in result.branches:
            self.branch_outcomes.labels(branch.name, branch.outcome).inc()
            if branch.outcome != BranchOutcome.SKIPPED:
                self.branch_latency.labels(branch.name).observe(branch.latency_ms / 1000.0)
        self.packing_paths.labels(result.packing_path).inc()
        self.usable_budget.observe(result.usable_budget)
        self.tokens_used.observe(result.tokens_used)
        self.memory_tokens.observe(result.memory_tokens)
        for disposition, count in collections.Counter(record.detail or record.exclusion for record in result.memories_used).items():
            self.candidates.labels(disposition).inc(count)

    def observe_request(self, surface: str, method: str, code: str, seconds: float) -> None:
        self.requests.labels(surface, method, code).inc()
        self.request_latency.labels(surface, method).observe(seconds)

    def answer_not_sent(self, surface: str, method: str, counted_code: str) -> None:
        self.answers_not_sent.labels(surface, method, counted_code).inc()

    def call_shed(self, surface: str, reason: str) -> None:
        self.shed.labels(surface, reason).inc()

    def auth_failure(self, reason: str) -> None:
        self.auth_failures.labels(reason).inc()

    def observe_feedback(self, outcome: FeedbackOutcome) -> None:
        """One count per id: ``applied`` or its failure (``FeedbackFailure``), the same at both edges."""
        for update in outcome.updates:
            self.feedback_updates.labels(update.failure or FEEDBACK_APPLIED).inc()

    def trace_span_dropped(self) -> None:
        self.trace_spans_dropped.inc()

    def trace_export(self, result: str, spans: int) -> None:
        self.trace_exports.labels(result).inc(spans)

    def directive_cache_lookup(self, result: str) -> None:
        """One directive lookup: ``hit``, ``refresh``, ``miss`` or ``bypass`` (``adapters.directive_cache.CacheResult``)."""
        self.directive_cache.labels(result).inc()

    def directive_subscription(self, live: bool) -> None:
        self.directive_subscription_up.set(1 if live else 0)

    def directive_circuit(self, state: str) -> None:
        """The directive store's circuit entered ``state``: ``closed``, ``open`` or ``half_open``
        (``adapters.redis_directive_store.circuit``)."""
        self.directive_circuit_open.set(0 if state == "closed" else 1)
        self.directive_circuit_transitions.labels(state).inc()

    def directive_invalidation(self, org_id: str | None) -> None:
        """One invalidation message: for one org, or (None) for a channel naming none."""
        self.directive_invalidations.labels("all" if org_id is None else "org").inc()

    @contextmanager
    def in_flight(self, surface: str) -> Iterator[None]:
        gauge = self.in_flight_requests.labels(surface)
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
