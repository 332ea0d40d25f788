"""One API call on the HTTP edge: its correlation ids and its JSON body, read with every check.

Body rules: ``Content-Type`` must be ``application/json`` (charset, when given, utf-8) else 415;
at most ``max_body_bytes`` else 413; UTF-8 JSON whose top level is an object else 400.

Correlation: the call's request id is the body's ``requestId``, else ``X-Request-ID`` (1..128
visible ASCII characters, else 400), else one generated for the call (a UUID4). That one id is
the use case's request id (echoed in AssembleContextResponse, sent downstream), the call's log
line, the id quoted in internal errors and the ``X-Request-ID`` response header (left out only
when a body id cannot travel in a header).
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from entrypoints.http_api.errors import INVALID_ARGUMENT, PAYLOAD_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE, ApiError
from entrypoints.http_api.json_mapping import loads_object
from entrypoints.observability.correlation import new_request_id

REQUEST_ID_HEADER = "X-Request-ID"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
_HEADER_SAFE = re.compile(r"[\x21-\x7e]{1,128}")


class ApiCall:
    def __init__(self, request: Request, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.request = request
        self._max_body_bytes = max_body_bytes
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

    async def read_json(self) -> dict[str, Any]:
        """The body as a JSON object (see the module docstring for the checks and their statuses)."""
        if self._header_id and not _HEADER_SAFE.fullmatch(self._header_id):
            raise ApiError(400, INVALID_ARGUMENT, f"{REQUEST_ID_HEADER} must be 1..128 visible ASCII characters",
                           REQUEST_ID_HEADER)
        self._check_media_type()
        body = await self._read_limited()
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, INVALID_ARGUMENT, "the request body is not valid UTF-8", "") from None
        return loads_object(text, "the request body")

    def respond(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
        headers = dict(headers or {})
        if _HEADER_SAFE.fullmatch(self.request_id):
            headers[REQUEST_ID_HEADER] = self.request_id
        return JSONResponse(body, status_code=status, headers=headers)

    def _check_media_type(self) -> None:
        raw = self.request.headers.get("content-type", "")
        media_type, *params = (part.strip().lower() for part in raw.split(";"))
        charset = next((p.partition("=")[2].strip('"') for p in params if p.startswith("charset=")), "utf-8")
        if media_type != "application/json" or charset not in ("utf-8", "utf8"):
            shown = raw or "none"
            raise ApiError(415, UNSUPPORTED_MEDIA_TYPE, f"Content-Type must be application/json (utf-8), got {shown}")

    async def _read_limited(self) -> bytes:
        declared = self.request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_body_bytes:
            raise self._too_large()
        chunks: list[bytes] = []
        size = 0
        async for chunk in self.request.stream():
            size += len(chunk)
            if size > self._max_body_bytes:
                raise self._too_large()
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self) -> ApiError:
        return ApiError(413, PAYLOAD_TOO_LARGE, f"the request body exceeds {self._max_body_bytes} bytes")
