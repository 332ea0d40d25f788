"""Text profiles with a bounded cache: memories repeat from one assembly to the next (the hot
list above all), so each content is cut into words once, not once per assembly.

The cache is keyed by the whole content and bounded in entries (least recently used goes
first); a profile depends on the content alone, so a hit is exactly what a miss computes.
"""

from __future__ import annotations

from functools import lru_cache

from domain.relevance import TextProfile, profile
from ports.text_profiles import TextProfiles

DEFAULT_MAX_ENTRIES = 65_536


class CachedTextProfiles(TextProfiles):
    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._profile = lru_cache(maxsize=max_entries)(profile)

    def profile(self, text: str) -> TextProfile:
        return self._profile(text)

    @property
    def entries(self) -> int:
        return self._profile.cache_info().currsize
