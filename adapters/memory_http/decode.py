"""Strict decoding of memory-service answers: msgspec typed structs, one decoder per answer kind.

Body level: the answer must be a JSON object whose ``data`` is an object with a list ``results``;
anything else fails the call (MemorySourceUnavailableError "malformed body: ..." naming what was
wrong). Item level: an item that breaks a field rule is dropped and reported (reason "malformed",
detail ``results[<index>].<field>: <problem>``); the other items are kept in order. Results past the
limit the call asked for are not read at all (one dropped record, ``results[<limit>:]``), so a
hostile answer of a million items costs no more item checks than a valid one (0.14 s instead of
5.6 s of event-loop time for a million ``{}`` items in a 3 MB body).

The rules of one item (``_Item`` and ``_Memory`` below, then ``_hit``):

- ``memory`` an object; ``memory.id``, ``memory.org_id``, ``memory.agent_id`` UUID strings,
  normalised to the lower-case hyphenated form (any form ``uuid.UUID`` reads);
- ``memory.content``, ``memory.category``, ``source`` strings (any category: the service owns them);
- ``memory.confidence`` a number in [0, 1]; ``similarity`` a finite number (no range);
  ``rank`` an integer >= 1;
- optional (absent or null): ``memory.usefulness_score`` a number in [0, 1] (else None),
  ``memory.created_at`` an ISO-8601 string (no offset: UTC; else None), ``memory.retrieval_count``
  an integer >= 0 (else 0), ``memory.tags`` a list of strings (else ());
- strict types: a boolean is not a number, a string is not a number, a float is not an integer
  (an integer is a number); other fields are ignored.

msgspec checks every type and every bound it can express (``Meta``) in C while it reads the JSON;
what it cannot express (UUIDs in any spelling, ISO-8601 timestamps as ``datetime.fromisoformat``
reads them, a finite similarity) is checked after it, in ``_hit``. No cache: each answer is decoded
from its bytes (only the tenant's org and agent ids are checked once per answer).

Speed: the whole answer is decoded with every item typed in one msgspec call (the fast path).
Otherwise the answer is read by Python's ``json`` and each item is checked on its own against the
same ``_Item`` type (``msgspec.convert``), so that one bad item drops alone and is named. That
happens when msgspec refuses an item, and when the body is not strict JSON but Python's ``json``
reads it, as the memory service's answers always have been read: a UTF-8 BOM, bytes that are not
UTF-8 and lone surrogate escapes (``\\ud800``) become U+FFFD (a memory's text stays useful with one
replaced character, and every string we emit is encodable); the bare words ``NaN``, ``Infinity`` and
``-Infinity`` become floats that then break their field's rule, so only their item is dropped. Ids
are never repaired into validity: a broken id fails the UUID rule and its item is dropped.

Duplicate keys: msgspec checks each occurrence of a field as it reads it, so a bad value is refused
even when a later duplicate key would have replaced it (Python's json keeps the last one).
"""

from __future__ import annotations

import json
import math
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, TypeVar

import msgspec

from domain.model.feedback import FEEDBACK_VALUES, FeedbackResult
from domain.model.memory import DroppedItem, MemoryBatch, MemoryHit
from ports.errors import MemorySourceUnavailableError

_T = TypeVar("_T")
_Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_Count = Annotated[int, msgspec.Meta(ge=0)]
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ERROR_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_MISSING_FIELD = "Object missing required field `"
# A backslash escape in JSON text, as _lenient reads it: an escaped backslash or a surrogate pair
# (group 1: kept), or a lone surrogate (replaced by U+FFFD). Escaped backslashes are matched so that
# "\\\\ud800" stays the text "\\ud800" (inside a string each escape starts where the previous
# one ends; outside one a backslash is not JSON). The pattern starts with the backslash itself, so
# the search skips to the next one in C.
_ESCAPE = re.compile(
    r"\\(?:(\\|u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})|u[dD][89a-fA-F][0-9a-fA-F]{2})")


class _Memory(msgspec.Struct, gc=False):
    id: str
    org_id: str
    agent_id: str
    content: str
    category: str
    confidence: _Unit
    usefulness_score: _Unit | None = None
    created_at: str | None = None
    retrieval_count: _Count | None = None
    tags: tuple[str, ...] | None = None


class _Item(msgspec.Struct, gc=False):
    memory: _Memory
    similarity: float
    rank: Annotated[int, msgspec.Meta(ge=1)]
    source: str


class _Results(msgspec.Struct, gc=False):
    results: list[_Item]


class _Answer(msgspec.Struct, gc=False):
    data: _Results


class _LooseResults(msgspec.Struct, gc=False):
    results: list[object]


class _LooseAnswer(msgspec.Struct, gc=False):
    data: _LooseResults


class _Feedback(msgspec.Struct, gc=False):
    memory_id: str
    feedback: str
    new_usefulness_score: _Unit
    total_positive_feedback: _Count
    total_negative_feedback: _Count
    previous_usefulness_score: _Unit | None = None


class _FeedbackAnswer(msgspec.Struct, gc=False):
    data: _Feedback


class _ErrorDetail(msgspec.Struct, gc=False):
    code: str = ""


class _ErrorAnswer(msgspec.Struct, gc=False):
    detail: _ErrorDetail | None = None


_ANSWER = msgspec.json.Decoder(_Answer, strict=True)
_FEEDBACK_ANSWER = msgspec.json.Decoder(_FeedbackAnswer, strict=True)
_ERROR_ANSWER = msgspec.json.Decoder(_ErrorAnswer, strict=True)
_JSON = msgspec.json.Decoder()  # any JSON value, as dicts, lists, strings, numbers


class _Refused(msgspec.Struct, frozen=True, gc=False):
    """An item ``_Item`` refused: ``detail`` is "<field>: <problem>", ``memory_id`` the item's id
    when that is a UUID (else "")."""

    detail: str
    memory_id: str


class _FieldError(Exception):
    """A field that broke a rule checked after msgspec: "<field path>: <problem>"."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")


def decode_batch(body: bytes, limit: int | None = None) -> MemoryBatch:
    """Decode a hot/search answer into hits (source order) and dropped items; malformed -> Unavailable.

    ``limit``: the number of results the call asked for. Results past it are not checked (an answer
    of a million items costs the item checks of ``limit``) and are reported as one dropped item,
    ``results[limit:]``.
    """
    try:
        items: list[_Item] | list[_Item | _Refused] = _ANSWER.decode(body).data.results
        items, surplus = _within(items, limit)
    except msgspec.ValidationError as exc:
        field, _ = _blame(exc, "")
        if not field.startswith("data.results["):
            raise _malformed(exc) from None
        items, surplus = _each_item(body, limit)  # an item was refused: check them one by one
    except (msgspec.DecodeError, RecursionError):
        items, surplus = _each_item(body, limit)  # not strict JSON: read it as Python's json does
    hits: list[MemoryHit] = []
    dropped: list[DroppedItem] = []
    tenant_ids: dict[str, str] = {}
    for index, item in enumerate(items):
        if type(item) is _Refused:
            detail, known = item.detail, item.memory_id
        else:
            try:
                hits.append(_hit(item, tenant_ids))
                continue
            except _FieldError as exc:
                detail, known = str(exc), _known_id(item.memory.id)
        dropped.append(DroppedItem("malformed", f"results[{index}].{detail}", known))
    if surplus:
        dropped.append(DroppedItem("malformed", f"results[{limit}:]: past the limit of {limit} asked for, "
                                                f"not read ({surplus} more)"))
    return MemoryBatch(hits=hits, dropped=dropped)


def decode_feedback(body: bytes, memory_id: str) -> FeedbackResult:
    """Decode a feedback answer; it must be about ``memory_id``. Malformed -> Unavailable."""
    try:
        data = _decoded(_FEEDBACK_ANSWER, body).data
    except msgspec.ValidationError as exc:
        raise _malformed(exc) from None
    try:
        result = FeedbackResult(
            memory_id=_uuid(data.memory_id, "memory_id"),
            feedback=_choice(data.feedback, "feedback", FEEDBACK_VALUES),
            new_usefulness_score=data.new_usefulness_score,
            total_positive_feedback=data.total_positive_feedback,
            total_negative_feedback=data.total_negative_feedback,
            previous_usefulness_score=data.previous_usefulness_score,
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
        detail = _decoded(_ERROR_ANSWER, body).detail
    except (msgspec.ValidationError, MemorySourceUnavailableError):
        return ""
    code = "" if detail is None else detail.code
    return code if _ERROR_CODE.fullmatch(code) else ""


def _within(entries: list[_T], limit: int | None) -> tuple[list[_T], int]:
    """The first ``limit`` entries, and how many more there were."""
    if limit is None or len(entries) <= limit:
        return entries, 0
    return entries[:limit], len(entries) - limit


def _each_item(body: bytes, limit: int | None) -> tuple[list[_Item | _Refused], int]:
    """The first ``limit`` items checked one by one against ``_Item`` (each one an ``_Item`` or the
    ``_Refused`` naming its field), and how many items were past the limit. The body is read by
    ``_lenient``, so a number may be NaN or infinite (refused by its bound, or by ``_hit`` for the
    similarity)."""
    try:
        entries = msgspec.convert(_lenient(body), _LooseAnswer, strict=True).data.results
    except msgspec.ValidationError as exc:
        raise _malformed(exc) from None
    entries, surplus = _within(entries, limit)
    items: list[_Item | _Refused] = []
    for entry in entries:
        try:
            items.append(msgspec.convert(entry, _Item, strict=True))
        except msgspec.ValidationError as exc:
            field, problem = _blame(exc, "item")
            items.append(_Refused(f"{field}: {problem}", _entry_id(entry)))
    return items, surplus


def _hit(item: _Item, tenant_ids: dict[str, str]) -> MemoryHit:
    """The item as a MemoryHit, after the rules msgspec cannot express (UUIDs, timestamps, and a
    finite similarity: msgspec's JSON reader never yields NaN or infinity, Python's json does).

    ``tenant_ids`` holds the org and agent ids already checked in this answer (its items share them).
    """
    memory = item.memory
    memory_id = _uuid(memory.id, "memory.id")
    org_id, agent_id = tenant_ids.get(memory.org_id), tenant_ids.get(memory.agent_id)
    if org_id is None:
        org_id = tenant_ids[memory.org_id] = _uuid(memory.org_id, "memory.org_id")
    if agent_id is None:
        agent_id = tenant_ids[memory.agent_id] = _uuid(memory.agent_id, "memory.agent_id")
    if not math.isfinite(item.similarity):
        raise _FieldError("similarity", f"Expected a finite number, got {item.similarity!r}")
    created_at, count, tags = memory.created_at, memory.retrieval_count, memory.tags
    return MemoryHit(
        memory_id=memory_id,
        org_id=org_id,
        agent_id=agent_id,
        content=memory.content,
        category=memory.category,
        confidence=memory.confidence,
        similarity=item.similarity,
        rank=item.rank,
        source=item.source,
        usefulness=memory.usefulness_score,
        created_at=None if created_at is None else _timestamp(created_at, "memory.created_at"),
        retrieval_count=0 if count is None else count,
        tags=() if tags is None else tags,
    )


def _uuid(text: str, field: str) -> str:
    """``text`` as a lower-case hyphenated UUID (the common form is returned as it is)."""
    if _CANONICAL_UUID.fullmatch(text) is not None:
        return text
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise _FieldError(field, f"Expected a UUID, got {text[:64]!r}") from None


def _choice(text: str, field: str, allowed: tuple[str, ...]) -> str:
    if text not in allowed:
        raise _FieldError(field, f"Expected one of {', '.join(allowed)}, got {text[:32]!r}")
    return text


def _timestamp(text: str, field: str) -> datetime:
    """ISO-8601; a timestamp without an offset is read as UTC (the service stores timestamptz)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _FieldError(field, f"Expected an ISO-8601 timestamp, got {text[:40]!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _known_id(memory_id: str) -> str:
    """The id a dropped item can still be reported under: its normalised UUID, else ""."""
    try:
        return str(uuid.UUID(memory_id))
    except ValueError:
        return ""


def _entry_id(entry: object) -> str:
    """The normalised UUID at ``memory.id`` of a refused item (as Python's json read it), else ""."""
    memory = entry.get("memory") if isinstance(entry, dict) else None
    memory_id = memory.get("id") if isinstance(memory, dict) else None
    return _known_id(memory_id) if isinstance(memory_id, str) else ""


def _decoded(decoder: msgspec.json.Decoder[_T], body: bytes) -> _T:
    """``body`` decoded by ``decoder``; one that is not strict JSON is read by Python's json and
    converted to the decoder's type. Raises msgspec.ValidationError for a type or bound refused,
    MemorySourceUnavailableError for a body that is not JSON at all."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError:
        raise
    except (msgspec.DecodeError, RecursionError):
        pass
    result: _T = msgspec.convert(_lenient(body), decoder.type, strict=True)
    return result


def _lenient(body: bytes) -> object:
    """``body`` as Python's json reads it (a UTF-8 BOM skipped; NaN, Infinity and -Infinity read as
    floats), with bytes that are not UTF-8 and lone surrogate escapes read as U+FFFD. Strict JSON
    (an answer with a refused item) is read by msgspec, to the same values, three times faster."""
    try:
        return _JSON.decode(body)
    except (msgspec.DecodeError, RecursionError):
        pass  # not strict JSON, or a number beyond float64 (Python's json reads it as infinite)
    text = body.decode("utf-8-sig", errors="replace")
    if "\\u" in text:
        text = _ESCAPE.sub(_kept_or_replaced, text)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        what = str(exc)[:120] or type(exc).__name__
        raise MemorySourceUnavailableError(f"malformed body: not JSON ({what})") from None


def _kept_or_replaced(match: re.Match[str]) -> str:
    return match.group(0) if match.group(1) else "\\ufffd"


def _blame(exc: msgspec.ValidationError, whole: str) -> tuple[str, str]:
    """(field path, problem) from msgspec's message; ``whole`` names the value at ``$``.

    "Expected `float`, got `str` - at `$.similarity`" -> ("similarity", "Expected `float`, got `str`");
    "Object missing required field `id` - at `$.memory`" -> ("memory.id", "required field missing").
    """
    message = str(exc)
    problem, separator, path = message.rpartition(" - at `")
    if not separator:  # an error at the top level carries no path
        problem, path = message, "$`"
    field = path[:-1].removeprefix("$").removeprefix(".")
    if problem.startswith(_MISSING_FIELD):
        name = problem[len(_MISSING_FIELD):].removesuffix("`")
        return (f"{field}.{name}" if field else name), "required field missing"
    return field or whole, problem


def _malformed(exc: msgspec.ValidationError) -> MemorySourceUnavailableError:
    field, problem = _blame(exc, "")
    return MemorySourceUnavailableError(f"malformed body: {field + ': ' if field else ''}{problem}")
