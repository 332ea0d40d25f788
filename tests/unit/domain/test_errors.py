"""UnknownModelError names the model and lists the known ones, sorted and capped."""

from __future__ import annotations

from domain.model.errors import KNOWN_MODELS_SHOWN, UnknownModelError


def test_without_known_models_the_message_only_names_the_model() -> None:
    error = UnknownModelError("gpt-17")
    assert str(error) == "unknown model 'gpt-17': not in the model catalog"
    assert (error.model, error.known) == ("gpt-17", ())


def test_the_known_models_are_listed_sorted() -> None:
    error = UnknownModelError("gpt-17", ["gpt-4o", "claude-x", "gpt-3.5-turbo"])
    assert str(error) == "unknown model 'gpt-17': not in the model catalog (known: claude-x, gpt-3.5-turbo, gpt-4o)"
    assert error.known == ("claude-x", "gpt-3.5-turbo", "gpt-4o")


def test_exactly_the_cap_lists_them_all() -> None:
    known = [f"m{i:03d}" for i in range(KNOWN_MODELS_SHOWN)]
    assert str(UnknownModelError("x", known)).endswith(f"(known: {', '.join(known)})")


def test_a_long_list_shows_the_first_ones_and_counts_the_rest() -> None:
    known = [f"m{i:03d}" for i in reversed(range(KNOWN_MODELS_SHOWN + 5))]
    message = str(UnknownModelError("x", known))
    first = ", ".join(f"m{i:03d}" for i in range(KNOWN_MODELS_SHOWN))
    assert message.endswith(f"(known: {first}, ... and 5 more)")
    assert f"m{KNOWN_MODELS_SHOWN:03d}" not in message
    assert len(UnknownModelError("x", known).known) == KNOWN_MODELS_SHOWN + 5
