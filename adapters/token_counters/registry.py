"""The registry handing out token counters by estimate kind."""

from __future__ import annotations

import threading

from domain.model.errors import UnsupportedEstimateKindError
from ports.token_counter import TokenCounter, TokenCounters

from .exact import ENCODING_SPECS, PROCESS_ENCODINGS, EncodingStore, ExactTokenCounter
from .heuristic import CharsDiv4Counter, RunesDiv35Counter


class TokenCountersRegistry(TokenCounters):
    """Heuristic counters always; exact counters built on first use (or by :meth:`preload`).

    Args:
        cache_entries: bound of each exact counter's chunk cache.
        max_cached_chunk_chars: longer chunks are counted without caching.
        encodings: where vocabularies come from (default: the process-wide store).
    """

    def __init__(
        self,
        cache_entries: int = 50_000,
        max_cached_chunk_chars: int = 4096,
        encodings: EncodingStore = PROCESS_ENCODINGS,
    ) -> None:
        self._cache_entries = cache_entries
        self._max_cached_chunk_chars = max_cached_chunk_chars
        self._encodings = encodings
        heuristics: tuple[TokenCounter, ...] = (CharsDiv4Counter(), RunesDiv35Counter())
        self._counters: dict[str, TokenCounter] = {counter.kind: counter for counter in heuristics}
        self._lock = threading.Lock()

    @staticmethod
    def kinds() -> tuple[str, ...]:
        """Every supported estimate kind, sorted."""
        return tuple(sorted((CharsDiv4Counter().kind, RunesDiv35Counter().kind, *ENCODING_SPECS)))

    def for_kind(self, estimate_kind: str) -> TokenCounter:
        counter = self._counters.get(estimate_kind)
        if counter is not None:
            return counter
        spec = ENCODING_SPECS.get(estimate_kind)
        if spec is None:
            raise UnsupportedEstimateKindError(
                f"no token counter for estimate kind {estimate_kind!r} (supported: {', '.join(self.kinds())})"
            )
        with self._lock:
            counter = self._counters.get(estimate_kind)
            if counter is None:
                counter = ExactTokenCounter(
                    estimate_kind,
                    self._encodings.get(spec),
                    cache_entries=self._cache_entries,
                    max_cached_chunk_chars=self._max_cached_chunk_chars,
                )
                self._counters[estimate_kind] = counter
        return counter

    def preload(self) -> None:
        """Build every exact counter now (start-up), so no request pays the vocabulary load."""
        for kind in ENCODING_SPECS:
            self.for_kind(kind)
