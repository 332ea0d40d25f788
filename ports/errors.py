"""Errors adapters raise instead of library errors. Nothing else may cross a port."""

from __future__ import annotations


class PortError(Exception):
    """Base of every error an adapter raises through a port."""


class DirectiveStoreError(PortError):
    """The directive store failed (unreachable, timed out, or returned a malformed value)."""


class DirectiveStoreTimeoutError(DirectiveStoreError):
    """The directive store did not answer within the call's timeout."""


class MemorySourceError(PortError):
    """Base for memory source failures. ``status_code`` is the upstream HTTP status when any."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class MemorySourceTimeoutError(MemorySourceError):
    """The source did not answer within the call's timeout."""


class MemorySourceDeniedError(MemorySourceError):
    """The source refused the caller's credentials (HTTP 401/403)."""


class MemorySourceUnavailableError(MemorySourceError):
    """Transport failure, 5xx, or a malformed response body."""


class MemoryNotFoundError(MemorySourceError):
    """The memory does not exist for this tenant (feedback on an unknown id)."""


class MemorySourceClosedError(MemorySourceError):
    """The source was used after close()."""


class CatalogUnavailableError(PortError):
    """The catalog document could not be read."""
