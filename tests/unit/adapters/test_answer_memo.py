"""The memory adapter's memo of decoded answers: a hit is exactly what decoding gives."""

from __future__ import annotations

import pytest

from adapters.memory_http.answer_memo import AnswerMemo
from adapters.memory_http.decode import decode_batch
from ports.errors import MemorySourceUnavailableError
from tests.unit.adapters.test_memory_http_decode import body, item


def test_the_same_bytes_are_decoded_once_and_give_the_decoded_batch() -> None:
    memo, answer = AnswerMemo(), body(item(0), item(1))
    first = memo.batch(answer)
    assert first == decode_batch(answer) and memo.hits() == 0
    assert memo.batch(bytes(answer)) is first and memo.hits() == 1  # equal bytes, another object


def test_different_bytes_are_decoded_on_their_own() -> None:
    memo = AnswerMemo()
    one, two = body(item(0)), body(item(1))
    assert memo.batch(one) == decode_batch(one) and memo.batch(two) == decode_batch(two)
    assert memo.hits() == 0


def test_large_bodies_bypass_the_memo_and_it_stays_bounded() -> None:
    answer = body(item(0), item(1), item(2))
    large = AnswerMemo(max_body_bytes=len(answer) - 1)
    assert large.batch(answer) == decode_batch(answer) and large.batch(answer) == decode_batch(answer)
    assert large.hits() == 0
    small = AnswerMemo(entries=1)
    small.batch(body(item(0)))
    small.batch(body(item(1)))  # evicts the first
    small.batch(body(item(0)))
    assert small.hits() == 0


def test_an_answer_that_fails_to_decode_is_never_kept() -> None:
    memo = AnswerMemo()
    for _ in range(2):
        with pytest.raises(MemorySourceUnavailableError):
            memo.batch(b'{"data": {"results": {}}}')
    assert memo.hits() == 0


def test_sizes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="entries and max_body_bytes must be >= 1"):
        AnswerMemo(entries=0)
