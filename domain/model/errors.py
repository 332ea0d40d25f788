"""The domain's error hierarchy: every error the core raises derives from DomainError."""

from __future__ import annotations

from collections.abc import Iterable

KNOWN_MODELS_SHOWN = 20  # an unknown-model message lists at most this many known ids


class DomainError(Exception):
    """Base of every error raised by the domain."""


class InvalidRequestError(DomainError):
    """A request value is out of bounds; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class UnknownModelError(DomainError):
    """The model is not in the catalog; ``known`` holds the catalog's model ids, sorted.

    The message names the model and, when ``known`` is given, lists the first
    ``KNOWN_MODELS_SHOWN`` of them (then "... and N more").
    """

    def __init__(self, model: str, known: Iterable[str] = ()) -> None:
        self.model = model
        self.known = tuple(sorted(known))
        super().__init__(f"unknown model '{model}': not in the model catalog{_known_suffix(self.known)}")


def _known_suffix(known: tuple[str, ...]) -> str:
    if not known:
        return ""
    shown = ", ".join(known[:KNOWN_MODELS_SHOWN])
    more = len(known) - KNOWN_MODELS_SHOWN
    return f" (known: {shown}{f', ... and {more} more' if more > 0 else ''})"


class CatalogError(DomainError):
    """The model catalog document is invalid."""


class EstimateKindMismatchError(DomainError):
    """Two parts of one budget were counted with different estimate kinds (fail closed)."""


class UnsupportedEstimateKindError(DomainError):
    """No token counter exists for an estimate kind."""


class PackerInvariantError(DomainError):
    """The packer produced a selection above its budget (never expected; fail closed)."""
