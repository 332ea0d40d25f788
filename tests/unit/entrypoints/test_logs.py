"""The JSON log formatter: every record is plain JSON, including uvicorn's coloured ones."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import click
import pytest

from entrypoints.observability.logs import JsonFormatter, plain


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("uvicorn.error")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    logger.handlers[:], logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    yield logger, stream
    logger.handlers[:], logger.level, logger.propagate = saved


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_a_uvicorn_record_is_plain_json_without_color_message(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    # exactly how uvicorn.server logs its start (uvicorn styles its colour copy with click)
    logger.info("Started server process [%d]", 4242,
                extra={"color_message": "Started server process [" + click.style("%d", fg="cyan") + "]"})
    entry = json.loads(stream.getvalue())
    assert entry["event"] == "Started server process [4242]"
    assert entry["logger"] == "uvicorn.error" and "color_message" not in entry
    assert "\\u001b" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_escape_sequences_are_removed_from_every_field(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    bold = click.style("127.0.0.1:9093", bold=True)
    logger.info("Uvicorn running on %s", bold, extra={
        "detail": click.style("red", fg="red"), "nested": {click.style("k", fg="blue"): [click.style("v", bold=True)]},
        "title": "\x1b]0;window title\x07named", "object": _Shouting(),
    })
    entry = json.loads(stream.getvalue())
    assert entry["event"] == "Uvicorn running on 127.0.0.1:9093"
    assert (entry["detail"], entry["nested"], entry["title"], entry["object"]) == ("red", {"k": ["v"]}, "named", "LOUD")
    assert not any("\x1b" in text for text in _strings(entry))


def test_an_exception_with_escapes_is_logged_plain(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    try:
        raise RuntimeError(click.style("boom", fg="red"))
    except RuntimeError:
        logger.exception("failed")
    entry = json.loads(stream.getvalue())
    assert "RuntimeError: boom" in entry["exception"] and "\x1b" not in entry["exception"]


def test_plain_leaves_ordinary_values_alone() -> None:
    value = {"a": 1, "b": [1.5, None, True], "c": "text with ümlaut\nand a newline"}
    assert plain(value) == value
    assert plain(("x", "\x1b[1my\x1b[0m")) == ["x", "y"]


class _Shouting:
    def __str__(self) -> str:
        return click.style("LOUD", fg="yellow")
