"""Token budget: what is left for memories after every other part of the prompt.

``usable = window - reserve - safety - directive - history - tools - formatter overhead`` where

* reserve = max(500, min(int(window * 0.15), max_output_tokens, 4096)) (the model's answer),
* safety = int(window * family.safety_buffer_fraction),
* directive / history / tools are the counts of the exact section texts the formatter emits,
* formatter overhead = the safety sentence with the real nonce (charged whenever memories may be
  emitted) plus the blank lines joining the sections,

clamped at 0 and capped by a positive ``available_tokens``; constrained when below 256. Every part
is counted with the one counter of the model's family, so estimate kinds never mix inside one
budget. Invariant: reserve + safety + every part + usable <= window.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from domain.formatter import SECTION_JOIN, directive_section, history_section, tools_section
from domain.model.catalog import ModelSpec, TokenizerFamily
from domain.model.errors import EstimateKindMismatchError
from domain.model.messages import Message
from ports.token_counter import TokenCounter

MIN_VIABLE_MEMORY_BUDGET = 256
RESERVE_FLOOR = 500
RESERVE_CAP = 4096
RESERVE_FRACTION = 0.15
MAX_SECTION_JOINS = 3


@attrs.frozen
class BudgetRequest:
    model: ModelSpec
    family: TokenizerFamily
    nonce: str
    directive: str = ""
    messages: tuple[Message, ...] = attrs.field(default=(), converter=tuple)
    tool_schemas: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    available_tokens: int = 0


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
    is_constrained: bool
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


def section_joins(directive_present: bool, messages_present: bool, tools_present: bool) -> int:
    """Blank-line joins between sections; memories always count as present."""
    sections = 1 + int(directive_present) + int(messages_present) + int(tools_present)
    return min(MAX_SECTION_JOINS, max(0, sections - 1))


def _overhead_text(request: BudgetRequest, tools_text: str) -> str:
    """The safety sentence (after the directive, or as a section of its own) and the joins.

    Memories may be emitted, so the first section (directive and/or safety sentence) is always
    present and counts as the directive section when computing the joins.
    """
    with_sentence = directive_section(request.directive, request.nonce, has_memories=True)
    sentence_part = with_sentence[len(request.directive.strip()) :]
    joins = section_joins(True, bool(history_section(request.messages)), bool(tools_text))
    return sentence_part + SECTION_JOIN * joins


def calculate_budget(request: BudgetRequest, counter: TokenCounter) -> TokenBudget:
    """Compute the memory budget for one assembly (see the module docstring)."""
    if counter.kind != request.family.estimate_kind:
        raise EstimateKindMismatchError(
            f"estimate kind mismatch: counter {counter.kind!r} for family "
            f"{request.family.name!r} which requires {request.family.estimate_kind!r}"
        )
    tools_text = tools_section(request.tool_schemas)
    directive_tokens = counter.count(request.directive.strip())
    messages_tokens = counter.count(history_section(request.messages))
    tools_tokens = counter.count(tools_text)
    overhead_tokens = counter.count(_overhead_text(request, tools_text))
    reserve = response_reserve(request.model)
    safety = safety_buffer(request.model, request.family)
    usable = request.model.context_window - reserve - safety
    usable -= directive_tokens + messages_tokens + tools_tokens + overhead_tokens
    usable = max(0, usable)
    if 0 < request.available_tokens < usable:
        usable = request.available_tokens
    return TokenBudget(
        context_window=request.model.context_window,
        response_reserve=reserve,
        safety_buffer=safety,
        directive_tokens=directive_tokens,
        messages_tokens=messages_tokens,
        tool_schemas_tokens=tools_tokens,
        formatter_overhead_tokens=overhead_tokens,
        usable_budget=usable,
        is_constrained=usable < MIN_VIABLE_MEMORY_BUDGET,
        estimate_kind=counter.kind,
    )


def memory_costs(counter: TokenCounter, head: str, tail_lines: Sequence[str]) -> tuple[int, ...]:
    """The cost charged per memory: its whole element plus the separator that follows it, given as
    the assembly's shared element head and each memory's tail line (``formatter.element_tail_line``)."""
    count_joined = counter.count_joined
    return tuple([count_joined((head, line)) for line in tail_lines])
