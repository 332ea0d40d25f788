"""Context quality: do the memories that answer the question make it into the block?

A seeded data set (``bench.quality_data``: agents with core facts, topics, distractors,
paraphrased and verbatim duplicates, questions with known answering memories) is loaded into a
temporary embedded backend through its import path, and every question is sent through the real
AssembleContext use case (embedded memory and directive stores, the built-in catalog, exact
tiktoken counts, system clock, real nonces; walls and branch timeouts of 1 s, so that selection is
measured, not timing) at each budget, for each score policy. Fully offline. The data set is the
same for a seed; the figures can move in the third decimal between runs, because each assembly's
nonce is random and the tokens of its tags shift what fits.

    .venv/bin/python -m bench.quality [--seed 7] [--agents 8] [--questions-per-agent 48]
        [--policies interim_v1,relevance_v1] [--budgets 500,1000,2000] [--hot-limit N] [--cold-limit N]
        [--floor F] [--sharpness S] [--hot-slots N] [--core-slots N] [--quick] [--json]

With ``interim_v1`` among the policies, a ``search_top_k`` row is added: what a plain retrieval
pipeline (LangChain, LlamaIndex) would pack from the same answers, the search hits in the
source's rank order, each while it fits, at the costs the service charged.

Figures per (policy, budget), from ``memories_used`` and the generator's truth. An evidence memory
counts as present when it or one of its copies (verbatim or paraphrased) is, since either answers:

* ev.block: per question, the share of its evidence in the block (included), averaged;
* ev.cands: the same share among the candidates (any record but ``tenant_mismatch``), averaged;
* kept/found: evidence included / evidence among candidates, summed over all questions;
* noise: included memories that are neither evidence nor a copy of it / all included, summed;
* dups: included memories whose normalised text (casefold, punctuation stripped, whitespace
  collapsed) equals another included memory's in the same block, summed;
* near-dups: paraphrased pairs of the truth with both members included, summed;
* incl/block, tokens (the block's ``tokens_used``), CPU ms (process time per assembly, SQLite worker
  threads included, mean; a warm-up pass fills the token cache first, so no policy pays for it alone).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from adapters.embedded import EmbeddedDatabase, EmbeddedDirectiveStore, EmbeddedMemoryStore
from adapters.json_model_catalog import JsonModelCatalog
from adapters.secrets_nonce_source import SecretsNonceSource
from adapters.system_clock import SystemClock
from adapters.token_counters import TokenCountersRegistry
from bench import quality_data
from bench.quality_data import Dataset, Question
from adapters.text_profiles import CachedTextProfiles
from domain.model.assembly import SCORE_POLICIES, ScoreSchema, AssembleRequest, AssemblyResult
from domain.relevance_policy import RelevancePolicy
from domain.usecases.assemble_context import AssembleContext
from domain.usecases.assembly_config import AssemblyConfig
from entrypoints.settings import Settings

MODEL = "gpt-4o-mini"
POLICIES = ("interim_v1", "relevance_v1")
BUDGETS = (500, 1000, 2000)
QUICK_AGENTS, QUICK_QUESTIONS = 2, 8
GENEROUS_S = 1.0
INCLUDED = "included"
DEGRADATION_NONE = "L0"
TENANT_MISMATCH = "tenant_mismatch"
SEARCH_SOURCE = "full_text"  # the embedded backend's search hits
TOP_K = "search_top_k"  # the baseline row, from the interim_v1 answers


@attrs.define
class Tally:
    """The sums behind one (policy, budget) row."""

    questions: int = 0
    block_share: float = 0.0
    candidate_share: float = 0.0
    evidence_included: int = 0
    evidence_found: int = 0
    included: int = 0
    noise: int = 0
    duplicates: int = 0
    near_duplicates: int = 0
    tokens: int = 0
    cpu_s: float = 0.0
    degraded: int = 0  # answers below L0 (a branch failed or timed out): selection was not all measured

    def row(self, policy: str, budget: int) -> dict[str, object]:
        n = max(1, self.questions)
        return {
            "policy": policy, "budget": budget, "questions": self.questions,
            "evidence_in_block": self.block_share / n, "evidence_among_candidates": self.candidate_share / n,
            "kept_of_found": self.evidence_included / self.evidence_found if self.evidence_found else 0.0,
            "noise_share": self.noise / self.included if self.included else 0.0,
            "duplicates_packed": self.duplicates, "near_duplicates_packed": self.near_duplicates,
            "evidence_included": self.evidence_included, "evidence_found": self.evidence_found,
            "included_per_block": self.included / n, "tokens_used": self.tokens / n, "cpu_ms": self.cpu_s * 1000.0 / n,
            "degraded": self.degraded,
        }


class Truth:
    """What the generator knows, indexed for scoring one block."""

    def __init__(self, dataset: Dataset) -> None:
        self.text = {m.memory_id: quality_data.normalise(m.content) for m in dataset.memories}
        self.copies = dataset.copies()
        self.paraphrase_of: dict[str, set[str]] = {}
        for a, b in dataset.paraphrase_pairs:
            self.paraphrase_of.setdefault(a, set()).add(b)
            self.paraphrase_of.setdefault(b, set()).add(a)

    def add(self, tally: Tally, question: Question, result: AssemblyResult, included: set[str] | None = None) -> None:
        """Score one answer; ``included`` replaces the answer's own selection (a baseline's)."""
        tokens = result.tokens_used
        if included is None:
            included = {r.memory_id for r in result.memories_used if r.exclusion == INCLUDED}
        else:  # the block the baseline would have sent: the same text around other memories
            cost = {r.memory_id: r.token_estimate for r in result.memories_used}
            tokens += sum(cost[m] for m in included) - result.memory_tokens
        found = {r.memory_id for r in result.memories_used if r.detail != TENANT_MISMATCH}
        groups = [{e, *self.copies.get(e, ())} for e in question.evidence]
        in_block = sum(1 for g in groups if g & included)
        in_candidates = sum(1 for g in groups if g & found)
        tally.questions += 1
        tally.block_share += in_block / len(groups)
        tally.candidate_share += in_candidates / len(groups)
        tally.evidence_included += in_block
        tally.evidence_found += in_candidates
        tally.included += len(included)
        tally.noise += len(included - set().union(*groups))
        texts = Counter(self.text[m] for m in included)
        tally.duplicates += sum(n for n in texts.values() if n > 1)
        tally.near_duplicates += sum(1 for m in included for o in self.paraphrase_of.get(m, ()) if m < o and o in included)
        tally.tokens += tokens
        tally.degraded += result.degradation_level != DEGRADATION_NONE


def search_top_k(result: AssemblyResult) -> set[str]:
    """What a plain retrieval pipeline packs: the search hits in the source's rank order, each
    taken while it still fits the usable budget, at the costs the service charged. Needs an
    answer that priced every candidate (``interim_v1`` prices all it does not dedupe)."""
    cost = {r.memory_id: r.token_estimate for r in result.memories_used if r.token_estimate > 0}
    ranked = sorted((r.rank, r.memory_id) for r in result.memories_used if r.source == SEARCH_SOURCE)
    chosen: set[str] = set()
    room = result.usable_budget
    for _, memory_id in ranked:
        if memory_id not in chosen and memory_id in cost and cost[memory_id] <= room:
            chosen.add(memory_id)
            room -= cost[memory_id]
    return chosen


def config_for(policy: str, hot_limit: int | None, cold_limit: int | None,
               relevance: RelevancePolicy | None = None) -> AssemblyConfig:
    """The service's configuration (its declared defaults) with generous walls, ``policy``, and the
    limits and relevance_v1 parameters given (None: the service's)."""
    if policy not in SCORE_POLICIES:
        raise SystemExit(f"bench.quality: unknown score policy {policy!r} (known: {', '.join(SCORE_POLICIES)})")
    limits = {name: value for name, value in (("hot_limit", hot_limit), ("cold_limit", cold_limit)) if value is not None}
    tuned = {} if relevance is None else {"relevance": relevance}
    return Settings().assembly_config(wall_s=GENEROUS_S, directive_timeout_s=GENEROUS_S, hot_timeout_s=GENEROUS_S,
                                      cold_timeout_s=GENEROUS_S, score_policy=policy, **limits, **tuned)


async def load(dataset: Dataset, memories: EmbeddedMemoryStore, directives: EmbeddedDirectiveStore,
               now: datetime, folder: Path) -> None:
    """Import every memory (dated ``now - age``) through the JSONL import and set each directive."""
    path = folder / "memories.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for m in dataset.memories:
            created = (now - timedelta(days=m.age_days)).isoformat()
            out.write(json.dumps({"org_id": dataset.org_id, "agent_id": m.agent_id, "content": m.content,
                                  "category": m.category, "confidence": m.confidence, "usefulness": m.usefulness,
                                  "memory_id": m.memory_id, "created_at": created}) + "\n")
    await memories.import_jsonl(path)
    for agent in dataset.agents:
        await directives.set_directive(dataset.org_id, agent.agent_id, agent.directive)


async def measure(dataset: Dataset, configs: dict[str, AssemblyConfig], budgets: Sequence[int]) -> dict[str, Any]:
    truth = Truth(dataset)
    rows = [*configs, *((TOP_K,) if ScoreSchema.INTERIM in configs else ())]
    tallies = {(p, b): Tally() for p in rows for b in budgets}
    exclusions: dict[str, Counter[str]] = {p: Counter() for p in configs}
    schemas: dict[str, set[str]] = {p: set() for p in configs}
    clock = SystemClock()
    counters = TokenCountersRegistry()
    counters.preload()
    catalog = JsonModelCatalog.builtin()
    with tempfile.TemporaryDirectory(prefix="ibex-quality-") as folder:
        database = EmbeddedDatabase.open(Path(folder) / "quality.db")
        memories, directives = EmbeddedMemoryStore(database, clock), EmbeddedDirectiveStore(database, clock)
        try:
            await load(dataset, memories, directives, clock.now(), Path(folder))
            cases = {p: AssembleContext(directives=directives, memories=memories, catalog=catalog, counters=counters,
                                        clock=clock, nonces=SecretsNonceSource(), config=c,
                                        profiles=CachedTextProfiles()) for p, c in configs.items()}

            def request(question: Question, budget: int) -> AssembleRequest:
                return AssembleRequest(org_id=dataset.org_id, agent_id=question.agent_id, model=MODEL,
                                       query=question.text, available_tokens=budget)

            first = next(iter(cases.values()))
            for question in dataset.questions:  # warm the token cache, so no policy pays for it alone
                await first.execute(request(question, max(budgets)))
            for question in dataset.questions:
                for policy, case in cases.items():
                    for budget in budgets:
                        started = time.process_time()
                        result = await case.execute(request(question, budget))
                        tally = tallies[(policy, budget)]
                        tally.cpu_s += time.process_time() - started
                        truth.add(tally, question, result)
                        if policy == ScoreSchema.INTERIM:
                            truth.add(tallies[(TOP_K, budget)], question, result, search_top_k(result))
                        exclusions[policy].update(r.detail for r in result.memories_used if r.exclusion != INCLUDED)
                        schemas[policy].add(result.score_schema)
        finally:
            await memories.close()
            await directives.close()
            await database.close()
    return {"rows": [tallies[(p, b)].row(p, b) for p in rows for b in budgets],
            "exclusions": {p: dict(c.most_common()) for p, c in exclusions.items()},
            "score_schemas": {p: sorted(s) for p, s in schemas.items()}}


def describe(dataset: Dataset) -> dict[str, Any]:
    return {"seed": dataset.seed, "agents": len(dataset.agents), "memories": len(dataset.memories),
            "questions": len(dataset.questions), "evidence": sum(len(q.evidence) for q in dataset.questions),
            "fingerprint": dataset.fingerprint(), "kinds": quality_data.kinds(dataset.memories)}


def print_report(report: dict[str, Any]) -> None:
    d, c = report["dataset"], report["config"]
    print(f"bench.quality: seed {d['seed']}, {d['agents']} agents, {d['memories']:,} memories, "
          f"{d['questions']:,} questions ({d['evidence']:,} evidence memories), dataset {d['fingerprint']}")
    print(f"model {MODEL}, hot_limit {c['hot_limit']}, cold_limit {c['cold_limit']}, walls {GENEROUS_S:g} s, "
          "embedded backend, exact token counts")
    print(f"{'policy':<14}{'budget':>7}{'ev.block':>10}{'ev.cands':>10}{'kept/found':>12}{'noise':>8}"
          f"{'dups':>6}{'near-dups':>11}{'incl/block':>12}{'tokens':>8}{'CPU ms':>8}")
    for r in report["rows"]:
        print(f"{r['policy']:<14}{r['budget']:>7}{r['evidence_in_block']:>10.3f}{r['evidence_among_candidates']:>10.3f}"
              f"{r['kept_of_found']:>12.3f}{r['noise_share']:>8.3f}{r['duplicates_packed']:>6}"
              f"{r['near_duplicates_packed']:>11}{r['included_per_block']:>12.2f}{r['tokens_used']:>8.0f}"
              f"{r['cpu_ms']:>8.2f}")
    degraded = sum(r["degraded"] for r in report["rows"])
    if degraded:
        print(f"note: {degraded} answers were degraded (a branch failed or timed out)", file=sys.stderr)
    print("exclusion reasons of non-included candidates (summed over budgets):")
    for policy, counts in report["exclusions"].items():
        listed = ", ".join(f"{reason or '(none)'} {n:,}" for reason, n in counts.items()) or "none"
        schemas = ", ".join(report["score_schemas"][policy])
        print(f"  {policy:<14} {listed}   [score_schema on the wire: {schemas}]")
        if report["score_schemas"][policy] != [policy]:
            print(f"note: policy {policy} answered with score_schema {schemas}", file=sys.stderr)


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--agents", type=int, help=f"default {quality_data.DEFAULT_AGENTS} ({QUICK_AGENTS} with --quick)")
    parser.add_argument("--questions-per-agent", type=int,
                        help=f"default {quality_data.DEFAULT_QUESTIONS_PER_AGENT} ({QUICK_QUESTIONS} with --quick)")
    parser.add_argument("--policies", type=lambda s: tuple(p.strip() for p in s.split(",") if p.strip()),
                        default=POLICIES, help="comma-separated score policies (default: %(default)s)")
    parser.add_argument("--budgets", type=_numbers, default=BUDGETS, help="comma-separated available_tokens values")
    defaults = Settings()  # the service's declared defaults (entrypoints.settings)
    parser.add_argument("--hot-limit", type=int, help=f"hot memories asked for (default: the service's, {defaults.hot_limit})")
    parser.add_argument("--cold-limit", type=int,
                        help=f"search hits asked for (default: the service's, {defaults.cold_limit})")
    parser.add_argument("--floor", type=float, default=defaults.relevance_floor, help="relevance_v1 floor (%(default)s)")
    parser.add_argument("--sharpness", type=float, default=defaults.relevance_sharpness,
                        help="relevance_v1 sharpness (%(default)s)")
    parser.add_argument("--hot-slots", type=int, default=defaults.hot_slots, help="relevance_v1 hot slots (%(default)s)")
    parser.add_argument("--core-slots", type=int, default=defaults.core_slots, help="relevance_v1 core slots (%(default)s)")
    parser.add_argument("--quick", action="store_true", help="a small run (for the smoke test)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.agents is None:
        args.agents = QUICK_AGENTS if args.quick else quality_data.DEFAULT_AGENTS
    if args.questions_per_agent is None:
        args.questions_per_agent = QUICK_QUESTIONS if args.quick else quality_data.DEFAULT_QUESTIONS_PER_AGENT
    if not args.policies or not args.budgets or args.agents < 1 or args.questions_per_agent < 1:
        parser.error("--policies, --budgets, --agents and --questions-per-agent must not be empty or below 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        relevance = RelevancePolicy(floor=args.floor, sharpness=args.sharpness, hot_slots=args.hot_slots,
                                    core_slots=args.core_slots)
    except ValueError as exc:
        raise SystemExit(f"bench.quality: bad relevance_v1 parameter: {exc}") from None
    configs = {policy: config_for(policy, args.hot_limit, args.cold_limit, relevance) for policy in args.policies}
    dataset = quality_data.generate(args.seed, args.agents, args.questions_per_agent)
    measured = asyncio.run(measure(dataset, configs, args.budgets))
    some = next(iter(configs.values()))
    report = {"dataset": describe(dataset), "config": {"model": MODEL, "hot_limit": some.hot_limit,
                                                        "cold_limit": some.cold_limit, "wall_s": GENEROUS_S},
              **measured}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)


if __name__ == "__main__":
    main()
