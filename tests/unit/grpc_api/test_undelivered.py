"""The filter on grpc's logger: only grpc's failed-send record of a watched call becomes our callback."""

from __future__ import annotations

import contextvars
import logging

from entrypoints.grpc_api.undelivered import GRPC_LOGGER, AnswerNotSentFilter, install, watch_call

SEND_FAILED = "ExecuteBatchError raised in core by servicer method [%s]"


def record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(GRPC_LOGGER, logging.ERROR, "server.pyx.pxi", 710, msg, args, None)


def test_a_failed_send_of_a_watched_call_runs_its_callback_once_and_is_dropped() -> None:
    seen: list[str] = []

    def in_the_call() -> list[bool]:
        watch_call(lambda: seen.append("not sent"))
        log_filter = AnswerNotSentFilter()
        return [log_filter.filter(record(SEND_FAILED, "/ibex.context.v1.ContextAssemblyService/AssembleContext")),
                log_filter.filter(record(SEND_FAILED, "/ibex.context.v1.ContextAssemblyService/AssembleContext"))]

    assert contextvars.copy_context().run(in_the_call) == [False, True]  # dropped once, then grpc's own again
    assert seen == ["not sent"]


def test_other_records_and_unwatched_calls_pass_as_grpc_wrote_them() -> None:
    seen: list[str] = []

    def in_the_call() -> list[bool]:
        watch_call(lambda: seen.append("not sent"))
        log_filter = AnswerNotSentFilter()
        return [log_filter.filter(record("Unexpected [%s] raised by servicer method [%s]", "ValueError", "/x")),
                log_filter.filter(record("%s", SEND_FAILED))]  # the prefix in an argument, not the message

    assert contextvars.copy_context().run(in_the_call) == [True, True]
    assert contextvars.copy_context().run(lambda: AnswerNotSentFilter().filter(record(SEND_FAILED, "/x"))) is True
    assert seen == []


def test_install_puts_one_filter_on_grpcs_logger() -> None:
    install()
    install()
    assert sum(isinstance(f, AnswerNotSentFilter) for f in logging.getLogger(GRPC_LOGGER).filters) == 1
