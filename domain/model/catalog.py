"""Model capabilities and tokenizer families (one entry of the model catalog each)."""

from __future__ import annotations

import attrs


@attrs.frozen
class TokenizerFamily:
    name: str
    estimate_kind: str
    safety_buffer_fraction: float


@attrs.frozen
class ModelSpec:
    model_id: str
    provider: str
    context_window: int
    max_output_tokens: int
    tokenizer_family: str
    supports_tools: bool = True
    supports_vision: bool = True
    supports_streaming: bool = True
