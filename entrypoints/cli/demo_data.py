"""A small, realistic demo data set: one organisation, three agents, directives and ~300 memories.

Deterministic (no randomness): the same records every time, so the README's example output is
stable. Used by ``ibex-context demo load`` (and ``make run``) on an empty embedded backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import attrs

DEMO_ORG = "0b7e3c1a-5d2f-4e8a-9c6b-1f2a3b4c5d6e"
SUPPORT_AGENT = "5a1d9e2c-7b3f-4c8d-a6e5-2b1c0d9e8f7a"
DEVOPS_AGENT = "6b2e0f3d-8c4a-4d9e-b7f6-3c2d1e0f9a8b"
SALES_AGENT = "7c3f1a4e-9d5b-4eaf-88a7-4d3e2f1a0b9c"
EPOCH = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


@attrs.frozen
class DemoMemory:
    org_id: str
    agent_id: str
    content: str
    category: str
    confidence: float
    usefulness: float
    tags: tuple[str, ...]
    created_at: datetime


DIRECTIVES = {
    SUPPORT_AGENT: "You are Acme Cloud's support assistant. Be concise, cite the customer's plan, and never promise refunds.",
    DEVOPS_AGENT: "You are the on-call DevOps assistant for Acme Cloud. Prefer runbook steps and state risks before commands.",
    SALES_AGENT: "You are Acme Cloud's sales assistant. Be accurate about pricing and never disclose other customers' deals.",
}

_CUSTOMERS = ("Globex", "Initech", "Umbrella Health", "Stark Logistics", "Wayne Retail", "Hooli", "Vandelay Imports",
              "Soylent Foods", "Tyrell Labs", "Cyberdyne Systems", "Wonka Confectionery", "Oscorp Energy")

_SUPPORT = {
    "factual": ("{c} is on the Enterprise plan with a 99.95% uptime SLA.",
                "{c}'s primary region is eu-west-1 and their failover region is eu-central-1.",
                "{c} has 14 seats and renews every March.",
                "Support hours for {c} are 24/7 with a 1-hour first-response target."),
    "preference": ("{c}'s admin prefers answers in bullet points.",
                   "{c} wants status updates by email, not chat.",
                   "{c}'s team prefers dark mode screenshots in guides."),
    "procedural": ("To reset SSO for {c}, rotate the SAML certificate in Settings > Identity, then ask their admin to re-upload metadata.",
                   "Refund requests from {c} go to billing@acme.example with the invoice number; support never approves them."),
    "episodic": ("{c} reported slow dashboard loads last Tuesday; resolved by clearing the CDN cache.",
                 "{c}'s admin asked about audit-log exports during the October review."),
    "behavioral": ("{c}'s users often open duplicate tickets within minutes; merge them before replying.",),
}
_DEVOPS = {
    "procedural": ("Restart the billing worker with `systemctl restart billing-worker` after draining the queue.",
                   "Before a database failover, freeze deploys and announce it in #incidents.",
                   "Rotate Redis credentials monthly; update the secret in Vault and roll the API pods.",
                   "If p99 latency exceeds 40 ms, check the memory service's hot-cache hit rate first.",
                   "Scale the search cluster by adding a replica, never by resizing the primary in place."),
    "factual": ("The primary Postgres cluster runs version 16 with three replicas.",
                "The gRPC gateway listens on port 9092; the HTTP API on 9093.",
                "Log retention is 30 days in hot storage and 1 year in cold storage.",
                "The CDN purge API allows 100 requests per minute."),
    "episodic": ("The 2026-10-14 outage was caused by an expired TLS certificate on the internal load balancer.",
                 "Last week's deploy of search v2.3 raised CPU by 20% until the cache warmed."),
    "behavioral": ("The team deploys on Tuesdays and Thursdays only.",),
    "preference": ("The on-call lead prefers commands with a dry-run flag first.",),
}
_SALES = {
    "factual": ("{c}'s contract value is discussed only with their account owner.",
                "The Team plan costs 40 USD per seat per month; Enterprise is custom-priced.",
                "{c} is evaluating the Enterprise plan for Q1."),
    "preference": ("{c}'s buyer prefers a short call over long emails.",
                   "{c} asked for pricing in EUR."),
    "episodic": ("{c} attended the November product webinar and asked about SOC 2 reports.",),
    "procedural": ("Send security questionnaires to security@acme.example; never fill them in yourself.",),
}


def _expand(agent_id: str, templates: dict[str, tuple[str, ...]], per_customer: bool) -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    customers = _CUSTOMERS if per_customer else ("",)
    for category, texts in templates.items():
        for text in texts:
            if "{c}" in text:
                for customer in customers:
                    yield agent_id, category, text.format(c=customer), (customer.lower().replace(" ", "-"),) if customer else ()
            else:
                yield agent_id, category, text, ()


def demo_memories() -> tuple[DemoMemory, ...]:
    rows = [
        *_expand(SUPPORT_AGENT, _SUPPORT, per_customer=True),
        *_expand(DEVOPS_AGENT, _DEVOPS, per_customer=False),
        *_expand(SALES_AGENT, _SALES, per_customer=True),
    ]
    memories = []
    for index, (agent_id, category, content, tags) in enumerate(rows):
        memories.append(
            DemoMemory(
                org_id=DEMO_ORG,
                agent_id=agent_id,
                content=content,
                category=category,
                confidence=round(0.6 + (index * 7 % 40) / 100, 2),
                usefulness=round(0.3 + (index * 11 % 60) / 100, 2),
                tags=(category, *tags),
                created_at=EPOCH - timedelta(days=index * 13 % 200, hours=index % 24),
            )
        )
    return tuple(memories)
