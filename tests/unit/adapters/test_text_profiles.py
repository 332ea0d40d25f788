from __future__ import annotations

from adapters.text_profiles import CachedTextProfiles
from domain.relevance import profile


def test_a_cached_profile_is_exactly_the_computed_one() -> None:
    profiles = CachedTextProfiles(max_entries=4)
    text = "Before a database failover, freeze deploys and announce it in #incidents."
    first, second = profiles.profile(text), profiles.profile(text)
    assert first == second == profile(text) and first is second


def test_the_cache_is_bounded_in_entries() -> None:
    profiles = CachedTextProfiles(max_entries=3)
    for i in range(10):
        profiles.profile(f"memory number {i}")
    assert profiles.entries == 3
    assert profiles.profile("memory number 0") == profile("memory number 0")  # evicted, computed again
