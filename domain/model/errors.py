"""The domain's error hierarchy: every error the core raises derives from DomainError."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every error raised by the domain."""


class InvalidRequestError(DomainError):
    """A request value is out of bounds; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class UnknownModelError(DomainError):
    """The model is not in the catalog."""

    def __init__(self, model: str) -> None:
        super().__init__(f"unknown model '{model}': not in the model catalog")
        self.model = model


class CatalogError(DomainError):
    """The model catalog document is invalid."""


class EstimateKindMismatchError(DomainError):
    """Two parts of one budget were counted with different estimate kinds (fail closed)."""


class UnsupportedEstimateKindError(DomainError):
    """No token counter exists for an estimate kind."""


class PackerInvariantError(DomainError):
    """The packer produced a selection above its budget (never expected; fail closed)."""
