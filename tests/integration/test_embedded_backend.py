"""The embedded backend against a real SQLite file: durability, concurrency, import, ranking,
scores, directives, validation and errors. (The port contract itself: tests/contract.)"""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.embedded import EmbeddedDatabase, EmbeddedDirectiveStore, EmbeddedMemoryStore, EmbeddedValidationError
from adapters.embedded import memory_store as memory_store_module
from adapters.embedded.database import DEFAULT_WORKERS
from adapters.embedded.scoring import hot_score, idf, similarity_from_bm25, term_score
from domain.model.directive import Directive
from domain.model.feedback import FeedbackItem
from domain.model.memory import HotQuery, SearchQuery
from ports.errors import (
    DirectiveStoreError,
    MemorySourceClosedError,
    MemorySourceTimeoutError,
    MemorySourceUnavailableError,
)
from tests.fakes.clock import FixedClock

ORG, AGENT = str(uuid.uuid4()), str(uuid.uuid4())
HOLD_CAP_S = 30.0  # a hang guard only
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "ibex.db"


@pytest.fixture
async def store(db_path: Path, clock: FixedClock) -> AsyncIterator[EmbeddedMemoryStore]:
    memory_store = EmbeddedMemoryStore.open(db_path, clock=clock)
    yield memory_store
    await memory_store.close()


async def _search(store: EmbeddedMemoryStore, text: str, *, org: str = ORG, agent: str = AGENT, **options):
    return await store.search(SearchQuery(org, agent, text, **options), timeout_s=5.0)


async def _add(store: EmbeddedMemoryStore, content: str, category: str = "factual", **fields) -> str:
    return await store.add(org_id=fields.pop("org_id", ORG), agent_id=fields.pop("agent_id", AGENT),
                           content=content, category=category, **fields)


# --- durability --------------------------------------------------------------------------------


async def test_the_file_is_in_wal_mode_and_data_survives_reopening(db_path: Path, clock: FixedClock) -> None:
    store = EmbeddedMemoryStore.open(db_path, clock=clock)
    memory_id = await _add(store, "The user prefers dark mode")
    await store.close()
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    reopened = EmbeddedMemoryStore.open(db_path, clock=clock)
    try:
        hits = (await _search(reopened, "dark mode")).hits
        assert [hit.memory_id for hit in hits] == [memory_id]
    finally:
        await reopened.close()


def test_a_committed_write_survives_a_process_that_dies_without_closing(db_path: Path) -> None:
    script = (
        "import asyncio, os\n"
        "from adapters.embedded import EmbeddedMemoryStore\n"
        "from tests.fakes.clock import FixedClock\n"
        "async def main():\n"
        f"    store = EmbeddedMemoryStore.open({str(db_path)!r}, clock=FixedClock())\n"
        f"    await store.add(org_id={ORG!r}, agent_id={AGENT!r}, content='survivor', category='factual')\n"
        "    os._exit(0)\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, check=True, timeout=60)
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT content FROM memories").fetchall() == [("survivor",)]


def test_a_file_from_a_newer_build_is_refused(db_path: Path, clock: FixedClock) -> None:
    db_path.parent.mkdir(parents=True)
    with sqlite3.connect(db_path) as raw:
        raw.execute("PRAGMA user_version = 99")
    with pytest.raises(MemorySourceUnavailableError, match="newer than this build"):
        EmbeddedMemoryStore.open(db_path, clock=clock)


# --- concurrency -------------------------------------------------------------------------------


async def test_two_hundred_concurrent_searches_never_stall_the_event_loop(
    store: EmbeddedMemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    lines = [json.dumps({"org_id": ORG, "agent_id": AGENT, "category": "factual",
                         "content": " ".join(words[(n + k) % 10] for k in range(6)) + f" note {n}"})
             for n in range(400)]
    import_file = tmp_path / "bulk.jsonl"
    import_file.write_text("\n".join(lines), encoding="utf-8")
    assert await store.import_jsonl(import_file) == 400
    # Every search's SQLite work is held inside it until the test lets go: had the store run that
    # work on the event loop, the loop itself would be stuck in the first search (and the hold
    # would give up after HOLD_CAP_S, failing the test) instead of running on while every worker
    # thread sits in a search.
    loop, loop_thread = asyncio.get_running_loop(), threading.get_ident()
    release, lock, ran_on = threading.Event(), threading.Lock(), set()
    entered: list[int] = []
    all_workers_busy = asyncio.Event()
    real_search = memory_store_module.search_memories

    def held_search(conn: sqlite3.Connection, *, query: SearchQuery):  # type: ignore[no-untyped-def]
        with lock:
            ran_on.add(threading.get_ident())
            entered.append(1)
            if len(entered) == DEFAULT_WORKERS:
                loop.call_soon_threadsafe(all_workers_busy.set)
        if not release.wait(HOLD_CAP_S):
            release.set()  # give up once, not once per search
            raise AssertionError(f"search held {HOLD_CAP_S} s: the event loop never got to release it")
        return real_search(conn, query=query)

    monkeypatch.setattr(memory_store_module, "search_memories", held_search)
    queries = [f"{words[n % 10]} {words[(n + 3) % 10]}" for n in range(200)]
    searches = asyncio.gather(*(store.search(SearchQuery(ORG, AGENT, query, limit=10), timeout_s=HOLD_CAP_S * 2)
                                for query in queries))
    try:
        await all_workers_busy.wait()  # the loop runs this while every worker thread is inside a search
        for _ in range(100):  # and it keeps running: other tasks get their turns meanwhile
            await asyncio.sleep(0)
        assert len(entered) == DEFAULT_WORKERS and not searches.done()  # the other 196 wait their turn
    finally:
        release.set()
    results = await searches
    assert all(len(batch.hits) == 10 for batch in results)
    assert len(entered) == 200 and loop_thread not in ran_on and len(ran_on) <= DEFAULT_WORKERS


async def test_concurrent_feedback_loses_no_update_and_dedupes_retries(store: EmbeddedMemoryStore) -> None:
    memory_id = await _add(store, "counted memory")
    distinct = [FeedbackItem(ORG, memory_id, "positive", f"key-{n}") for n in range(40)]
    retried = [FeedbackItem(ORG, memory_id, "negative", "same-key") for _ in range(20)]
    results = await asyncio.gather(*(store.record(item, timeout_s=30.0) for item in distinct + retried))
    final = await store.record(FeedbackItem(ORG, memory_id, "neutral", "last"), timeout_s=30.0)
    assert (final.total_positive_feedback, final.total_negative_feedback) == (40, 1)
    assert len({(r.new_usefulness_score, r.total_negative_feedback) for r in results[40:]}) == 1


# --- JSONL import ------------------------------------------------------------------------------


def _line(**fields) -> str:
    return json.dumps({"org_id": ORG, "agent_id": AGENT, "content": "imported", "category": "factual", **fields})


async def test_import_stores_every_line_and_reports_progress(store: EmbeddedMemoryStore, tmp_path: Path) -> None:
    path = tmp_path / "ok.jsonl"
    path.write_text("\n".join([_line(content="one", tags=["a"]), "", _line(content="two", confidence=0.3),
                               _line(content="three", created_at="2025-12-01T00:00:00+02:00")]) + "\n")
    seen: list[tuple[int, int]] = []
    assert await store.import_jsonl(path, progress=lambda done, total: seen.append((done, total))) == 3
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert sorted(memory.content for memory in await store.list(ORG, AGENT)) == ["one", "three", "two"]


@pytest.mark.parametrize(
    ("bad_line", "field"),
    [
        (_line(confidence=1.5), "confidence"),
        (_line(org_id="not-a-uuid"), "org_id"),
        (_line(content=""), "content"),
        (_line(content="x" * 32_769), "content"),
        (_line(tags=["ok", 3]), "tags[1]"),
        (_line(catgory="typo"), "catgory"),
        (_line(created_at="2026-01-01T00:00:00"), "created_at"),
        ('{"org_id": ', "line"),
    ],
)
async def test_a_bad_line_imports_nothing_and_names_the_line(
    store: EmbeddedMemoryStore, tmp_path: Path, bad_line: str, field: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([_line(content="first"), _line(content="second"), "", bad_line, _line()]))
    with pytest.raises(EmbeddedValidationError) as caught:
        await store.import_jsonl(path)
    assert (caught.value.line, caught.value.field) == (4, field)
    assert str(caught.value).startswith(f"line 4: {field}: ")
    assert await store.list(ORG, AGENT) == ()


async def test_a_duplicate_id_fails_the_whole_import_at_its_line(store: EmbeddedMemoryStore, tmp_path: Path) -> None:
    memory_id = str(uuid.uuid4())
    path = tmp_path / "dup.jsonl"
    path.write_text("\n".join([_line(memory_id=memory_id), _line(), _line(memory_id=memory_id.upper())]))
    with pytest.raises(EmbeddedValidationError, match="line 3: memory_id: .*already exists"):
        await store.import_jsonl(path)
    assert await store.list(ORG, AGENT) == ()


async def test_a_missing_import_file_is_a_clear_error(store: EmbeddedMemoryStore, tmp_path: Path) -> None:
    with pytest.raises(EmbeddedValidationError, match="path: cannot read"):
        await store.import_jsonl(tmp_path / "absent.jsonl")


# --- ranking and scores ------------------------------------------------------------------------


async def test_the_obviously_most_relevant_memory_ranks_first(store: EmbeddedMemoryStore) -> None:
    await _add(store, "The quarterly report is due on the first Monday")
    await _add(store, "The user likes short answers")
    wanted = await _add(store, "The user prefers a dark theme in the code editor", "preference")
    await _add(store, "Deployments of the editor plugin happen weekly", "procedural")
    await _add(store, "The team uses the light theme for slides")
    hits = (await _search(store, "which editor theme does the user prefer?")).hits
    assert hits[0].memory_id == wanted
    assert hits[0].similarity > hits[1].similarity


async def test_search_matches_word_forms_and_accents(store: EmbeddedMemoryStore) -> None:
    prefers = await _add(store, "She prefers trains", "preference")
    cafe = await _add(store, "Meets the client at the café near the station", "episodic")
    assert [hit.memory_id for hit in (await _search(store, "preferring")).hits] == [prefers]
    assert [hit.memory_id for hit in (await _search(store, "CAFE")).hits] == [cafe]


async def test_more_occurrences_of_the_query_never_lower_similarity(store: EmbeddedMemoryStore) -> None:
    once = await _add(store, "kiwi grows here")
    twice = await _add(store, "kiwi kiwi grows here")
    await _add(store, "nothing relevant at all")
    hits = {hit.memory_id: hit.similarity for hit in (await _search(store, "kiwi", min_similarity=0.0)).hits}
    assert 0.0 < hits[once] <= hits[twice] <= 1.0


async def test_search_similarity_is_the_documented_bm25_mapping(store: EmbeddedMemoryStore) -> None:
    once = await _add(store, "kiwi grows here")  # terms: kiwi, grow, here
    twice = await _add(store, "Kiwi, kiwi grows here")
    await _add(store, "nothing relevant at all")
    found = {hit.memory_id: hit.similarity for hit in (await _search(store, "kiwis growing")).hits}
    average_length, weight = 11 / 3, idf(3, 2)  # both query terms are in 2 of the 3 memories

    def expected(kiwi_tf: int, length: int) -> float:
        score = term_score(weight, kiwi_tf, length, average_length) + term_score(weight, 1, length, average_length)
        return similarity_from_bm25(score, ideal=2 * weight)

    assert found == {once: pytest.approx(expected(1, 3)), twice: pytest.approx(expected(2, 4))}


async def test_a_tenants_similarities_ignore_other_tenants_memories(store: EmbeddedMemoryStore) -> None:
    await _add(store, "The user collects vintage cameras")
    await _add(store, "The user rides a bicycle to work")
    before = [(h.memory_id, h.similarity) for h in (await _search(store, "vintage cameras", min_similarity=0.0)).hits]
    other_org = str(uuid.uuid4())
    for n in range(30):
        await _add(store, f"vintage cameras catalogue page {n}", org_id=other_org)
    after = [(h.memory_id, h.similarity) for h in (await _search(store, "vintage cameras", min_similarity=0.0)).hits]
    assert after == before


async def test_a_single_memory_matching_the_whole_query_scores_the_ideal_similarity(store: EmbeddedMemoryStore) -> None:
    await _add(store, "standing desk")
    hits = (await _search(store, "standing desk")).hits
    assert [round(hit.similarity, 6) for hit in hits] == [0.8]


async def test_the_default_min_similarity_drops_stop_word_matches(store: EmbeddedMemoryStore) -> None:
    for n in range(5):
        await _add(store, f"the filler memory number {n} of the set")
    target = await _add(store, "the user owns a sailboat")
    assert [hit.memory_id for hit in (await _search(store, "the sailboat")).hits] == [target]
    assert len((await _search(store, "the sailboat", min_similarity=0.0)).hits) == 6


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(1e-6, 1e6))
def test_bm25_to_similarity_is_monotone_and_within_the_unit_interval(a: float, b: float, ideal: float) -> None:
    low, high = sorted((a, b))
    assert 0.0 <= similarity_from_bm25(low, ideal) <= similarity_from_bm25(high, ideal) <= 1.0
    assert similarity_from_bm25(0.0, ideal) == 0.0


async def test_hot_orders_by_the_documented_score_with_category_half_lives(
    store: EmbeddedMemoryStore, clock: FixedClock
) -> None:
    now = clock.now()
    old_episode = await _add(store, "old episode", "episodic", created_at=now - timedelta(days=28))
    old_fact = await _add(store, "old fact", "factual", created_at=now - timedelta(days=28))
    fresh = await _add(store, "fresh episode", "episodic", usefulness=0.2, confidence=0.6, retrieval_count=4)
    hits = (await store.hot(HotQuery(ORG, AGENT), timeout_s=5.0)).hits
    assert [hit.memory_id for hit in hits] == [old_fact, fresh, old_episode]
    episode_recency = 0.25  # 28 days at a 14-day half-life
    fact_recency = math.exp(-math.log(2) * 28 / 180)
    assert hits[2].similarity == pytest.approx(0.40 + 0.25 * episode_recency + 0.20 * 0.5 + 0.10 * 1.0)
    assert hits[0].similarity == pytest.approx(0.40 + 0.25 * fact_recency + 0.20 * 0.5 + 0.10 * 1.0)
    assert hits[1].similarity == pytest.approx(hot_score(
        age_seconds=0, category="episodic", usefulness=0.2, confidence=0.6, retrieval_count=4))
    clock.advance(timedelta(days=60).total_seconds())
    assert (await store.hot(HotQuery(ORG, AGENT), timeout_s=5.0)).hits[0].memory_id == old_fact


# --- write API ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"org_id": "nope"}, "org_id"),
        ({"content": "   "}, "content"),
        ({"content": "bad \ud800 text"}, "content"),
        ({"category": ""}, "category"),
        ({"confidence": math.nan}, "confidence"),
        ({"usefulness": -0.1}, "usefulness"),
        ({"confidence": True}, "confidence"),
        ({"tags": "ui"}, "tags"),
        ({"memory_id": "123"}, "memory_id"),
        ({"retrieval_count": -1}, "retrieval_count"),
        ({"status": "deleted"}, "status"),
    ],
)
async def test_add_rejects_bad_values_naming_the_field(store: EmbeddedMemoryStore, fields: dict, field: str) -> None:
    values = {"org_id": ORG, "agent_id": AGENT, "content": "valid", "category": "factual", **fields}
    with pytest.raises(EmbeddedValidationError) as caught:
        await store.add(**values)
    assert caught.value.field == field and caught.value.line is None


async def test_list_and_delete_are_tenant_scoped(store: EmbeddedMemoryStore, clock: FixedClock) -> None:
    first = await _add(store, "first memory", tags=["x"])
    clock.advance(1)
    second = await _add(store, "second memory", status="archived")
    assert [memory.memory_id for memory in await store.list(ORG, AGENT)] == [second, first]
    assert [memory.memory_id for memory in await store.list(ORG, AGENT, limit=1)] == [second]
    assert (await _search(store, "memory", min_similarity=0.0)).hits[0].memory_id == first  # archived: hidden
    assert not await store.delete(str(uuid.uuid4()), AGENT, first)
    await store.record(FeedbackItem(ORG, first, "positive", "k"), timeout_s=5.0)
    assert await store.delete(ORG, AGENT, first)
    assert not await store.delete(ORG, AGENT, first)
    assert (await _search(store, "memory", min_similarity=0.0)).hits == ()
    assert [memory.memory_id for memory in await store.list(ORG, AGENT)] == [second]


# --- errors ------------------------------------------------------------------------------------


async def test_a_broken_database_is_unavailable_and_a_zero_timeout_times_out(
    store: EmbeddedMemoryStore, db_path: Path
) -> None:
    await _add(store, "some memory")
    with pytest.raises(MemorySourceTimeoutError):
        await store.hot(HotQuery(ORG, AGENT), timeout_s=0.0)
    with sqlite3.connect(db_path) as raw:
        raw.execute("DROP TABLE memory_postings")
    with pytest.raises(MemorySourceUnavailableError, match="no such table"):
        await _search(store, "some memory")


async def test_a_closed_store_refuses_writes_too(store: EmbeddedMemoryStore) -> None:
    await store.close()
    with pytest.raises(MemorySourceClosedError):
        await _add(store, "too late")


# --- directives --------------------------------------------------------------------------------


@pytest.fixture
async def directives(db_path: Path, clock: FixedClock) -> AsyncIterator[EmbeddedDirectiveStore]:
    directive_store = EmbeddedDirectiveStore.open(db_path, clock=clock)
    yield directive_store
    await directive_store.close()


async def test_a_directive_round_trips_and_each_set_is_a_new_version(directives: EmbeddedDirectiveStore) -> None:
    first = await directives.set_directive(ORG, AGENT, "Answer in French.", "system_append")
    assert await directives.get(ORG, AGENT, timeout_s=5.0) == Directive("Answer in French.", "system_append", first)
    second = await directives.set_directive(ORG.upper(), AGENT, "Answer in German.")
    assert second != first and str(uuid.UUID(second)) == second
    assert await directives.get_directive(ORG, AGENT) == Directive("Answer in German.", "system_first", second)


async def test_directives_are_scoped_by_org_and_agent(directives: EmbeddedDirectiveStore) -> None:
    await directives.set_directive(ORG, AGENT, "Mine.")
    assert await directives.get(str(uuid.uuid4()), AGENT, timeout_s=5.0) is None
    assert await directives.get(ORG, str(uuid.uuid4()), timeout_s=5.0) is None
    assert await directives.get("not-a-uuid", AGENT, timeout_s=5.0) is None
    assert await directives.delete_directive(ORG, AGENT)
    assert await directives.get(ORG, AGENT, timeout_s=5.0) is None


async def test_directive_writes_are_validated_and_a_closed_store_raises(directives: EmbeddedDirectiveStore) -> None:
    with pytest.raises(EmbeddedValidationError, match="injection_mode"):
        await directives.set_directive(ORG, AGENT, "x", "shout")
    with pytest.raises(EmbeddedValidationError, match="content"):
        await directives.set_directive(ORG, AGENT, "")
    await directives.close()
    with pytest.raises(DirectiveStoreError):
        await directives.get(ORG, AGENT, timeout_s=5.0)


async def test_stores_sharing_a_database_close_independently(db_path: Path, clock: FixedClock) -> None:
    database = EmbeddedDatabase.open(db_path, workers=2)
    memories, directives = EmbeddedMemoryStore(database, clock), EmbeddedDirectiveStore(database, clock)
    await _add(memories, "a memory")
    await directives.set_directive(ORG, AGENT, "a directive")
    await directives.close()
    with pytest.raises(DirectiveStoreError):
        await directives.get(ORG, AGENT, timeout_s=5.0)
    assert len((await memories.hot(HotQuery(ORG, AGENT), timeout_s=5.0)).hits) == 1
    await database.close()
    with pytest.raises(MemorySourceClosedError):
        await memories.hot(HotQuery(ORG, AGENT), timeout_s=5.0)
