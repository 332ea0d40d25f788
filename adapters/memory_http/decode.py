"""Strict decoding of memory-service answers.

Body level: the answer must be a JSON object whose ``data`` is an object with a list ``results``;
anything else fails the call (MemorySourceUnavailableError "malformed body: ..."). Item level: an
item that breaks a field rule is dropped and reported (reason "malformed", the detail names the
field); the other items are kept in order.

Text that is not valid Unicode is cleaned, not dropped: a lone surrogate left by a JSON escape such
as ``\\ud800``, or bytes that are not UTF-8, become U+FFFD in every string field (content, category,
source, tags). A memory's text stays useful with one replaced character, and every string we emit
is then encodable. Ids are never cleaned: a broken id fails the UUID rule and the item is dropped.

Speed: decoding is a pure function of the answer's bytes, so an answer identical to a recent one
(a hot list between writes, a repeated search) reuses that answer's immutable batch. Otherwise,
almost every item is already in normal form (canonical lower-case ids, ASCII text, floats in range,
a timestamp shared by many items): ``_plain_hit`` accepts exactly that form in one pass without
exceptions, remembering ids and timestamps it has checked; anything else goes to ``_hit``, which
normalises what it can and names the field that broke a rule. The caches are small and bounded.
Both paths stay in this one module (past 300 lines) on purpose: the fast path must accept exactly
what the checking path accepts unchanged, and side by side that can be reviewed.
"""

from __future__ import annotations

import json
import math
import re
import sys
import uuid
from datetime import UTC, datetime
from typing import TypeVar

import attrs

from domain.model.feedback import FEEDBACK_VALUES, FeedbackResult
from domain.model.memory import DroppedItem, MemoryBatch, MemoryHit
from ports.errors import MemorySourceUnavailableError

_SURROGATES = re.compile("[\ud800-\udfff]")
_MISSING = object()
_K = TypeVar("_K")
_V = TypeVar("_V")
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ERROR_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_FLOAT_MAX = sys.float_info.max
_CACHE_LIMIT = 4096  # entries per cache below; a full cache is emptied and refilled
_BATCH_LIMIT, _BATCH_BODY_MAX = 64, 64 * 1024  # recent answers kept, and the largest one kept
_BATCHES: dict[bytes, MemoryBatch] = {}  # recent answers (immutable) by their exact bytes
_CANONICAL_IDS: dict[str, None] = {}  # ids already known to be canonical UUIDs
_MOMENTS: dict[str, datetime] = {}  # timestamps already parsed (datetimes are immutable)
# _plain_hit builds MemoryHit positionally (the keyword form costs a third more): pin the order.
_HIT_FIELDS = ("memory_id", "org_id", "agent_id", "content", "category", "confidence", "similarity",
               "rank", "source", "usefulness", "created_at", "retrieval_count", "tags")
if tuple(field.name for field in attrs.fields(MemoryHit)) != _HIT_FIELDS:
    raise ImportError(f"MemoryHit fields are no longer {_HIT_FIELDS}: update decode._plain_hit")


class _FieldError(Exception):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")


def clean_text(value: str) -> str:
    """Replace lone surrogates with U+FFFD (ASCII text, the common case, is returned at once)."""
    return value if value.isascii() else _SURROGATES.sub("\ufffd", value)


def parse_document(body: bytes) -> object:
    """JSON-decode an answer (undecodable UTF-8 bytes become U+FFFD); malformed -> Unavailable."""
    text = body.decode("utf-8-sig", errors="replace")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MemorySourceUnavailableError(f"malformed body: not JSON ({_brief(exc)})") from None


def decode_batch(body: bytes) -> MemoryBatch:
    """Decode a hot/search answer into hits (source order) and dropped items."""
    batch = _BATCHES.get(body)
    if batch is None:
        batch = _decoded_batch(body)
        if len(body) <= _BATCH_BODY_MAX:
            _remember(_BATCHES, body, batch, _BATCH_LIMIT)
    return batch


def _decoded_batch(body: bytes) -> MemoryBatch:
    results = _results(parse_document(body))
    hits: list[MemoryHit] = []
    dropped: list[DroppedItem] = []
    for index, item in enumerate(results):
        hit = _plain_hit(item)
        if hit is None:
            try:
                hit = _hit(item)
            except _FieldError as exc:
                dropped.append(DroppedItem("malformed", f"results[{index}].{exc}", _known_id(item)))
                continue
        hits.append(hit)
    return MemoryBatch(hits=hits, dropped=dropped)


def decode_feedback(body: bytes, memory_id: str) -> FeedbackResult:
    """Decode a feedback answer; it must be about ``memory_id``. Malformed -> Unavailable."""
    document = parse_document(body)
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, dict):
        raise MemorySourceUnavailableError("malformed body: expected an object with an object 'data'")
    try:
        previous = data.get("previous_usefulness_score")
        result = FeedbackResult(
            memory_id=_uuid(data.get("memory_id", _MISSING), "memory_id"),
            feedback=_choice(data.get("feedback", _MISSING), "feedback", FEEDBACK_VALUES),
            new_usefulness_score=_unit(data.get("new_usefulness_score", _MISSING), "new_usefulness_score"),
            total_positive_feedback=_integer(data.get("total_positive_feedback", _MISSING),
                                             "total_positive_feedback", 0),
            total_negative_feedback=_integer(data.get("total_negative_feedback", _MISSING),
                                             "total_negative_feedback", 0),
            previous_usefulness_score=None if previous is None else _unit(previous, "previous_usefulness_score"),
        )
    except _FieldError as exc:
        raise MemorySourceUnavailableError(f"malformed body: data.{exc}") from None
    if result.memory_id != memory_id:
        raise MemorySourceUnavailableError(
            f"malformed body: answer is about memory {result.memory_id}, not {memory_id}")
    return result


def error_code(body: bytes) -> str:
    """The ``detail.code`` of an error answer when it is a plain identifier, else ""."""
    try:
        document = json.loads(body.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return ""
    detail = document.get("detail") if isinstance(document, dict) else None
    code = detail.get("code") if isinstance(detail, dict) else None
    return code if isinstance(code, str) and _ERROR_CODE.fullmatch(code) else ""


def _results(document: object) -> list[object]:
    if not isinstance(document, dict):
        raise MemorySourceUnavailableError(f"malformed body: expected a JSON object, got {_kind(document)}")
    data = document.get("data", _MISSING)
    if not isinstance(data, dict):
        raise MemorySourceUnavailableError(f"malformed body: 'data' must be an object, got {_kind(data)}")
    results = data.get("results", _MISSING)
    if not isinstance(results, list):
        raise MemorySourceUnavailableError(
            f"malformed body: 'data.results' must be a list, got {_kind(results)}")
    return results


def _plain_hit(item: object) -> MemoryHit | None:
    """The item when it is already in normal form, else None (``_hit`` then decides).

    Accepts only what ``_hit`` accepts unchanged, and gives the same MemoryHit: canonical ids,
    ASCII strings, float (not integer) numbers in range, rank >= 1, a parsable timestamp, a list
    of ASCII tags; usefulness, created_at, retrieval_count and tags may be null (absent: ``_hit``).
    """
    if type(item) is not dict:
        return None
    memory = item.get("memory")
    if type(memory) is not dict:
        return None
    try:  # every field is present in the common form; an absent one goes to ``_hit``
        memory_id, org_id, agent_id = memory["id"], memory["org_id"], memory["agent_id"]
        content, category, source = memory["content"], memory["category"], item["source"]
        confidence, similarity, rank = memory["confidence"], item["similarity"], item["rank"]
        usefulness, count = memory["usefulness_score"], memory["retrieval_count"]
        created_at, raw_tags = memory["created_at"], memory["tags"]
    except KeyError:
        return None
    ids = _CANONICAL_IDS
    if not (type(memory_id) is str and (memory_id in ids or _learn_id(memory_id))
            and type(org_id) is str and (org_id in ids or _learn_id(org_id))
            and type(agent_id) is str and (agent_id in ids or _learn_id(agent_id))
            and type(content) is str and content.isascii() and type(category) is str
            and category.isascii() and type(source) is str and source.isascii()
            and type(confidence) is float and 0.0 <= confidence <= 1.0
            and type(similarity) is float and -_FLOAT_MAX <= similarity <= _FLOAT_MAX
            and type(rank) is int and rank >= 1
            and (usefulness is None or (type(usefulness) is float and 0.0 <= usefulness <= 1.0))
            and (count is None or (type(count) is int and count >= 0))):
        return None
    moment = None if created_at is None else _moment(created_at)
    tags = _plain_tags(raw_tags)
    if tags is None or (moment is None and created_at is not None):
        return None
    return MemoryHit(memory_id, org_id, agent_id, content, category, confidence, similarity, rank,
                     source, usefulness, moment, 0 if count is None else count, tags)


def _learn_id(value: str) -> bool:
    """Whether ``value`` is a lower-case hyphenated UUID (remembered when it is)."""
    if _CANONICAL_UUID.fullmatch(value) is None:
        return False
    _remember(_CANONICAL_IDS, value, None)
    return True


def _plain_tags(value: object) -> tuple[str, ...] | None:
    """Null tags or a list of ASCII strings as a tuple; anything else None."""
    if value is None:
        return ()
    if type(value) is not list:
        return None
    for tag in value:
        if type(tag) is not str or not tag.isascii():
            return None
    return tuple(value)


def _moment(value: object) -> datetime | None:
    """An ISO-8601 string as an aware datetime (no offset: UTC), or None when it is not one."""
    if type(value) is not str:
        return None
    moment = _MOMENTS.get(value)
    if moment is None:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        _remember(_MOMENTS, value, moment)
    return moment


def _remember(cache: dict[_K, _V], key: _K, value: _V, limit: int = _CACHE_LIMIT) -> None:
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value


def _hit(item: object) -> MemoryHit:
    if type(item) is not dict:
        raise _FieldError("item", f"expected an object, got {_kind(item)}")
    memory = item.get("memory", _MISSING)
    if type(memory) is not dict:
        raise _FieldError("memory", f"expected an object, got {_kind(memory)}")
    get = memory.get
    usefulness, created_at = get("usefulness_score"), get("created_at")
    retrieval_count, tags = get("retrieval_count"), get("tags")
    return MemoryHit(
        memory_id=_uuid(get("id", _MISSING), "memory.id"),
        org_id=_uuid(get("org_id", _MISSING), "memory.org_id"),
        agent_id=_uuid(get("agent_id", _MISSING), "memory.agent_id"),
        content=clean_text(_string(get("content", _MISSING), "memory.content")),
        category=clean_text(_string(get("category", _MISSING), "memory.category")),
        confidence=_unit(get("confidence", _MISSING), "memory.confidence"),
        similarity=_number(item.get("similarity", _MISSING), "similarity"),
        rank=_integer(item.get("rank", _MISSING), "rank", 1),
        source=clean_text(_string(item.get("source", _MISSING), "source")),
        usefulness=None if usefulness is None else _unit(usefulness, "memory.usefulness_score"),
        created_at=None if created_at is None else _timestamp(created_at, "memory.created_at"),
        retrieval_count=0 if retrieval_count is None else _integer(retrieval_count, "memory.retrieval_count", 0),
        tags=() if tags is None else _tags(tags, "memory.tags"),
    )


def _number(value: object, name: str) -> float:
    """A finite JSON number (booleans are not numbers)."""
    if type(value) is float:
        if math.isfinite(value):
            return value
        raise _FieldError(name, f"expected a finite number, got {value!r}")
    if type(value) is not int:
        raise _FieldError(name, f"expected a number, got {_kind(value)}")
    try:
        return float(value)
    except OverflowError:
        raise _FieldError(name, "expected a finite number, got a huge integer") from None


def _unit(value: object, name: str) -> float:
    number = _number(value, name)
    if not 0.0 <= number <= 1.0:
        raise _FieldError(name, f"expected a number in [0, 1], got {number!r}")
    return number


def _integer(value: object, name: str, minimum: int) -> int:
    if type(value) is not int:
        raise _FieldError(name, f"expected an integer, got {_kind(value)}")
    if value < minimum:
        raise _FieldError(name, f"expected an integer >= {minimum}, got {value}")
    return value


def _string(value: object, name: str) -> str:
    if type(value) is not str:
        raise _FieldError(name, f"expected a string, got {_kind(value)}")
    return value


def _uuid(value: object, name: str) -> str:
    text = _string(value, name)
    if text in _CANONICAL_IDS or _learn_id(text):
        return text  # the common form, already normalised
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise _FieldError(name, f"expected a UUID, got {text[:64]!r}") from None


def _choice(value: object, name: str, allowed: tuple[str, ...]) -> str:
    text = _string(value, name)
    if text not in allowed:
        raise _FieldError(name, f"expected one of {', '.join(allowed)}, got {text[:32]!r}")
    return text


def _timestamp(value: object, name: str) -> datetime:
    """ISO-8601; a timestamp without an offset is read as UTC (the service stores timestamptz)."""
    text = _string(value, name)
    moment = _moment(text)
    if moment is None:
        raise _FieldError(name, f"expected an ISO-8601 timestamp, got {text[:40]!r}")
    return moment


def _tags(value: object, name: str) -> tuple[str, ...]:
    if type(value) is not list or not all(type(tag) is str for tag in value):
        raise _FieldError(name, f"expected a list of strings, got {_kind(value)}")
    return tuple(clean_text(tag) for tag in value)


def _known_id(item: object) -> str:
    memory = item.get("memory") if isinstance(item, dict) else None
    try:
        return str(uuid.UUID(memory["id"]))  # type: ignore[index]
    except (TypeError, KeyError, ValueError, AttributeError):
        return ""


def _kind(value: object) -> str:
    if value is _MISSING:
        return "nothing (field missing)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {value}".lower()
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value[:32]!r}"
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)


def _brief(exc: BaseException) -> str:
    return str(exc)[:120] or type(exc).__name__
