"""How the embedded backend scores memories: the hot score, BM25 ranking and feedback updates.

Hot score (the ``similarity`` of a hot hit, in [0.4, 1]) mirrors the memory service's write-time
composite, computed at read time with the relevance component fixed at 1.0::

    hot = 0.40 * 1.0 + 0.25 * recency + 0.20 * usefulness + 0.10 * confidence
          + 0.05 * min(1, retrieval_count / 10)
    recency = exp(-ln 2 * age_days / half_life_days(category))

Half-lives: the domain's (``domain.scoring.CATEGORY_HALF_LIFE_DAYS``; factual 180 days, procedural
120, preference 45, behavioral 30, episodic 14, any other category 14). A memory dated in the
future has age 0.

Search ranking is Okapi BM25 (k1 = 1.2, b = 0.75, the constants of FTS5's ``bm25()``) over the
terms of SQLite FTS5's tokenizer (``porter unicode61 remove_diacritics 2``: stems, case and
accents folded), computed in SQL from postings keyed by tenant, with the **tenant's own**
statistics (the number of the agent's active memories, their average length, each term's
document frequency among them). FTS5's own ``bm25()`` takes these from the whole table, which
would let one tenant's memories shift another tenant's scores (a cross-tenant signal) and gives
every term of a one- or two-memory corpus a weight of about zero; one FTS5 table per tenant was
measured and rejected (2000 tables: 60 s to create, and each new tenant's schema change stalls
every connection for 0.65 s). The IDF is the non-negative form
``ln(1 + (N - df + 0.5) / (df + 0.5))``.

BM25 -> similarity: ``similarity = 1 - exp(-ln 5 * score / ideal)`` where ``ideal`` is the score
that a memory of average length containing each query term (that the tenant's corpus knows) once
would get, i.e. the sum of those terms' IDF. It is 0 for no match, strictly increasing in the
score, below 1 (at most about 0.97), and 0.8 for that "ideal" memory, whatever the corpus size.
Query terms absent from the tenant's corpus do not lower it (no memory could match them).

``reads`` computes the hot score and BM25 in SQL from the constants below; ``hot_score`` and
``term_score`` are the reference formulas the tests hold that SQL to.

Feedback moves usefulness a step toward 1 (positive) or 0 (negative):
``u' = u + 0.1 * (1 - u)`` / ``u' = u - 0.1 * u``; neutral leaves it unchanged.
"""

from __future__ import annotations

import math

from domain.scoring import CATEGORY_HALF_LIFE_DAYS, UNKNOWN_CATEGORY_HALF_LIFE_DAYS
SECONDS_PER_DAY = 86_400.0

HOT_RELEVANCE_WEIGHT = 0.40
HOT_RECENCY_WEIGHT = 0.25
HOT_USEFULNESS_WEIGHT = 0.20
HOT_CONFIDENCE_WEIGHT = 0.10
HOT_FREQUENCY_WEIGHT = 0.05
FREQUENCY_SATURATION = 10

BM25_K1 = 1.2
BM25_B = 0.75
IDEAL_MATCH_SIMILARITY = 0.8
_SIMILARITY_RATE = -math.log(1.0 - IDEAL_MATCH_SIMILARITY)

FEEDBACK_STEP = 0.1


def half_life_days(category: str) -> float:
    return CATEGORY_HALF_LIFE_DAYS.get(category, UNKNOWN_CATEGORY_HALF_LIFE_DAYS)


def recency(age_seconds: float, category: str) -> float:
    """exp(-ln 2 * age / half-life), 1.0 for an age <= 0."""
    age_days = max(0.0, age_seconds) / SECONDS_PER_DAY
    return math.exp(-math.log(2.0) * age_days / half_life_days(category))


def hot_score(
    *, age_seconds: float, category: str, usefulness: float, confidence: float, retrieval_count: int
) -> float:
    """The documented hot composite (relevance fixed at 1.0), in [0.4, 1]."""
    frequency = min(1.0, max(0, retrieval_count) / FREQUENCY_SATURATION)
    return (
        HOT_RELEVANCE_WEIGHT
        + HOT_RECENCY_WEIGHT * recency(age_seconds, category)
        + HOT_USEFULNESS_WEIGHT * usefulness
        + HOT_CONFIDENCE_WEIGHT * confidence
        + HOT_FREQUENCY_WEIGHT * frequency
    )


def idf(doc_count: int, doc_freq: int) -> float:
    """Non-negative BM25 IDF of a term found in ``doc_freq`` of ``doc_count`` memories."""
    return math.log(1.0 + (doc_count - doc_freq + 0.5) / (doc_freq + 0.5))


def term_score(term_idf: float, tf: int, doc_length: int, average_length: float) -> float:
    """One term's BM25 contribution for a memory where it occurs ``tf`` times."""
    if tf <= 0:
        return 0.0
    relative_length = doc_length / average_length if average_length > 0 else 1.0
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * relative_length)
    return term_idf * tf * (BM25_K1 + 1.0) / (tf + norm)


def similarity_from_bm25(score: float, ideal: float) -> float:
    """Map a BM25 score to [0, 1): 0 for no match, 0.8 when ``score == ideal``, increasing."""
    if score <= 0.0 or ideal <= 0.0:
        return 0.0
    return 1.0 - math.exp(-_SIMILARITY_RATE * score / ideal)


def score_floor(similarity: float, ideal: float) -> float:
    """The lowest BM25 score whose similarity can reach ``similarity`` (slightly under, for
    rounding: callers compare the mapped similarity exactly afterwards)."""
    if not similarity > 0.0:
        return 0.0
    if similarity >= 1.0:
        return math.inf
    return ideal * -math.log(1.0 - similarity) / _SIMILARITY_RATE * (1.0 - 1e-9)


def updated_usefulness(usefulness: float, feedback: str) -> float:
    """Usefulness after one feedback value ("positive" | "negative" | "neutral")."""
    if feedback == "positive":
        return usefulness + FEEDBACK_STEP * (1.0 - usefulness)
    if feedback == "negative":
        return usefulness - FEEDBACK_STEP * usefulness
    return usefulness
