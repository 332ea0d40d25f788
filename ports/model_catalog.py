"""Port: the catalog of models and tokenizer families."""

from __future__ import annotations

from abc import abstractmethod
from typing import Protocol

from domain.model.catalog import ModelSpec, TokenizerFamily


class ModelCatalog(Protocol):
    @abstractmethod
    def for_model(self, model_id: str) -> ModelSpec:
        """Return the model's capabilities (``model_id`` is stripped, then matched exactly).

        Raises:
            UnknownModelError: the model is not in the catalog (``known``: the catalog's model ids).
        """

    @abstractmethod
    def family(self, name: str) -> TokenizerFamily:
        """Return a tokenizer family's policy.

        Raises:
            UnknownModelError: no such family.
        """

    @abstractmethod
    def models(self) -> tuple[ModelSpec, ...]:
        """Every model, sorted by model id."""
