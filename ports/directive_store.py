"""Port: where the agent's directive is read from."""

from __future__ import annotations

from abc import abstractmethod
from typing import Protocol

from domain.model.directive import Directive


class DirectiveStore(Protocol):
    @abstractmethod
    async def get(self, org_id: str, agent_id: str, *, timeout_s: float) -> Directive | None:
        """Return the agent's directive, or None when there is none (a miss is a success).

        ``org_id`` and ``agent_id`` are canonical lowercase UUID strings. Implementations bound
        every network wait by ``timeout_s`` seconds.

        Raises:
            DirectiveStoreError: unreachable store, timeout, or a stored value that is malformed.
        """

    @abstractmethod
    async def close(self) -> None:
        """Release connections; later calls raise DirectiveStoreError."""
