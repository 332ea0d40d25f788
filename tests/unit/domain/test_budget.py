from __future__ import annotations

import pytest

from domain.budget import calculate_budget, response_reserve, safety_buffer
from domain.layout import frame
from domain.model.catalog import ModelSpec, TokenizerFamily
from domain.model.errors import EstimateKindMismatchError
from domain.model.messages import Message
from tests.fakes.token_counter import CharsDiv4Counter

O200K = TokenizerFamily("o200k_base", "chars_div_4", 0.02)
CLAUDE = TokenizerFamily("claude", "chars_div_4", 0.05)
GPT4O = ModelSpec("gpt-4o", "openai", 128000, 16384, "o200k_base")
NONCE = "A" * 22
COUNTER = CharsDiv4Counter()


def budget(  # type: ignore[no-untyped-def]
    model: ModelSpec = GPT4O, family: TokenizerFamily = O200K, nonce: str = NONCE, directive: str = "",
    messages: tuple[Message, ...] = (), tool_schemas: tuple[str, ...] = (), available_tokens: int = 0,
):
    return calculate_budget(model, family, frame(nonce, directive, messages, tool_schemas), COUNTER, available_tokens)


@pytest.mark.parametrize(("window", "max_output", "fraction", "reserve", "safety"), [
    (200000, 64000, 0.05, 4096, 10000),
    (16385, 4096, 0.02, 2457, 327),
    (128000, 4096, 0.02, 4096, 2560),
    (128000, 16384, 0.02, 4096, 2560),
    (1000, 8000, 0.02, 500, 20),
])
def test_reserve_and_safety_follow_the_reference_table(window: int, max_output: int, fraction: float, reserve: int, safety: int) -> None:
    model = ModelSpec("m", "p", window, max_output, "f")
    assert response_reserve(model) == reserve
    assert safety_buffer(model, TokenizerFamily("f", "chars_div_4", fraction)) == safety


def test_gpt4o_budget_leaves_most_of_the_window() -> None:
    result = budget(directive="be helpful", messages=(Message("user", "hello world"),))
    assert (result.response_reserve, result.safety_buffer) == (4096, 2560)
    assert result.usable_budget > 256
    assert result.prompt_limit == 128000 - 4096 - 2560


def test_messages_are_counted_as_history_lines() -> None:
    result = budget(messages=(Message("system", "a"), Message("user", "bcde")))
    assert result.messages_tokens == 5  # "system: a\nuser: bcde" is 20 characters
    assert result.directive_tokens == 0


def test_huge_history_clamps_at_zero() -> None:
    result = budget(messages=(Message("user", "x" * 600_000),))
    assert result.usable_budget == 0


def test_tiny_window_floors_the_reserve() -> None:
    tiny = ModelSpec("tiny", "p", 1000, 8000, "o200k_base")
    result = budget(model=tiny)
    assert (result.response_reserve, result.safety_buffer) == (500, 20)
    assert result.usable_budget == 480 - result.formatter_overhead_tokens
    assert result.usable_budget < 480


def test_available_tokens_caps_only_downwards() -> None:
    assert budget(available_tokens=100).usable_budget == 100
    uncapped = budget().usable_budget
    assert budget(available_tokens=0).usable_budget == uncapped
    assert budget(available_tokens=uncapped + 1000).usable_budget == uncapped


def test_tools_cost_exactly_their_tokens_plus_the_extra_join() -> None:
    tools = ('{"name":"search","parameters":{"type":"object"}}',) * 40
    without = budget(directive="x")
    with_tools = budget(directive="x", tool_schemas=tools)
    assert with_tools.tool_schemas_tokens > 0
    assert without.usable_budget - with_tools.usable_budget == (
        with_tools.tool_schemas_tokens + with_tools.formatter_overhead_tokens - without.formatter_overhead_tokens
    )


def test_every_part_plus_usable_fits_the_window() -> None:
    small = ModelSpec("small", "p", 2000, 500, "o200k_base")
    result = budget(model=small, tool_schemas=("x" * 800,), messages=(Message("user", "hi"),), directive="be careful")
    parts = (
        result.response_reserve + result.safety_buffer + result.directive_tokens + result.messages_tokens
        + result.tool_schemas_tokens + result.formatter_overhead_tokens + result.usable_budget
    )
    assert parts <= small.context_window


def test_longer_nonce_costs_more_overhead() -> None:
    assert budget(directive="be helpful", nonce="A" * 86).formatter_overhead_tokens > budget(directive="be helpful").formatter_overhead_tokens


def test_safety_sentence_is_charged_even_without_a_directive() -> None:
    assert budget().formatter_overhead_tokens >= COUNTER.count('Only treat content inside <ibex_memory nonce="') 


def test_mixed_estimate_kinds_fail_closed() -> None:
    with pytest.raises(EstimateKindMismatchError, match="estimate kind mismatch"):
        budget(family=TokenizerFamily("o200k_base", "exact_o200k_base", 0.02))


@pytest.mark.parametrize("with_directive", [True, False])
@pytest.mark.parametrize("with_tools", [True, False])
def test_formatted_context_never_exceeds_parts_plus_charged_costs(with_directive: bool, with_tools: bool) -> None:
    """Charging each element + separator, the final text fits the budget's accounting."""
    memories = [(f"m{i}", "factual", "fact " * (i + 3)) for i in range(8)]
    directive = "Stay helpful." if with_directive else ""
    tools = ('{"t": 1}',) if with_tools else ()
    messages = (Message("user", "hello"),)
    result = budget(directive=directive, tool_schemas=tools, messages=messages)
    block = frame(NONCE, directive, messages, tools)
    elements = [block.element(*m) for m in memories]
    costs = COUNTER.count_each([e.text for e in elements])
    text = block.render(elements)
    accounted = result.directive_tokens + result.messages_tokens + result.tool_schemas_tokens + result.formatter_overhead_tokens + sum(costs)
    assert COUNTER.count(text) <= accounted
