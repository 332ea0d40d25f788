"""Text signals computed locally over one assembly's candidates: query terms, BM25, duplicates.

* Words: letters and digits, case-folded. A content's **terms** are its words less English stop
  words. Query terms are also folded from plural to singular (``databases`` -> ``database``),
  and a query term matches a content word spelled as that term or as its plural (``-s``,
  ``-es``, ``-ies``), so a query and a memory written in different grammatical numbers meet.
* Lexical relevance: Okapi BM25 (k1 1.2, b 0.75, IDF ``ln(1 + (N - df + 0.5) / (df + 0.5))``)
  of each candidate against the query terms, with the statistics of the candidate set itself
  (N, average length in words, document frequencies). It scores memories a source returned
  without a query (the hot list) on the same footing as the search hits.
* Duplicates: two contents are the same memory when their words are equal (punctuation, case
  and spacing aside), and near duplicates when their term sets overlap by a Jaccard index of at
  least ``jaccard`` (a few words swapped, added or reordered). Candidate pairs are found by
  prefix filtering (``DuplicateIndex``), so a pool is not compared pair by pair.

A ``TextProfile`` depends on the content alone: the ``TextProfiles`` port may serve it from a
cache, since memories repeat from one assembly to the next.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import attrs

BM25_K1 = 1.2
BM25_B = 0.75
_WORD = re.compile(r"[^\W_]+")
STOP_WORDS = frozenset(
    "a about above after again all am an and any are as at be been before being below between both"
    " but by can could did do does doing down during each few for from further had has have having"
    " he her here hers herself him himself his how i if in into is it its itself just me more most"
    " my myself no nor not now of off on once only or other our ours ourselves out over own same"
    " she should so some such than that the their theirs them themselves then there these they this"
    " those through to too under until up very was we were what when where which while who whom why"
    " will with would you your yours yourself yourselves".split()
)


@attrs.frozen
class TextProfile:
    """One content's words as the relevance and duplicate rules see them."""

    key: str  # the case-folded words joined by spaces: equal keys, same memory
    length: int  # words in all
    counts: dict[str, int] = attrs.field(eq=False)  # occurrences of each term
    terms: frozenset[str]  # words less stop words
    ordered_terms: tuple[str, ...]  # the terms, longest first then alphabetical (prefix filtering)


def profile(text: str) -> TextProfile:
    words = _WORD.findall(text.casefold())
    counts = Counter(words)
    for stop_word in STOP_WORDS.intersection(counts):
        del counts[stop_word]
    terms = frozenset(counts)
    return TextProfile(key=" ".join(words), length=len(words), counts=dict(counts), terms=terms,
                       ordered_terms=tuple(sorted(terms, key=_rare_first)))


@attrs.frozen
class QueryTerms:
    """The query's terms (singular) and every spelling of them a content word may match."""

    terms: frozenset[str]
    spellings: dict[str, str] = attrs.field(eq=False)  # content word -> query term

    def __bool__(self) -> bool:
        return bool(self.terms)


def query_terms(text: str) -> QueryTerms:
    terms = frozenset(_singular(w) for w in _WORD.findall(text.casefold()) if w not in STOP_WORDS)
    spellings = {spelling: term for term in terms for spelling in _plurals(term)}
    return QueryTerms(terms=terms, spellings=spellings)


def bm25(query: QueryTerms, documents: Sequence[TextProfile]) -> list[float]:
    """BM25 of each document for ``query`` with the documents' own statistics (0.0: no match)."""
    if not query or not documents:
        return [0.0] * len(documents)
    spellings = query.spellings
    spelled = spellings.keys()
    matches: list[dict[str, int]] = []  # each document's query terms -> occurrences
    for doc in documents:
        found: dict[str, int] = {}
        for word in spelled & doc.terms:  # usually empty or a few words
            term = spellings[word]
            found[term] = found.get(term, 0) + doc.counts[word]
        matches.append(found)
    doc_freq = Counter([term for found in matches for term in found])
    count = len(documents)
    average = max(1.0, sum(doc.length for doc in documents) / count)
    weight = {t: math.log(1.0 + (count - df + 0.5) / (df + 0.5)) for t, df in doc_freq.items()}
    saturation = BM25_K1 + 1.0
    scores = []
    for doc, found in zip(documents, matches, strict=True):
        score = 0.0  # the terms' parts added one after the other, in the order found
        if found:
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * doc.length / average)
            for term, tf in found.items():
                score += weight[term] * tf * saturation / (tf + norm)
        scores.append(score)
    return scores


def near_duplicates(a: TextProfile, b: TextProfile, jaccard: float) -> bool:
    """Same words, or term sets overlapping by a Jaccard index of at least ``jaccard``."""
    if a.key == b.key:
        return True
    smaller, larger = sorted((len(a.terms), len(b.terms)))
    if smaller == 0 or smaller < jaccard * larger:  # the index is at most smaller / larger
        return False
    shared = len(a.terms & b.terms)
    return shared >= jaccard * (len(a.terms) + len(b.terms) - shared)


class DuplicateIndex:
    """The profiles kept so far, searchable for a near duplicate of a new one.

    Prefix filtering: two term sets with a Jaccard index >= j share at least ``j * max(n, m)``
    terms, so they share one of the first ``n - ceil(j * n) + 1`` terms of each, in any one fixed
    order. The order is longest term first (long words are the rare ones), so the few kept
    profiles listed under a prefix term are mostly real near duplicates.
    """

    def __init__(self, jaccard: float) -> None:
        self._jaccard = jaccard
        self._keys: set[str] = set()
        self._by_term: dict[str, list[tuple[int, int]]] = {}  # prefix term -> (terms as bits, size) kept
        self._bits: dict[str, int] = {}  # each term seen by this index -> its bit

    def find_or_add(self, text: TextProfile) -> bool:
        """True if ``text`` nearly duplicates a kept profile; otherwise keep it and say False.

        Term sets are compared as bit sets over the terms this index has seen (one bit each), so
        the size of an intersection is one ``&`` and a popcount.
        """
        if text.key in self._keys:
            return True
        terms, jaccard = text.terms, self._jaccard
        size = len(terms)
        low, high = jaccard * size, size / jaccard  # the sizes a near duplicate can have
        prefix = text.ordered_terms[: size - math.ceil(low - 1e-9) + 1]
        mask = self._mask(terms)
        by_term = self._by_term
        seen: set[int] = set()
        for term in prefix:
            for kept, other in by_term.get(term, ()):
                if kept in seen:
                    continue
                seen.add(kept)
                if low <= other <= high:
                    shared = (mask & kept).bit_count()
                    if shared >= jaccard * (size + other - shared):
                        return True
        self._keys.add(text.key)
        entry = (mask, size)
        for term in prefix:
            by_term.setdefault(term, []).append(entry)
        return False

    def _mask(self, terms: frozenset[str]) -> int:
        bits = self._bits
        mask = 0
        for term in terms:
            bit = bits.get(term)
            if bit is None:
                bit = bits[term] = 1 << len(bits)
            mask |= bit
        return mask


def _rare_first(term: str) -> tuple[int, str]:
    return (-len(term), term)


def _singular(word: str) -> str:
    """A light English plural fold; short words and ``-ss``, ``-us``, ``-is`` endings are kept."""
    if len(word) <= 3 or not word.endswith("s") or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    return word[:-1]


def _plurals(term: str) -> tuple[str, ...]:
    if term.endswith("y") and len(term) > 2:
        return (term, term + "s", term[:-1] + "ies")
    return (term, term + "s", term + "es")
