"""Synchronous read-side SQL (runs on a worker thread): the hot list and the ranked search.

Search: the query's words (at most 64 distinct) are cut into terms by FTS5's tokenizer; BM25
(``scoring``) is computed in SQL from the tenant's postings with the tenant's own statistics and
mapped to a similarity; then ``min_similarity`` (None: ``DEFAULT_MIN_SIMILARITY``),
``min_confidence`` (inclusive), ``categories`` (any of) and ``tags`` (a memory carrying any of
them) filter, and the best ``limit`` are returned by similarity descending, ties by memory id.
Hot: every active memory of the tenant by the hot score of ``scoring``, computed in SQL.
Reads never write: the retrieval count is data, not a counter of reads.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Iterable

from adapters.embedded.database import tokenize
from adapters.embedded.records import decode_tags, from_micros
from adapters.embedded.scoring import (
    BM25_B,
    BM25_K1,
    FREQUENCY_SATURATION,
    HOT_CONFIDENCE_WEIGHT,
    HOT_FREQUENCY_WEIGHT,
    HOT_RECENCY_WEIGHT,
    HOT_RELEVANCE_WEIGHT,
    HOT_USEFULNESS_WEIGHT,
    SECONDS_PER_DAY,
    idf,
    score_floor,
    similarity_from_bm25,
)
from adapters.embedded.validation import canonical_uuid_or_none
from domain.model.memory import DroppedItem, HotQuery, MemoryBatch, MemoryHit, SearchQuery
from domain.scoring import CATEGORY_HALF_LIFE_DAYS, UNKNOWN_CATEGORY_HALF_LIFE_DAYS

DEFAULT_MIN_SIMILARITY = 0.15
MAX_QUERY_WORDS = 64
HOT_SOURCE = "hot"
SEARCH_SOURCE = "full_text"
_WORD = re.compile(r"[^\W_]+")
_HIT_COLUMNS = (
    "m.id, m.memory_id, m.org_id, m.agent_id, m.content, m.category, m.confidence, m.usefulness,"
    " m.retrieval_count, m.tags, m.created_us"
)
_HALF_LIFE_SQL = (
    "CASE m.category "
    + " ".join(f"WHEN '{name}' THEN {days!r}" for name, days in CATEGORY_HALF_LIFE_DAYS.items())
    + f" ELSE {UNKNOWN_CATEGORY_HALF_LIFE_DAYS!r} END"
)
_HOT_SCORE_SQL = (
    f"{HOT_RELEVANCE_WEIGHT!r}"
    f" + {HOT_RECENCY_WEIGHT!r} * exp(-{math.log(2.0)!r} * max(0, :now_us - m.created_us)"
    f" / ({SECONDS_PER_DAY * 1e6!r} * ({_HALF_LIFE_SQL})))"
    f" + {HOT_USEFULNESS_WEIGHT!r} * m.usefulness + {HOT_CONFIDENCE_WEIGHT!r} * m.confidence"
    f" + {HOT_FREQUENCY_WEIGHT!r} * min(1.0, m.retrieval_count / {float(FREQUENCY_SATURATION)!r})"
)
_BM25_SQL = (
    "WITH scored AS ("
    " SELECT p.memory_rowid AS id,"
    f" sum(w.value * p.tf * {BM25_K1 + 1.0!r} / (p.tf + {BM25_K1!r} * ({1.0 - BM25_B!r}"
    f" + {BM25_B!r} * p.doc_length / :average_length))) AS score"
    " FROM json_each(:weights) AS w"
    " JOIN memory_postings AS p ON p.tenant_no = :tenant_no AND p.term = w.key"
    " GROUP BY p.memory_rowid)"
    f" SELECT {_HIT_COLUMNS}, s.score FROM scored AS s JOIN memories AS m ON m.id = s.id"
    " WHERE s.score >= :floor AND m.status = 'active' AND m.confidence >= :min_confidence"
)
_CATEGORY_FILTER = " AND m.category IN (SELECT value FROM json_each(:categories))"
_TAG_FILTER = (
    " AND EXISTS (SELECT 1 FROM json_each(m.tags) AS t"
    " WHERE t.value IN (SELECT value FROM json_each(:tags)))"
)


def hot_memories(conn: sqlite3.Connection, query: HotQuery, now_us: int) -> MemoryBatch:
    """The tenant's active memories by hot score descending (ties by id), at most ``limit``."""
    tenant = _tenant(query.org_id, query.agent_id)
    if tenant is None or query.limit <= 0:
        return MemoryBatch()
    rows = conn.execute(
        f"SELECT {_HIT_COLUMNS}, {_HOT_SCORE_SQL} AS score FROM memories AS m"
        " WHERE m.org_id = :org_id AND m.agent_id = :agent_id AND m.status = 'active'"
        " AND m.confidence >= :min_confidence ORDER BY score DESC, m.memory_id LIMIT :limit",
        {"now_us": now_us, "org_id": tenant[0], "agent_id": tenant[1],
         "min_confidence": query.min_confidence, "limit": query.limit},
    ).fetchall()
    return _batch(((row[:-1], row[-1]) for row in rows), HOT_SOURCE)


def search_memories(conn: sqlite3.Connection, query: SearchQuery) -> MemoryBatch:
    """The tenant's active memories matching ``query.query``, best first (see module docstring)."""
    tenant = _tenant(query.org_id, query.agent_id)
    words = query_words(query.query)
    if tenant is None or query.limit <= 0 or not words:
        return MemoryBatch()
    terms = sorted(set(tokenize(conn, " ".join(words))))
    conn.execute("BEGIN")  # one snapshot for the statistics and the ranking
    try:
        ranked = _ranked(conn, query, tenant, terms)
    finally:
        conn.execute("COMMIT")
    return _batch(ranked, SEARCH_SOURCE)


def query_words(text: str) -> list[str]:
    """The query's distinct words (case-insensitive), in order, at most ``MAX_QUERY_WORDS``."""
    seen: dict[str, str] = {}
    for word in _WORD.findall(text):
        seen.setdefault(word.casefold(), word)
        if len(seen) == MAX_QUERY_WORDS:
            break
    return list(seen.values())


def tenant_number(conn: sqlite3.Connection, org_id: str, agent_id: str) -> int | None:
    row = conn.execute("SELECT tenant_no FROM tenants WHERE org_id = ? AND agent_id = ?", (org_id, agent_id)).fetchone()
    return None if row is None else int(row[0])


def _tenant(org_id: str, agent_id: str) -> tuple[str, str] | None:
    org, agent = canonical_uuid_or_none(org_id), canonical_uuid_or_none(agent_id)
    return None if org is None or agent is None else (org, agent)


def _ranked(
    conn: sqlite3.Connection, query: SearchQuery, tenant: tuple[str, str], terms: list[str]
) -> list[tuple[tuple, float]]:  # type: ignore[type-arg]
    tenant_no = tenant_number(conn, *tenant)
    doc_count, total_length = conn.execute(
        "SELECT count(*), total(token_count) FROM memories WHERE org_id = ? AND agent_id = ? AND status = 'active'",
        tenant,
    ).fetchone()
    if tenant_no is None or doc_count == 0 or not terms:
        return []
    weights = _idf_weights(conn, tenant_no, terms, doc_count)
    ideal = sum(weights.values())
    threshold = DEFAULT_MIN_SIMILARITY if query.min_similarity is None else query.min_similarity
    if ideal <= 0.0 or threshold > 1.0:
        return []
    sql = _BM25_SQL + (_CATEGORY_FILTER if query.categories else "") + (_TAG_FILTER if query.tags else "")
    rows = conn.execute(
        sql + " ORDER BY s.score DESC, m.memory_id LIMIT :limit",
        {"average_length": max(total_length / doc_count, 1.0), "weights": json.dumps(weights),
         "tenant_no": tenant_no, "floor": score_floor(threshold, ideal), "min_confidence": query.min_confidence,
         "categories": json.dumps(list(query.categories)), "tags": json.dumps(list(query.tags)),
         "limit": query.limit},
    ).fetchall()
    scored = ((row[:-1], similarity_from_bm25(row[-1], ideal)) for row in rows)
    return [(row, similarity) for row, similarity in scored if similarity > 0.0 and similarity >= threshold]


def _idf_weights(conn: sqlite3.Connection, tenant_no: int, terms: list[str], doc_count: int) -> dict[str, float]:
    """IDF of each query term the tenant's memories contain (absent terms carry no weight)."""
    rows = conn.execute(
        "SELECT w.value, (SELECT count(*) FROM memory_postings AS p WHERE p.tenant_no = ? AND p.term = w.value)"
        " FROM json_each(?) AS w",
        (tenant_no, json.dumps(terms)),
    ).fetchall()
    return {term: idf(doc_count, doc_freq) for term, doc_freq in rows if doc_freq > 0}


def _batch(scored_rows: Iterable[tuple[tuple, float]], source: str) -> MemoryBatch:  # type: ignore[type-arg]
    hits: list[MemoryHit] = []
    dropped: list[DroppedItem] = []
    for row, similarity in scored_rows:
        try:
            hits.append(_hit(row, similarity, rank=len(hits) + 1, source=source))
        except ValueError as exc:
            dropped.append(DroppedItem(reason="malformed", detail=str(exc), memory_id=str(row[1])))
    return MemoryBatch(hits=tuple(hits), dropped=tuple(dropped))


def _hit(row: tuple, similarity: float, *, rank: int, source: str) -> MemoryHit:  # type: ignore[type-arg]
    (_, memory_id, org_id, agent_id, content, category, confidence, usefulness, retrieval_count,
     raw_tags, created_us) = row
    return MemoryHit(
        memory_id=memory_id,
        org_id=org_id,
        agent_id=agent_id,
        content=content,
        category=category,
        confidence=confidence,
        similarity=similarity,
        rank=rank,
        source=source,
        usefulness=usefulness,
        created_at=from_micros(created_us),
        retrieval_count=retrieval_count,
        tags=decode_tags(raw_tags),
    )
