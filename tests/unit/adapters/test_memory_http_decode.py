"""adapters.memory_http.decode: the strict msgspec decoder of memory-service answers.

Every rule of an item, the per-item drop (named field, the rest kept in order), the failure of a
malformed envelope, the repair of what Python's json read beyond strict JSON (BOM, bad UTF-8, lone
surrogates, NaN/Infinity), feedback answers and error codes.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from adapters.memory_http.decode import decode_batch, decode_feedback, error_code
from domain.model.feedback import FeedbackResult
from domain.model.memory import DroppedItem, MemoryHit
from ports.errors import MemorySourceUnavailableError

ORG = "0b6c3c9e-3f4a-4d7e-9a51-1c2d3e4f5a6b"
AGENT = "5e8f1a2b-7c3d-4e9f-8a1b-2c3d4e5f6a7b"
IDS = [str(uuid.UUID(int=0x1000 + n, version=4)) for n in range(3)]
MISSING = object()


def item(n: int = 0, **changes: object) -> dict[str, object]:
    """A valid search item; ``changes`` set (or, with MISSING, remove) item or ``memory_<field>`` fields."""
    memory: dict[str, object] = {
        "id": IDS[n], "org_id": ORG, "agent_id": AGENT, "content": f"memory {n}", "category": "preference",
        "confidence": 0.9, "status": "active", "created_at": "2026-01-02T03:04:05Z",
        "updated_at": "2026-01-03T00:00:00Z", "usefulness_score": 0.25, "retrieval_count": 4, "tags": ["ui", "go"],
    }
    entry: dict[str, object] = {"memory": memory, "similarity": 0.8 - n / 10, "rank": n + 1, "source": "vector"}
    for key, value in changes.items():
        target, name = (memory, key.removeprefix("memory_")) if key.startswith("memory_") else (entry, key)
        if value is MISSING:
            target.pop(name)
        else:
            target[name] = value
    return entry


def hit(n: int = 0, **changes: object) -> MemoryHit:
    """The MemoryHit of ``item(n)``."""
    fields: dict[str, object] = {
        "memory_id": IDS[n], "org_id": ORG, "agent_id": AGENT, "content": f"memory {n}", "category": "preference",
        "confidence": 0.9, "similarity": 0.8 - n / 10, "rank": n + 1, "source": "vector", "usefulness": 0.25,
        "created_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "retrieval_count": 4, "tags": ("ui", "go"),
    }
    return MemoryHit(**{**fields, **changes})  # type: ignore[arg-type]


def body(*items: object, **envelope: object) -> bytes:
    return json.dumps({"data": {"results": list(items)}, **envelope}).encode()


def with_middle(middle: object) -> bytes:
    """Three items: item(0), ``middle`` (at index 1), item(2)."""
    return body(item(0), middle, item(2))


# ------------------------------------------------------------------ valid answers
def test_every_field_is_decoded_in_the_services_order() -> None:
    batch = decode_batch(body(item(0), item(1), item(2)))
    assert batch.hits == (hit(0), hit(1), hit(2))
    assert batch.dropped == ()


def test_optional_fields_may_be_absent_or_null() -> None:
    absent = item(0, memory_usefulness_score=MISSING, memory_created_at=MISSING, memory_retrieval_count=MISSING,
                   memory_tags=MISSING)
    null = item(1, memory_usefulness_score=None, memory_created_at=None, memory_retrieval_count=None, memory_tags=None)
    batch = decode_batch(body(absent, null))
    defaults = {"usefulness": None, "created_at": None, "retrieval_count": 0, "tags": ()}
    assert batch.hits == (hit(0, **defaults), hit(1, **defaults))


def test_integers_are_numbers_and_numbers_are_floats() -> None:
    [decoded] = decode_batch(body(item(0, memory_confidence=1, similarity=-3, memory_usefulness_score=0))).hits
    assert (decoded.confidence, decoded.similarity, decoded.usefulness) == (1.0, -3.0, 0.0)
    assert {type(decoded.confidence), type(decoded.similarity), type(decoded.usefulness)} == {float}


def test_similarity_has_no_range_and_bounds_are_inclusive() -> None:
    batch = decode_batch(body(item(0, similarity=-0.5, memory_confidence=0.0, memory_usefulness_score=1.0),
                              item(1, similarity=7.25, memory_confidence=1.0, rank=10**30)))
    assert batch.hits == (hit(0, similarity=-0.5, confidence=0.0, usefulness=1.0),
                          hit(1, similarity=7.25, confidence=1.0, rank=10**30))


@pytest.mark.parametrize("spelling", [
    IDS[1].upper(), "{" + IDS[1] + "}", "urn:uuid:" + IDS[1], IDS[1].replace("-", ""),
])
def test_ids_in_any_uuid_spelling_are_normalised(spelling: str) -> None:
    other_org, other_agent = ORG.upper(), "{" + AGENT + "}"
    [decoded] = decode_batch(body(item(1, memory_id=spelling, memory_org_id=other_org,
                                       memory_agent_id=other_agent))).hits
    assert (decoded.memory_id, decoded.org_id, decoded.agent_id) == (IDS[1], ORG, AGENT)


@pytest.mark.parametrize(("text", "moment"), [
    ("2026-01-02T03:04:05", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),  # no offset: UTC
    ("2026-01-02T03:04:05.123456+02:00", datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=timezone(timedelta(hours=2)))),
    ("2026-01-02", datetime(2026, 1, 2, tzinfo=UTC)),
    ("2026-01-02 03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
])
def test_timestamps_are_read_as_iso_8601(text: str, moment: datetime) -> None:
    [decoded] = decode_batch(body(item(0, memory_created_at=text))).hits
    assert decoded.created_at == moment and decoded.created_at.utcoffset() == moment.utcoffset()


def test_fields_the_decoder_does_not_use_are_ignored_whatever_they_hold() -> None:
    extra = item(0, explain={"nested": [1, {"deep": None}]}, score="high", memory_embedding=[0.1] * 8)
    raw = body(extra, meta={"request_id": "r-1"}).replace(b'"high"', b"NaN")
    assert decode_batch(raw).hits == (hit(0),)


def test_an_empty_result_list_is_an_empty_batch() -> None:
    batch = decode_batch(body())
    assert (batch.hits, batch.dropped) == ((), ())


# ------------------------------------------------------------------ text that is not valid Unicode
def test_a_lone_surrogate_escape_becomes_a_replacement_character() -> None:
    raw = body(item(0, memory_content="broken \ud800 text", memory_tags=["a\udc00"]), item(1))
    assert b"\\ud800" in raw
    batch = decode_batch(raw)
    assert batch.hits == (hit(0, content="broken \ufffd text", tags=("a\ufffd",)), hit(1))


def test_surrogate_pairs_and_escaped_backslashes_are_kept() -> None:
    raw = body(item(0, memory_content="smile \U0001f600 and \\ud800 literally", memory_category="\ud800"))
    [decoded] = decode_batch(raw).hits
    assert (decoded.content, decoded.category) == ("smile \U0001f600 and \\ud800 literally", "\ufffd")


def test_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    raw = body(item(0, memory_content="bad MARK bytes"), item(1)).replace(b"MARK", b"\xff\xfe")
    batch = decode_batch(raw)
    assert batch.hits == (hit(0, content="bad \ufffd\ufffd bytes"), hit(1))


def test_bad_utf8_in_an_answer_decoded_item_by_item_is_repaired_too() -> None:
    raw = body(item(0, memory_content="bad MARK"), item(1, rank=0), item(2)).replace(b"MARK", b"\xff")
    batch = decode_batch(raw)
    assert batch.hits == (hit(0, content="bad \ufffd"), hit(2))
    assert [d.detail.split(":")[0] for d in batch.dropped] == ["results[1].rank"]


def test_a_utf8_byte_order_mark_is_skipped() -> None:
    assert decode_batch(b"\xef\xbb\xbf" + body(item(0))).hits == (hit(0),)


# ------------------------------------------------------------------ one bad item is dropped, the rest kept
@pytest.mark.parametrize(("changes", "detail"), [
    ({"similarity": "0.5"}, "results[1].similarity: Expected `float`, got `str`"),
    ({"similarity": True}, "results[1].similarity: Expected `float`, got `bool`"),
    ({"similarity": None}, "results[1].similarity: Expected `float`, got `null`"),
    ({"similarity": MISSING}, "results[1].similarity: required field missing"),
    ({"rank": 1.0}, "results[1].rank: Expected `int`, got `float`"),
    ({"rank": True}, "results[1].rank: Expected `int`, got `bool`"),
    ({"rank": "1"}, "results[1].rank: Expected `int`, got `str`"),
    ({"rank": 0}, "results[1].rank: Expected `int` >= 1"),
    ({"source": 3}, "results[1].source: Expected `str`, got `int`"),
    ({"source": MISSING}, "results[1].source: required field missing"),
    ({"memory": MISSING}, "results[1].memory: required field missing"),
    ({"memory": "a memory"}, "results[1].memory: Expected `object`, got `str`"),
    ({"memory_id": MISSING}, "results[1].memory.id: required field missing"),
    ({"memory_id": 7}, "results[1].memory.id: Expected `str`, got `int`"),
    ({"memory_id": "not-a-uuid"}, "results[1].memory.id: Expected a UUID, got 'not-a-uuid'"),
    ({"memory_id": ""}, "results[1].memory.id: Expected a UUID, got ''"),
    ({"memory_org_id": 7}, "results[1].memory.org_id: Expected `str`, got `int`"),
    ({"memory_org_id": "org-1"}, "results[1].memory.org_id: Expected a UUID, got 'org-1'"),
    ({"memory_agent_id": None}, "results[1].memory.agent_id: Expected `str`, got `null`"),
    ({"memory_agent_id": "agent-1"}, "results[1].memory.agent_id: Expected a UUID, got 'agent-1'"),
    ({"memory_content": 42}, "results[1].memory.content: Expected `str`, got `int`"),
    ({"memory_content": MISSING}, "results[1].memory.content: required field missing"),
    ({"memory_category": None}, "results[1].memory.category: Expected `str`, got `null`"),
    ({"memory_confidence": 1.5}, "results[1].memory.confidence: Expected `float` <= 1.0"),
    ({"memory_confidence": -0.1}, "results[1].memory.confidence: Expected `float` >= 0.0"),
    ({"memory_confidence": False}, "results[1].memory.confidence: Expected `float`, got `bool`"),
    ({"memory_confidence": "0.9"}, "results[1].memory.confidence: Expected `float`, got `str`"),
    ({"memory_confidence": None}, "results[1].memory.confidence: Expected `float`, got `null`"),
    ({"memory_usefulness_score": 2}, "results[1].memory.usefulness_score: Expected `float` <= 1.0"),
    ({"memory_usefulness_score": "high"}, "results[1].memory.usefulness_score: Expected `float | null`, got `str`"),
    ({"memory_created_at": "yesterday"},
     "results[1].memory.created_at: Expected an ISO-8601 timestamp, got 'yesterday'"),
    ({"memory_created_at": 1767225600}, "results[1].memory.created_at: Expected `str | null`, got `int`"),
    ({"memory_retrieval_count": -1}, "results[1].memory.retrieval_count: Expected `int` >= 0"),
    ({"memory_retrieval_count": 2.0}, "results[1].memory.retrieval_count: Expected `int | null`, got `float`"),
    ({"memory_tags": "a,b"}, "results[1].memory.tags: Expected `array | null`, got `str`"),
    ({"memory_tags": ["a", 1]}, "results[1].memory.tags[1]: Expected `str`, got `int`"),
])
def test_a_bad_field_drops_its_item_naming_the_field_and_the_rest_is_kept(changes: dict[str, object],
                                                                          detail: str) -> None:
    batch = decode_batch(with_middle(item(1, **changes)))
    assert batch.hits == (hit(0), hit(2))
    [dropped] = batch.dropped
    assert dropped.reason == "malformed"
    assert dropped.detail == detail
    id_is_usable = "memory_id" not in changes and "memory" not in changes
    assert dropped.memory_id == (IDS[1] if id_is_usable else "")


@pytest.mark.parametrize("middle", ["not an object", 7, None, [item(1)]])
def test_an_item_that_is_not_an_object_is_dropped_as_item(middle: object) -> None:
    batch = decode_batch(with_middle(middle))
    assert batch.hits == (hit(0), hit(2))
    [dropped] = batch.dropped
    assert dropped.detail.startswith("results[1].item: Expected `object`, got ")
    assert dropped.memory_id == ""


@pytest.mark.parametrize(("word", "shown"), [
    (b"NaN", "nan"), (b"Infinity", "inf"), (b"-Infinity", "-inf"), (b"1e400", "inf"), (b"-1e999", "-inf"),
])
def test_a_similarity_that_is_not_a_finite_number_drops_its_item(word: bytes, shown: str) -> None:
    raw = with_middle(item(1, similarity=123.5)).replace(b"123.5", word)
    batch = decode_batch(raw)
    assert batch.hits == (hit(0), hit(2))
    assert batch.dropped == (
        DroppedItem("malformed", f"results[1].similarity: Expected a finite number, got {shown}", IDS[1]),)


@pytest.mark.parametrize(("field", "word", "problem"), [
    ("memory_confidence", b"NaN", "Expected `float` >= 0.0"),
    ("memory_confidence", b"Infinity", "Expected `float` <= 1.0"),
    ("memory_usefulness_score", b"-Infinity", "Expected `float` >= 0.0"),
    ("rank", b"NaN", "Expected `int`, got `float`"),
    ("memory_content", b"Infinity", "Expected `str`, got `float`"),
])
def test_nan_and_infinity_break_the_rule_of_any_other_field(field: str, word: bytes, problem: str) -> None:
    raw = with_middle(item(1, **{field: 0.125})).replace(b"0.125", word)
    batch = decode_batch(raw)
    assert batch.hits == (hit(0), hit(2))
    name = field.replace("memory_", "memory.")
    assert batch.dropped == (DroppedItem("malformed", f"results[1].{name}: {problem}", IDS[1]),)


def test_an_integer_beyond_float_range_is_not_a_confidence() -> None:
    raw = with_middle(item(1, memory_confidence=0.125)).replace(b"0.125", b"1" + b"0" * 400)
    [dropped] = decode_batch(raw).dropped
    assert dropped.detail == "results[1].memory.confidence: Number out of range"


def test_a_dropped_item_is_reported_under_its_normalised_id() -> None:
    [dropped] = decode_batch(with_middle(item(1, memory_id=IDS[1].upper(), rank=0))).dropped
    assert dropped.memory_id == IDS[1]
    [dropped] = decode_batch(with_middle(item(1, memory_id=IDS[1].upper(), memory_created_at="soon"))).dropped
    assert dropped == DroppedItem("malformed", "results[1].memory.created_at: Expected an ISO-8601 timestamp, "
                                               "got 'soon'", IDS[1])


def test_many_bad_items_are_each_reported_with_their_index_and_good_ones_keep_their_order() -> None:
    batch = decode_batch(body("x", item(0), item(1, rank=0), item(1, memory_id="nope"), item(2),
                              item(2, similarity=False)))
    assert batch.hits == (hit(0), hit(2))
    assert [d.detail.split(":")[0] for d in batch.dropped] == [
        "results[0].item", "results[2].rank", "results[3].memory.id", "results[5].similarity"]


def test_a_bad_value_is_quoted_only_in_part() -> None:
    [dropped] = decode_batch(with_middle(item(1, memory_id="x" * 1000))).dropped
    assert dropped.detail == f"results[1].memory.id: Expected a UUID, got {'x' * 64!r}"


# ------------------------------------------------------------------ a malformed envelope fails the answer
@pytest.mark.parametrize(("raw", "message"), [
    (b"", "malformed body: not JSON (Expecting value: line 1 column 1 (char 0))"),
    (b"<html>upstream error</html>", "malformed body: not JSON (Expecting value: line 1 column 1 (char 0))"),
    (b'{"data": {"results": [{"memory": ', "malformed body: not JSON (Expecting value: line 1 column 34"),
    (b'{"data": {"results": []}} trailing', "malformed body: not JSON (Extra data: line 1 column 27"),
    (b'{"data": {"results": ["a\x01b"]}}', "malformed body: not JSON (Invalid control character at"),
    (b'{"data": {"results": [-NaN]}}', "malformed body: not JSON (Expecting value"),
    (b'{"data": {"results": [1NaN]}}', "malformed body: not JSON (Expecting ',' delimiter"),
    (b"[]", "malformed body: Expected `object`, got `array`"),
    (b"null", "malformed body: Expected `object`, got `null`"),
    (b"{}", "malformed body: data: required field missing"),
    (b'{"data": []}', "malformed body: data: Expected `object`, got `array`"),
    (b'{"data": null}', "malformed body: data: Expected `object`, got `null`"),
    (b'{"data": {}}', "malformed body: data.results: required field missing"),
    (b'{"data": {"results": {}}}', "malformed body: data.results: Expected `array`, got `object`"),
    (b'{"data": {"results": null}}', "malformed body: data.results: Expected `array`, got `null`"),
    (b'{"data": NaN}', "malformed body: data: Expected `object`, got `float`"),
    (b'\xef\xbb\xbf{"data": {"results": 5}}', "malformed body: data.results: Expected `array`, got `int`"),
])
def test_a_malformed_envelope_fails_the_whole_answer_naming_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(MemorySourceUnavailableError) as caught:
        decode_batch(raw)
    assert str(caught.value).startswith(message)


def test_a_syntax_error_after_a_refused_item_still_fails_the_whole_answer() -> None:
    raw = body(item(0, rank=0), item(1))[:-3]  # the first item is refused before the truncation is read
    with pytest.raises(MemorySourceUnavailableError, match=r"^malformed body: not JSON \(Expecting"):
        decode_batch(raw)


@pytest.mark.parametrize("where", ["an item", "an ignored field"])
def test_nesting_past_the_recursion_limit_fails_the_answer(where: str) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    raw = (b'{"data": {"results": [' + deep + b"]}}" if where == "an item" else
           body(item(0)).replace(b'"status": "active"', b'"status": ' + deep))
    with pytest.raises(MemorySourceUnavailableError, match=r"^malformed body: not JSON \(maximum recursion depth"):
        decode_batch(raw)


# ------------------------------------------------------------------ feedback answers
def feedback(**changes: object) -> bytes:
    data: dict[str, object] = {"memory_id": IDS[0], "feedback": "positive", "new_usefulness_score": 0.75,
                               "total_positive_feedback": 3, "total_negative_feedback": 1,
                               "previous_usefulness_score": 0.5}
    for key, value in changes.items():
        if value is MISSING:
            data.pop(key)
        else:
            data[key] = value
    return json.dumps({"data": data}).encode()


def test_a_feedback_answer_is_decoded() -> None:
    assert decode_feedback(feedback(), IDS[0]) == FeedbackResult(IDS[0], "positive", 0.75, 3, 1, 0.5)
    assert decode_feedback(feedback(previous_usefulness_score=None, new_usefulness_score=1), IDS[0]) == (
        FeedbackResult(IDS[0], "positive", 1.0, 3, 1, None))
    assert decode_feedback(feedback(previous_usefulness_score=MISSING, memory_id=IDS[0].upper()), IDS[0]) == (
        FeedbackResult(IDS[0], "positive", 0.75, 3, 1, None))


@pytest.mark.parametrize(("raw", "message"), [
    (feedback(feedback="maybe"),
     "malformed body: data.feedback: Expected one of positive, negative, neutral, got 'maybe'"),
    (feedback(feedback=1), "malformed body: data.feedback: Expected `str`, got `int`"),
    (feedback(memory_id="m-1"), "malformed body: data.memory_id: Expected a UUID, got 'm-1'"),
    (feedback(memory_id=MISSING), "malformed body: data.memory_id: required field missing"),
    (feedback(new_usefulness_score="0.5"), "malformed body: data.new_usefulness_score: Expected `float`, got `str`"),
    (feedback(new_usefulness_score=1.5), "malformed body: data.new_usefulness_score: Expected `float` <= 1.0"),
    (feedback(previous_usefulness_score=-1),
     "malformed body: data.previous_usefulness_score: Expected `float` >= 0.0"),
    (feedback(total_positive_feedback=True), "malformed body: data.total_positive_feedback: Expected `int`, got `bool`"),
    (feedback(total_negative_feedback=-2), "malformed body: data.total_negative_feedback: Expected `int` >= 0"),
    (feedback(memory_id=IDS[1]), f"malformed body: answer is about memory {IDS[1]}, not {IDS[0]}"),
    (b'{"data": []}', "malformed body: data: Expected `object`, got `array`"),
    (b"{}", "malformed body: data: required field missing"),
    (b"not json", "malformed body: not JSON"),
    (feedback(new_usefulness_score=0.125).replace(b"0.125", b"NaN"),
     "malformed body: data.new_usefulness_score: Expected `float` >= 0.0"),
])
def test_a_malformed_feedback_answer_fails_naming_the_field(raw: bytes, message: str) -> None:
    with pytest.raises(MemorySourceUnavailableError) as caught:
        decode_feedback(raw, IDS[0])
    assert str(caught.value).startswith(message)


# ------------------------------------------------------------------ error answers
@pytest.mark.parametrize(("raw", "code"), [
    (b'{"detail": {"code": "AGENT_NOT_AUTHORIZED", "message": "no"}}', "AGENT_NOT_AUTHORIZED"),
    (b'{"detail": {"code": "x.y-z_1"}, "extra": NaN}', "x.y-z_1"),
    (b'{"detail": {"code": "has space"}}', ""),
    (b'{"detail": {"code": "' + b"C" * 65 + b'"}}', ""),
    (b'{"detail": {"code": 401}}', ""),
    (b'{"detail": "Unauthorized"}', ""),
    (b'{"detail": null}', ""),
    (b"{}", ""),
    (b"[]", ""),
    (b"<html>502 Bad Gateway</html>", ""),
])
def test_the_error_code_is_read_only_when_it_is_a_plain_identifier(raw: bytes, code: str) -> None:
    assert error_code(raw) == code


# ------------------------------------------------------------------ more results than asked for
def test_results_past_the_limit_are_not_read_and_are_reported_once() -> None:
    batch = decode_batch(body(item(0), item(1), item(2)), limit=2)
    assert batch.hits == (hit(0), hit(1))
    assert batch.dropped == (DroppedItem("malformed", "results[2:]: past the limit of 2 asked for, not read (1 more)"),)


def test_a_broken_item_past_the_limit_is_never_checked() -> None:
    batch = decode_batch(body(item(0), {"memory": "not an object"}, *[{}] * 1000), limit=1)
    assert batch.hits == (hit(0),)
    assert batch.dropped == (DroppedItem("malformed", "results[1:]: past the limit of 1 asked for, not read (1001 more)"),)


def test_a_broken_item_inside_the_limit_is_dropped_as_without_a_limit() -> None:
    raw = body(item(0), item(1, rank=0), item(2), item(2))
    unbounded = decode_batch(raw)
    bounded = decode_batch(raw, limit=3)
    assert bounded.hits == unbounded.hits[:2] == (hit(0), hit(2))
    assert bounded.dropped == (*unbounded.dropped,
                               DroppedItem("malformed", "results[3:]: past the limit of 3 asked for, not read (1 more)"))
