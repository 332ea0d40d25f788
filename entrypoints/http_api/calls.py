"""One API call on the HTTP edge: its correlation ids and its JSON body, read with every check.

Body rules: ``Content-Type`` must be ``application/json`` (charset, when given, utf-8) else 415;
at most the route's byte limit (``limits.py``) else 413, refused from ``Content-Length`` before a
byte is read and while reading otherwise; the whole body within ``read_timeout_s`` of the first
read else 408 (and the connection is closed); UTF-8 JSON whose top level is an object else 400.
The body is read into the route's request message by its ``BodyDecoder`` (bounded decoding, then
``json_format``: ``body_json.py``, ``proto_json.py``); one larger than ``INLINE_DECODE_BYTES`` is
decoded on one worker thread, so the event loop serves other calls meanwhile (each step of a
decode holds the interpreter for at most ~50 ms, at the limit).

Correlation: the call's request id is the body's ``requestId``, else ``X-Request-ID`` (1..128
visible ASCII characters, else 400), else one generated for the call (a UUID4). That one id is
the use case's request id (echoed in AssembleContextResponse, sent downstream), the call's log
line, the id quoted in internal errors and the ``X-Request-ID`` response header (left out only
when a body id cannot travel in a header).
"""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.protobuf.message import Message
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from entrypoints.http_api.body_json import BodyDecoder
from entrypoints.http_api.errors import (
    CANCELLED,
    CLIENT_CLOSED_REQUEST,
    INVALID_ARGUMENT,
    PAYLOAD_TOO_LARGE,
    REQUEST_TIMEOUT,
    UNSUPPORTED_MEDIA_TYPE,
    ApiError,
    echo,
)
from entrypoints.http_api.limits import ASSEMBLE_BODY_LIMIT
from entrypoints.observability.correlation import new_request_id

REQUEST_ID_HEADER = "X-Request-ID"
DEFAULT_MAX_BODY_BYTES = ASSEMBLE_BODY_LIMIT
DEFAULT_READ_TIMEOUT_S = 10.0
INLINE_DECODE_BYTES = 256 * 1024  # ~1 ms of decoding: below it, a thread hop costs more than it saves
_HEADER_SAFE = re.compile(r"[\x21-\x7e]{1,128}")
_decode_pool: ThreadPoolExecutor | None = None


def _decoder_thread() -> ThreadPoolExecutor:
    """One thread for every large decode: decodes queue behind each other instead of contending with
    the event loop for the interpreter."""
    global _decode_pool
    if _decode_pool is None:
        _decode_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ibex-http-json")
    return _decode_pool


class ApiCall:
    def __init__(self, request: Request, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> None:
        self.request = request
        self._max_body_bytes = max_body_bytes
        self._read_timeout_s = read_timeout_s
        self._header_id = request.headers.get(REQUEST_ID_HEADER.lower(), "")
        header_ok = bool(_HEADER_SAFE.fullmatch(self._header_id))
        self.request_id = self._header_id if header_ok else new_request_id()
        self.trace_id = ""

    def correlate(self, request_id: str, trace_id: str = "") -> str:
        """Record the body's ids; return the call's request id, which the use case must carry."""
        self.trace_id = trace_id
        if request_id:
            self.request_id = request_id
        return self.request_id

    async def read_message(self, decoder: BodyDecoder) -> Message:
        """The body as the route's request message (see the module docstring for the checks)."""
        if self._header_id and not _HEADER_SAFE.fullmatch(self._header_id):
            raise ApiError(400, INVALID_ARGUMENT, f"{REQUEST_ID_HEADER} must be 1..128 visible ASCII characters",
                           REQUEST_ID_HEADER)
        self._check_media_type()
        body = await self._read_limited()
        if len(body) <= INLINE_DECODE_BYTES:
            return decoder.read(body)
        return await asyncio.get_running_loop().run_in_executor(_decoder_thread(), decoder.read, body)

    def respond(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
        headers = dict(headers or {})
        if _HEADER_SAFE.fullmatch(self.request_id):
            headers[REQUEST_ID_HEADER] = self.request_id
        return SafeJSONResponse(body, status_code=status, headers=headers)

    def _check_media_type(self) -> None:
        raw = self.request.headers.get("content-type", "")
        media_type, *params = (part.strip().lower() for part in raw.split(";"))
        charset = next((p.partition("=")[2].strip('"') for p in params if p.startswith("charset=")), "utf-8")
        if media_type != "application/json" or charset not in ("utf-8", "utf8"):
            shown = echo(raw) if raw else "none"
            raise ApiError(415, UNSUPPORTED_MEDIA_TYPE, f"Content-Type must be application/json (utf-8), got {shown}",
                           "Content-Type")

    async def _read_limited(self) -> bytes:
        """The body, as ``bytes``: the decoder's skipped elements then reference it instead of copying."""
        declared = self.request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_body_bytes:
            raise self._too_large()
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self._read_timeout_s):
                async for chunk in self.request.stream():
                    size += len(chunk)
                    if size > self._max_body_bytes:
                        raise self._too_large()
                    chunks.append(chunk)
        except TimeoutError:
            raise ApiError(408, REQUEST_TIMEOUT, f"the request body did not arrive within {self._read_timeout_s:g} s "
                           f"({size} bytes came)", close=True) from None
        except ClientDisconnect:
            raise ApiError(CLIENT_CLOSED_REQUEST, CANCELLED, "the client closed the connection before the whole "
                           "request body came", close=True) from None
        return b"".join(chunks)

    def _too_large(self) -> ApiError:
        return ApiError(413, PAYLOAD_TOO_LARGE,
                        f"the request body exceeds {self._max_body_bytes} bytes (more than any valid request needs)")


class SafeJSONResponse(JSONResponse):
    """A JSON response that renders any text: a lone surrogate (from an upstream document) is written
    as its ``\\uXXXX`` escape instead of failing the whole answer."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, indent=None,
                              separators=(",", ":")).encode("ascii")
