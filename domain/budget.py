"""Token budget: what is left for memories after every other part of the prompt.

``usable = window - reserve - safety - directive - history - tools - formatter overhead`` where

* reserve = max(500, min(int(window * 0.15), max_output_tokens, 4096)) (the model's answer),
* safety = int(window * family.safety_buffer_fraction),
* directive / history / tools / formatter overhead are the counts of the texts the block's
  :class:`~domain.layout.Frame` gives (``domain.layout`` says what each one is),

clamped at 0 and capped by a positive ``available_tokens``. Every part is counted with the one
counter of the model's family, so estimate kinds never mix inside one budget. Invariant:
reserve + safety + every part + usable <= window.
"""

from __future__ import annotations

import attrs

from domain.layout import Frame
from domain.model.catalog import ModelSpec, TokenizerFamily
from domain.model.errors import EstimateKindMismatchError
from ports.token_counter import TokenCounter

RESERVE_FLOOR = 500
RESERVE_CAP = 4096
RESERVE_FRACTION = 0.15


@attrs.frozen
class TokenBudget:
    context_window: int
    response_reserve: int
    safety_buffer: int
    directive_tokens: int
    messages_tokens: int
    tool_schemas_tokens: int
    formatter_overhead_tokens: int
    usable_budget: int
    estimate_kind: str

    @property
    def prompt_limit(self) -> int:
        """The most tokens the assembled context may ever use: window - reserve - safety."""
        return max(0, self.context_window - self.response_reserve - self.safety_buffer)


def response_reserve(model: ModelSpec) -> int:
    fraction = int(model.context_window * RESERVE_FRACTION)
    return max(RESERVE_FLOOR, min(fraction, model.max_output_tokens, RESERVE_CAP))


def safety_buffer(model: ModelSpec, family: TokenizerFamily) -> int:
    return int(model.context_window * family.safety_buffer_fraction)


def calculate_budget(
    model: ModelSpec, family: TokenizerFamily, frame: Frame, counter: TokenCounter, available_tokens: int = 0
) -> TokenBudget:
    """Compute the memory budget for one assembly (see the module docstring).

    Raises:
        EstimateKindMismatchError: the counter is not the family's.
    """
    if counter.kind != family.estimate_kind:
        raise EstimateKindMismatchError(
            f"estimate kind mismatch: counter {counter.kind!r} for family "
            f"{family.name!r} which requires {family.estimate_kind!r}"
        )
    directive_tokens = counter.count(frame.directive)
    messages_tokens = counter.count(frame.history)
    tools_tokens = counter.count(frame.tools)
    overhead_tokens = counter.count(frame.overhead)
    reserve = response_reserve(model)
    safety = safety_buffer(model, family)
    usable = model.context_window - reserve - safety
    usable -= directive_tokens + messages_tokens + tools_tokens + overhead_tokens
    usable = max(0, usable)
    if 0 < available_tokens < usable:
        usable = available_tokens
    return TokenBudget(
        context_window=model.context_window,
        response_reserve=reserve,
        safety_buffer=safety,
        directive_tokens=directive_tokens,
        messages_tokens=messages_tokens,
        tool_schemas_tokens=tools_tokens,
        formatter_overhead_tokens=overhead_tokens,
        usable_budget=usable,
        estimate_kind=counter.kind,
    )
