"""What one AssembleContext runs with: retrieval deadlines and limits, nonce size, scoring policy.

Values come from the process settings (``entrypoints.settings``), the one place they are declared.
"""

from __future__ import annotations

import attrs

from domain.model.assembly import ScoreSchema
from domain.relevance_policy import RelevancePolicy


@attrs.frozen(kw_only=True)
class AssemblyConfig:
    """No defaults here: ``entrypoints.settings`` declares them (``Settings().assembly_config(...)``)."""

    wall_s: float
    directive_timeout_s: float
    hot_timeout_s: float
    cold_timeout_s: float
    nonce_bytes: int
    hot_limit: int
    cold_limit: int
    min_confidence: float
    score_policy: ScoreSchema  # RELEVANCE or INTERIM (SCORE_POLICIES); request weights select WEIGHTED
    relevance: RelevancePolicy  # relevance_v1's floor, sharpness and slots
    deadline_headroom_s: float  # kept for packing and formatting before the caller's deadline
