"""A loopback OTLP/HTTP trace receiver for tests: ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest`` (``opentelemetry-proto``), optionally gzip- or deflate-encoded.

    with OtlpReceiver.running() as receiver:          # 127.0.0.1, a free port, threads of its own
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        ...
        spans = receiver.wait_for(lambda spans: any(s.name == "budget" for s in spans))

Modes, to stand in for a broken collector: ``"ok"`` (answers an empty ExportTraceServiceResponse),
``"fail"`` (503 to every export; the exporter retries, then gives up), ``"hang"`` (reads the
request and never answers until ``close``). ``exports`` counts the requests that arrived.

``OtlpGrpcReceiver`` is the same over OTLP/gRPC (``TraceService/Export``, ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``),
mode ``ok`` only.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import attrs
import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

MODES = ("ok", "fail", "hang")


@attrs.frozen
class ReceivedSpan:
    """One span as the collector received it (ids in lower-case hex, "" for no parent)."""

    service_name: str
    scope: str
    name: str
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind: 1 internal, 2 server, 3 client
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, object]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    events: tuple[str, ...]

    def strings(self) -> Iterator[str]:
        """Every text the span carries: its name, attribute keys and values, status, events."""
        yield self.name
        yield self.status_message
        yield from self.events
        for key, value in self.attributes.items():
            yield key
            yield str(value)


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one serialized ExportTraceServiceRequest."""
    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    service_name=str(resource.get("service.name", "")), scope=scope_spans.scope.name,
                    name=span.name, kind=span.kind, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(), start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    attributes={kv.key: _value(kv.value) for kv in span.attributes},
                    status_code=span.status.code, status_message=span.status.message,
                    events=tuple(event.name for event in span.events),
                ))
    return spans


class OtlpReceiver:
    """The receiver; every method is thread-safe."""

    def __init__(self, mode: str = "ok", *, keep: bool = True) -> None:
        self._keep = keep  # False: count exports only (a benchmark's collector, cheap on shared cores)
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._exports = 0
        self._mode = mode
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @classmethod
    @contextmanager
    def running(cls, mode: str = "ok", *, keep: bool = True) -> Iterator[OtlpReceiver]:
        receiver = cls(mode, keep=keep)
        receiver._thread.start()
        try:
            yield receiver
        finally:
            receiver.close()

    def close(self) -> None:
        self._closing.set()  # releases hanging exports
        self._server.shutdown()
        self._server.server_close()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        """The base endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``); traces go to ``/v1/traces``."""
        return f"http://127.0.0.1:{self.port}"

    def set_mode(self, mode: str) -> None:
        assert mode in MODES, mode
        with self._lock:
            self._mode = mode

    @property
    def exports(self) -> int:
        with self._lock:
            return self._exports

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 30.0) -> list[ReceivedSpan]:
        """The spans once ``predicate(spans)`` holds; ``timeout_s`` is a hang guard only."""
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans()
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"the spans expected did not arrive in {timeout_s} s: {[s.name for s in spans]}")
            time.sleep(0.02)

    def _receive(self, body: bytes, encoding: str) -> tuple[int, bytes]:
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        with self._lock:
            self._exports += 1
            mode = self._mode
        if mode == "hang":
            self._closing.wait()
            return 503, b""
        if mode == "fail":
            return 503, b""
        if not self._keep:
            return 200, ExportTraceServiceResponse().SerializeToString()
        spans = decode(body)
        with self._lock:
            self._spans.extend(spans)
        return 200, ExportTraceServiceResponse().SerializeToString()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the http.server hook
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path != "/v1/traces":
                    status, answer = 404, b""
                else:
                    status, answer = receiver._receive(body, self.headers.get("content-encoding", "").lower())
                self.send_response(status)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                return None

        return Handler


class OtlpGrpcReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver on 127.0.0.1 (plaintext), in grpc's own threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._server = grpc.server(ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @classmethod
    @contextmanager
    def running(cls) -> Iterator[OtlpGrpcReceiver]:
        receiver = cls()
        receiver._server.start()
        try:
            yield receiver
        finally:
            receiver._server.stop(0)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def Export(self, request: ExportTraceServiceRequest, context: object) -> ExportTraceServiceResponse:  # noqa: N802
        spans = decode(request.SerializeToString())
        with self._lock:
            self._spans.extend(spans)
        return ExportTraceServiceResponse()

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 30.0) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout_s
        while not predicate(spans := self.spans()):
            if time.monotonic() > deadline:
                raise AssertionError(f"the spans expected did not arrive in {timeout_s} s: {[s.name for s in spans]}")
            time.sleep(0.02)
        return spans


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.support.otlp_receiver [--mode ok|fail|hang]``: serve until SIGTERM/SIGINT,
    printing the endpoint first, then the exports and spans received every 10 s (for benchmarks)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description="a loopback OTLP/HTTP trace receiver")
    parser.add_argument("--mode", choices=MODES, default="ok")
    parser.add_argument("--discard", action="store_true", help="count exports without decoding them")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with OtlpReceiver.running(args.mode, keep=not args.discard) as receiver:
        print(receiver.endpoint, flush=True)
        while not stop.wait(10.0):
            print(f"exports {receiver.exports} spans {len(receiver.spans())}", flush=True)
        print(f"exports {receiver.exports} spans {len(receiver.spans())}", flush=True)


if __name__ == "__main__":
    main()
