"""An in-memory DirectiveStore for unit tests."""

from __future__ import annotations

import asyncio

from domain.model.directive import Directive
from ports.directive_store import DirectiveStore
from ports.errors import DirectiveStoreError, DirectiveStoreTimeoutError


class InMemoryDirectiveStore(DirectiveStore):
    """Directives keyed by (org_id, agent_id).

    Test controls: ``delay_s`` (each ``get`` sleeps that long first, bounded by its ``timeout_s``,
    past which it raises DirectiveStoreTimeoutError), ``fail_with`` (an error ``get`` raises) and
    the ``lookups`` log of (org_id, agent_id).
    """

    def __init__(self, directives: dict[tuple[str, str], Directive] | None = None, *, delay_s: float = 0.0) -> None:
        self._directives = dict(directives or {})
        self._closed = False
        self.delay_s = delay_s
        self.fail_with: DirectiveStoreError | None = None
        self.lookups: list[tuple[str, str]] = []

    def set(self, org_id: str, agent_id: str, directive: Directive) -> None:
        self._directives[(org_id, agent_id)] = directive

    async def get(self, org_id: str, agent_id: str, *, timeout_s: float) -> Directive | None:
        if self._closed:
            raise DirectiveStoreError("in-memory directive store is closed")
        self.lookups.append((org_id, agent_id))
        if self.delay_s > 0:
            await asyncio.sleep(min(self.delay_s, max(timeout_s, 0.0)))
            if self.delay_s > timeout_s:
                raise DirectiveStoreTimeoutError(f"no answer within {timeout_s} s")
        if self.fail_with is not None:
            raise self.fail_with
        return self._directives.get((org_id, agent_id))

    async def close(self) -> None:
        self._closed = True
